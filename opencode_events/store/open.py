"""Choosing a store and its sessions: ``open_store`` (the command line's lookup: a database,
a data directory, or the legacy JSON files) and ``select_sessions`` (ids or prefixes,
``--last``, ``--since``, ``--all``, ``--children``).

    >>> from opencode_events.store import open_store, select_sessions
    >>> with open_store("samples/task/opencode.db") as store:
    ...     len(select_sessions(store, all_sessions=True))
    2
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ..errors import InputError
from ..paths import channel_databases, locate_db
from .legacy import LegacyStore, MixedStore, find_legacy_roots, legacy_session_ids, mixed_note
from .rows import descendants, is_top_level, offers_fast_scans
from .sqlite import Store

__all__ = ["open_store", "select_sessions", "every_session", "store_files", "copy_note"]


def copy_note(path: Any) -> str:
    """What to add to "no session(s) in PATH" when PATH may be a copy made without its WAL:
    a database in WAL mode (its header's bytes 18 and 19 are 2) with no ``-wal`` beside it.
    OpenCode keeps its newest writes in ``opencode.db-wal`` until a checkpoint, so a copy of
    ``opencode.db`` alone, made while OpenCode ran, lacks them: the newest sessions, or all."""
    try:
        with open(path, "rb") as f:
            header = f.read(20)
        if header[18:20] != b"\x02\x02" or os.path.exists(f"{path}-wal"):
            return ""
    except (OSError, TypeError, ValueError):
        return ""
    return (
        " (a copy of a database in use needs its -wal file beside it: OpenCode keeps its"
        " newest writes in opencode.db-wal until it checkpoints)"
    )


def store_files(store: Any) -> list[Path]:
    """What reading ``store`` reads: the database and the files SQLite keeps beside it, or
    the folder of a legacy JSON store."""
    if isinstance(store, LegacyStore):  # its storage/ folders
        return list(store.roots)
    if isinstance(store, MixedStore):  # the database's files and the storage/ folders
        return [*store_files(store.database), *store.roots]
    path = Path(store.path)
    return [path, *(Path(f"{path}{suffix}") for suffix in ("-wal", "-shm", "-journal"))]


def _is_top_level(store: Any, session_id: str) -> bool:
    row = store.session(session_id)
    if row is None:
        return True
    return is_top_level(row, lambda sid: store.session(sid) is not None, store.loop_members())


def every_session(store: Any, *, top_level: bool = False) -> list[str]:
    """Every session's id (``top_level``: only those that are no subagent), oldest first."""
    if offers_fast_scans(store):  # without building every row
        return store.session_ids(top_level=top_level)
    rows = store.sessions(top_level=top_level)
    return [row.id for row in sorted(rows, key=lambda r: (r.time_created, r.id))]


def select_sessions(
    store: Store,
    ids: Sequence[str] = (),
    *,
    last: bool = False,
    since_ms: int | None = None,
    all_sessions: bool = False,
    children: bool = False,
) -> list[str]:
    """Session ids to read, oldest first, each followed by its subagents with ``children``.

    ``ids`` may be prefixes: one that matches several sessions names the one it equals, or
    else the only top-level one among them (a subagent's id starts like its parent's, and
    people shorten the id they see in ``sessions``); otherwise it is an error.
    ``all_sessions`` means every session, subagents included. With nothing chosen, the most
    recently active top-level session.
    """
    if all_sessions:
        return every_session(store)
    chosen: list[str] = []
    for wanted in ids:
        if not wanted:  # every id starts with "": no choice at all
            raise InputError("an empty session id")
        found = store.find_sessions(wanted)
        if not found:
            raise InputError(f"no session {wanted} in {store.path}{copy_note(store.path)}")
        if len(found) > 1 and wanted in found:
            found = [wanted]
        if len(found) > 1:
            tops = [sid for sid in found if _is_top_level(store, sid)]
            found = tops if len(tops) == 1 else found
        if len(found) > 1:
            shown = ", ".join(found[:5]) + (
                f", … ({len(found) - 5} more)" if len(found) > 5 else ""
            )
            raise InputError(
                f"{wanted} matches {len(found)} sessions ({shown}); give more of the id"
            )
        chosen.append(found[0])
    if since_ms is not None:
        recent = store.sessions(since_ms=since_ms, top_level=True)
        chosen += [r.id for r in sorted(recent, key=lambda r: (r.time_created, r.id))]
    if last or (not ids and since_ms is None):
        # the first row alone (a row with a damaged id is a session all the same)
        newest = store.sessions(top_level=True, limit=1)
        if not newest:
            raise InputError(f"no sessions in {store.path}{copy_note(store.path)}")
        chosen.append(newest[0].id)
    unique = list(dict.fromkeys(chosen))
    if not children:
        return unique
    tree = store.children()
    expanded: list[str] = []
    for sid in unique:
        expanded.append(sid)
        expanded.extend(descendants([sid], tree))
    return list(dict.fromkeys(expanded))


def open_store(
    explicit: str | None = None, env: Mapping[str, str] | None = None, *, legacy: bool = True
) -> Any:
    """The store to read: the database ``locate_db`` names, or else legacy JSON files.

    ``explicit`` may also name an OpenCode data directory (its ``opencode.db``, else its
    legacy files) or a ``storage`` folder. When the
    default database is missing, the data directory's legacy ``storage/`` files are used;
    failing that, the error names any ``opencode-<channel>.db`` found beside it.

    A data directory (named, or the default one) that holds both ``opencode.db`` and the
    ``storage/`` files of an OpenCode before 1.2 is read as both (``with_legacy_files``),
    unless ``legacy`` is false (the live views: old files hold no live session). The
    store's ``notes`` (a list, maybe empty) say so, and name an older schema.
    """
    path = locate_db(explicit, env)
    if path.is_dir():
        if (path / "opencode.db").is_file():  # OpenCode's data directory
            return with_legacy_files(Store(path / "opencode.db"), path, legacy)
        others = channel_databases(path)
        if others and not find_legacy_roots(path):
            names = ", ".join(str(p) for p in others)
            raise InputError(f"no opencode.db in {path} (found {names}; pass --db FILE)")
        return LegacyStore(path)
    if not path.exists() and not explicit:
        if find_legacy_roots(path.parent):
            return LegacyStore(path.parent)
        others = channel_databases(path.parent)
        if others:
            names = ", ".join(str(p) for p in others)
            raise InputError(f"no OpenCode database at {path} (found {names}; pass --db)")
        named = (os.environ if env is None else env).get("OPENCODE_DB")
        raise InputError(  # the first thing a user whose data is elsewhere meets: the way
            f"no OpenCode database at {path} (named by OPENCODE_DB)"
            if named
            else f"no OpenCode database at {path}: OpenCode writes it there once it has "
            "run; to read another, pass --db PATH or set OPENCODE_DB"
        )
    store = Store(path)
    if explicit:  # a database named as a file is that file alone
        return with_legacy_files(store, None, False)
    return with_legacy_files(store, path.parent, legacy)


def with_legacy_files(store: Store, data_dir: Path | None, legacy: bool) -> Any:
    """``store``, or a ``MixedStore`` of it and the JSON files in ``data_dir`` when they hold
    a session the database does not; ``notes`` set on what is returned."""
    notes = [note] if (note := store.schema_note()) else []
    if legacy and data_dir is not None and find_legacy_roots(data_dir):
        in_files = legacy_session_ids(data_dir)
        if in_files and not in_files <= set(store.session_ids()):
            mixed = MixedStore(store, LegacyStore(data_dir))
            mixed.notes = notes + mixed.notes
            return mixed
        if in_files:
            notes.append(mixed_note(store.path, find_legacy_roots(data_dir), 0, len(in_files)))
    store.notes = notes
    return store
