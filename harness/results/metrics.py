"""Every metric a result row stores, declared once per family, as
pytest-benchmark's ``Stats.fields``: one declaration drives computing and
storing, and everything else about a metric is derived from it:

- the result columns and their schema migrations (harness/results/store.py:
  a metric's ``schema`` is the version that added its column);
- computing it: the timing statistics from a case's samples
  (``stats.summarize``), the counts from a Callgrind dump (``per_call``, the
  columns the counting run writes: harness/measuring/callgrind.py);
- judging it: ``MetricFamily.factor``, the count gate's (harness/judging/);
- showing it: ``Metric.format`` in every table and report, the choices of
  ``compare --metric``, and the dashboard's charts (its script is handed
  ``Metric.decimals`` so that it prints counts as ``fmt_count`` does).

A new counted metric is one ``Metric`` in ``COUNTS.fields``, with the schema
version that adds its column (and ``store.SCHEMA_VERSION`` raised to it); a
new family (gradients, say) is one more ``MetricFamily`` and its place in
``store.COLUMN_SPECS``. Counts and times are better lower: a count regresses
when it grows past ``COUNTS.factor`` (``regression.count_verdict``).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from harness.base.format import fmt_time
from harness.results import counts

SECONDS = "s"


@dataclass(frozen=True)
class Metric:
    """One stored metric: its column, and how it is computed and shown."""

    name: str  # the result column
    unit: str  # what it is measured in: "s" (shown as a time), or what is counted ("instructions")
    description: str  # one phrase: what it is (help texts, the report's notes)
    schema: int  # the result schema version that added the column (store.COLUMNS_ADDED)
    compute: Callable  # the value from the family's source: a case's samples (numpy), a dump's events
    decimals: int = 0  # a count's decimals when shown (with thousands separators); a time's are fmt_time's
    type: type = float  # what ``compute``'s value is stored as

    def format(self, value) -> str:
        """The value as every table, report and line shows it."""
        return fmt_time(value) if self.unit == SECONDS else fmt_count(value, self.decimals)


@dataclass(frozen=True)
class MetricFamily:
    """Metrics computed together from one source. ``factor``: for a family
    of deterministic measurements, the ratio past which a value that grew
    regresses, with no statistical test; None where the values are
    statistics of noisy samples, judged by the wall-time rule
    (harness/judging/regression.py). The first field is the family's
    headline: what a report ranks by, and the table `regress` prints."""

    name: str
    source: str  # what the fields are computed from
    fields: tuple[Metric, ...]
    factor: float | None = None

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(metric.name for metric in self.fields)

    @property
    def primary(self) -> Metric:
        return self.fields[0]

    def __getitem__(self, name: str) -> Metric:
        for metric in self.fields:
            if metric.name == name:
                return metric
        raise KeyError(f"{name}: not a {self.name} metric (one of {', '.join(self.names)})")

    def compute(self, source) -> dict:
        """{column: value} of every field, from one source (samples, events)."""
        return {metric.name: metric.type(metric.compute(source)) for metric in self.fields}

    def columns(self) -> tuple[tuple[str, str, int], ...]:
        """The fields as result columns: (name, "number", schema version)."""
        return tuple((metric.name, "number", metric.schema) for metric in self.fields)


def fmt_count(value, decimals: int = 0) -> str:
    """A count with thousands separators (``1,234,567``), ``decimals``
    after the point, rounded half to even; "–" for none (or not a number). The dashboard's
    script prints the same (dashboard_assets/dashboard.js, ``countText``)."""
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value):
        return "–"
    return f"{value:,.{decimals}f}"


# ------------------------------------------------------------------ timing
def _numpy(function: str, *args) -> Callable:
    """numpy's ``function`` of the samples (and ``args``). numpy is imported
    when a statistic is computed, not with the declaration: the CLI reads it
    to build its help, and `scatterbench list` should not pay for numpy."""

    def compute(samples):
        import numpy

        return getattr(numpy, function)(samples, *args)

    compute.__name__ = f"numpy.{function}"
    return compute


def _iqr(samples) -> float:
    # scipy.stats takes 0.5-1.4 s to import on the 2-core VM: commands that never
    # time (`check`, `list`, a dashboard build) should not pay for it (harness/results/stats.py).
    from scipy import stats as scipy_stats

    return scipy_stats.iqr(samples)


# The statistics a timed case stores, from its samples (seconds, a numpy array).
TIMING = MetricFamily("timing", "a timed case's samples", (
    Metric("median_s", SECONDS, "the median sample", 1, _numpy("median")),
    Metric("iqr_s", SECONDS, "the interquartile range of the samples", 1, _iqr),
    Metric("min_s", SECONDS, "the fastest sample", 1, _numpy("min")),
    Metric("mean_s", SECONDS, "the mean sample", 1, _numpy("mean")),
    Metric("n_samples", "samples", "how many samples the statistics rest on", 1, _numpy("size"), type=int),
    # The quartiles the IQR spans (bars drawn from them are the samples' own, not
    # median ± IQR/2), the 10th percentile the regression gate screens on, the slowest.
    Metric("q1_s", SECONDS, "the first quartile", 3, _numpy("percentile", 25)),
    Metric("q3_s", SECONDS, "the third quartile", 3, _numpy("percentile", 75)),
    Metric("p10_s", SECONDS, "the 10th percentile", 3, _numpy("percentile", 10)),
    Metric("max_s", SECONDS, "the slowest sample", 3, _numpy("max")),
))


# ------------------------------------------------------------------ counts
# Per call, from one Callgrind run with cache simulation (harness/results/counts.py
# reads the dump; its docstring says what the counts are and are not).
COUNTS = MetricFamily("counts", "a Callgrind dump's events (`run --instrument callgrind`)", (
    Metric("instructions", "instructions", "Callgrind's Ir, the instructions executed", 4,
           lambda events: events["Ir"]),
    Metric("est_cycles", "cycles", f"KCachegrind's cycle estimation, {counts.EST_CYCLES_FORMULA}", 4,
           counts.est_cycles),
), factor=1.03)


def per_call(events: dict, calls: int) -> dict:
    """The row's count columns (``COUNTS``) from a dump of ``calls`` calls,
    and every event per call for its ``extra`` (``events_per_call``)."""
    return {**{name: value / calls for name, value in COUNTS.compute(events).items()},
            "events_per_call": {name: value / calls for name, value in events.items()}}
