"""What can go wrong for a user, and the exit status it ends in.

Every error a user can cause (a bad config, flag, result directory or output
path) is one of these; the CLI prints its message as one line on stderr and
exits with its status. Nothing here imports the rest of the harness.
"""

from __future__ import annotations

EXIT_OK = 0
EXIT_FINDINGS = 1  # the suite worked and found something: a mismatch, an error, a regression
EXIT_USAGE = 2  # bad input: config, flag, result directory, output path
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
