"""Takes the machine for loaded, a runnable task per core, whatever its load:
for the tests of what a run on a busy machine says (the unpinned-threads
warning) without hogs holding the cores while they run. That the load is read
from a machine really loaded is test_facts.py's. Loaded through
SCATTERBENCH_PLUGINS before any command runs."""

import os

from harness.measuring import facts, pinning

LOAD = float(os.cpu_count() or 1)


def _loaded(*args, **kwargs) -> float:
    return LOAD


facts.competing_load = pinning.competing_load = _loaded
