"""What every layer above uses: errors, formatting, the config and the plugins."""
