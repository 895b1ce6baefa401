"""What ``otel --follow`` delivered to a backend, kept across its restarts, so that a
follower started again does not send the history the backend already has.

One file per database and backend URL, ``$XDG_STATE_HOME/opencode-events/otel-sent/``:
for each session delivered, the number of its newest event then (``event_sequence.seq``,
the change counter the report cache keys on: ``store.changes``). A session whose counter
has not moved since is not sent again; one that went on, was never delivered, or has no
counter (a store older than OpenCode's event log) is sent whole, with the same ids. The
file names the database and the backend it was written for; one for another, damaged, or
of another format is not trusted (everything is sent, and a new one written). It is
written whole to a new file and renamed over the old one, so a run killed mid-write
leaves the old one, and kept only in a folder no one else can write.

    ledger = SentLedger.open("/home/me/.local/share/opencode/opencode.db", traces_url)
    if ledger.sent("ses_…") == 42: ...      # delivered when its newest event was the 42nd
    ledger.record("ses_…", 57)
    problem = ledger.save()                 # None, or why nothing could be kept
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Container
from pathlib import Path

import msgspec

from ..paths import state_dir
from ..store.changes import blake2b, resolved_path
from ..store.files import new_private_file, private_folder, read_regular_file

__all__ = ["SentLedger", "FORMAT"]

FORMAT = "opencode-events otel sent 1"
_LARGEST = 256 << 20  # a file larger than this is no ledger of ours


class _Kept(msgspec.Struct, forbid_unknown_fields=True):
    format: str
    database: str
    destination: str
    sessions: dict[str, int]


_decode = msgspec.json.Decoder(_Kept).decode
_encode = msgspec.json.Encoder().encode


class SentLedger:
    def __init__(
        self, file: Path, database: str, destination: str, sessions: dict[str, int]
    ) -> None:
        self.file = file
        self.database = database
        self.destination = destination
        self.sessions = sessions
        self.changed = False  # records not yet saved

    @classmethod
    def open(
        cls,
        database: str | os.PathLike[str],
        destination: str,
        folder: Path | None = None,
    ) -> SentLedger:
        """The ledger of ``database`` (its resolved path) and ``destination`` (the URL the
        spans go to), as last saved; empty when there is none to trust."""
        where = resolved_path(database)
        folder = (state_dir() / "otel-sent") if folder is None else folder
        name = blake2b(f"{where}\0{destination}".encode("utf-8", "surrogateescape"), digest_size=12)
        file = folder / f"{name.hexdigest()}.json"
        sessions: dict[str, int] = {}
        data = read_regular_file(file, limit=_LARGEST)
        if data is not None:
            try:
                kept = _decode(data)
            except (msgspec.DecodeError, ValueError):
                kept = None
            if (
                kept is not None
                and kept.format == FORMAT
                and kept.database == where
                and kept.destination == destination
            ):
                sessions = kept.sessions
        return cls(file, where, destination, sessions)

    def sent(self, session_id: str) -> int | None:
        """The counter ``session_id`` had when it was last delivered; None: never."""
        return self.sessions.get(session_id)

    def record(self, session_id: str, seq: int) -> None:
        if self.sessions.get(session_id) != seq:
            self.sessions[session_id] = seq
            self.changed = True

    def keep_only(self, known: Container[str]) -> None:
        """Forget the sessions no longer in the database (deleted): the file stays the
        size of the database's session list."""
        gone = [sid for sid in self.sessions if sid not in known]
        for sid in gone:
            del self.sessions[sid]
        self.changed = self.changed or bool(gone)

    def save(self) -> str | None:
        """Write the records (when they changed); None, or why they could not be kept."""
        if not self.changed:
            return None
        folder = self.file.parent
        if not (private_folder(folder.parent) and private_folder(folder)):
            return f"{folder} cannot be made, or is not this user's alone"
        body = _encode(_Kept(FORMAT, self.database, self.destination, self.sessions))
        try:
            fd, tmp = new_private_file(folder)
            try:
                with os.fdopen(fd, "wb") as out:
                    out.write(body)
                os.replace(tmp, self.file)
            except BaseException:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)
                raise
        except OSError as exc:
            return f"cannot write {self.file}: {exc.strerror or exc}"
        self.changed = False
        return None
