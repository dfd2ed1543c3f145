"""One run's life, the same for every way of running cases (the sweep of
``scatterbench run``, the counting run of ``run --instrument callgrind``,
``bench()``): its threads pinned, its metadata written and its result
directory's writer opened, its cases run by the caller, then one of three
endings, and the directory closed.

- **complete**: ``RunSession.complete`` marks meta.json finished, with the
  end time, the load average and the seconds per phase.
- **interrupted**: Ctrl-C and SIGTERM raise ``Interrupted`` in the main
  thread while the session is open (a BaseException, so that no strategy's
  ``except Exception`` swallows it); meta.json says ``interrupted`` and by
  which signal, every finished case stays on disk, and the case in flight is
  not taken for a crash (``--resume`` runs it again in-process).
- **disk full**: an OSError saying the disk is full, read-only or failing
  (``DISK_FULL``) ends the run the same way, with the error as the reason
  (written in the room the writer kept for it, ``store.RESERVE``).

The session never raises for those endings: ``outcome`` (``RunOutcome``)
says which one it was, for the caller to report (the CLI: one line and exit
130 or 2; ``bench()``: the signal raised again, or one error line).
"""

from __future__ import annotations

import contextlib
import errno
import os
import signal
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from harness.base import plugins
from harness.base.errors import ResultError, retried_later
from harness.measuring import facts, pinning
from harness.results import store

# Errors that mean the result directory can take no more: the run stops, its finished cases kept.
DISK_FULL = (errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EIO)


class Interrupted(BaseException):
    """Ctrl-C or SIGTERM: a BaseException so no strategy's ``except
    Exception`` swallows it."""

    def __init__(self, signal_name: str):
        super().__init__(signal_name)
        self.signal_name = signal_name


@dataclass
class RunOutcome:
    out_dir: Path | None
    run_id: str
    interrupted: str | None = None  # the signal's name
    disk_full: str | None = None  # the error, when the disk filled up mid-run
    cases_on_disk: int = 0


class PhaseClock:
    """Seconds spent per phase (ceilings, check, prepare/compile, time) over a
    run: where a sweep's time goes, stored in meta.json as ``phase_s``."""

    def __init__(self, forward=None):
        self.seconds: dict[str, float] = {}
        self.current, self.since = None, time.perf_counter()
        self.forward = forward

    def __call__(self, phase: str | None) -> None:
        now = time.perf_counter()
        if self.current:
            self.seconds[self.current] = self.seconds.get(self.current, 0.0) + now - self.since
        self.current, self.since = phase, now
        if phase and self.forward:
            self.forward(phase)

    def absorb(self, phase_s: dict) -> None:
        """Adds a child process's seconds per phase, taking them out of the
        phase in progress (which spanned the child's whole life)."""
        for phase, seconds in phase_s.items():
            self.seconds[phase] = self.seconds.get(phase, 0.0) + seconds
        self.since += sum(phase_s.values())

    def totals(self) -> dict:
        self(None)
        return {phase: round(seconds, 3) for phase, seconds in self.seconds.items()}


class NoCaseInFlight:
    """A writer's ``begin_case`` and ``end_case`` for a writer that marks no
    case in flight (``store.RunWriter`` marks one on disk, for --resume to
    record the case a run died in): they do nothing."""

    def begin_case(self, case: dict) -> None:
        pass

    def end_case(self) -> None:
        pass


class MemoryWriter(NoCaseInFlight):
    """A run's rows kept in memory (``bench()`` without ``out``): nothing on
    disk for a later --resume, so no case in flight to record, nothing to
    close. ``meta``: the fields of a run's meta.json that its cases and its
    judges read (the fresh-write bandwidths of the floor; the core count and
    the loads at start and end of the fitness rule), updated as a run's are."""

    def __init__(self, meta: dict | None = None):
        self.rows: list[dict] = []
        self.meta = dict(meta or {})

    @property
    def written(self) -> int:
        return len(self.rows)

    def append(self, row: dict, samples_s=None, round_sizes=None) -> None:
        self.rows.append(dict(row))

    def update_meta(self, **fields) -> None:
        self.meta.update(fields)

    def close(self) -> None:
        pass


class _Signals:
    """SIGINT and SIGTERM raise ``Interrupted`` in the main thread while a run
    writes, so both end the same way."""

    def __enter__(self):
        self.previous = {}
        for signum in (signal.SIGINT, signal.SIGTERM):
            try:
                self.previous[signum] = signal.signal(signum, self._raise)
            except ValueError:  # not the main thread: leave signals alone
                pass
        return self

    @staticmethod
    def _raise(signum, frame):
        if retried_later(signum, frame):
            return
        raise Interrupted(signal.Signals(signum).name)

    def __exit__(self, *exc):
        for signum, handler in self.previous.items():
            signal.signal(signum, handler)
        return False


def _safely(update, **fields) -> None:
    try:
        update(**fields)
    except OSError:  # the disk that stopped the run may refuse this too; the rows are safe
        pass


class RunSession:
    """``with RunSession(out_dir, run_id) as session:`` pin threads
    (``pin_threads``), open the writer (``open``), run the cases into
    ``session.writer`` with ``session.clock`` as the phase callback, then
    ``complete()``. ``out_dir`` None keeps the rows in memory
    (``MemoryWriter``). Afterwards ``session.outcome`` says how it ended."""

    def __init__(self, out_dir: Path | None, run_id: str, *, on_phase=None):
        self.outcome = RunOutcome(Path(out_dir) if out_dir is not None else None, run_id)
        self.clock = PhaseClock(on_phase)
        self.writer = None
        self.threads: dict = {}  # in force while the session is open (pin_threads)
        self._undo = contextlib.ExitStack()
        self._signals = _Signals()
        self._earlier_phase_s: dict = {}

    def __enter__(self) -> RunSession:
        self._signals.__enter__()
        return self

    def pin_threads(self, threads) -> dict:
        """The config's thread settings (``pinning.apply_threads``) while the
        session is open, the caller's own back when it closes; returns what is
        in force."""
        self.threads = self._undo.enter_context(pinning.threads_applied(threads))
        return self.threads

    def open(self, config, config_path: str | None, argv: list[str], *, threads: dict | None = None, **fields):
        """Writes meta.json (the machine's facts, ``threads``, by default those
        in force, the config, the plugins loaded, status ``starting`` unless
        ``fields`` say otherwise) and opens the writer the cases go to."""
        if self.outcome.out_dir is None:
            self.writer = MemoryWriter({"cpu_count": os.cpu_count(), "load_avg_start": facts.load_average(),
                                        **fields})
            return self.writer
        meta = facts.run_metadata(self.threads if threads is None else threads, config_path, argv)
        meta.update(run_id=self.outcome.run_id, config=config.model_dump(), plugins=plugins.recorded(),
                    status="starting")
        meta.update(fields)
        self.writer = store.RunWriter(self.outcome.out_dir, meta)
        # A resumed run's earlier attempts' seconds per phase: its totals go on from them.
        self._earlier_phase_s = dict(self.writer.meta.get("phase_s") or {})
        return self.writer

    def phase_totals(self) -> dict:
        """Seconds per phase over the run, its earlier attempts included."""
        totals = dict(self._earlier_phase_s)
        for phase, seconds in self.clock.totals().items():
            totals[phase] = round(totals.get(phase, 0.0) + seconds, 3)
        return totals

    def complete(self, **fields) -> None:
        """Every case ran: meta.json says so, with the run's end and its seconds per phase."""
        self.writer.update_meta(status="complete", end_time=facts.now_iso(), load_avg_end=facts.load_average(),
                                phase_s=self.phase_totals(), **fields)

    def __exit__(self, exc_type, error, traceback) -> bool:
        try:
            return error is not None and self._ended_by(error)
        finally:
            try:
                if self.writer is not None:
                    self.outcome.cases_on_disk = self.writer.written
                    self.writer.close()
            finally:
                self._undo.close()
                self._signals.__exit__()

    def _ended_by(self, error: BaseException) -> bool:
        """Records an interruption or a full disk (True: handled); any other
        error goes on to the caller, an OSError as one line naming the directory."""
        if isinstance(error, (KeyboardInterrupt, Interrupted)):
            self.outcome.interrupted = getattr(error, "signal_name", "SIGINT")
            self._stopped(self.outcome.interrupted)
            return True
        if not isinstance(error, OSError) or self.outcome.out_dir is None:
            self._failed(f"{type(error).__name__}: {' '.join(str(error).split())}")
            return False
        described = store.describe_os_error(error, self.outcome.out_dir)
        if error.errno not in DISK_FULL or self.writer is None:
            self._failed(described)
            raise ResultError(f"{self.outcome.out_dir}: {described}") from None
        self.outcome.disk_full = described
        self.writer.free_reserve()  # the room kept for this: meta.json can still say why the run stopped
        self._stopped(described)
        return True

    def _failed(self, reason: str) -> None:
        """An error ended the run (a plugin's, ours): meta.json says ``failed`` and why, never
        ``running``; the case in flight was not a crash of the process (no in-flight.json is left),
        and every row already written stays (``--resume`` finishes the run)."""
        if self.writer is not None:
            _safely(self.writer.end_case)
            _safely(self.writer.update_meta, status="failed", interrupted_by=reason, phase_s=self.phase_totals())

    def _stopped(self, reason: str) -> None:
        if self.writer is not None:
            _safely(self.writer.end_case)  # stopped in an orderly way: the case in flight was not a crash
            # where the time went up to the stop: what a run cut by a lease's limit most needs to say
            _safely(self.writer.update_meta, status="interrupted", interrupted_by=reason,
                    phase_s=self.phase_totals())


def signal_again(signal_name: str) -> None:
    """For a caller that must not go on as if nothing happened (``bench()``
    in a script or notebook): the signal that stopped its session, sent again
    now that the run's record is safe and the caller's own handlers are back
    (Python's: KeyboardInterrupt; SIGTERM's default: the process ends). A
    handler that returns, or a session outside the main thread, still gets
    KeyboardInterrupt naming the signal."""
    if threading.current_thread() is threading.main_thread():
        signal.raise_signal(signal.Signals[signal_name])
    raise KeyboardInterrupt(signal_name)
