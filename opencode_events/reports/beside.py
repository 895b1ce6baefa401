"""Items of a long ordered report made by two processes: this one and a forked helper.

A report of every session spends its last stretch on one core: the workers' scan is done,
and this process reads the session rows and makes the summaries one by one. ``made_beside``
hands most of the rows to a forked helper, which makes their items while this process
reads the next rows, makes a few itself and writes the report; the helper's items come
back encoded, and every item comes out in the rows' order, the same as if made here::

    for item in made_beside(rows, make, there, encode, decode, jobs=expected):
        ...

- ``make(row)`` makes an item in this process. ``there()`` is called once in the helper,
  first thing, and gives the helper's own ``make`` and ``side``: what the helper needs of
  its own is opened there (a SQLite connection must not be used across ``fork``: the
  store's ``reopen``). ``side()`` gives what else the helper learned with each round
  (plain data, pickled), which ``merge(side)`` takes here; ``fixed(item)`` finishes here
  each item the helper made.
- ``encode(items) -> bytes`` and ``decode(bytes) -> items`` carry a round's items back
  (msgpack of typed items, say).
- The helper is an optimisation only: one that cannot start, fails, dies or sends what
  does not decode leaves its round (and every later one) to this process, which still
  holds the rows. Closing the iterator stops and reaps it.

How they take turns: the rows come in rounds of ``HERE`` rows for this process and
``THERE`` for the helper (this process also reads every row, and writes every item, so the
helper takes the larger share). Two rounds are handed over ahead, so that the helper always
has one to make while this process waits for none. Rows and items go through two pairs of
files, a round's in the pair of its parity, each written from its start; the pipes carry
only 8 bytes a round (how long: the slot is the round's parity), so neither side ever waits
on a full pipe.
A round's slot is written again only after this process has read its items, two rounds
later: the files hold two rounds, never the whole report. The rows are read two rounds
ahead, so an error reading them (a damaged page) comes out that many items earlier than
in one process; the report fails the same way.

The helper is forked only when the worker policy allows a second process for ``jobs``
(``workers.worker_count``).
"""

from __future__ import annotations

import contextlib
import itertools
import os
import pickle
import signal
from collections.abc import Callable, Iterable, Iterator
from typing import Any, TypeVar

from ..workers import child_signals, read_exactly, scratch_file, worker_count
from .cache import read_at, write_at

__all__ = ["HERE", "MIN_JOBS", "THERE", "made_beside"]

Row = TypeVar("Row")
Item = TypeVar("Item")

# Rows a round: this process's and the helper's. Measured on 10,000 sessions: this process
# reads every row's cells and writes every summary (about 7 µs a row) and decodes the
# helper's (1 µs); making a summary, its row first, costs either side about 16 µs. At a
# third here the two finish a round together (at a quarter, this process waited for
# the helper 20-30 ms a report).
HERE, THERE = 200, 400
MIN_JOBS = 2000  # items that pay for the fork (a few ms) and the round trips
_AHEAD = 2  # rounds handed over before the first is asked for back


def made_beside(
    rows: Iterable[Row],
    make: Callable[[Row], Item],
    there: Callable[[], tuple[Callable[[Row], Item], Callable[[], Any]]],
    encode: Callable[[list[Item]], bytes],
    decode: Callable[[bytes], list[Item]],
    *,
    jobs: int,
    fixed: Callable[[Item], Item] = lambda item: item,
    merge: Callable[[Any], None] = lambda side: None,
    here: int | None = None,
    helped: int | None = None,
) -> Iterator[Item]:
    """The items of ``rows`` in order, most made by a forked helper (see the module's
    docstring); all here when ``jobs`` do not pay for it. ``here`` and ``helped``: the rows
    of a round made here and there (default ``HERE``, ``THERE``)."""
    rows = iter(rows)
    here = HERE if here is None else here
    helped = THERE if helped is None else helped
    if worker_count(jobs, min_jobs=MIN_JOBS) < 2:
        yield from map(make, rows)
        return
    helper: _Helper | None = None
    rounds: list[tuple[list[Row], list[Row], bool]] = []  # rows here, rows there, sent

    def hand_over() -> None:
        mine = list(itertools.islice(rows, here))
        theirs = list(itertools.islice(rows, helped))
        if mine or theirs:
            sent = helper is not None and bool(theirs) and helper.send(theirs)
            rounds.append((mine, theirs, sent))

    try:
        helper = _Helper.start(there, encode)  # inside the try: a Ctrl-C after it stops it
        for _ in range(_AHEAD):
            hand_over()
        while rounds:
            mine, theirs, sent = rounds.pop(0)
            for row in mine:
                yield make(row)
            made = helper.receive(decode) if sent and helper is not None else None
            if theirs and (made is None or len(made[0]) != len(theirs)):
                if helper is not None:  # failed: every later round made here
                    helper.stop()
                    helper = None
                for row in theirs:
                    yield make(row)
            elif made is not None:
                items, learned = made
                merge(learned)
                for item in items:
                    yield fixed(item)
            hand_over()
    finally:
        if helper is not None:
            helper.stop()


class _Helper:
    """The forked helper and the files and pipes between it and this process."""

    def __init__(self, pid: int, down: int, up: int, rows: list[int], items: list[int]) -> None:
        self.pid, self.down, self.up = pid, down, up
        self.rows, self.items = rows, items  # each a pair of files, a slot a round's parity
        self.sent = self.received = 0  # rounds

    @classmethod
    def start(
        cls,
        there: Callable[[], tuple[Callable[[Any], Any], Callable[[], Any]]],
        encode: Callable[[list[Any]], bytes],
    ) -> _Helper | None:
        opened: list[int] = []
        # Ctrl-C held while forking: the helper must never unwind into the caller's code
        # (its ``finally`` blocks keep files, flush the output), not even in the moment
        # before its own ``try``.
        held = _hold(signal.SIGINT)
        try:
            for _ in range(4):
                opened.append(scratch_file())
            down_r, down_w = os.pipe()
            opened += (down_r, down_w)
            up_r, up_w = os.pipe()
            opened += (up_r, up_w)
            pid = os.fork()
        except BaseException as exc:
            for fd in opened:  # closed before a held Ctrl-C may be raised
                with contextlib.suppress(OSError):
                    os.close(fd)
            _hold(signal.SIGINT, held)
            if isinstance(exc, OSError):
                return None
            raise
        rows, items = opened[0:2], opened[2:4]
        if pid == 0:  # the helper: never returns into the caller's code
            code = 1
            try:
                child_signals()
                _hold(signal.SIGINT, held)
                os.close(down_w)
                os.close(up_r)
                make, side = there()
                _serve(down_r, up_w, rows, items, make, encode, side)
                code = 0
            except BaseException:  # noqa: BLE001 - the parent finds the round unmade
                pass
            finally:
                os._exit(code)
        helper = cls(pid, down_w, up_r, rows, items)
        os.close(down_r)
        os.close(up_w)
        try:
            _hold(signal.SIGINT, held)  # a Ctrl-C that came meanwhile is raised here, now
        except BaseException:
            helper.stop()
            raise
        return helper

    def send(self, rows: list[Any]) -> bool:
        """Hand a round's rows over; False when they cannot go (made here then)."""
        try:
            data = pickle.dumps(rows, pickle.HIGHEST_PROTOCOL)
            write_at(self.rows[self.sent % 2], data, 0)
            os.write(self.down, len(data).to_bytes(8, "little"))  # a few bytes: never waits
        except (OSError, pickle.PicklingError, TypeError, AttributeError):
            return False
        self.sent += 1
        return True

    def receive(self, decode: Callable[[bytes], list[Any]]) -> tuple[list[Any], Any] | None:
        """The next round's items and what the helper learned; None when it failed."""
        try:
            head = read_exactly(self.up, 8)
            if head is None:  # the helper's pipe closed
                return None
            data = read_at(
                self.items[self.received % 2], int.from_bytes(head, "little"), 0, "a round"
            )
            size = int.from_bytes(data[:8], "little")
            items = decode(data[8 : 8 + size])
            learned = pickle.loads(data[8 + size :])
        except Exception:  # noqa: BLE001 - cut short, or not what was sent: made here
            return None
        self.received += 1
        return items, learned

    def stop(self) -> None:
        held = _hold(signal.SIGINT)  # a second Ctrl-C waits till the helper is reaped
        try:
            with contextlib.suppress(OSError):
                os.kill(self.pid, signal.SIGKILL)
            with contextlib.suppress(OSError):
                os.waitpid(self.pid, 0)
            for fd in (self.down, self.up, *self.rows, *self.items):
                with contextlib.suppress(OSError):
                    os.close(fd)
        finally:
            _hold(signal.SIGINT, held)


def _serve(
    down: int,
    up: int,
    rows_files: list[int],
    items_files: list[int],
    make: Callable[[Any], Any],
    encode: Callable[[list[Any]], bytes],
    side: Callable[[], Any],
) -> None:
    """The helper's loop: a round's rows in, their items out, until the pipe closes."""
    for round_ in itertools.count():
        head = read_exactly(down, 8)
        if head is None:
            return
        rows = pickle.loads(
            read_at(rows_files[round_ % 2], int.from_bytes(head, "little"), 0, "a round")
        )
        encoded = encode([make(row) for row in rows])
        learned = pickle.dumps(side(), pickle.HIGHEST_PROTOCOL)
        body = len(encoded).to_bytes(8, "little") + encoded + learned
        write_at(items_files[round_ % 2], body, 0)
        os.write(up, len(body).to_bytes(8, "little"))


def _hold(number: int, mask: Any = None) -> Any:
    """Block signal ``number``, returning the mask before; with ``mask``, set that again.
    Nothing where the system has no signal masks."""
    if not hasattr(signal, "pthread_sigmask"):
        return None
    if mask is None:
        return signal.pthread_sigmask(signal.SIG_BLOCK, {number})
    return signal.pthread_sigmask(signal.SIG_SETMASK, mask)
