"""OpenCode's JSON storage from before SQLite (OPENCODE.md §7), read like ``store.Store``.

Two layouts, each one JSON file per object, ids included in the objects:

- newer, under ``<data>/storage/``: ``session/<project>/<session>.json``,
  ``message/<session>/<message>.json``, ``part/<message>/<part>.json``;
- oldest, under ``<data>/project/<name>/storage/``: ``session/info/<session>.json``,
  ``session/message/<session>/<message>.json``, ``session/part/<session>/<message>/<part>.json``.

Sessions here carry no totals of their own, so a session's cost and tokens are the sums of its
assistant messages' (which is how OpenCode computed them then). Files are only read.
"""

from __future__ import annotations

import contextlib
import functools
import os
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import msgspec

from ..core.figures import read_figures, summed_cost
from ..core.text import as_utf8, is_utf8
from ..core.views import LegacySessionInfo, MessageInfo, decode_leniently
from ..errors import InputError
from .files import read_regular_file, why_unreadable
from .rows import MessageRow, PartRow, SessionRow, is_top_level, loop_members

__all__ = ["LegacyStore", "MixedStore", "find_legacy_roots", "legacy_session_ids", "mixed_note"]


_SESSION = msgspec.json.Decoder(LegacySessionInfo)
_MESSAGE = msgspec.json.Decoder(MessageInfo)


def find_legacy_roots(data: Path) -> list[Path]:
    """Every ``storage`` folder under an OpenCode data directory, newer layout first."""
    roots = []
    if (data / "storage" / "session").is_dir():
        roots.append(data / "storage")
    project = data / "project"
    if project.is_dir():
        roots += sorted(p for p in project.glob("*/storage") if (p / "session").is_dir())
    return roots


def _safe_id(value: Any) -> bool:
    """An id that names one file or folder inside the storage tree (ids become paths), and
    that output can carry: a file name that is not UTF-8 (its bytes surrogate escapes)
    cannot be written as JSON."""
    return (
        isinstance(value, str)
        and value not in ("", ".", "..")
        and not any(c in value for c in ("/", "\\", "\0"))
        and is_utf8(value)
    )


def _shown(name: str) -> str:
    """A file name as an id in output: bytes that are not UTF-8 as U+FFFD (the name itself
    still finds the file)."""
    return as_utf8(name)


def _session_info(data: bytes | None) -> LegacySessionInfo | None:
    """The session a file holds, read as leniently as a damaged row of the database is
    (``decode_leniently``); None when the file holds no JSON object."""
    return _lenient(_SESSION, data)


def _message_info(data: bytes) -> MessageInfo | None:
    """A message file as every report reads a message row (``decode_leniently``): its
    figures still count when its ``time`` or a byte of its text is damaged."""
    return _lenient(_MESSAGE, data)


def _lenient(decoder: Any, data: bytes | None) -> Any:
    if not data:
        return None
    try:
        return decode_leniently(decoder, data)
    except (msgspec.DecodeError, RecursionError):
        return None


_NOTED_FILES = 10  # a damaged tree is named in a few notes, not one per file


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


class _Layout:
    """Where one root keeps sessions, messages and parts."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.oldest = (root / "session" / "info").is_dir()

    def session_files(self) -> list[Path]:
        """In the order of their paths: which of two files naming one session is read
        first must not depend on the order a filesystem lists them in."""
        if self.oldest:
            return sorted((self.root / "session" / "info").glob("*.json"))
        return sorted((self.root / "session").glob("*/*.json"))

    def message_root(self) -> Path:
        return self.root / "session" / "message" if self.oldest else self.root / "message"

    def message_dir(self, session_id: str) -> Path:
        return self.message_root() / session_id

    def part_dir(self, session_id: str, message_id: str) -> Path:
        if self.oldest:
            return self.root / "session" / "part" / session_id / message_id
        return self.root / "part" / message_id


class LegacyStore:
    """The legacy JSON files of one data directory (all its storage roots)."""

    def __init__(self, data_dir: str | os.PathLike[str]) -> None:
        self.path = Path(data_dir)
        self.notes: list[str] = []  # session files that could not be read as they are
        self._unread = 0
        roots = find_legacy_roots(self.path)
        if not roots and (self.path / "session").is_dir():
            roots = [self.path]  # pointed straight at a storage folder
        if not roots:
            raise InputError(f"no OpenCode storage/ files under {self.path}")
        self.roots = roots  # the folders read (nothing may be written inside them)
        self._sessions: dict[str, tuple[SessionRow, _Layout]] = {}
        self._noted: set[str] = set()
        layouts = [_Layout(root) for root in roots]
        for layout in layouts:
            for file in layout.session_files():
                row = self._session_row(file, layout)
                if row is not None:
                    self._keep(row, layout, file)
        for layout in layouts:  # once every root's files are read: a folder no file names
            self._read_unclaimed(layout)
        if self._unread > _NOTED_FILES:
            more = self._unread - _NOTED_FILES
            self.notes.append(f"and {more} more file{'s' if more != 1 else ''} as above")

    def _note(self, text: str) -> None:
        """A note for people, once, and at most ``_NOTED_FILES`` of them (then a count):
        a damaged tree is named in a few notes, not one per file."""
        if text in self._noted:
            return
        self._noted.add(text)
        self._unread += 1
        if self._unread <= _NOTED_FILES:
            self.notes.append(text)

    def _keep(self, row: SessionRow, layout: _Layout, file: Path) -> None:
        """``row`` read from ``file``; of two files naming one session (a copy, a session
        in two projects' folders) the one updated last is read, and a note says so when
        they differ."""
        kept = self._sessions.get(row.id)
        if kept is not None and kept[0] != row:
            newer = row.time_updated > kept[0].time_updated
            self._note(
                f"{file}: session {row.id} again, as another file has it; "
                + ("read from this one, updated later" if newer else "read from the other")
            )
            if not newer:
                return
        elif kept is not None:
            return
        self._sessions[row.id] = (row, layout)

    def _read_unclaimed(self, layout: _Layout) -> None:
        """A folder of messages no session file names (the file lost to a crash or a
        sync): read as the session it is named after, with a note, as a damaged file's
        session is; its messages are spend all the same."""
        folder = layout.message_root()
        try:
            with os.scandir(folder) as entries:
                names = sorted(e.name for e in entries if e.is_dir() and e.name[:1] != ".")
        except (FileNotFoundError, NotADirectoryError):
            return
        except OSError as exc:
            self._note(
                f"{folder}: cannot be listed ({exc.strerror or exc}); its messages are left out"
            )
            return
        for name in names:
            if name in self._sessions:
                continue
            if not _safe_id(name):
                self._note(f"{folder / name}: messages under a name that is no session id; skipped")
                continue
            if not self._message_files(name, layout):
                continue  # OpenCode deletes a session's messages, then its file: folders stay
            self._note(
                f"{folder / name}: messages of a session no file names; "
                "read as the session the folder is named after"
            )
            self._sessions[name] = (self._row(name, None, layout), layout)

    def __enter__(self) -> LegacyStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        pass

    # ------------------------------------------------------------------ sessions

    def _session_row(self, file: Path, layout: _Layout) -> SessionRow | None:
        data = read_regular_file(file)
        info = _session_info(data)
        session_id = info.id if info is not None else None
        if not _safe_id(session_id):
            # OpenCode names the file after its session (its own import into SQLite took the
            # ids from the paths): a session whose messages are there is not lost to a
            # damaged file; a file that names nothing is said, not passed over in silence.
            reason = why_unreadable(file) if data is None else None
            why = (
                f"cannot be read ({reason})"
                if reason
                else "no session in it"
                if info is None
                else "no session id in it"
            )
            stem = file.stem
            if _safe_id(stem) and layout.message_dir(stem).is_dir():
                self._note(f"{file}: {why}; read as session {stem}, as its file is named")
                session_id = stem
            else:
                self._note(f"{file}: {why}, nor messages under its name; skipped")
                return None
        return self._row(session_id, info, layout)

    def _row(self, session_id: str, info: LegacySessionInfo | None, layout: _Layout) -> SessionRow:
        if info is None:
            info = LegacySessionInfo()
        cost = 0.0
        inferences = 0
        tokens = [0, 0, 0, 0, 0]
        model = None
        first = last = None  # its messages' times: a session file that says none is dated so
        for message in self._message_infos(session_id, layout):
            times = message.time
            for when in (times.created, times.completed) if times is not None else ():
                if _int(when) is not None:
                    first = when if first is None or when < first else first
                    last = when if last is None or when > last else last
            if message.role != "assistant":
                continue
            figures = read_figures(message.tokens, message.cost)  # the one rule
            cost += figures.cost
            inferences += 1
            tokens[0] += figures.input
            tokens[1] += figures.output
            tokens[2] += figures.reasoning
            tokens[3] += figures.cache_read
            tokens[4] += figures.cache_write
            if isinstance(message.modelID, str):
                model = msgspec.json.encode(
                    {"id": message.modelID, "providerID": message.providerID}
                )
        created = (_int(info.time.created) if info.time else None) or first
        updated = (_int(info.time.updated) if info.time else None) or last
        return SessionRow(
            id=session_id,
            parent_id=info.parentID if isinstance(info.parentID, str) else None,
            title=info.title if isinstance(info.title, str) else None,
            directory=info.directory if isinstance(info.directory, str) else None,
            version=info.version if isinstance(info.version, str) else None,
            agent=info.agent if isinstance(info.agent, str) else None,
            model=model,
            cost=summed_cost(cost, inferences),  # no column: the sum of its messages
            tokens_input=tokens[0],
            tokens_output=tokens[1],
            tokens_reasoning=tokens[2],
            tokens_cache_read=tokens[3],
            tokens_cache_write=tokens[4],
            time_created=created or 0,
            time_updated=updated or created or 0,
            time_archived=_int(info.time.archived) if info.time else None,
            revert=bytes(info.revert) if info.revert else None,
        )

    def sessions(
        self, *, since_ms: int | None = None, top_level: bool = False, limit: int | None = None
    ) -> list[SessionRow]:
        rows = [row for row, _ in self._sessions.values()]
        if since_ms is not None:
            rows = [r for r in rows if r.time_updated >= since_ms]
        if top_level:
            loops = self.loop_members()
            rows = [r for r in rows if is_top_level(r, self._sessions.__contains__, loops)]
        rows.sort(key=lambda r: (r.time_updated, r.id), reverse=True)
        return rows if limit is None or limit < 0 else rows[:limit]

    def session(self, session_id: str) -> SessionRow | None:
        found = self._sessions.get(session_id)
        return found[0] if found else None

    def reverted_sessions(self) -> dict[str, str | bytes]:
        """session id → its pending revert (JSON), for the sessions that have one."""
        return {i: row.revert for i, (row, _) in self._sessions.items() if row.revert}

    def sessions_with_untimed_parts(self) -> frozenset[str]:
        """Every session: a part file holds no write time (``Store``'s rule: its parts are
        dated from their data, as an export's are)."""
        return self._every_session

    @functools.cached_property
    def _every_session(self) -> frozenset[str]:
        return frozenset(self._sessions)

    def find_sessions(self, prefix: str) -> list[str]:
        return sorted(sid for sid in self._sessions if sid == prefix or sid.startswith(prefix))

    def children(self) -> dict[str, list[str]]:
        tree: dict[str, list[str]] = {}
        loops = self.loop_members()
        for row in sorted(
            (r for r, _ in self._sessions.values()), key=lambda r: (r.time_created, r.id)
        ):
            if row.parent_id and row.parent_id != row.id and row.id not in loops:
                tree.setdefault(row.parent_id, []).append(row.id)
        return tree

    def loop_members(self) -> frozenset[Any]:
        """The sessions on a loop of parent links (see ``store.loop_members``)."""
        return loop_members({sid: row.parent_id for sid, (row, _) in self._sessions.items()})

    # ------------------------------------------------------------ messages, parts

    def _message_files(self, session_id: str, layout: _Layout) -> list[tuple[int, str, bytes]]:
        """A session's message files, in the order they were written: (created, file
        name, bytes). One that cannot be read, or a folder that cannot be listed, is said
        in a note (all are read when the store opens), not passed over in silence."""
        folder = layout.message_dir(session_id)
        try:
            with os.scandir(folder) as entries:
                names = [e.name for e in entries if e.name.endswith(".json") and e.name[:1] != "."]
        except (FileNotFoundError, NotADirectoryError):
            return []
        except OSError as exc:
            why = exc.strerror or str(exc)
            self._note(f"{folder}: cannot be listed ({why}); its messages are left out")
            return []
        found = []
        for name in names:
            file = folder / name
            data = read_regular_file(file)
            if data is None:
                if reason := why_unreadable(file):
                    self._note(f"{file}: cannot be read ({reason}); left out")
                continue
            info = _message_info(data)
            created = _int(info.time.created) if info is not None and info.time else None
            found.append((created or 0, file.stem, data))
        return sorted(found, key=lambda item: (item[0], item[1]))

    def _message_infos(self, session_id: str, layout: _Layout) -> Iterator[MessageInfo]:
        for _, _, data in self._message_files(session_id, layout):
            info = _message_info(data)
            if info is not None:
                yield info

    def messages(self, session_id: str) -> Iterator[MessageRow]:
        found = self._sessions.get(session_id)
        if found is None:
            return
        for created, message_id, data in self._message_files(session_id, found[1]):
            yield MessageRow(_shown(message_id), session_id, created or None, data)

    def parts(self, session_id: str) -> Iterator[PartRow]:
        found = self._sessions.get(session_id)
        if found is None:
            return
        layout = found[1]
        for created, message_id, _ in self._message_files(session_id, layout):
            files = sorted(layout.part_dir(session_id, message_id).glob("*.json"))
            for file in files:
                data = read_regular_file(file)
                if data is not None:
                    yield PartRow(
                        _shown(file.stem), _shown(message_id), session_id, created or None, data
                    )

    def all_message_data(
        self, session_ids: Sequence[str] | None = None
    ) -> Iterator[tuple[str, bytes]]:
        for sid in session_ids if session_ids is not None else list(self._sessions):
            for row in self.messages(sid):
                yield sid, row.data

    def all_part_data(
        self, session_ids: Sequence[str] | None = None
    ) -> Iterator[tuple[str, bytes]]:
        for sid in session_ids if session_ids is not None else list(self._sessions):
            for row in self.parts(sid):
                yield sid, row.data


def legacy_session_ids(data_dir: Path) -> set[str]:
    """The ids of the sessions the storage/ files under ``data_dir`` hold, from the names
    of the session files and of the message folders alone (cheap: no file is read)."""
    ids: set[str] = set()
    for root in find_legacy_roots(data_dir):
        layout = _Layout(root)
        ids.update(file.stem for file in layout.session_files())
        with contextlib.suppress(OSError), os.scandir(layout.message_root()) as entries:
            ids.update(e.name for e in entries if e.is_dir() and _holds_messages(e.path))
    return {sid for sid in ids if _safe_id(sid)}


def _holds_messages(folder: str) -> bool:
    """Whether a message folder holds a message file: one OpenCode emptied when it
    deleted the session (files go, folders stay) names no session (``_read_unclaimed``)."""
    if os.path.basename(folder)[:1] == ".":
        return False
    with contextlib.suppress(OSError), os.scandir(folder) as files:
        return any(f.name.endswith(".json") and f.name[:1] != "." for f in files)
    return False


class MixedStore:
    """A data directory's ``opencode.db`` and the older ``storage/`` JSON files beside it,
    read as one store: each session once. OpenCode 1.2 imported the files into its new
    database and left them in place, so a session in both is read from the database (what
    OpenCode reads now); one the files alone hold (written by a release before 1.2, after
    the import or without one) from the files. OpenCode 1.18 itself reads only the database.
    ``notes`` says what was read from where, for people."""

    def __init__(self, database: Any, files: LegacyStore) -> None:
        self.database, self.files = database, files
        self.path = files.path
        self.roots = files.roots
        in_database = set(database.session_ids())
        self._from_files = {sid for sid in files._sessions if sid not in in_database}
        self.in_both = len(files._sessions) - len(self._from_files)
        said = mixed_note(database.path, files.roots, len(self._from_files), self.in_both)
        self.notes = [said, *files.notes]

    def _store_of(self, session_id: str) -> Any:
        return self.files if session_id in self._from_files else self.database

    def __enter__(self) -> MixedStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.database.close()
        self.files.close()

    def _file_rows(self, rows: list[SessionRow]) -> list[SessionRow]:
        return [r for r in rows if r.id in self._from_files]

    def sessions(
        self, *, since_ms: int | None = None, top_level: bool = False, limit: int | None = None
    ) -> list[SessionRow]:
        rows = self.database.sessions(since_ms=since_ms) + self._file_rows(
            self.files.sessions(since_ms=since_ms)
        )
        if top_level:
            loops = self.loop_members()
            known = {r.id for r in self.database.sessions()} | self._from_files
            rows = [r for r in rows if is_top_level(r, known.__contains__, loops)]
        rows.sort(key=lambda r: (r.time_updated, r.id), reverse=True)
        return rows if limit is None or limit < 0 else rows[:limit]

    def session(self, session_id: str) -> SessionRow | None:
        return self._store_of(session_id).session(session_id)

    def reverted_sessions(self) -> dict[str, str | bytes]:
        found = {k: v for k, v in self.files.reverted_sessions().items() if k in self._from_files}
        return {**found, **self.database.reverted_sessions()}

    def sessions_with_untimed_parts(self) -> frozenset[str]:
        return self._untimed

    @functools.cached_property
    def _untimed(self) -> frozenset[str]:
        return frozenset(self._from_files) | self.database.sessions_with_untimed_parts()

    def find_sessions(self, prefix: str) -> list[str]:
        files = [sid for sid in self.files.find_sessions(prefix) if sid in self._from_files]
        return sorted({*self.database.find_sessions(prefix), *files})

    def _parents(self) -> dict[str, str | None]:
        parents = {r.id: r.parent_id for r in self.database.sessions()}
        parents.update({r.id: r.parent_id for r in self._file_rows(self.files.sessions())})
        return parents

    def children(self) -> dict[str, list[str]]:
        rows = self.database.sessions() + self._file_rows(self.files.sessions())
        known = {r.id for r in rows}
        loops = self.loop_members()
        tree: dict[str, list[str]] = {}
        for row in sorted(rows, key=lambda r: (r.time_created, r.id)):
            parent = row.parent_id
            if parent and parent != row.id and parent in known and row.id not in loops:
                tree.setdefault(parent, []).append(row.id)
        return tree

    def loop_members(self) -> frozenset[Any]:
        return loop_members(self._parents())

    def messages(self, session_id: str) -> Iterator[MessageRow]:
        return self._store_of(session_id).messages(session_id)

    def parts(self, session_id: str) -> Iterator[PartRow]:
        return self._store_of(session_id).parts(session_id)

    def all_message_data(
        self, session_ids: Sequence[str] | None = None
    ) -> Iterator[tuple[str, bytes]]:
        for sid in session_ids if session_ids is not None else self._every_id():
            for row in self.messages(sid):
                yield sid, row.data

    def all_part_data(
        self, session_ids: Sequence[str] | None = None
    ) -> Iterator[tuple[str, bytes]]:
        for sid in session_ids if session_ids is not None else self._every_id():
            for row in self.parts(sid):
                yield sid, row.data

    def _every_id(self) -> list[str]:
        return [r.id for r in sorted(self.sessions(), key=lambda r: (r.time_created, r.id))]


def mixed_note(database: Path, roots: Sequence[Path], only_files: int, in_both: int) -> str:
    """What a data directory of both kinds gave: which sessions were read from where."""
    folders = ", ".join(str(root) for root in roots)
    said = f"{database} and the JSON files of an OpenCode before 1.2 in {folders}"
    both = (
        f"; {in_both} session{'s' if in_both != 1 else ''} in both, read once, from the database"
        if in_both
        else ""
    )
    if only_files:
        plural = "s" if only_files != 1 else ""
        return f"reading {said}: {only_files} session{plural} only the files hold{both}"
    return f"reading {database}: the JSON files in {folders} hold no other session{both}"
