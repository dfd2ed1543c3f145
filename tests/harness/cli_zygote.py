"""A fork server for tests/harness/test_faults.py: runs ``python -m harness``
and ``report.py`` as real processes without paying the interpreter's start-up
(torch, scipy, pandas, matplotlib: seconds per command on a 2-core machine).

It imports the harness once, then for each request (one JSON line on stdin)
forks a child that takes the request's environment, working directory and
argv, points its fds 0/1/2 at /dev/null and the request's two files, runs the
module as ``__main__`` exactly as ``python -m`` does, and exits with its
status; an exception that escapes prints its traceback to the child's stderr
and exits 1, as the interpreter would. The server waits for the child (killing
it past the request's timeout) and answers one JSON line: the pid and the
status (negative: killed by that signal).

The server imports no plugin and never runs a command itself, so every child
starts from the same state; plugins (SCATTERBENCH_PLUGINS) are imported fresh
in each child. Commands that must be signalled or limited while they run are
started by the tests as ordinary subprocesses instead.
"""

import json
import os
import signal
import sys
import time
import traceback


def child(request: dict) -> None:
    code = 1
    try:
        os.environ.clear()
        os.environ.update(request["env"])
        os.chdir(request["cwd"])
        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.signal(signal.SIGPIPE, signal.SIG_IGN)  # as the interpreter sets it
        stdin = os.open(os.devnull, os.O_RDONLY)
        out = os.open(request["out"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        err = os.open(request["err"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        for fd, target in ((stdin, 0), (out, 1), (err, 2)):
            os.dup2(fd, target)
            os.close(fd)
        sys.stdin = open(0, encoding="utf-8", closefd=False)
        sys.stdout = open(1, "w", encoding="utf-8", closefd=False)
        sys.stderr = open(2, "w", buffering=1, encoding="utf-8", errors="backslashreplace", closefd=False)
        sys.__stdout__, sys.__stderr__ = sys.stdout, sys.stderr
        module, *args = request["argv"]
        sys.argv = [module, *args]
        sys.path.insert(0, os.getcwd())  # as `python -m` puts the working directory first
        import runpy

        try:
            runpy.run_module(module, run_name="__main__", alter_sys=True)
            code = 0
        except SystemExit as exit_:
            if exit_.code is None:
                code = 0
            elif isinstance(exit_.code, int):
                code = exit_.code
            else:
                print(exit_.code, file=sys.stderr)
                code = 1
        except BaseException:  # noqa: B036 -- what the interpreter does with an uncaught one
            traceback.print_exc()
            code = 1
    except BaseException:  # noqa: B036 -- the set-up itself failed: say so on whatever fd 2 is
        os.write(2, ("cli_zygote: " + traceback.format_exc()).encode())
        code = 1
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)


def wait(pid: int, timeout: float) -> int:
    deadline = time.monotonic() + timeout
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
        time.sleep(0.01)


def main() -> None:
    # Import the harness from where `python -m harness` would, run in this
    # working directory: the directory first, then PYTHONPATH and the rest.
    sys.path.insert(0, os.getcwd())
    # What every command imports; loaded once, inherited by each child.
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot  # noqa: F401
    import pandas  # noqa: F401
    import scipy.stats  # noqa: F401
    import torch  # noqa: F401

    import harness.cli  # noqa: F401
    import impls  # noqa: F401

    for name in ("harness.measuring.check", "harness.judging.compare", "harness.presenting.dashboard", "harness.measuring.sweep", "harness.presenting.tables",
                 "harness.measuring.facts", "harness.results.merge", "report"):
        try:
            __import__(name)
        except ImportError:  # an older layout of the code under test
            pass
    # The answers go to a private copy of stdout; fd 1 itself is nobody's.
    answers = os.fdopen(os.dup(1), "w")
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, 1)
    answers.write(json.dumps({"ready": os.getpid()}) + "\n")
    answers.flush()
    for line in sys.stdin:
        request = json.loads(line)
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            answers.close()
            child(request)
        status = wait(pid, request.get("timeout", 300))
        answers.write(json.dumps({"pid": pid, "status": status}) + "\n")
        answers.flush()


if __name__ == "__main__":
    main()
