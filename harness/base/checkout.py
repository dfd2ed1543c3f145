"""Where this checkout is: the directory that holds harness/ and impls/.

One home, because a module that counts its own folders up to the checkout
breaks when it moves to another folder, and finds a directory that is not
the checkout (the gate's ``git archive`` of a baseline commit would then
archive a subfolder only)."""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]  # harness/base/checkout.py -> the checkout
