"""OpenCode's store, read-only: the SQLite database (``sqlite``), the legacy JSON layout
(``legacy``), the files beside them (``files``), and whole-table scans over rowid ranges in
worker processes (``ranges``, ``fastscan``). Nothing here writes a byte of what it reads.
"""
