"""The harness: config, check, timing, stats, store, sweep, compare, CLI.

Each module owns one thing; only ``impls.registry`` holds global state.
"""
