"""OpenCode's store, read-only: the SQLite database (``sqlite``), the legacy JSON layout
(``legacy``), the rows both hand out and the session tree (``rows``), choosing a store and
its sessions (``open``), the files beside them (``files``), and whole-table scans over rowid
ranges in worker processes (``ranges``, ``fastscan``). Nothing here writes a byte of what it
reads.

    >>> from opencode_events.store import open_store, select_sessions
    >>> with open_store("samples/task/opencode.db") as store:
    ...     len(select_sessions(store, all_sessions=True))
    2
"""

from importlib import import_module
from typing import Any

_WHERE = {
    "Store": ".sqlite",
    "LegacyStore": ".legacy",
    "open_store": ".open",
    "select_sessions": ".open",
    "every_session": ".open",
    "store_files": ".open",
    "SessionRow": ".rows",
    "MessageRow": ".rows",
    "PartRow": ".rows",
    "descendants": ".rows",
}

__all__ = list(_WHERE)


def __getattr__(name: str) -> Any:
    # Imported on first use: a reader that needs only the row types (``rows``) must not
    # pay for sqlite3 at start-up (``normalize`` never opens a database).
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(import_module(module, __name__), name)
