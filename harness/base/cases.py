"""What identifies a case across runs, as the columns of a result row.

A *case* is one strategy measured at one point of the sweep; its *group* is
the cases that share inputs and oracle (operator, device, dtype, parameters):
the strategies compared with each other, in a table of the terminal summary,
a chart of the report or the dashboard, and the gate's confirmation. Every
module that groups or matches rows by case takes the columns from here, so
two runs, or two views of one run, cannot disagree on what one case is.

Lists, not tuples: pandas reads a tuple given to ``groupby`` or ``merge`` as
one key. Concatenate them (``CASE_GROUP + ["machine"]``), never change them.
"""

from __future__ import annotations

# In this order: a group's key, as groupby gives it, is unpacked as (op, device, dtype, params).
CASE_GROUP = ["op", "device", "dtype", "params"]
CASE_KEY = ["op", "strategy", "device", "dtype", "params"]  # the group's columns and the strategy


def in_group(frame, row):
    """The rows of ``frame`` (a DataFrame) in the group of ``row`` (a row
    of any frame with the group's columns)."""
    mask = True
    for column in CASE_GROUP:
        mask = mask & (frame[column] == row[column])
    return frame[mask]
