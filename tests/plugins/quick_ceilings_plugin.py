"""Shrinks the run's start-up measurements for the fault tests: the copy
ceiling and the fresh-write bandwidth on 4 MiB, twice, instead of 256 MiB
four (per try) and five times, the ceiling's tries back to back, and the
bandwidth curves on three small sizes
(seconds per run on a 2-core machine). The tests need a run, not its
ceilings; the values are still measured, just less accurately.
Loaded through SCATTERBENCH_PLUGINS before any command runs."""

from harness.measuring import ceilings, timing

_copy_ceiling, _fresh_write = timing.copy_ceiling_gbps, timing.fresh_write_gbps
SMALL = 4 << 20


def copy_ceiling_gbps(device, nbytes=None, repeats=10):
    return _copy_ceiling(device, SMALL, 2)


def fresh_write_gbps(allocator, nbytes=None, repeats=5):
    return _fresh_write(allocator, SMALL, 2)


timing.copy_ceiling_gbps, timing.fresh_write_gbps = copy_ceiling_gbps, fresh_write_gbps
ceilings.TRY_GAP_S = 0.0  # its tries back to back
# The bandwidth curves on three sizes up to 1 MiB, three tries each.
ceilings.CURVE_POINTS, ceilings.CURVE_TRIES, ceilings.CURVE_PASS_BYTES = 3, 3, 1 << 20
ceilings.CURVE_PLACEMENTS = 2
ceilings.CURVE_TOP_MIN_BYTES = ceilings.CURVE_TOP_MAX_BYTES = 1 << 20
