"""What identifies a case across runs, as the columns of a result row.

A *case* is one strategy measured at one point of the sweep; its *group* is
the cases that share inputs and oracle (operator, device, dtype, parameters,
mode: forward, backward or forward+backward):
the strategies compared with each other, in a table of the terminal summary,
a chart of the report or the dashboard, and the gate's confirmation. Every
module that groups or matches rows by case takes the columns from here, so
two runs, or two views of one run, cannot disagree on what one case is.

Lists, not tuples: pandas reads a tuple given to ``groupby`` or ``merge`` as
one key. Concatenate them (``CASE_GROUP + ["machine"]``), never change them.
"""

from __future__ import annotations

# In this order: a group's key, as groupby gives it, is unpacked as (op, device, dtype, params, mode, layout).
# ``mode`` (docs/SPEC.md §1.5): forward, backward or forward+backward; a run before it is all forward.
# ``layout`` (docs/SPEC.md §2): how the 4-D inputs lie in memory, contiguous or channels_last; a run
# before it is all contiguous.
CASE_GROUP = ["op", "device", "dtype", "params", "mode", "layout"]
CASE_KEY = ["op", "strategy", "device", "dtype", "params", "mode", "layout"]  # the group's columns and the strategy
# What a row without the column (an older run's, a caller's own frame) or with it left empty was.
CASE_DEFAULTS = {"mode": "forward", "layout": "contiguous"}
# The report's points (report/load.layout_in_params): a case timed in another layout than contiguous
# carries it in its params under this key, so that whatever goes by params gives each layout apart.
POINT_LAYOUT_KEY = "layout"


def with_case_columns(frame):
    """``frame`` (rows of any source: a store, a summary, a caller's own
    DataFrame) with the ``mode`` and ``layout`` columns a key needs; rows
    without them, or with them left empty, were forward and contiguous
    (docs/SPEC.md §1.5, §2: a run before them timed nothing else)."""
    for column, default in CASE_DEFAULTS.items():
        if column not in frame.columns:
            frame = frame.assign(**{column: default})
            continue
        empty = frame[column].isna() | (frame[column].astype(str) == "")
        # As text: a summary's categorical column may not hold the default among its categories.
        if empty.any():
            frame = frame.assign(**{column: frame[column].astype(str).where(~empty, default)})
    return frame


def mode_and_layout(row, sep: str = " ", say_forward: bool = True) -> str:
    """A row's (a mapping's) training mode, and its layout where that is not contiguous, joined by
    ``sep``: ``forward``, ``backward channels_last`` (a table's mode cell). Without ``say_forward``,
    forward is left unsaid too (a title's suffix): ``""``, ``channels_last``. Every mode-and-layout
    label (tables, dashboard, plan, report) is made here."""
    mode, layout = case_value(row, "mode"), case_value(row, "layout")
    words = [mode] if say_forward or mode != CASE_DEFAULTS["mode"] else []
    return sep.join(words + ([] if layout == CASE_DEFAULTS["layout"] else [layout]))


def case_value(row, column: str):
    """``row``'s (a mapping's) ``column`` of ``CASE_DEFAULTS``; absent, None, NaN or empty: the default
    (a row of a run before the column, or a caller's own frame)."""
    value = row.get(column, None)
    return CASE_DEFAULTS[column] if value is None or value != value or value == "" else value


def in_group(frame, row):
    """The rows of ``frame`` (a DataFrame) in the group of ``row`` (a row
    of any frame with the group's columns)."""
    frame, mask = with_case_columns(frame), True
    for column in CASE_GROUP:
        value = case_value(row, column) if column in CASE_DEFAULTS else row[column]
        mask = mask & (frame[column] == value)
    return frame[mask]


def grid_cells(rows, column, values, missing: str, cell) -> list[str]:
    """One strategy's cells in a grid of strategies × ``column`` (the
    terminal's case tables: × parameters; the report's machines table: ×
    machine), from ``rows`` (a DataFrame of that strategy's rows): for each
    of ``values``, ``cell(value, found)`` of the first row with it in
    ``column`` (``found``, a one-row frame), or ``missing`` where none has it."""
    cells = []
    for value in values:
        found = rows[rows[column] == value]
        cells.append(missing if found.empty else cell(value, found.iloc[:1]))
    return cells
