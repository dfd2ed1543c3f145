"""What can go wrong for a user, and the exit status it ends in.

Every error a user can cause (a bad config, flag, result directory or output
path) is one of these; the CLI prints its message as one line on stderr and
exits with its status. Nothing here imports the rest of the harness.
"""

from __future__ import annotations

EXIT_OK = 0
EXIT_FINDINGS = 1  # the suite worked and found something: a mismatch, an error, a regression
EXIT_USAGE = 2  # bad input: config, flag, result directory, output path
EXIT_UNFIT = 3  # compare: a run of the pair fails the fitness rule, so its times are not judged
EXIT_INTERRUPTED = 130  # Ctrl-C or SIGTERM; what finished is kept


class ScatterbenchError(Exception):
    """A user-facing error: the message is one line naming the file, key or case."""

    exit_status = EXIT_USAGE


class UsageError(ScatterbenchError):
    """A bad command line: an unknown name, an empty selection, a bad value."""


class ConfigError(ScatterbenchError):
    """A bad config: the message names file, key and problem."""


class ResultError(ScatterbenchError):
    """A result directory that cannot be read or written: names the file and line."""


class LaunchError(ScatterbenchError):
    """A launched shard that failed again after its resubmission: names it, why, and its directory."""


class ResultWarning(UserWarning):
    """Something in a result directory was skipped (an unusable samples record,
    a line cut off mid-write): the rest still reads. The test suite turns it
    into an error, so every test that provokes one must assert it."""


class UnpinnedThreadsWarning(RuntimeWarning):
    """Thread pools left at every core on a machine already loaded to its core
    count: the timings that follow may be far too slow (harness/measuring/facts.py)."""


class CacheWarning(UserWarning):
    """A cache file the suite could not use (harness/base/caches.py): it is
    ignored, and what it held is measured or checked again."""


# Where a signal handler must not raise: a process being started
# (multiprocessing's, and a worker pool's until it lists the process), as
# (file ending, function). What an import is, is told by its frames' file.
_STARTING_A_PROCESS = (
    ("/multiprocessing/process.py", "start"),
    ("/concurrent/futures/process.py", "_spawn_process"),
)


def retried_later(signum: int, frame) -> bool:
    """Whether a signal handler about to raise (Ctrl-C, SIGTERM) caught the
    process where raising would do harm, and so has sent the signal again
    for 50 ms later instead:
    - inside an import: an exception raised there may be swallowed by the
      library (measured: ``import torch`` interrupted 0.35 s in went on as if
      nothing had happened, and a `check` sent SIGTERM then ran to the end
      with exit 0) or leave it half-imported ("cannot load module more than
      once per process");
    - while starting a worker process: raised between the spawn and the
      write of the worker's start-up data, it left a child nobody stops,
      reading a closed pipe ("EOFError: Ran out of input" after `check`'s
      "interrupted by SIGTERM", in CI); a moment later the pool lists it and
      stops it with the others.
    Plain standard library: callable from any handler."""
    import os
    import threading

    while frame is not None:
        code = frame.f_code
        filename = code.co_filename.replace(os.sep, "/")
        if filename.startswith("<frozen importlib") or any(
                filename.endswith(ending) and code.co_name == name for ending, name in _STARTING_A_PROCESS):
            threading.Timer(0.05, os.kill, (os.getpid(), signum)).start()
            return True
        frame = frame.f_back
    return False
