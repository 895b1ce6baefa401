"""What changed in a database since a report last read it, told cheaply: the keys of the
report cache (``reports.cache``).

Two keys, from coarse to fine:

- ``fingerprint(store)``: the whole database, from its files and a few edge queries. Any
  committed write changes it: SQLite appends every transaction to the ``-wal`` (its size
  grows; a restarted WAL gets new salts in its header), and a checkpoint or a rollback-mode
  commit rewrites the main file (size, modification time, header). The identity of the file
  (device, inode, path) and the tables' edges (newest rowids, session count, the event
  log's total sequence) tell a database replaced by another file, even one copied with
  its times kept. Clocks play no part but the files' modification times, and a time that
  goes backwards cannot make two different states look alike: the sizes, headers and row
  edges would have to agree too.
- ``session_stamps(store)``: per session, OpenCode's own change counter. OpenCode 1.18.33
  writes every change to a session's messages and parts (created, updated in place,
  removed) through its append-only event log in the same transaction, and
  ``event_sequence.seq`` is the number of the session's latest event: it moves on every
  change and never comes back. A session with no sequence row (written before the log
  existed, or by another program) has no stamp, and keeps none until OpenCode writes to it:
  an unstamped session still unstamped is unchanged, as a stamp that did not move. A
  database that changed while its log did not (``log_moved``) was written by another
  program, or migrated by OpenCode (a new row in its migration tables): then no stamp, and
  no session without one, is trusted. Written by OpenCode and another program
  between two reports, a change by the other one to a session OpenCode did not write to
  is not seen (OpenCode's moves the log, which hides it): ``--no-cache`` recomputes.

::

    with open_store("opencode.db") as store:
        before = fingerprint(store)
        stamps = session_stamps(store)     # {"ses_…": 42, …}
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from .files import read_head

try:  # hashlib's blake2b without loading OpenSSL's bindings (start-up)
    from _blake2 import blake2b as _blake2b
except ImportError:  # pragma: no cover - an interpreter built without it
    from hashlib import blake2b as _blake2b

__all__ = [
    "fingerprint",
    "session_stamps",
    "database_identity",
    "resolved_path",
    "blake2b",
    "log_moved",
    "log_kept",
]

blake2b = _blake2b  # for our other digests (what otel --follow sent, rows read again)

_HEADER = 100  # bytes of SQLite's database header
_WAL_HEADER = 32  # bytes of the WAL header: magic, page size, checkpoint sequence, salts


def _last_frame(info: os.stat_result, head: bytes) -> tuple[int, int] | None:
    """Where a -wal's last frame header is (offset, 24): its checksums are cumulative over
    every frame of the file, so a -wal written over in place, size, header and mtime kept
    (``cp`` then ``touch -r``), differs there. Its ctime cannot tell (root chowns it)."""
    if len(head) < _WAL_HEADER:
        return None
    frame = 24 + int.from_bytes(head[8:12], "big")
    body = info.st_size - _WAL_HEADER
    if frame <= 24 or body < frame or body % frame:
        return None
    return info.st_size - frame, 24


def _file_state(path: Path, head: int, *, ctime: bool = False, tail: Any = None) -> list[Any]:
    """(device, inode, size, mtime ns, with ``ctime`` the ctime ns, the first ``head``
    bytes) of a file, or [] when it is not there. Read through ``read_head``: the store's
    connection keeps its locks."""
    state = read_head(path, head, tail)
    if state is None:
        return []
    info, start = state
    if not ctime:
        return [info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns, start.hex()]
    return [info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns, start.hex()]


def database_identity(store: Any) -> str:
    """A name for the database a store reads, stable across its changes: a digest of its
    resolved path (the cache's folder per database; a hard link or a bind mount to it is
    another path, with a cache of its own)."""
    where = resolved_path(store.path)
    return _blake2b(where.encode("utf-8", "surrogateescape"), digest_size=12).hexdigest()


def resolved_path(path: str | os.PathLike[str]) -> str:
    """``path`` as a database is named by: its symlinks resolved (absolute if it cannot be)."""
    try:
        return str(Path(path).resolve())
    except OSError:
        return os.path.abspath(path)


def fingerprint(store: Any) -> list[Any]:
    """The state of the whole database: equal fingerprints, equal contents (see above)."""
    path = Path(store.path)
    edges = store.change_edges() if hasattr(store, "change_edges") else None
    return [
        # The database's ctime too: no one can set it (``touch -r`` and ``cp -p`` set the
        # mtime), so a copy written over it in place, size, header and mtime kept, differs.
        # Not the -wal's: SQLite running as root chowns it at every open, a read included.
        _file_state(path, _HEADER, ctime=True),
        _file_state(Path(f"{path}-wal"), _WAL_HEADER, tail=_last_frame),
        _file_state(Path(f"{path}-journal"), 0),
        edges,
    ]


def log_moved(before: Any, after: Any) -> bool:
    """Whether the event log moved between two fingerprints (a new event row, or a
    session's sequence changed): how a write made by OpenCode shows. A database that
    changed while its log did not was written by someone else, and no stamp can be
    trusted."""
    try:
        old, new = before[3], after[3]
        if before[0][:2] != after[0][:2]:  # another file (restored, synced, moved in)
            return False
        if old[7] != new[7]:  # OpenCode migrated its schema or data: rows rewritten unlogged
            return False
        # Forward only: a new event row, or more events in the sequences. A log that only
        # lost rows (a deleted session's) shows no write of OpenCode's.
        return _above(new[3], old[3]) or _above(new[6], old[6])
    except (TypeError, IndexError, KeyError):
        return False  # not two fingerprints of a database: nothing is known to have moved


def log_kept(store: Any, before: Any) -> bool:
    """Whether the event log still holds the newest event of the state ``before`` (a
    fingerprint): the same id at the same rowid. OpenCode only appends to its log, so a log
    that moved on from there grew from it; one whose newest event then is gone or another
    is a history rewritten (a backup restored, a copy from another machine) that OpenCode's
    later writes would otherwise hide. A log emptied of that row by a deleted session
    (OpenCode's own) is judged so too: every session is read again, which is only slower."""
    try:
        rowid, event_id = before[3][3], before[3][8]
    except (TypeError, IndexError):
        return False
    if rowid is None:
        return True  # no event then: nothing to lose
    check = getattr(store, "event_id_at", None)
    return check is not None and check(rowid) == event_id


def _above(new: Any, old: Any) -> bool:
    if type(new) not in (int, float):
        return False
    return type(old) not in (int, float) or new > old


def session_stamps(store: Any) -> dict[str, int]:
    """Each logged session's change counter (``event_sequence.seq``); {} for a store with
    no event log."""
    stamps = getattr(store, "event_sequences", None)
    return stamps() if stamps is not None else {}
