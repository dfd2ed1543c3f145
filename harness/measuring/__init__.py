"""Running strategies: the machine, threads, memory, timing, the check, the sweep, counting, launching."""
