"""The harness, in layer folders, each importing only those below it
(tests/test_layers.py checks it):

- ``base``: errors, formatting, the config and plugins;
- ``results``: what a run leaves on disk (store, statistics and count
  columns, run metadata, summaries, merging);
- ``measuring``: running strategies (machine facts, thread pinning, memory,
  timing, the check, the sweep, counting under Callgrind, launching shards);
- ``judging``: reading results (regression rules, ranking, comparison, the
  wall-time and count gates, history);
- ``presenting``: terminal tables, the report, the dashboard;
- ``api`` and ``cli`` on top.

Only ``impls.registry`` holds global state.
"""
