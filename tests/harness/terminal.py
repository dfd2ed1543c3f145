"""What a test needs to send a child process Ctrl-C as a terminal would."""

import signal


def sigint_as_at_a_terminal() -> None:
    """A ``preexec_fn``: SIGINT back to its default action in the child, so
    that Python there turns it into KeyboardInterrupt. A test runner started
    as a background job of a non-interactive shell (or under nohup) ignores
    SIGINT, and every child inherits that: a launcher or sweep sent SIGINT
    would then go on as if nothing happened (seen in a fresh-clone CI run
    started with ``&``)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
