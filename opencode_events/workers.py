"""The one worker policy: how many processes a whole-table scan (``store.ranges``) or a
large import (``pipeline.fanout``) uses, and how a forked worker's failure reaches its parent.

- **Count**: ``$OPENCODE_EVENTS_WORKERS`` when set (1: this process only), else one per
  core this process may run on, at most ``MAX_AUTO`` — and 1 where ``fork`` is missing,
  where this process runs other Python threads (a fork copies only the calling one: a lock
  another held, SQLite's or the allocator's, stays held in the child, which then waits
  forever), or where the job is too small to pay for the workers (``min_jobs``).
- **A child's signals**: ``child_signals()``, first thing in every forked worker: the
  host's own handlers (a harness's shutdown hook) are not the worker's to run.
- **Processes and pipes**: ``Crew`` keeps the workers' ids and the pipe ends this process
  opened for them: each end closed once (its number may be another file's by now), the
  workers killed and waited for.
  ``scratch_file()`` is a file the two sides hand each other bytes through (in memory
  where the system offers it); ``read_exactly`` reads a pipe's next message whole.
- **Failures**: a worker sends ``failure_report(exc)`` (plain data, always picklable); the
  parent calls ``raise_failure(report)``, which raises the same kind of error the worker
  met (``InputError``, ``OutputError``, ``OSError``, ``BrokenPipeError``,
  ``KeyboardInterrupt``), so the command line reports it as if it happened here; anything
  else is a ``RuntimeError`` carrying the worker's traceback.

    >>> from opencode_events.workers import worker_count
    >>> worker_count(1, min_jobs=100)
    1
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
from typing import Any, NoReturn

from .errors import InputError, OutputError
from .paths import wanted_workers

__all__ = [
    "MAX_WORKERS",
    "MAX_AUTO",
    "worker_count",
    "child_signals",
    "can_share",
    "Crew",
    "failure_report",
    "raise_failure",
    "read_exactly",
    "scratch_file",
]

MAX_WORKERS = 32  # the most ``$OPENCODE_EVENTS_WORKERS`` may ask for (two pipes a worker)
MAX_AUTO = 4  # the most chosen unasked: more cores fight over one database's pages


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def worker_count(jobs: int | None = None, *, min_jobs: int = 0) -> int:
    """Processes for ``jobs`` units of work (sessions, rows) that pay for workers from
    ``min_jobs`` on (``None``: the caller judges the size itself)."""
    if not hasattr(os, "fork"):
        return 1
    wanted = wanted_workers()
    if wanted is not None:
        return min(wanted, MAX_WORKERS)
    if jobs is not None and jobs < min_jobs:
        return 1
    if _other_threads():
        return 1
    return max(1, min(_cores(), MAX_AUTO))


def _other_threads() -> bool:
    """Whether threads run beside this one: any thread (a C library's too, as Python 3.12+
    counts them for fork's DeprecationWarning), else Python's (``threading`` never imported:
    none)."""
    try:
        if len(os.listdir("/proc/self/task")) > 1:
            return True
    except OSError:  # no /proc: Python's own threads only
        pass
    threading = sys.modules.get("threading")
    return threading is not None and threading.active_count() > 1


_HOST_SIGNALS = ("SIGTERM", "SIGHUP", "SIGQUIT", "SIGUSR1", "SIGUSR2", "SIGALRM", "SIGCHLD")


def child_signals() -> None:
    """In a forked worker: the default action for the signals a host may handle itself
    (``_HOST_SIGNALS``), and SIGINT a ``KeyboardInterrupt`` the worker reports to its
    parent. One the process ignores stays ignored (``nohup``'s SIGHUP: a closed terminal
    must not end the workers of a command told to outlive it; SIGINT of ``cmd &`` in a
    script), but SIGTERM, how a parent stops its workers. SIGPIPE stays ignored, as Python
    sets it: a closed pipe is an error to report."""
    for name in _HOST_SIGNALS:
        number = getattr(signal, name, None)
        if number is None:
            continue
        with contextlib.suppress(OSError, ValueError):
            if name == "SIGTERM" or signal.getsignal(number) is not signal.SIG_IGN:
                signal.signal(number, signal.SIG_DFL)
    if signal.getsignal(signal.SIGINT) is not signal.SIG_IGN:  # `cmd &` in a script: ignored
        signal.signal(signal.SIGINT, signal.default_int_handler)


def can_share(out: Any) -> bool:
    """Whether forked workers can write to ``out`` for us: a file object over a real file
    descriptor (a pipe, a file, a terminal), not an in-memory or wrapped stream, whose
    writes would stay in each worker's own copy."""
    import io

    if not isinstance(out, (io.BufferedWriter, io.FileIO)):
        return False
    try:
        out.fileno()
    except (OSError, ValueError):
        return False
    return True


class Crew:
    """Forked workers (``pids``) and the pipe ends opened for them (``opened``)."""

    def __init__(self) -> None:
        self.pids: list[int] = []
        self.opened: list[int] = []

    def _pipe(self) -> tuple[int, int]:
        pair = os.pipe()
        self.opened.extend(pair)
        return pair

    def _close(self, fd: int) -> None:
        if fd in self.opened:  # each once: a number closed may be another file's by now
            self.opened.remove(fd)
            with contextlib.suppress(OSError):
                os.close(fd)

    def keep(self, *mine: int) -> None:
        """In a worker: close every end opened for the crew but ``mine``, so that whoever
        is gone reads as an end of file."""
        for fd in list(self.opened):
            if fd not in mine:
                self._close(fd)

    def kill(self) -> None:
        for pid in self.pids:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGTERM)

    def close(self) -> None:
        for fd in list(self.opened):
            self._close(fd)

    def reap(self) -> list[int]:
        """Wait for every worker; the signals that killed any."""
        killed = []
        for pid in self.pids:
            with contextlib.suppress(ChildProcessError):
                status = os.waitpid(pid, 0)[1]
                if os.WIFSIGNALED(status):
                    killed.append(os.WTERMSIG(status))
        return killed


def failure_report(exc: BaseException, *, traceback: bool = True) -> dict[str, Any]:
    """What the parent needs to raise ``exc`` again: its kind, message, errno and file."""
    message = str(exc) if not isinstance(exc, KeyboardInterrupt) else ""
    # an InputError of a kind of its own (the store's damaged text) is one all the same
    kind = "InputError" if isinstance(exc, InputError) else type(exc).__name__
    report: dict[str, Any] = {"error": kind, "message": message}
    if isinstance(exc, OSError) and not isinstance(exc, BrokenPipeError):
        report.update(error="OSError", errno=exc.errno, message=exc.strerror or message)
        if isinstance(exc, OutputError):
            report["output"] = exc.filename
    elif traceback and not isinstance(exc, (InputError, BrokenPipeError, KeyboardInterrupt)):
        import traceback as tb

        report["message"] = "".join(tb.format_exception(exc)).strip()
    return report


def raise_failure(report: dict[str, Any]) -> NoReturn:
    """Raise in the parent what ``failure_report`` described (``Killed``: a worker that
    died without a word, an ``InputError`` naming why)."""
    kind, message = report["error"], report["message"]
    if kind in ("InputError", "Killed"):
        raise InputError(message)
    if kind == "BrokenPipeError":
        raise BrokenPipeError(message)
    if kind == "KeyboardInterrupt":
        raise KeyboardInterrupt
    if kind == "OSError":
        if report.get("output") is not None:
            raise OutputError(report.get("errno") or 0, message, report["output"])
        raise OSError(report.get("errno") or 0, message)
    raise RuntimeError(f"a worker failed: {message}")


def scratch_file() -> int:
    """A file for what a worker and its parent hand each other (results, rows): in memory
    where the system offers it, else an unnamed temporary file."""
    if hasattr(os, "memfd_create"):
        with contextlib.suppress(OSError):
            return os.memfd_create("opencode-events", os.MFD_CLOEXEC)
    import tempfile

    with tempfile.TemporaryFile() as file:
        return os.dup(file.fileno())


def read_exactly(fd: int, size: int) -> bytes | None:
    """``size`` bytes from the pipe ``fd``; None when it closed before they all came."""
    parts: list[bytes] = []
    while size:
        data = os.read(fd, min(size, 1 << 20))
        if not data:
            return None
        parts.append(data)
        size -= len(data)
    return b"".join(parts)
