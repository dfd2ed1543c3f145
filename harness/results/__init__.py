"""What a run leaves on disk: the store, its statistics and count columns, run metadata, merging."""
