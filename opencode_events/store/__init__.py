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

from .legacy import LegacyStore
from .open import every_session, open_store, select_sessions, store_files
from .rows import MessageRow, PartRow, SessionRow, descendants
from .sqlite import Store

__all__ = [
    "Store",
    "LegacyStore",
    "open_store",
    "select_sessions",
    "every_session",
    "store_files",
    "SessionRow",
    "MessageRow",
    "PartRow",
    "descendants",
]
