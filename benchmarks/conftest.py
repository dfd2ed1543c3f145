import os

from impls.backends import device_present

# Triton's kernels run under its interpreter where there is no GPU; set before triton is imported.
if not device_present("cuda"):
    os.environ.setdefault("TRITON_INTERPRET", "1")
