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

# In this order: a group's key, as groupby gives it, is unpacked as (op, device, dtype, params, mode).
# ``mode`` (docs/SPEC.md §1.5): forward, backward or forward+backward; a run before it is all forward.
CASE_GROUP = ["op", "device", "dtype", "params", "mode"]
CASE_KEY = ["op", "strategy", "device", "dtype", "params", "mode"]  # the group's columns and the strategy


def with_mode(frame):
    """``frame`` (rows of any source: a store, a summary, a caller's own
    DataFrame) with the ``mode`` column a key needs; rows without one, or
    with it left empty, were forward (docs/SPEC.md §1.5: a run before modes timed
    nothing else)."""
    if "mode" not in frame.columns:
        return frame.assign(mode="forward")
    empty = frame["mode"].isna() | (frame["mode"].astype(str) == "")
    # As text: a summary's categorical column may not hold "forward" among its categories.
    return frame.assign(mode=frame["mode"].astype(str).where(~empty, "forward")) if empty.any() else frame


def in_group(frame, row):
    """The rows of ``frame`` (a DataFrame) in the group of ``row`` (a row
    of any frame with the group's columns)."""
    frame, mask = with_mode(frame), True
    for column in CASE_GROUP:
        mask = mask & (frame[column] == (row.get(column, "forward") if column == "mode" else row[column]))
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
