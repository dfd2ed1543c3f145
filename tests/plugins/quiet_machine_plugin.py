"""Takes the machine for quiet whatever its load: for the tests of what a
quiet run writes (a copy ceiling used, floors in every row), on a CI machine
or a developer's that is busy. The ceiling's tries still record the load they
saw. Loaded through SCATTERBENCH_PLUGINS before any command runs."""

from harness.measuring import facts

facts.at_capacity = lambda load, cores: False
