"""Rows put in order in less memory than they take: sorted runs set aside in a file of no
name as they come, merged as they are read back (an external merge sort). ``usage --all
--by step`` orders every inference of a database by time this way: 2.6 million rows are
1.8 GB held, a few tens of MB in runs.

Each run is a list already in order; it goes to the file in groups of ``GROUP`` rows,
each encoded with MessagePack, and comes back a group at a time while the runs are merged
(``merged``): ties keep the order the runs were added in, then the order within a run,
as one stable sort of all the rows would. ``FAN_IN`` runs of one size are merged into one
run of the next as they come, so that the runs merged at the end, and the groups they
hold then, stay a few tens however many rows there are (each row is written once more
per size: 2.6 million rows pass twice). A run that cannot be set aside (no file, a full
disk, a row MessagePack cannot hold) stays in memory, and the rows are the same. The file
goes when the runs are closed, or with the process whatever happens to it.

::

    runs = SortedRuns(UsageRow, key=lambda r: (r.started or 0, r.message_id or ""))
    for batch in batches:
        runs.add(sorted(batch, key=...))          # each run in order
    for row in runs.merged(last_rows):            # every row, in order
        ...
    runs.close()

``RowSpool`` keeps rows in the order given in the same kind of file, to be read back
after (a Markdown table names its columns only once every row was seen)::

    spool = RowSpool(UsageRow)
    for row in rows:
        spool.add(row)
    for row in spool:                             # the same rows, in the same order
        ...
    spool.close()
"""

from __future__ import annotations

import heapq
import itertools
import os
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import msgspec

from ..errors import InputError
from .cache import appended, read_at, write_at

__all__ = ["SortedRuns", "RowSpool", "GROUP"]

GROUP = 256  # rows encoded, and read back, at a time: what each run holds while merged
FAN_IN = 16  # runs of one size merged into one: the runs merged at the end stay few
SPOOLED = 16 * GROUP  # rows a ``RowSpool`` holds before it sets them aside

# What setting a run aside can raise: no file, a full disk, a row MessagePack cannot hold,
# or one that would not read back as it was (a value of another type than the row's field).
_UNKEPT = (
    OSError,
    OverflowError,
    UnicodeError,
    msgspec.EncodeError,
    msgspec.DecodeError,
    msgspec.ValidationError,
)


class _GroupFile:
    """Lists of rows of ``item_type`` written to a file of no name in ``folder`` (default:
    the system's temporary folder), ``GROUP`` rows a MessagePack-encoded group, and read
    back a group at a time: where ``SortedRuns`` and ``RowSpool`` keep their rows."""

    def __init__(self, item_type: type, folder: str | None) -> None:
        self._folder = folder
        self._encoder = msgspec.msgpack.Encoder()
        self._decoder = msgspec.msgpack.Decoder(list[item_type])  # type: ignore[valid-type]
        self._file: Any = None
        self._end = 0
        self._shared = False

    def share(self) -> None:
        """Make the file now, to be written by this process and the children it forks
        after (raises ``OSError`` when it cannot be made, or locked: a folder on a file
        system without locks): each group is then appended at the file's end under a lock
        (POSIX locks are a process's own, so they hold between processes sharing one open
        file)."""
        import fcntl

        self._open()
        fd = self._file.fileno()
        fcntl.lockf(fd, fcntl.LOCK_EX)  # tried once here, not found failing group by group
        fcntl.lockf(fd, fcntl.LOCK_UN)
        self._shared = True

    def _open(self) -> None:
        if self._file is None:
            import tempfile

            if self._folder is not None:
                os.makedirs(self._folder, exist_ok=True)
            # closed by ``close``, or with the process: it has no name to leave behind
            self._file = tempfile.TemporaryFile(dir=self._folder)  # noqa: SIM115

    def written(self, rows: Iterator[Any], checked: bool = False) -> list[tuple[int, int]]:
        """``rows`` to the end of the file, ``GROUP`` at a time; where each group lies. Each
        group is decoded first as it will be read back, unless ``checked`` (rows read back
        already): one that would not raises (``_UNKEPT``: the caller then holds the rows)."""
        self._open()
        groups = []
        fd = self._file.fileno()
        while True:
            group = list(itertools.islice(rows, GROUP))
            if not group:
                break
            piece = self._encoder.encode(group)
            if not checked:
                self._decoder.decode(piece)
            if self._shared:
                groups.append((appended(fd, piece), len(piece)))
                continue
            write_at(fd, piece, self._end)
            groups.append((self._end, len(piece)))
            self._end += len(piece)
        return groups  # rows cut short by an error are never listed: their bytes lie unused

    def read(self, groups: list[tuple[int, int]]) -> Iterator[Any]:
        """The rows of ``groups`` (as ``written`` gave them), a group at a time."""
        fd = self._file.fileno()
        for offset, length in groups:
            try:
                rows = self._decoder.decode(read_at(fd, length, offset, "a group of rows"))
            except (OSError, msgspec.DecodeError, msgspec.ValidationError) as exc:
                # only what changed the file under us: every group was read back when written
                raise InputError(f"rows set aside could not be read back: {exc}") from None
            yield from rows

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
            self._end = 0


class SortedRuns:
    """Runs of rows of ``item_type``, each in the order of ``key``, merged on demand.
    ``folder``: where the file of no name is made (default: the system's temporary
    folder)."""

    def __init__(
        self, item_type: type, key: Callable[[Any], Any], folder: str | None = None
    ) -> None:
        self._key = key
        self._item_type = item_type
        self._file = _GroupFile(item_type, folder)
        self._copy = False  # a ``fresh`` copy: neither merges its runs nor closes the file
        # each run: the (offset, length) of its groups in the file, or its rows held
        self._runs: list[list[tuple[int, int]] | list[Any]] = []
        self._held: list[bool] = []
        self._sizes: list[int] = []  # each run's size: 0 as added, 1 for FAN_IN of those …

    def __len__(self) -> int:
        return len(self._runs)

    def share(self) -> None:
        """Make the runs' file now, for the children this process forks after to set their
        runs aside in too (``fresh``, ``handed_over``, ``adopt``); ``OSError`` when it
        cannot be made."""
        self._file.share()

    def fresh(self) -> SortedRuns:
        """Empty runs of the same rows and order, in the same file (``share``: a worker's,
        whose runs this process ``adopt``s). A copy sets its runs aside as they are added,
        unmerged, so that those it hands over are all of the first size, as added here;
        its ``close`` leaves the file to the runs it was made from."""
        runs = SortedRuns(self._item_type, self._key)
        runs._file, runs._copy = self._file, True
        return runs

    def handed_over(self) -> list[tuple[bool, Any, int]]:
        """Every run, in order, as ``adopt`` takes them (where its groups lie in the shared
        file, or its rows held, and its size), and none left here."""
        runs = list(zip(self._held, self._runs, self._sizes, strict=True))
        self._runs, self._held, self._sizes = [], [], []
        return runs

    def adopt(self, runs: list[tuple[bool, Any, int]]) -> None:
        """Another's runs (``handed_over`` by a ``fresh`` copy of these, in this file) after
        these, in their order: as if their rows had been added here."""
        for held, run, size in runs:
            self._runs.append(run)
            self._held.append(held)
            self._sizes.append(size)
            self._fan_in(size)

    def add(self, rows: list[Any]) -> None:
        """Set ``rows`` aside as a run (they must be in ``key``'s order already)."""
        if not rows:
            return
        self._append(rows, 0)
        if not self._copy:
            self._fan_in(0)

    def _fan_in(self, size: int) -> None:
        """The last ``FAN_IN`` runs, while they are all of ``size``, merged into one of the
        next size."""
        while len(self._sizes) >= FAN_IN and all(s == size for s in self._sizes[-FAN_IN:]):
            # the last FAN_IN runs, in the order they were added: one run of the next size
            first = len(self._runs) - FAN_IN
            if any(self._held[first:]):
                return  # rows held already (no file for them): merged at the end
            sources = [self._source(i) for i in range(first, len(self._runs))]
            try:
                groups = self._file.written(heapq.merge(*sources, key=self._key), checked=True)
            except _UNKEPT:
                return  # left as they are: merged at the end all the same
            del self._runs[first:], self._held[first:], self._sizes[first:]
            self._runs.append(groups)
            self._held.append(False)
            self._sizes.append(size + 1)
            size += 1

    def _append(self, rows: list[Any], size: int) -> None:
        try:
            groups = self._file.written(iter(rows))
        except _UNKEPT:
            self._runs.append(rows)  # kept in memory: the same rows, in the same order
            self._held.append(True)
        else:
            self._runs.append(groups)
            self._held.append(False)
        self._sizes.append(size)

    def _source(self, index: int) -> Iterable[Any]:
        run = self._runs[index]
        return run if self._held[index] else self._file.read(run)  # type: ignore[arg-type]

    def merged(self, *more: Iterable[Any]) -> Iterator[Any]:
        """Every run's rows and then ``more``'s (each in order), merged in ``key``'s order:
        a tie goes to the run added first."""
        sources = [self._source(i) for i in range(len(self._runs))]
        sources.extend(more)
        if len(sources) == 1:
            return iter(sources[0])
        return heapq.merge(*sources, key=self._key)

    def close(self) -> None:
        """Let the file go (the runs cannot be read after)."""
        if not self._copy:
            self._file.close()
        self._runs.clear()
        self._held.clear()
        self._sizes.clear()


class RowSpool:
    """Rows of ``item_type`` kept in the order given (``add``), set aside ``SPOOLED`` at a
    time in a file of no name in ``folder`` (default: the system's temporary folder), and
    read back in that order (iterate, as often as asked) until ``close``. Rows that cannot
    be set aside (no file, a full disk, a row MessagePack cannot hold) are held in memory
    in their place: the same rows, in the same order."""

    def __init__(self, item_type: type, folder: str | None = None) -> None:
        self._file = _GroupFile(item_type, folder)
        self._waiting: list[Any] = []
        self._pieces: list[tuple[bool, Any]] = []  # (True, rows held) or (False, groups)

    def add(self, row: Any) -> None:
        self._waiting.append(row)
        if len(self._waiting) >= SPOOLED:
            self._set_aside()

    def _set_aside(self) -> None:
        rows, self._waiting = self._waiting, []
        if not rows:
            return
        try:
            self._pieces.append((False, self._file.written(iter(rows))))
        except _UNKEPT:
            self._pieces.append((True, rows))

    def __iter__(self) -> Iterator[Any]:
        self._set_aside()
        for held, piece in self._pieces:
            yield from piece if held else self._file.read(piece)

    def close(self) -> None:
        """Let the file go (the rows cannot be read after)."""
        self._file.close()
        self._pieces.clear()
        self._waiting.clear()
