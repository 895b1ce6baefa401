"""The report cache: what ``sessions`` and ``usage`` computed from a database, kept so that
a report of a database that did not change is not computed again, and a report of one that
changed reads only the sessions that did.

Where: ``$XDG_CACHE_HOME/opencode-events/<database>/`` (``~/.cache`` without it), one folder
per database path, never beside the database, which is never written. What:

- **memos**: whole reports, each under its request (the command's choices) and the
  database's ``fingerprint`` (``store.changes``): a repeat with nothing changed is answered
  from the memo. A report with a reply in flight (``busy``) is not kept: its state would
  turn ``stale`` with the clock alone.
- **renditions**: a memo's report as a command writes it (its JSON, say), kept beside the
  memo under the same keys: a repeat with nothing changed copies them out without decoding
  the report (``rendered``). Only a report kept as a memo in this run gets one. A memo
  spooled item by item keeps each item's size and key, and its rendition where each item
  lies, so that a report brought up to date copies the bytes of the items that did not
  change from both (``previous_pieces``, ``KeptPieces``).
- **ledgers**: per session, what a report needs of its messages and parts, under the
  session's stamp (OpenCode's change counter, ``event_sequence.seq``). A session whose
  stamp is unchanged is not read again, nor one still without a stamp, while only OpenCode
  wrote (``store.changes``). A large one may be kept by a forked child while the
  report is made (``aside``); the report waits for it before it returns (``settle``).
  Its entries are kept in groups, each with its CRC-32, and read back a group at a time
  (``ledger_entries``), or decoded whole where they are small (``ledger``).

Every file starts with a header naming this format, the tool's version and the database,
and every byte kept is summed (CRC-32: a header's body, a rendition's bytes, each group of
a spooled memo's or a ledger's items); a file that is damaged, truncated, foreign or of
another version is ignored (and replaced by the next write), never trusted. Files are
written whole to a temporary name and renamed, so two runs at once never leave a torn file
(the last one wins; both were right; the state last seen, ``seen``, is read and written
under a lock, one run at a time). The size is bounded: all of it in bytes (``budget``,
``$OPENCODE_EVENTS_CACHE_SIZE``), and at most ``MEMOS`` memos and as many renditions and
``LEDGERS`` ledgers per database and ``DATABASES`` databases, the least recently used go
first; a ledger holds only the sessions the database still has.

::

    cache = ReportCache.open(store)         # None: a store that is not a database
    report = cache.recall("sessions", request, SessionsReport)
    if report is None:
        report = compute()
        cache.remember("sessions", request, report)
    cache.keep_rendered("sessions", request, "json", write_json(report))
    spool = cache.rendering("sessions", request, "json")  # or piece by piece, as written
    kept = cache.rendered("sessions", request, "json")   # the next run: None, or
    kept.write_to(sys.stdout.buffer)                      # the bytes, copied out
    kept.notes                                            # and what was said apart
    cache.close()                                         # or ``with ReportCache.open(…)``
"""

from __future__ import annotations

import array
import bisect
import contextlib
import errno
import gc
import io
import itertools
import os
import threading
import time
import zlib
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, BinaryIO, NoReturn, TypeVar

import msgspec

try:  # hashlib's blake2b without loading OpenSSL's bindings (start-up)
    from _blake2 import blake2b
except ImportError:  # pragma: no cover - an interpreter built without it
    from hashlib import blake2b

from .._version import __version__
from ..errors import InputError
from ..paths import CACHE_SIZE, cache_size_setting
from ..store.changes import database_identity, fingerprint, log_kept, log_moved, session_stamps
from ..store.files import new_private_file as _new_file
from ..store.files import private_folder as _private_folder
from ..workers import child_signals, worker_count

__all__ = [
    "ReportCache",
    "Rendition",
    "MemoSpool",
    "RenditionSpool",
    "cache_digest",
    "MEMOS",
    "LEDGERS",
    "DATABASES",
    "ASIDE_ENTRIES",
    "UNENCODABLE",
    "Spill",
    "LedgerEntries",
    "KeptPieces",
    "appended",
    "encoded_map",
    "read_at",
    "write_at",
]

T = TypeVar("T")

FORMAT = 13  # 2: invalid calls among tool_failures; forked, …; 3: the fingerprint's epoch;
# 4: a memo's groups; 5: a report by turn of every session spooled row by row; 6: a
# ledger's entries in groups, read as they are used; 7: every file's bytes summed (CRC-32);
# 8: a folded subagent's total_tokens its replies' (was its session row's classes); 9: the
# database's change time in the fingerprint; 10: only a session's newest reply in flight,
# a history two forks copied from a deleted original counted once, a damaged time no time;
# 11: a prompt awaiting its reply in flight (the ledger's in_flight: maybe, by the newest);
# 12: a spooled memo's item sizes and order keys, a rendition's item spans (``KeptPieces``);
# 13: those sizes and spans as 8-byte arrays' bytes, and a memo's token in its renditions
MEMOS = 16  # whole reports kept per database
# Ledgers kept per database: one per kind of report and choice that needs one (sessions,
# usage by day, model or agent in each zone, context, undo windows), and those an older
# version of this tool left under names this one no longer asks for.
LEDGERS = 32
DATABASES = 32  # database folders kept
_LARGEST = 1 << 30  # a file is not written beyond this (a runaway, not a real report)
_PIECE = 1 << 20  # a large ledger is written in pieces of about this many bytes
# A ledger's entries up to this many bytes (about 25,000 sessions' days) are held as they
# were read when it was opened, not read again for each pass over them.
_HELD_LEDGER = 16 << 20
_KEPT_FILES = ("memo-", "render-", "ledger-")  # what ``_fit`` counts and lets go
_OWN_FILES = (*_KEPT_FILES, "seen", ".seen", ".tmp-")  # everything a folder of ours holds
ASIDE_ENTRIES = 1000  # sessions from which a ledger is written by a forked child


# What encoding a value can raise: an integer beyond 64 bits (a damaged figure), a lone
# surrogate in a string. Such a report or entry is not kept; it is made again next time.
UNENCODABLE = (OverflowError, UnicodeError, msgspec.EncodeError)


class _TooLarge(Exception):
    """A file that is not to be kept after all (too large, or its entries miscounted)."""


class _Header(msgspec.Struct, array_like=True):
    magic: str
    format: int
    version: str
    database: str
    fingerprint: Any
    body: msgspec.Raw
    check: int  # the body's CRC-32: a byte changed anywhere in it, and it is not trusted


_MAGIC = "opencode-events report cache"
_HEADER = msgspec.msgpack.Decoder(_Header)
_ENCODER = msgspec.msgpack.Encoder()


class _Memo(msgspec.Struct, array_like=True):
    request: Any
    checks: Any  # what the report consulted besides the database (e.g. MCP config)
    value: msgspec.Raw
    # What a report needs to bring this one up to date (``previous``): e.g. each session's
    # stamp then. None: it is kept only for a database in the same state.
    basis: msgspec.Raw = msgspec.Raw(b"\xc0")  # nil; decoded only when asked (``previous``)
    # How a report's list spooled item by item (``MemoSpool``) lies in ``value``: the items
    # and bytes of each group, read back a group at a time (``recall_each``). Empty: the
    # value is decoded whole. Each group: its items, its bytes and their CRC-32.
    groups: list[tuple[int, int, int]] = []
    # A spooled memo's items one by one: each one's bytes (an ``_INTS`` array's, 8 bytes
    # an item), and the key it was given (``MemoSpool.add_item``: a msgpack array of
    # them), so that a report brought up to date copies those that did not change without
    # decoding them (``previous_pieces``). Empty, nil: not known.
    sizes: bytes = b""
    keys: msgspec.Raw = msgspec.Raw(b"\xc0")
    # This memo's own name, drawn when it was written: a rendition made with it names it
    # (``_Rendition.memo``). Two runs can keep a memo and a rendition under the same
    # fingerprint and different rows (OpenCode wrote between a run's keys and its reads),
    # and the two files are replaced one after the other: only this pairs them.
    token: bytes = b""


_MEMO = msgspec.msgpack.Decoder(_Memo)


class _Rendition(msgspec.Struct, array_like=True):
    request: Any
    form: str
    checks: Any  # the memo's
    length: int  # of the bytes after the head
    # The report's notes where its form says them apart from these bytes (JSON Lines and
    # CSV: on stderr), to be said again with them.
    notes: list[str] = []
    check: int = 0  # the bytes' CRC-32, checked before any of them is copied out
    # Where each item of the memo's list lies in the bytes: [start, end, …] (``ListForm``
    # writers), an ``_INTS`` array's bytes; empty when not known.
    spans: bytes = b""
    memo: bytes = b""  # the token of the memo these bytes were made with (``_Memo.token``)


_RENDITION = msgspec.msgpack.Decoder(_Rendition)
# Sizes and offsets, 8 bytes each, as this machine orders them (a cache is this machine's:
# one from another, whose numbers would read as nonsense, fails the checks they are put to).
_INTS = "q"
_HEAD_LARGEST = 1 << 24  # a rendition's head: a request and the MCP servers consulted
_COPY_PIECE = 1 << 20


class _Items:
    """Where a spooled memo's items lie in its file (opened when its head was checked, so
    a run that replaces the file meanwhile changes nothing here): read by offset."""

    def __init__(self, file: BinaryIO, offset: int, size: int) -> None:
        self.file, self.offset, self.size = file, offset, size

    def read(self, at: int, length: int) -> bytes:
        return read_at(self.file.fileno(), length, at, "a memo")

    def close(self) -> None:
        self.file.close()


_UNDECODABLE = (msgspec.DecodeError, msgspec.ValidationError, RecursionError, TypeError)
# And what a type's own checks (``__post_init__``) raise on a value no report made.
_UNTRUSTED = (*_UNDECODABLE, KeyError, ValueError)
_LEDGER_GROUP = msgspec.msgpack.Decoder(list[tuple[str, int | None, msgspec.Raw]])


class LedgerEntries:
    """The entries of a ledger still true of the database (``ReportCache.ledger_entries``):
    ``count`` of them, left in the ledger's file (opened when its head was checked, so a run
    that replaces the file meanwhile changes nothing here) and read a group at a time as
    often as they are asked for; a small ledger's (``_HELD_LEDGER`` bytes at most) are
    held as first read. ``each`` gives (session, the entry's bytes), for the caller to
    decode as its type, or as a smaller view of it::

        entries = cache.ledger_entries("usage-days", request)
        for sid, entry in entries.each():
            days = decoder.decode(entry)

    Every group decoded once when the file was opened; one that fails later (a file changed
    in place, never by a run of ours) is an ``InputError``, and the file is let go."""

    def __init__(
        self,
        file: BinaryIO | None,
        offset: int,
        groups: Sequence[tuple[int, int, int]] = (),
        stamps: Mapping[str, Any] | None = None,
        path: Path | None = None,
        hold: bool = False,
    ) -> None:
        self._file, self._offset, self._groups = file, offset, groups
        self._stamps = stamps or {}
        self._path = path
        # The groups as first read, decoded, where they are to be passed over again and
        # are few enough bytes to hold.
        self._held: list[Any] | None = None
        self._holds = hold and sum(group[1] for group in groups) <= _HELD_LEDGER
        self.count = 0
        self.picked: dict[str, bytes] = {}  # the entries asked for first (``ledger_entries``)

    def each(self) -> Iterator[tuple[str, msgspec.Raw]]:
        """(session, entry) of every entry still true, in the order they were kept. The
        cycle collector is paused till the last is given (or the iteration is let go):
        the caller decodes each entry (``decoded``) and folds it in, tens of thousands of
        young objects none of which is in a cycle, and a pause around each decode alone
        cost more than the decode (a lock and a context a session)."""
        if self._file is None:
            return
        stamps = self._stamps
        with _collector_paused():
            held = self._held
            for group in held if held is not None else self._read_groups(self._file.fileno()):
                # Only OpenCode wrote (or nothing): an unstamped session it wrote to has a
                # stamp now, so one still without is as unchanged as a stamp that held.
                for sid, stamp, entry in group:
                    if stamps.get(sid) == stamp:
                        yield sid, entry

    def _read_groups(self, fd: int) -> Iterator[list[tuple[str, Any, msgspec.Raw]]]:
        """Each group read from the file ``fd`` and decoded (held as it comes, when it may
        be: once every group is read, as a ledger is opened, they are not read again)."""
        at = self._offset
        held: list[Any] | None = [] if self._holds else None
        for count, size, check in self._groups:
            try:
                group = _decoded_group(
                    _LEDGER_GROUP, read_at(fd, size, at, "a ledger"), count, check
                )
            except (OSError, ValueError, *_UNDECODABLE) as exc:
                self.damaged(exc)
            at += size
            if held is not None:
                held.append(group)
            yield group
        self._held = held

    def decoded(self, decoder: msgspec.msgpack.Decoder[Any], entry: msgspec.Raw) -> Any:
        """``entry`` decoded by ``decoder`` (the caller's type of entry, or a view of it);
        one that does not decode is ``damaged``. Every group's bytes are checked against
        their sum as they are read, so only a file written so on purpose gets here.
        Meant for the entries of ``each``, which pauses the cycle collector for them."""
        try:
            return decoder.decode(entry)
        except _UNDECODABLE as exc:
            self.damaged(exc)

    def damaged(self, cause: BaseException) -> NoReturn:
        """Let the ledger's file go and raise the one error a damaged cache read is."""
        with _quietly():
            self._path.unlink()  # type: ignore[union-attr]
        raise InputError(
            f"the report cache {self._path} was damaged while read: run again"
        ) from cause

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
        self._file = self._held = None

    def __enter__(self) -> LedgerEntries:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()


class KeptPieces:
    """The last report of a kind, as its spooled memo's items and its rendition in one form
    lie in their files, both found sound (``ReportCache.previous_pieces``): what a report
    brought up to date copies of the items that did not change, without decoding them or
    writing them again. ``keys``: each item's (``MemoSpool.add_item``), in the memo's order;
    ``basis`` and ``checks``: the memo's. The files were opened when they were checked, so
    a run that replaces them meanwhile changes nothing here; ``close`` when done.

    ::

        kept = cache.previous_pieces("sessions", request, "json", key_type=tuple[int, str])
        for piece, spans in kept.rendered_runs(0, 10):  # items 0 … 9 as they were written
            out.write(piece)
        memo.add_kept(kept, 0, 10)                       # and as they were kept
    """

    def __init__(
        self,
        items: _Items,
        sizes: array.array[int],
        keys: list[Any],
        rendition: tuple[BinaryIO, Path, int, array.array[int]],  # file, path, start, spans
        basis: Any,
        checks: Any,
    ) -> None:
        self._items = items
        self._rendition, self._path, self._at, self._spans = rendition
        self.sizes, self.keys = sizes, keys
        self.basis, self.checks = basis, checks
        self._offsets = array.array(_INTS, itertools.accumulate(sizes, initial=items.offset))

    def memo_runs(self, low: int, high: int, most: int) -> Iterator[tuple[int, int]]:
        """Items [low, high) in runs [start, end) of at most ``most`` bytes each (at least
        one item): what is read at a time."""
        offsets = self._offsets
        while low < high:
            end = bisect.bisect_right(offsets, offsets[low] + most, low + 1, high + 1) - 1
            end = max(end, low + 1)
            yield low, end
            low = end

    def memo_into(self, buffer: bytearray, low: int, high: int) -> None:
        """The bytes of items [low, high) added to ``buffer``."""
        at = self._offsets[low]
        buffer += read_at(self._items.file.fileno(), self._offsets[high] - at, at, "a memo")

    def rendered_runs(
        self, low: int, high: int, most: int | None = None
    ) -> Iterator[tuple[bytes, list[int]]]:
        """The rendition's bytes from item ``low``'s first to item ``high - 1``'s last (what
        lies between them too), in pieces that each start at an item, of about ``most``
        bytes, with where their items lie in them (``RenditionSpool.add``'s spans)."""
        spans, fd = self._spans, self._rendition.fileno()
        most = _COPY_PIECE if most is None else most
        while low < high:
            start, limit = spans[2 * low], spans[2 * low] + most
            if spans[2 * high - 1] <= limit:  # the rest in one piece
                end = high
            else:  # to the last item that starts within the limit (the first one at least)
                found = bisect.bisect_right(spans, limit, 2 * low + 2, 2 * high)
                end = max((found - 1) // 2, low + 1)
            stop = spans[2 * end] if end < high else spans[2 * high - 1]
            try:
                piece = read_at(fd, stop - start, self._at + start, "a report kept")
            except OSError as exc:  # cut short in place since it was summed: not by us
                with _quietly():
                    self._path.unlink()
                raise InputError(
                    f"the report cache {self._path} was damaged while read: run again"
                ) from exc
            yield piece, [at - start for at in spans[2 * low : 2 * end]]
            low = end

    def close(self) -> None:
        self._rendition.close()


class _Unsound(Exception):
    """A rendition that is not to be trusted (damaged, foreign, or of another state)."""


class Rendition:
    """Bytes ``ReportCache.rendered`` found sound, still in their file: opened when they
    were checked, so a run that replaces the file meanwhile (a rename) changes nothing
    here. ``write_to`` copies them out and closes the file: to a file descriptor of its own
    (standard output as a file or a pipe) by ``os.sendfile``, in the kernel; else in
    pieces of a megabyte through one buffer. 100,000 sessions' JSON is 110 MB: read into
    new bytes a megabyte at a time it cost a repeat about 0.1 s of page faults. ``notes``:
    what was kept to be said apart from the bytes (``RenditionSpool.keep``)."""

    def __init__(self, file: BinaryIO, offset: int, length: int, notes: Sequence[str] = ()) -> None:
        self._file, self._offset, self.length = file, offset, length
        self.notes = list(notes)

    def write_to(self, out: BinaryIO) -> None:
        try:
            done = _sent(self._file, self._offset, self.length, out)
            left = self.length - done
            if not left:
                return
            self._file.seek(self._offset + done)
            view = memoryview(bytearray(min(left, _COPY_PIECE)))
            while left:
                got = self._file.readinto(view[: min(left, len(view))])
                if not got:  # cut short in place, which no run of ours does
                    raise InputError("the report cache was cut short while read: run again")
                out.write(view[:got])
                left -= got
        finally:
            self._file.close()

    def read(self) -> bytes:
        """The bytes whole (tests; a caller that needs them in memory)."""
        with io.BytesIO() as held:
            self.write_to(held)
            return held.getvalue()


# sendfile cannot serve this output (macOS: sockets only; some file systems): copy instead.
_NOT_SENDABLE = {errno.EINVAL, errno.ENOSYS, errno.ENOTSOCK, errno.EOPNOTSUPP, errno.EBADF}


def _sent(file: BinaryIO, offset: int, length: int, out: BinaryIO) -> int:
    """Bytes of ``file`` from ``offset`` on copied to ``out`` by ``os.sendfile`` (``out``
    flushed first, so what it holds goes out before them): all ``length`` of them, fewer
    when the file ends sooner, 0 when ``out`` is not a plain file object over a descriptor
    (an in-memory stream, the terminal's filter) or sendfile cannot write to it. An error
    writing (a closed pipe, a full disk) is raised as ``out.write`` would raise it."""
    if not hasattr(os, "sendfile") or not isinstance(out, (io.BufferedWriter, io.FileIO)):
        return 0
    try:
        target = out.fileno()
    except (OSError, ValueError):
        return 0
    out.flush()
    source, sent = file.fileno(), 0
    while sent < length:
        try:
            count = os.sendfile(target, source, offset + sent, length - sent)
        except OSError as exc:
            if sent == 0 and exc.errno in _NOT_SENDABLE:
                return 0
            raise
        if not count:  # the file ends here: the caller's copy says it was cut short
            break
        sent += count
    return sent


def cache_digest(value: Any) -> str:
    """A short digest of ``value`` (anything msgpack holds): a file name, or a long part of
    a request (the ids of every session) kept small."""
    return blake2b(_ENCODER.encode(value), digest_size=12).hexdigest()


_digest = cache_digest


def _memo_name(kind: str, request: Any) -> str:
    return f"memo-{_digest([kind, request])}"


def _ledger_name(kind: str, request: Any) -> str:
    return f"ledger-{_digest([kind, request])}"


def _rendition_name(kind: str, request: Any, form: str) -> str:
    return f"render-{_digest([kind, request, form])}"


class ReportCache:
    """The cache folder of one database, with the database's keys read once, when it is
    opened: before any report reads a row, so that what is kept is never older than the key
    it is kept under."""

    def __init__(
        self,
        folder: Path,
        database: str,
        state: Any,
        stamps: dict[str, int],
        budget: int = CACHE_SIZE,
    ) -> None:
        self.folder = folder
        self.budget = budget  # bytes the whole cache (every database's folder) may take
        self.database = database
        self.fingerprint = state
        self.stamps = stamps
        self.hits = 0  # ledger entries reused (tests read it)
        self._ledgers: dict[str, Any] = {}
        self._memos: dict[str, tuple[_Header, _Items | None] | None] = {}
        self._opened: list[_Items] = []  # spooled memos' files read in this run (``close``)
        self._sound_memos: set[str] = set()  # spooled memos whose every group gave its CRC-32
        # Memos kept or found sound in this run: their checks and token (``_Memo.token``).
        self._kept: dict[str, tuple[Any, bytes]] = {}
        self._bases: dict[str, Any] = {}  # a basis held for its next reader (``_memo_since``)
        self._aside: list[int] = []  # forked children writing a ledger (``settle``)
        self._keeps = True  # False: this run writes nothing (``_observe``)

    @classmethod
    def open(
        cls, store: Any, *, root: Path | None = None, budget: int | None = None
    ) -> ReportCache | None:
        """The cache of ``store``'s database; None for a store that is not a database (the
        legacy layout) or when the keys cannot be read. ``budget``: the bytes the whole
        cache may take (default ``$OPENCODE_EVENTS_CACHE_SIZE``, else ``CACHE_SIZE``; a
        setting that is no size raises ``InputError``)."""
        if not hasattr(store, "change_edges"):
            return None
        if budget is None:
            budget = cache_size_setting()
        if root is None:
            from ..paths import report_cache_dir

            root = report_cache_dir()
            if root is None:
                return None
        folder = root / database_identity(store)
        if not (_private_folder(root) and _private_folder(folder)):
            return None  # another user's, or writable by others: kept nothing, read nothing
        # As its files name it: a path's bytes that are not UTF-8 (held as surrogates,
        # which msgpack cannot write) as \xNN.
        database = os.fsencode(Path(store.path).absolute()).decode("utf-8", "backslashreplace")
        try:
            # One report at a time reads the database's state and records it (``seen``), so
            # that the states recorded follow one another as the database's did.
            with _one_at_a_time(folder) as alone:
                cache = cls(folder, database, fingerprint(store), {}, budget)
                cache._observe(record=alone, kept=lambda then: log_kept(store, then))
            cache.stamps = session_stamps(store)  # after the fingerprint: never newer
        except Exception:  # a store that cannot answer is simply not cached
            return None
        return cache

    def _observe(
        self, *, record: bool = True, kept: Callable[[Any], bool] = lambda then: True
    ) -> None:
        """Add the *epoch* to the fingerprint: a name for the stretch of the database's
        history in which only OpenCode wrote, as far as any report saw. The state the last
        report saw is kept (``seen``); one since which the database changed and the event
        log did not move was written by another program, and starts a new epoch. What is
        kept under another epoch is trusted only for the very state it was made of: a
        report made before another program's write, which a later report saw, is never
        brought up to date from the stamps (the write moved none).

        Not ``record``: the state could not be read and recorded alone (another run held
        the lock too long): an epoch of this run's own, recorded nowhere, and nothing
        written (what it kept could never be trusted, and would push out what can)."""
        state = self.fingerprint
        if not record:
            self.fingerprint = [*state, os.urandom(8).hex()]
            self._keeps = False
            return
        seen = self._read("seen")
        then = seen.fingerprint if seen is not None else None
        if type(then) is list and len(then) == len(state) + 1:
            epoch = then[-1]
            if then[:-1] == state:
                self.fingerprint = [*state, epoch]
                return
            if log_moved(then[:-1], state) and kept(then[:-1]):
                self.fingerprint = [*state, epoch]
                self._write("seen", b"\xc0")
                return
        # Never seen (or the record damaged), or another program wrote: a new epoch.
        self.fingerprint = [*state, os.urandom(8).hex()]
        self._write("seen", b"\xc0")

    def _only_opencode_since(self, then: Any) -> bool:
        """Whether only OpenCode wrote since the state ``then`` (a kept file's fingerprint):
        the same epoch, and the event log moved (``store.changes.log_moved``)."""
        now = self.fingerprint
        return (
            type(then) is list
            and len(then) == len(now)
            and then[-1] == now[-1]
            and log_moved(then[:-1], now[:-1])
        )

    # ------------------------------------------------------------------ files

    def _read(self, name: str) -> _Header | None:
        try:
            with open(self.folder / name, "rb") as file:
                data = file.read(_bounded_size(file))
        except OSError:
            return None
        return self._sound(data)

    def _read_memo(self, name: str) -> tuple[_Header, _Items | None] | None:
        """A memo's header, and where a spooled memo's items lie (``MemoSpool``): such a
        file is the length of its head (8 bytes), the head, then the items, read a group
        at a time and never whole; any other memo is its header alone, read whole."""
        try:
            file = open(self.folder / name, "rb", buffering=0)  # noqa: SIM115 - _Items'
        except OSError:
            return None
        try:
            info = os.fstat(file.fileno())
            if _from_the_future(info):
                raise _Unsound
            first = file.read(8)
            if len(first) == 8 and first[0] == 0:  # a head's length: no header starts so
                size = info.st_size
                header, length = self._head_of(file, first, min(_LARGEST, size - 8))
                _touched(file.fileno())
                items = _Items(file, 8 + length, size)
                self._opened.append(items)
                return header, items
            data = first + file.read(_bounded_size(file))
        except (_Unsound, OSError):
            file.close()
            return None
        except BaseException:
            file.close()
            raise
        file.close()
        header = self._sound(data)
        if header is None:
            return None
        _touched(self.folder / name)
        return header, None

    def _head_of(self, file: BinaryIO, first: bytes, room: int) -> tuple[_Header, int]:
        """The header of a file that is the length of its head (``first``: 8 bytes) then the
        head, with that length, when the head is sound and at most ``room`` bytes (else
        ``_Unsound``): a spooled memo's, a rendition's, a ledger's."""
        length = int.from_bytes(first, "big") if len(first) == 8 and first[0] == 0 else 0
        header = self._sound(file.read(length)) if 0 < length <= room else None
        if header is None:
            raise _Unsound
        return header, length

    def _sound(self, data: bytes) -> _Header | None:
        """The header ``data`` holds, when it is whole, of this format, this version and
        this database; else None."""
        try:
            header = _HEADER.decode(data)
        except (msgspec.DecodeError, msgspec.ValidationError, RecursionError, TypeError):
            return None
        if (
            header.magic != _MAGIC
            or header.format != FORMAT
            or header.version != __version__
            or header.database != self.database
            or zlib.crc32(header.body) != header.check
        ):
            return None
        return header

    def _head(self) -> bytes:
        """A ``_Header`` as its encoding would start, before its ``body``: the msgpack array
        of its first five fields, its length made seven (the body and its sum follow)."""
        head = bytearray(
            _ENCODER.encode((_MAGIC, FORMAT, __version__, self.database, self.fingerprint))
        )
        head[0] += 2  # fixarray of 5 (0x95) → of 7
        return bytes(head)

    def _sealed(self, body: bytes) -> bytes:
        """A whole ``_Header`` of ``body``: the head, the body, the body's CRC-32."""
        return b"".join(self._sealed_pieces([body]))

    def _sealed_pieces(self, body: Iterable[bytes | bytearray]) -> Iterator[bytes | bytearray]:
        """``_sealed`` of the pieces of ``body`` joined, in pieces as they come (a large
        memo's are never joined): the head, the pieces, their CRC-32 summed as they go."""
        yield self._head()
        check = 0
        for piece in body:
            check = zlib.crc32(piece, check)
            yield piece
        yield _ENCODER.encode(check)

    def _write(self, name: str, body: bytes | Iterable[bytes]) -> None:
        """Write ``name``: the header, then ``body``, its bytes or pieces of them written as
        they come (a large memo is never copied whole once more), then their sum."""
        self._replace(name, self._sealed_pieces([body] if isinstance(body, bytes) else body))

    def _replace(
        self, name: str, pieces: Iterable[bytes], tail: Rendition | None = None, end: bytes = b""
    ) -> None:
        """Write ``name`` whole (a temporary file renamed over it): ``pieces``, then the
        bytes of ``tail`` copied out of their file, then ``end``; failures are ignored: a
        cache that cannot be written only costs the next run its time."""
        if not self._keeps:
            return
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            fd, tmp = _new_file(self.folder)
            try:
                with os.fdopen(fd, "wb") as file:
                    size, most = 0, min(_LARGEST, self.budget // 2)
                    for piece in pieces:
                        size += file.write(piece)
                        # A runaway, not a real report; or larger than half the cache:
                        # kept, it would push every other report out (a report by turn
                        # of every session, in a small cache), and then be pushed out.
                        if size > most:
                            raise _TooLarge
                    if tail is not None:
                        tail.write_to(file)
                    file.write(end)
                os.replace(tmp, self.folder / name)
            except BaseException:
                with _quietly():
                    os.unlink(tmp)
                raise
        except (OSError, _TooLarge, InputError, *UNENCODABLE):  # InputError: a tail cut short
            return
        self._trim(self.folder / name)

    def _trim(self, written: Path) -> None:
        """Keep at most ``MEMOS`` memos (and renditions) and ``LEDGERS`` ledgers here, the
        least recently written or read going first, and ``DATABASES`` folders beside it;
        then the whole cache within its ``budget`` (``_fit``)."""
        with _quietly():
            for kind, most in (("memo-*", MEMOS), ("render-*", MEMOS), ("ledger-*", LEDGERS)):
                for old in sorted(self.folder.glob(kind), key=_mtime)[:-most]:
                    old.unlink()
            for stray in self.folder.glob(".tmp-*"):  # a run killed mid-write, long ago
                if _mtime(stray) < _mtime(self.folder) - 3600:
                    stray.unlink()
        with _quietly():
            # Real folders only: a link to a folder elsewhere is not ours to empty.
            folders = sorted(
                (p for p in self.folder.parent.iterdir() if p.is_dir() and not p.is_symlink()),
                key=_mtime,
            )
            for old in folders[:-DATABASES]:
                with _quietly():
                    for file in old.iterdir():
                        if file.name.startswith(_OWN_FILES):
                            file.unlink()
                    old.rmdir()  # not when anything else is in it
        with _quietly():
            self._fit(written)

    def _fit(self, written: Path) -> None:
        """The whole cache, every database's folder, made to take at most ``budget`` bytes:
        the least recently written or read memos, renditions and ledgers go first, of any
        database; the file just ``written`` last, only when it alone takes more. A file
        another run is reading stays readable to it (it is only unlinked)."""
        found: list[tuple[bool, float, str, int]] = []
        total = 0
        just = str(written)
        with os.scandir(self.folder.parent) as folders:
            for folder in folders:
                if not folder.is_dir(follow_symlinks=False):
                    continue
                try:
                    files = os.scandir(folder.path)
                except OSError:  # one folder we cannot list: the others are still bounded
                    continue
                with files:
                    for file in files:
                        if not file.name.startswith(_KEPT_FILES):
                            continue
                        try:
                            stat = file.stat(follow_symlinks=False)
                        except OSError:  # gone meanwhile (another run's trim)
                            continue
                        total += stat.st_size
                        found.append((file.path == just, stat.st_mtime, file.path, stat.st_size))
        if total <= self.budget:
            return
        found.sort()  # the least recently used first, the one just written last of all
        for _just, _when, path, size in found:
            if total <= self.budget:
                break
            with _quietly():
                os.unlink(path)
            total -= size

    # ------------------------------------------------------------------ memos

    def _memo(
        self, kind: str, request: Any, still_true: Callable[[Any], bool]
    ) -> tuple[_Header, _Memo, _Items | None] | None:
        """The memo kept for ``request`` (its file read once per run: ``recall``, then
        ``previous``), when it is sound, for this request, and ``still_true`` of what it
        consulted besides the database, with where its items lie if it was spooled; its
        fingerprint is for the caller to judge."""
        name = _memo_name(kind, request)
        if name not in self._memos:
            self._memos[name] = self._read_memo(name)
        found = self._memos[name]
        if found is None:
            return None
        header, items = found
        try:
            memo = _MEMO.decode(header.body)
        except (msgspec.DecodeError, msgspec.ValidationError, RecursionError, TypeError):
            return None
        if memo.request != request or not still_true(memo.checks):
            return None
        if items is None and memo.groups:
            return None  # groups without their items
        if items is not None and items.size != items.offset + sum(g[1] for g in memo.groups):
            return None  # items cut short, or added to
        return header, memo, items

    def _memo_now(
        self, kind: str, request: Any, still_true: Callable[[Any], bool]
    ) -> tuple[_Header, _Memo, _Items | None] | None:
        """``_memo``, when kept of the database in the state it is in now."""
        found = self._memo(kind, request, still_true)
        return found if found is not None and found[0].fingerprint == self.fingerprint else None

    def _memo_since(
        self, kind: str, request: Any, still_true: Callable[[Any], bool], *, hold: bool = False
    ) -> tuple[_Memo, _Items | None, Any] | None:
        """``_memo`` and its basis, when kept of an earlier state that only OpenCode's own
        writes (its event log moved) led from, with a basis. ``hold``: the basis is kept
        for the next asking in this run, and handed to it (a report that cannot copy from
        the last one reads its summaries next): not decoded twice, and held no longer."""
        found = self._memo(kind, request, still_true)
        if found is None or not self._only_opencode_since(found[0].fingerprint):
            return None
        name = _memo_name(kind, request)
        basis = self._bases.pop(name, _UNREAD)
        if basis is _UNREAD:
            try:
                with _collector_paused():
                    basis = msgspec.msgpack.decode(found[1].basis)
            except (msgspec.DecodeError, msgspec.ValidationError, RecursionError, TypeError):
                basis = None
        if hold:
            self._bases[name] = basis
        return None if basis is None else (found[1], found[2], basis)

    @staticmethod
    def _value(memo: _Memo, items: _Items | None) -> bytes | msgspec.Raw:
        """A memo's value whole: a spooled one's head and items joined (``ValueError`` when
        a group of the items is not as it was written)."""
        if items is None:
            return memo.value
        head = msgspec.msgpack.decode(memo.value, type=bytes)
        body = items.read(items.offset, items.size - items.offset)
        view, at = memoryview(body), 0
        for _count, size, check in memo.groups:
            if zlib.crc32(view[at : at + size]) != check:
                raise ValueError("a group of items is not as it was written")
            at += size
        return head + body

    def recall(
        self,
        kind: str,
        request: Any,
        type_: type[T],
        still_true: Callable[[Any], bool] = lambda checks: checks is None,
    ) -> T | None:
        """The report kept for ``request`` of a database in the state it is in now, or
        None. ``still_true`` is asked whether what was kept beside it (``checks``: what
        else the report consulted, e.g. a config file's servers) still holds."""
        found = self._memo_now(kind, request, still_true)
        if found is None:
            return None
        try:
            with _collector_paused():
                value = msgspec.msgpack.decode(self._value(found[1], found[2]), type=type_)
        except (*_UNTRUSTED, OSError):
            return None
        self._kept[_memo_name(kind, request)] = (found[1].checks, found[1].token)
        return value

    def remember(
        self, kind: str, request: Any, value: Any, checks: Any = None, basis: Any = None
    ) -> None:
        # The encoding of _Memo(request, checks, value, basis), written in its pieces: a
        # large report's encoding is not copied once more into the memo's.
        start = bytearray(_ENCODER.encode((request, checks)))
        start[0] += 6  # fixarray of 2 (0x92) → of 8: the value, basis, groups, … token follow

        def pieces() -> Iterator[bytes]:  # each encoded as the last is written
            yield bytes(start)
            yield from _encoded_in_pieces(value)
            yield _ENCODER.encode(basis)
            # No groups (decoded whole), no items' sizes or keys; its token.
            yield _ENCODER.encode(([], b"", None, token))[1:]

        token = os.urandom(8)
        name = _memo_name(kind, request)
        self._forget(name)
        self._kept[name] = (checks, token)
        self._write(name, pieces())

    def rendered(
        self,
        kind: str,
        request: Any,
        form: str,
        still_true: Callable[[Any], bool] = lambda checks: checks is None,
    ) -> Rendition | None:
        """The bytes kept by ``keep_rendered`` for ``request`` in ``form``, when the database
        is in the state they were kept in and their memo's ``checks`` still hold (as
        ``recall`` would find the memo); else None. They are left in their file, open, to
        be copied out (``Rendition``): 100,000 sessions' JSON is 110 MB.

        The file: the length of its head (8 bytes), the head (a ``_Header`` whose body says
        what the bytes are and how many), then the bytes."""
        found = self._rendition(
            _rendition_name(kind, request, form),
            lambda header, kept: (
                header.fingerprint == self.fingerprint
                and kept.request == request
                and kept.form == form
                and still_true(kept.checks)
            ),
        )
        if found is None:
            return None
        file, start, kept, _spans = found
        _touched(file.fileno())
        return Rendition(file, start, kept.length, kept.notes)

    def _rendition(
        self, name: str, fits: Callable[[_Header, _Rendition], bool], *, spans: bool = False
    ) -> tuple[BinaryIO, int, _Rendition, array.array[int]] | None:
        """The rendition ``name``, when it is sound (every byte summed) and ``fits`` the
        caller (its header and head), and with ``spans``, when they lie in order within its
        bytes: its file, opened (unbuffered: the check reads the head alone, a copy the
        bytes as they are now), where its bytes start, its head and its spans (empty
        without ``spans``); else None."""
        try:
            file = open(self.folder / name, "rb", buffering=0)  # noqa: SIM115 - the caller's
        except OSError:
            return None
        try:
            info = os.fstat(file.fileno())
            if _from_the_future(info):
                raise _Unsound
            size = info.st_size
            header, length = self._head_of(file, file.read(8), min(_HEAD_LARGEST, size - 8))
            kept = _RENDITION.decode(header.body)
            where = array.array(_INTS, kept.spans if spans else b"")
            if (
                not fits(header, kept)
                or size != 8 + length + kept.length
                or not _in_order(where)
                or (where and (where[0] < 0 or where[-1] > kept.length))
                or _summed(file.fileno(), 8 + length, kept.length) != kept.check
            ):
                raise _Unsound
        except (
            _Unsound,
            OSError,
            ValueError,  # spans that are not whole numbers
            msgspec.DecodeError,
            msgspec.ValidationError,
            RecursionError,
        ):
            file.close()
            return None
        except BaseException:
            file.close()
            raise
        return file, 8 + length, kept, where

    def keep_rendered(
        self,
        kind: str,
        request: Any,
        form: str,
        data: bytes | Sequence[bytes],
        notes: Sequence[str] = (),
    ) -> None:
        """Keep ``data`` (bytes, or pieces of them), the report of ``request`` as ``form``
        names it (one name, one way of writing it), beside its memo: only when that memo
        was kept (``remember``) or found sound (``recall``) in this run, so a report that
        is not kept (a reply in flight) is never answered from here either. ``notes``: what
        the form says apart from ``data`` (``Rendition.notes``)."""
        spool = self.rendering(kind, request, form)
        if spool is None:
            return
        for piece in [data] if isinstance(data, bytes) else data:
            spool.add(piece)
        spool.keep(notes)

    def rendering(
        self, kind: str, request: Any, form: str, *, ahead: bool = False
    ) -> RenditionSpool | None:
        """A spool for the report of ``request`` as ``form`` names it, to be given its bytes
        as they are written elsewhere (``RenditionSpool.add``) and kept at the end
        (``keep``), so that the whole of it is never held: as ``keep_rendered``, only when
        its memo was kept or found sound in this run (else None). ``ahead``: the memo is
        yet to be kept (``memo_spool``): the spool is given and asks at ``keep``."""
        kept = self._kept.get(_memo_name(kind, request), _NOT_KEPT)
        if kept is _NOT_KEPT and not ahead:
            return None
        return RenditionSpool(self, kind, request, form, kept)

    def memo_spool(self, kind: str, request: Any, field: str, item_type: type) -> MemoSpool:
        """A spool for the memo of ``request``, a report that is a struct of one field
        ``field``, a list of ``item_type``, whose items are made one at a time
        (``MemoSpool.add_item``): the memo ``remember`` would keep of the whole, never held
        whole, and read back a group at a time (``recall_each``, ``previous_each``)."""
        return MemoSpool(self, kind, request, field, item_type)

    def recalled_basis(
        self,
        kind: str,
        request: Any,
        still_true: Callable[[Any], bool] = lambda checks: checks is None,
    ) -> Any:
        """The basis kept with the memo ``recall`` (or ``recall_each``) answers from, for
        the database in the state it is in now (a report spooled item by item keeps there
        what follows its items, say); None when there is no such memo, or no basis."""
        found = self._memo_now(kind, request, still_true)
        if found is None:
            return None
        try:
            with _collector_paused():
                return msgspec.msgpack.decode(found[1].basis)
        except (msgspec.DecodeError, msgspec.ValidationError, RecursionError, TypeError):
            return None

    def recall_each(
        self,
        kind: str,
        request: Any,
        type_: type,
        field: str,
        item_type: type,
        still_true: Callable[[Any], bool] = lambda checks: checks is None,
    ) -> Iterator[Any] | None:
        """``recall``'s report (a ``type_``) as the items of its list ``field``, decoded a
        group at a time as they are asked for where its memo was spooled (``memo_spool``):
        never all held at once."""
        found = self._memo_now(kind, request, still_true)
        if found is None:
            return None
        items = self._each_item(kind, request, found[1], found[2], type_, field, item_type)
        if items is not None:
            self._kept[_memo_name(kind, request)] = (found[1].checks, found[1].token)
        return items

    def previous_each(
        self,
        kind: str,
        request: Any,
        type_: type,
        field: str,
        item_type: type,
        still_true: Callable[[Any], bool] = lambda checks: checks is None,
    ) -> tuple[Iterator[Any], Any, Any] | None:
        """``previous``, its report given as ``recall_each`` gives one."""
        found = self._memo_since(kind, request, still_true)
        if found is None:
            return None
        memo, kept, basis = found
        items = self._each_item(kind, request, memo, kept, type_, field, item_type)
        return None if items is None else (items, basis, memo.checks)

    def previous_pieces(
        self,
        kind: str,
        request: Any,
        form: str,
        key_type: Any,
        still_true: Callable[[Any], bool] = lambda checks: checks is None,
    ) -> KeptPieces | None:
        """The last report (as ``previous`` finds it) as ``KeptPieces``: its memo spooled
        item by item with each item's size and key (a ``key_type``), and its rendition in
        ``form`` made with it (the same state of the database, the same checks) with where
        each item lies; every byte of both summed and found as written. None when any of
        it is missing or unsound: the caller reads the memo's items instead."""
        name = _memo_name(kind, request)
        found = self._memo_since(kind, request, still_true, hold=True)
        if found is None:
            return None
        memo, items, basis = found
        header = self._memos[name]
        if items is None or header is None:
            return None
        count = sum(group[0] for group in memo.groups)
        try:
            sizes = array.array(_INTS, memo.sizes)
            keys = msgspec.msgpack.decode(memo.keys, type=list[key_type])
        except (*_UNDECODABLE, ValueError):  # ValueError: bytes not whole numbers
            return None
        if (
            len(sizes) != count
            or len(keys) != count
            or sum(sizes) != items.size - items.offset
            or (sizes and min(sizes) <= 0)
        ):
            return None
        if name not in self._sound_memos:
            if not _groups_sound(items, memo.groups):
                return None
            self._sound_memos.add(name)
        rendition_name = _rendition_name(kind, request, form)
        found = self._rendition(
            rendition_name,
            lambda head, kept: (
                bool(memo.token)
                and kept.memo == memo.token  # made with this very memo
                and head.fingerprint == header[0].fingerprint
                and kept.request == request
                and kept.form == form
                and kept.checks == memo.checks
                and len(kept.spans) == 16 * count  # two 8-byte numbers an item
            ),
            spans=True,
        )
        if found is None:
            return None
        file, start, _kept, spans = found
        rendition = (file, self.folder / rendition_name, start, spans)
        return KeptPieces(items, sizes, keys, rendition, basis, memo.checks)

    def _each_item(
        self,
        kind: str,
        request: Any,
        memo: _Memo,
        items: _Items | None,
        type_: type,
        field: str,
        item_type: type,
    ) -> Iterator[Any] | None:
        """The items of the list ``field`` of the report in ``memo``: read from its file a
        group at a time where it was spooled (``items``), else from the whole decoded; None
        when they cannot be read. Each group was decoded once as it was kept
        (``MemoSpool``), and the groups' lengths are checked (``_memo``): one that fails
        after all (a file changed in place, never by a run of ours) is an ``InputError``,
        and the memo is let go."""
        if items is None:
            try:
                with _collector_paused():
                    value = msgspec.msgpack.decode(memo.value, type=type_)
            except _UNTRUSTED:
                return None
            return iter(getattr(value, field))
        try:
            head = msgspec.msgpack.decode(memo.value, type=bytes)
        except (msgspec.DecodeError, msgspec.ValidationError):
            return None
        if head != _list_head(field, sum(group[0] for group in memo.groups)):
            return None
        decoder = msgspec.msgpack.Decoder(list[item_type])  # type: ignore[valid-type]
        name = _memo_name(kind, request)
        path = self.folder / name
        if name not in self._sound_memos:
            # Every group summed before the first row goes out, as a rendition's bytes are:
            # a report from a memo found damaged part-way would stop there (a CSV of it
            # looking whole). Only here, where rows are read: a repeat that asks the memo
            # its basis, then copies out a rendition, reads none of them.
            if not _groups_sound(items, memo.groups):
                return None
            self._sound_memos.add(name)

        def each() -> Iterator[Any]:
            at = items.offset
            for count, size, check in memo.groups:
                try:
                    decoded = _decoded_group(decoder, items.read(at, size), count, check)
                except (*_UNTRUSTED, OSError) as exc:
                    with _quietly():
                        path.unlink()
                    raise InputError(
                        f"the report cache {path} was damaged while read: run again"
                    ) from exc
                at += size
                yield from decoded

        return each()

    def previous(
        self,
        kind: str,
        request: Any,
        type_: type[T],
        still_true: Callable[[Any], bool] = lambda checks: checks is None,
    ) -> tuple[T, Any, Any] | None:
        """The report kept for ``request`` of this database in an earlier state that only
        OpenCode's own writes (its event log moved) led from, with its ``basis`` and
        ``checks``: for a report that reads only what changed since (the stamps in its
        basis tell which sessions). None when there is none, or none kept with a basis."""
        found = self._memo_since(kind, request, still_true)
        if found is None:
            return None
        memo, items, basis = found
        try:
            with _collector_paused():
                value = msgspec.msgpack.decode(self._value(memo, items), type=type_)
            return value, basis, memo.checks
        except (msgspec.DecodeError, msgspec.ValidationError, RecursionError, TypeError, OSError):
            return None

    def drop(self, kind: str, request: Any) -> None:
        """Delete the memo of ``request`` (and let it go): one found damaged while it was
        read, so that the next report is made again rather than fail again."""
        self.let_go(kind, request)
        with _quietly():
            (self.folder / _memo_name(kind, request)).unlink()

    def let_go(self, kind: str, request: Any) -> None:
        """Let go of the memo and ledger of ``request`` read in this run (their files
        stay): a report that will not use them need not hold them while it is made (at
        100,000 sessions, about 80 MB each)."""
        self._forget(_memo_name(kind, request))
        self._ledgers.pop(_ledger_name(kind, request), None)

    def _forget(self, name: str) -> None:
        """Let go of what this run read of memo ``name``: it is let go or written again."""
        self._memos.pop(name, None)
        self._bases.pop(name, None)
        self._sound_memos.discard(name)

    # ------------------------------------------------------------------ ledgers

    def ledger(
        self, kind: str, request: Any, type_: type[T], tidy: Callable[[T], Any] | None = None
    ) -> dict[str, T]:
        """The entries of ledger ``kind`` still true of the database, decoded whole: a
        session's whose stamp is unchanged (or still none), while only OpenCode wrote. For a
        ledger of small entries; a large one is read as it is used (``ledger_entries``).
        ``tidy`` is given each entry as it is decoded, a group at a time (to share what
        entries have in common, say: the decoded ledger then holds fewer objects)."""
        name = _ledger_name(kind, request)
        if name in self._ledgers:  # read once per run
            return self._ledgers[name]
        found = self._open_ledger(name, request)
        kept: dict[str, T] = {}
        if found is not None:
            decoder = msgspec.msgpack.Decoder(type_)
            try:
                with _collector_paused(), found:
                    for sid, entry in found.each():
                        kept[sid] = decoded = decoder.decode(entry)
                        if tidy is not None:
                            tidy(decoded)
            except (*_UNDECODABLE, InputError):
                kept = {}
        self.hits = len(kept)
        self._ledgers[name] = kept
        return kept

    def ledger_entries(
        self,
        kind: str,
        request: Any,
        pick: Callable[[str, msgspec.Raw], bool] | None = None,
    ) -> LedgerEntries:
        """The entries of ledger ``kind`` still true of the database (as ``ledger``), left
        in their file and read a group at a time as they are asked for
        (``LedgerEntries.each``, as often as need be): never held whole, whatever the
        number of sessions. Empty when there is none to trust. ``pick``: asked of every
        entry still true, (session, entry), as the ledger is opened: those it says yes to
        are wanted before the others (``LedgerEntries.picked``). An entry it cannot decode
        (``msgspec`` or ``ValueError``) makes the ledger one not to trust."""
        name = _ledger_name(kind, request)
        found = self._open_ledger(name, request, pick, hold=True)
        if found is None:
            return LedgerEntries(None, 0)
        self.hits = found.count
        return found

    def _open_ledger(
        self,
        name: str,
        request: Any,
        pick: Callable[[str, msgspec.Raw], bool] | None = None,
        hold: bool = False,
    ) -> LedgerEntries | None:
        """Ledger ``name``'s file, opened, when it is sound, of ``request``, and of this
        database in this state or one only OpenCode's writes led from, with each of its
        groups read once (each must decode) to count the entries still true, and to take
        those ``pick`` says yes to. ``hold``: the groups are passed over again, so a small
        ledger's are held as read (``LedgerEntries``); a ledger decoded whole in one more
        pass (``ledger``) is not held: it would double its peak."""
        try:
            file = open(self.folder / name, "rb", buffering=0)  # noqa: SIM115 - the entries'
        except OSError:
            return None
        entries = LedgerEntries(None, 0)
        try:
            size = os.fstat(file.fileno()).st_size
            header, length = self._head_of(file, file.read(8), min(_LARGEST, size - 16))
            whole = header.fingerprint == self.fingerprint
            # The database changed but OpenCode's event log did not: a write that bypassed
            # it (another program), which no stamp would show. Nothing is trusted.
            if not whole and not self._only_opencode_since(header.fingerprint):
                raise _Unsound
            if msgspec.msgpack.decode(header.body) != request:
                raise _Unsound
            tail = int.from_bytes(read_at(file.fileno(), 8, size - 8, "a ledger"), "big")
            end = size - 8 - tail
            if not 8 + length <= end < size:
                raise _Unsound
            groups = msgspec.msgpack.decode(
                read_at(file.fileno(), tail, end, "a ledger"), type=list[tuple[int, int, int]]
            )
            if any(not 0 < n < 1 << 32 or s < 0 for n, s, _check in groups):
                raise _Unsound
            if 8 + length + sum(group[1] for group in groups) != end:
                raise _Unsound  # items cut short, or added to
            entries = LedgerEntries(file, 8 + length, groups, self.stamps, self.folder / name, hold)
            _touched(file.fileno())
            for sid, entry in entries.each():
                entries.count += 1
                if pick is not None and pick(sid, entry):
                    entries.picked[sid] = bytes(entry)  # not the group's whole buffer
        except (_Unsound, OSError, ValueError, InputError, *_UNDECODABLE):
            entries.close()
            file.close()
            return None
        except BaseException:
            file.close()
            raise
        return entries

    def drop_ledger(self, kind: str, request: Any) -> None:
        """Delete ledger ``kind`` of ``request``: one found damaged while it was read."""
        with _quietly():
            (self.folder / _ledger_name(kind, request)).unlink()

    def keep_ledger(
        self, kind: str, request: Any, entries: Mapping[str, Any] | Iterable[tuple[str, Any]]
    ) -> None:
        """Keep ``entries`` (session → what the report keeps of it), each under the stamp
        read when the cache was opened. ``entries`` may be (session, entry) pairs made one
        at a time, an entry its encoding (``msgspec.Raw``): each is encoded as it comes, so
        that a large ledger is never held whole as objects.

        The file: the length of its head (8 bytes), the head (a ``_Header`` whose body is the
        request), then each entry as (session, stamp, entry) in groups of about ``_PIECE``
        bytes, then each group's item count, length and sum (CRC-32), and the length of those
        (8 bytes): read back a group at a time (``LedgerEntries``)."""
        if isinstance(entries, Mapping):
            entries = entries.items()
        name = _ledger_name(kind, request)
        self._ledgers.pop(name, None)
        head = self._sealed(_ENCODER.encode(request))
        self._replace(name, self._ledger_pieces(len(head).to_bytes(8, "big") + head, entries))

    def spill(self) -> Spill | None:
        """A new ``Spill`` in this cache's folder; None when no file can be made there (or
        no POSIX lock taken on it)."""
        try:
            import fcntl  # noqa: F401 - what ``put`` takes turns with
        except ImportError:
            return None
        try:
            return Spill(_unnamed_file(self.folder))
        except OSError:
            return None

    def aside(self, keep: Callable[[], None], sessions: int) -> None:
        """Run ``keep`` (which keeps a ledger of ``sessions`` sessions) in a forked child
        while this process goes on with its report, when the ledger is large enough to pay
        for the fork (``ASIDE_ENTRIES``) and the worker policy allows a second process;
        else here and now. The caller waits for it (``settle``) before it returns."""
        if worker_count(sessions, min_jobs=ASIDE_ENTRIES) > 1:
            try:
                pid = os.fork()
            except OSError:
                pid = -1
            if pid == 0:  # the child: never returns into the caller's code
                child_signals()
                code = 0
                try:
                    keep()
                except BaseException:  # noqa: BLE001 - a ledger not kept costs only time
                    code = 1
                finally:
                    os._exit(code)
            if pid > 0:
                self._aside.append(pid)
                self._ledgers.clear()  # what the child keeps is read from its file again
                return
        keep()

    def settle(self) -> None:
        """Wait for what ``aside`` keeps: once this returns it is in place (or, the child
        having failed, not written at all)."""
        while self._aside:
            pid = self._aside.pop()
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, 0)

    def close(self) -> None:
        """Done with the cache: what is kept aside settled, the memos read let go and
        their files closed (a library caller's process lives on; the command's ends)."""
        self.settle()
        self._memos.clear()
        self._sound_memos.clear()
        self._ledgers.clear()
        while self._opened:
            self._opened.pop().close()

    def __enter__(self) -> ReportCache:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def _ledger_pieces(self, head: bytes, entries: Iterable[tuple[str, Any]]) -> Iterator[bytes]:
        """A ledger file's bytes (``keep_ledger``) in pieces of about ``_PIECE`` bytes."""
        yield head
        stamps = self.stamps
        groups: list[tuple[int, int, int]] = []  # each group's count, length and CRC-32
        piece = bytearray()
        count = 0
        for sid, entry in entries:
            _ENCODER.encode_into((sid, stamps.get(sid), entry), piece, -1)
            count += 1
            if len(piece) >= _PIECE:
                groups.append((count, len(piece), zlib.crc32(piece)))
                yield bytes(piece)
                piece.clear()
                count = 0
        if count:
            groups.append((count, len(piece), zlib.crc32(piece)))
            yield bytes(piece)
        tail = _ENCODER.encode(groups)
        yield tail + len(tail).to_bytes(8, "big")


_NOT_KEPT = object()
_UNREAD = object()  # a basis not decoded yet


class Spill:
    """Bytes set aside in a file of no name in the cache's folder (``ReportCache.spill``),
    by this process or by the children it forks after (they share the file): ``put``
    appends a piece and says where it is, ``get`` reads it back, ``close`` lets the file
    go. A large ledger's entries wait here, written by the workers that encode them, not
    in memory until the ledger is written. Nothing is left behind whatever happens to the
    run; a piece that cannot be written raises ``OSError`` (the caller keeps it itself)."""

    def __init__(self, fd: int) -> None:
        self.fd = fd

    def put(self, piece: bytes) -> int:
        """Append ``piece``; its offset (``appended``)."""
        return appended(self.fd, piece)

    def get(self, offset: int, length: int) -> bytes:
        """The ``length`` bytes put at ``offset`` (``OSError`` if they are not all there)."""
        return read_at(self.fd, length, offset, "a spilled piece")

    def close(self) -> None:
        if self.fd >= 0:
            with _quietly():
                os.close(self.fd)
        self.fd = -1

    def __del__(self) -> None:
        self.close()


class _Spool:
    """Bytes on their way to the cache: to a file of no name in the cache's folder as they
    come (``add``); ``discard`` (or being dropped) leaves nothing. A spool that cannot
    write stops keeping, silently: the report itself goes out all the same."""

    def __init__(self, cache: ReportCache) -> None:
        self._cache = cache
        self._length = 0
        try:
            self._fd = _unnamed_file(cache.folder)
        except OSError:
            self._fd = -1

    def add(self, piece: bytes | bytearray) -> None:
        if self._fd < 0:
            return
        try:
            view = memoryview(piece)
            while view:
                view = view[os.write(self._fd, view) :]
        except OSError:
            self.discard()
            return
        self._length += len(piece)
        if self._length > min(_LARGEST, self._cache.budget):  # as ``_replace``: not kept
            self.discard()

    def _spooled(self) -> Rendition:
        """The bytes given so far, to be copied out of the spool's file."""
        return Rendition(os.fdopen(self._fd, "rb", buffering=0, closefd=False), 0, self._length)

    def discard(self) -> None:
        if self._fd >= 0:
            with _quietly():
                os.close(self._fd)
        self._fd = -1

    def __del__(self) -> None:
        self.discard()


class RenditionSpool(_Spool):
    """A rendition on its way to the cache (``ReportCache.rendering``): ``keep`` writes its
    file, the head and then the bytes copied as a kept rendition is (``Rendition.write_to``:
    by ``sendfile``, in the kernel)."""

    def __init__(self, cache: ReportCache, kind: str, request: Any, form: str, kept: Any):
        super().__init__(cache)
        self._kind, self._request, self._form = kind, request, form
        self._memo = kept  # its memo's checks and token, or _NOT_KEPT: asked at ``keep``
        self._check = 0  # the bytes' CRC-32, as they are given
        # Where the items lie (``add``); None: not known.
        self._spans: array.array[int] | None = array.array(_INTS)

    def add(self, piece: bytes | bytearray, spans: Sequence[int] | None = None) -> None:
        """Add ``piece``; ``spans``: where the items of the memo's list in it lie, ``[start,
        end, …]`` from its first byte (``ListForm.pieces``); None when they are not known,
        and then none is kept."""
        if spans is None:
            self._spans = None
        elif spans and self._spans is not None:
            at = self._length
            self._spans.extend([at + offset for offset in spans])
        self._check = zlib.crc32(piece, self._check)
        super().add(piece)

    def keep(self, notes: Sequence[str] = ()) -> None:
        """Keep the bytes given, and ``notes``, said apart from them (``Rendition.notes``)."""
        if self._fd < 0:
            return
        try:
            cache, kept = self._cache, self._memo
            if kept is _NOT_KEPT:  # a spool given ahead: its memo must be kept by now
                kept = cache._kept.get(_memo_name(self._kind, self._request), _NOT_KEPT)
                if kept is _NOT_KEPT:
                    return
            checks, token = kept
            rendition = _Rendition(
                self._request,
                self._form,
                checks,
                self._length,
                list(notes),
                self._check,
                b"" if self._spans is None else self._spans.tobytes(),
                token,
            )
            head = cache._sealed(_ENCODER.encode(rendition))
            name = _rendition_name(self._kind, self._request, self._form)
            cache._replace(name, [len(head).to_bytes(8, "big"), head], self._spooled())
        finally:
            self.discard()


class MemoSpool(_Spool):
    """A memo on its way to the cache (``ReportCache.memo_spool``): the report's list items
    are encoded as they come (``add_item``); ``keep`` writes the memo ``remember`` would
    write of the whole report, its items copied out of the spool."""

    def __init__(
        self, cache: ReportCache, kind: str, request: Any, field: str, item_type: type
    ) -> None:
        super().__init__(cache)
        self._kind, self._request, self._field = kind, request, field
        self._decoder = msgspec.msgpack.Decoder(item_type)
        self._groups: list[tuple[int, int, int]] = []  # items, bytes, CRC-32
        self._count = 0  # items in the buffer
        self._buffer = bytearray()
        self._sizes = array.array(_INTS)  # each item's bytes
        # Each item's key, encoded as it comes (no object held an item); None: an item was
        # given none.
        self._keys: bytearray | None = bytearray()

    def add_item(self, item: Any, *, from_memo: bool = False, key: Any = None) -> None:
        """Encode ``item`` into the spool, and decode it as it will be read back: an item
        that would not read back (a damaged row's text, say) keeps nothing, and the report
        is made again next time, as with a memo that fails. ``from_memo``: it was decoded
        from a memo of this type (``previous_each``) and is unchanged, so it reads back as
        it did and is not decoded again (a report brought up to date keeps most sessions'
        summaries as it read them: decoding them again cost a tenth of its time).
        ``key``: what the next report finds it by without decoding it (``KeptPieces``:
        the sessions' order, say); kept when every item was given one."""
        if self._fd < 0:
            return
        start = len(self._buffer)
        try:
            _ENCODER.encode_into(item, self._buffer, -1)
            if not from_memo:
                with memoryview(self._buffer) as encoded:
                    self._decoder.decode(encoded[start:])
        except (*UNENCODABLE, msgspec.DecodeError, msgspec.ValidationError, RecursionError):
            self.discard()
            return
        if key is None:
            self._keys = None
        elif self._keys is not None:
            try:
                _ENCODER.encode_into(key, self._keys, -1)
            except UNENCODABLE:
                self._keys = None
        self._sizes.append(len(self._buffer) - start)
        self._count += 1
        if len(self._buffer) >= _PIECE:
            self._flush()

    def add_kept(self, kept: KeptPieces, low: int, high: int) -> None:
        """The items [low, high) of the memo ``kept``, their bytes copied as they are,
        neither decoded nor encoded again: they were written, and read back, by a run
        before (``KeptPieces`` found them sound), with their keys."""
        if self._fd < 0:
            return
        for start, end in kept.memo_runs(low, high, _PIECE):
            try:
                kept.memo_into(self._buffer, start, end)
            except OSError:
                self.discard()
                return
            self._sizes.extend(kept.sizes[start:end])
            if self._keys is not None:  # their encoding, less the array's head
                keys = _ENCODER.encode(kept.keys[start:end])
                self._keys += memoryview(keys)[len(_array_head(end - start)) :]
            self._count += end - start
            if len(self._buffer) >= _PIECE:
                self._flush()

    def _flush(self) -> None:
        """The buffer's items, a group, to the spool."""
        if not self._count or self._fd < 0:
            return
        self._groups.append((self._count, len(self._buffer), zlib.crc32(self._buffer)))
        self.add(self._buffer)
        self._buffer.clear()
        self._count = 0

    def keep(self, checks: Any = None, basis: Any = None) -> None:
        """Keep the memo of the items given, with ``checks`` and ``basis`` (``remember``'s)."""
        self._flush()
        if self._fd < 0:
            return
        try:
            cache = self._cache
            # The head in pieces, never joined: at 100,000 sessions its basis and keys are
            # megabytes, and each copy of them was held at the run's peak.
            try:
                start = bytearray(_ENCODER.encode((self._request, checks)))
                token = os.urandom(8)
                count = sum(group[0] for group in self._groups)
                keys = [b"\xc0"] if self._keys is None else [_array_head(count), self._keys]
                end = [
                    _ENCODER.encode(basis),
                    _ENCODER.encode(self._groups),
                    _ENCODER.encode(memoryview(self._sizes).cast("B")),
                    *keys,
                    _ENCODER.encode(token),
                ]
            except UNENCODABLE:
                return
            start[0] += 6  # fixarray of 2 (0x92) → of 8: value, basis, groups, … token
            # The value's head, as bytes (its items follow the whole head, in the file:
            # ``_read_memo``), so that the head is whole without them.
            value = _ENCODER.encode(_list_head(self._field, count))
            head = list(cache._sealed_pieces([start, value, *end]))
            name = _memo_name(self._kind, self._request)
            cache._forget(name)
            cache._kept[name] = (checks, token)
            length = sum(len(piece) for piece in head)
            cache._replace(name, [length.to_bytes(8, "big"), *head], self._spooled())
        finally:
            self.discard()


_LIST_PIECE = 1000  # items of a long list encoded at a time (a report's sessions, say)


def _encoded_in_pieces(value: Any) -> Iterator[bytes]:
    """``_ENCODER.encode(value)`` in pieces whose bytes, joined, are exactly that: a long
    list a thousand items at a time, and a plain struct (a report: fields by name, every
    field written) field by field, so that 100,000 sessions are never one encoding."""
    if type(value) is list and len(value) > _LIST_PIECE:
        yield _array_head(len(value))
        for start in range(0, len(value), _LIST_PIECE):
            chunk = value[start : start + _LIST_PIECE]
            yield _ENCODER.encode(chunk)[len(_array_head(len(chunk))) :]
        return
    config = getattr(type(value), "__struct_config__", None)
    fields = getattr(type(value), "__struct_encode_fields__", None)
    if (
        config is None
        or config.array_like
        or config.omit_defaults
        or config.tag is not None
        or fields is None
        or len(fields) > 15
    ):
        yield _ENCODER.encode(value)
        return
    yield bytes((0x80 | len(fields),))  # a fixmap of the fields, in order
    for field, name in zip(value.__struct_fields__, fields, strict=True):
        yield _ENCODER.encode(name)
        yield from _encoded_in_pieces(getattr(value, field))


def _in_order(numbers: array.array[int]) -> bool:
    """Whether ``numbers`` never go down, looked at a slice at a time (in C)."""
    step = 4096
    for at in range(0, len(numbers), step):
        piece = numbers[at : at + step + 1].tolist()
        if piece != sorted(piece):
            return False
    return True


def _list_head(field: str, length: int) -> bytes:
    """The encoding of a struct of one field ``field``, a list of ``length`` items, up to
    its items (a ``MemoSpool``'s report)."""
    return b"\x81" + _ENCODER.encode(field) + _array_head(length)


def encoded_map(pairs: Iterable[tuple[Any, Any]]) -> msgspec.Raw:
    """The MessagePack map of ``pairs``, the bytes a dict of them encodes to (keys in the
    order given, each once), encoded as they come: a memo's basis of every session's
    parent is written without a dict of 100,000 sessions held (15 MB). Raises as encoding
    does (``UNENCODABLE``)::

        basis = [stamps, encoded_map(store.each_session_parent())]
    """
    body = bytearray(5)  # room for the longest head, written once the pairs are counted
    encode_into = _ENCODER.encode_into
    count = 0
    for key, value in pairs:
        encode_into(key, body, -1)
        encode_into(value, body, -1)
        count += 1
    if count < 16:
        head = bytes((0x80 | count,))
    elif count < 1 << 16:
        head = b"\xde" + count.to_bytes(2, "big")
    else:
        head = b"\xdf" + count.to_bytes(4, "big")
    start = 5 - len(head)
    body[start:5] = head
    return msgspec.Raw(memoryview(body)[start:])


def _array_head(length: int) -> bytes:
    """MessagePack's head of an array of ``length`` items, in its shortest form."""
    if length < 16:
        return bytes((0x90 | length,))
    if length < 1 << 16:
        return b"\xdc" + length.to_bytes(2, "big")
    return b"\xdd" + length.to_bytes(4, "big")


def _unnamed_file(folder: Path) -> int:
    """A new file of this user's alone in ``folder`` (made if need be), open for reading
    and writing, its name already gone: nothing is left behind whatever happens to the run
    (``OSError`` when none can be made)."""
    folder.mkdir(parents=True, exist_ok=True)
    fd, path = _new_file(folder, os.O_RDWR)
    with _quietly():
        os.unlink(path)
    return fd


def _bounded_size(file: BinaryIO) -> int:
    """How much of ``file`` to read whole: its size, but never more than a file is written
    (``_LARGEST``, and one byte more to tell a larger one): a read of the largest size
    would ask for a buffer of that size, whatever the file's."""
    return min(os.fstat(file.fileno()).st_size, _LARGEST) + 1


def read_at(fd: int, length: int, at: int, what: str) -> bytes:
    """The ``length`` bytes at ``at`` of ``fd`` (``OSError`` if they are not all there:
    ``what`` names them)."""
    piece = os.pread(fd, length, at)
    if len(piece) != length:
        raise OSError(errno.EIO, f"{what} was cut short while read")
    return piece


def write_at(fd: int, piece: bytes, at: int) -> None:
    """``piece`` written whole at ``at`` of ``fd`` (``OSError`` if it cannot be)."""
    view = memoryview(piece)
    while view:
        written = os.pwrite(fd, view, at)
        view, at = view[written:], at + written


def appended(fd: int, piece: bytes) -> int:
    """``piece`` written at the end of ``fd``'s file; where it lies. Processes sharing the
    file take turns: the end is found and written under a lock (POSIX locks are a
    process's own, so they hold between processes sharing one open file)."""
    import fcntl

    fcntl.lockf(fd, fcntl.LOCK_EX)
    try:
        at = os.fstat(fd).st_size
        write_at(fd, piece, at)
    finally:
        fcntl.lockf(fd, fcntl.LOCK_UN)
    return at


@contextlib.contextmanager
def _collector_paused() -> Iterator[None]:
    """Python's cycle collector paused while a large file decodes: it would walk the
    young objects again and again (tens of thousands of them, none in a cycle), which
    costs more than the decoding. The collector is the process's: with reports in several
    threads, the first pause turns it off and the last one ends puts it back as it was."""
    global _pauses, _collector_was_on
    with _pause_lock:
        if _pauses == 0:
            _collector_was_on = gc.isenabled()
            gc.disable()
        _pauses += 1
    try:
        yield
    finally:
        with _pause_lock:
            _pauses -= 1
            if _pauses == 0 and _collector_was_on:
                gc.enable()


_pause_lock = threading.Lock()
_pauses = 0  # reports in the pause now
_collector_was_on = False  # as the first of them found it


@contextlib.contextmanager
def _one_at_a_time(folder: Path) -> Iterator[bool]:
    """Hold the cache folder's lock (``.seen.lock``, POSIX ``flock``) for the block: True
    when held, or when no lock can be taken here at all (no ``fcntl``, a folder that
    cannot be written: the state is recorded as well as it can be); False when another run
    held it for more than ``_LOCK_WAIT`` seconds (stopped, say): this run then keeps
    nothing. The folder is touched, so that one in use is never the least recently used
    (``_trim`` removes those, lock file and all)."""
    try:
        import fcntl

        folder.mkdir(parents=True, exist_ok=True)
        os.utime(folder)
        fd = os.open(folder / ".seen.lock", os.O_RDWR | os.O_CREAT, 0o600)
    except (ImportError, OSError):
        fd = None
    if fd is None:
        yield True
        return
    try:
        held: bool | None = None
        deadline = time.monotonic() + _LOCK_WAIT
        while held is None:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                held = True
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    held = False
                else:
                    time.sleep(0.005)
            except OSError:  # a file system without locks: as well as it can be
                held = True
        yield held
    finally:
        os.close(fd)  # and the lock with it


_LOCK_WAIT = 2.0  # seconds; a report holds the lock for a few milliseconds


def _decoded_group(
    decoder: msgspec.msgpack.Decoder[Any], piece: bytes, count: int, check: int
) -> Any:
    """A group of ``count`` items (a ledger's or a spooled memo's), its bytes ``piece``
    decoded as a list when they give their CRC-32 ``check``; ``ValueError`` else."""
    if zlib.crc32(piece) != check:
        raise ValueError("a group of items is not as it was written")
    with _collector_paused():
        return decoder.decode(_array_head(count) + piece)


def _groups_sound(items: _Items, groups: Sequence[Sequence[int]]) -> bool:
    """Whether every group of a spooled memo's items (``groups``: count, length, CRC-32)
    gives its CRC-32, read a piece at a time."""
    at = items.offset
    try:
        for _count, size, check in groups:
            if _summed(items.file.fileno(), at, size) != check:
                return False
            at += size
    except (OSError, TypeError, ValueError):
        return False
    return True


def _summed(fd: int, at: int, length: int) -> int:
    """The CRC-32 of ``length`` bytes at ``at`` of ``fd``, read a piece at a time (a
    rendition is checked whole before any of it is copied out; ``OSError`` if it is
    shorter)."""
    check = 0
    view = memoryview(bytearray(min(length, _COPY_PIECE)))
    while length:
        got = os.preadv(fd, [view[: min(length, len(view))]], at)
        if not got:
            raise OSError(errno.EIO, "cut short")
        check = zlib.crc32(view[:got], check)
        at += got
        length -= got
    return check


def _touched(file: int | Path) -> None:
    """Mark a memo, rendition or ledger read now: the last to go when the cache is
    trimmed (``_trim``, ``_fit``), as one just written is."""
    with _quietly():
        os.utime(file)


def _from_the_future(info: os.stat_result) -> bool:
    """Whether a memo or rendition (its ``fstat``) was last written or read (its mtime:
    ``_touched``) later than now: the clock went back since. A report holding a session
    judged ``stale`` (silent for the stale limit) was kept because the clock only moves on;
    gone back, that session may be ``busy`` again, so such a file is not trusted."""
    return info.st_mtime_ns > time.time_ns()


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0


class _quietly:
    """Ignore what trimming a shared folder can meet (another run removed it first)."""

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: Any, exc: Any, tb: Any) -> bool:
        return kind is not None and issubclass(kind, OSError)
