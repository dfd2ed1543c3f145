"""Where this checkout is: the directory that holds harness/ and impls/.

One home, because a module that counts its own folders up to it breaks when
it moves: after harness/ went into layer folders, three modules still counted
one folder up, and the gate measured a baseline "from a commit" with this
checkout's code (``git archive`` run inside harness/ archived harness/ only)."""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]  # harness/base/checkout.py -> the checkout
