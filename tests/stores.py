"""Hand-made damage to copies of the real captured stores (samples/), for edge cases."""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

SAMPLES = Path(__file__).resolve().parent.parent / "samples"


def with_a_parent_loop(db: Path) -> tuple[str, str]:
    """``db``, a copy of samples/task's store, with its subagent's parent made the
    subagent's child: a loop of parent links, which OpenCode never writes. Returns the ids
    (the former parent, the former child)."""
    shutil.copyfile(SAMPLES / "task" / "opencode.db", db)
    conn = sqlite3.connect(db)
    (parent, child) = conn.execute(
        "SELECT parent_id, id FROM session WHERE parent_id IS NOT NULL"
    ).fetchone()
    conn.execute("UPDATE session SET parent_id = ? WHERE id = ?", (child, parent))
    conn.commit()
    conn.close()
    return parent, child


def with_every_reply_set(db: Path, sample: str, path: str, value: str) -> None:
    """``db``, a copy of samples/``sample``'s store in which every assistant message has
    the JSON ``path`` set to ``value``, an SQL expression over the message's ``data``."""
    shutil.copyfile(SAMPLES / sample / "opencode.db", db)
    with sqlite3.connect(db) as conn:
        conn.execute(
            f"UPDATE message SET data = json_set(data, ?, {value}) "
            "WHERE json_extract(data, '$.role') = 'assistant'",
            (path,),
        )
