"""Hand-made damage to copies of the real captured stores (samples/), for edge cases."""

from __future__ import annotations

import shutil
import sqlite3
from collections.abc import Iterable
from pathlib import Path
from typing import Any

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


def with_sessions_like_the_first(
    db: Path, sample: str, changes: Iterable[dict[str, Any]], *, keep: bool = False
) -> None:
    """``db``, a copy of samples/``sample``'s store whose session table is made again of
    copies of its first row, one for each of ``changes`` (the columns that copy changes);
    with ``keep``, beside the rows it had."""
    shutil.copyfile(SAMPLES / sample / "opencode.db", db)
    conn = sqlite3.connect(db)
    names = [c[1] for c in conn.execute("PRAGMA table_info(session)")]
    first = dict(zip(names, conn.execute("SELECT * FROM session").fetchone(), strict=True))
    if not keep:
        conn.execute("DELETE FROM session")
    for change in changes:
        row = {**first, **change}
        conn.execute(
            f"INSERT INTO session ({', '.join(row)}) VALUES ({', '.join('?' * len(row))})",
            list(row.values()),
        )
    conn.commit()
    conn.close()


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


def with_the_original_deleted(db: Path) -> str:
    """``db``, a copy of samples/fork's store without the session it was forked from: the
    fork's copied history (its messages keep their original times, older than the fork's
    own row) is then the only copy. Returns the fork's id."""
    shutil.copyfile(SAMPLES / "fork" / "opencode.db", db)
    with sqlite3.connect(db) as conn:
        (original, fork) = conn.execute(
            "SELECT id, (SELECT id FROM session ORDER BY time_created DESC LIMIT 1) "
            "FROM session ORDER BY time_created LIMIT 1"
        ).fetchone()
        for table in ("part", "message"):
            conn.execute(f"DELETE FROM {table} WHERE session_id = ?", (original,))
        conn.execute("DELETE FROM session WHERE id = ?", (original,))
    conn.close()
    return fork


def with_a_reply_before_its_prompt(db: Path) -> tuple[str, str]:
    """``db``, a copy of samples/continue3's store (three prompts in one session) in which
    the clock went back an hour before the second prompt's reply: the reply's row and data
    are dated before the prompt its ``parentID`` names. Returns (the prompt's id, the
    reply's)."""
    shutil.copyfile(SAMPLES / "continue3" / "opencode.db", db)
    with sqlite3.connect(db) as conn:
        prompts = conn.execute(
            "SELECT id FROM message WHERE json_extract(data, '$.role') = 'user' "
            "ORDER BY time_created, id"
        ).fetchall()
        prompt = prompts[1][0]
        (reply,) = conn.execute(
            "SELECT id FROM message WHERE json_extract(data, '$.parentID') = ? "
            "ORDER BY time_created, id LIMIT 1",
            (prompt,),
        ).fetchone()
        hour = 3_600_000
        conn.execute(
            "UPDATE message SET time_created = time_created - ?, data = json_set(data, "
            "'$.time.created', json_extract(data, '$.time.created') - ?, '$.time.completed', "
            "json_extract(data, '$.time.completed') - ?) WHERE id = ?",
            (hour, hour, hour, reply),
        )
        conn.execute(
            "UPDATE part SET time_created = time_created - ? WHERE message_id = ?", (hour, reply)
        )
    conn.close()
    return prompt, reply


def generated(db: Path, sessions: int = 30, parts: int = 1500) -> Path:
    """A store of ``sessions`` cloned from the captures by ``bench/gen_db.py`` (subagents,
    forks, errors; rows without an event log), at ``db``."""
    import subprocess
    import sys

    subprocess.run(
        [sys.executable, "bench/gen_db.py", "--sessions", str(sessions), "--parts", str(parts)]
        + ["--target-gb", "0.002", "--out", str(db)],
        cwd=SAMPLES.parent,
        check=True,
        capture_output=True,
    )
    return db


def merged_captures(db: Path, names: tuple[str, ...]) -> Path:
    """``db``, the stores of the captures ``names`` (samples/) in one, event log included:
    several real sessions written and logged by OpenCode itself (a project or row they
    share is kept once)."""
    shutil.copyfile(SAMPLES / names[0] / "opencode.db", db)
    with sqlite3.connect(f"file:{db}", uri=True) as conn:  # URIs: the others read-only
        tables = [
            name
            for (name,) in conn.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'"
            )
        ]
        for name in names[1:]:
            conn.execute(
                "ATTACH DATABASE ? AS other", (f"file:{SAMPLES / name / 'opencode.db'}?mode=ro",)
            )
            for table in tables:
                conn.execute(f"INSERT OR IGNORE INTO main.`{table}` SELECT * FROM other.`{table}`")
            conn.commit()
            conn.execute("DETACH DATABASE other")
    conn.close()
    return db


def with_a_prompt_awaiting_its_reply(db: Path, sample: str = "continue3") -> tuple[str, str]:
    """``db``, a copy of samples/``sample``'s store cut short after its newest prompt
    (``cut_after_the_newest_prompt``). Returns (the session's id, the prompt's)."""
    shutil.copyfile(SAMPLES / sample / "opencode.db", db)
    return cut_after_the_newest_prompt(db)


def cut_after_the_newest_prompt(db: Path, session_id: str | None = None) -> tuple[str, str]:
    """``db`` cut short after the newest prompt (of ``session_id``, else of any session):
    the replies to it and their parts are not written yet, as for a moment at every prompt,
    and for good when OpenCode was killed in between. Returns (the session's id, the
    prompt's)."""
    with sqlite3.connect(db) as conn:
        (sid, prompt, created) = conn.execute(
            "SELECT session_id, id, time_created FROM message WHERE json_extract(data, "
            "'$.role') = 'user' AND session_id = coalesce(?, session_id) "
            "ORDER BY time_created DESC, id DESC LIMIT 1",
            (session_id,),
        ).fetchone()
        later = "SELECT id FROM message WHERE session_id = ? AND time_created > ?"
        conn.execute(f"DELETE FROM part WHERE message_id IN ({later})", (sid, created))
        conn.execute(f"DELETE FROM message WHERE id IN ({later})", (sid, created))
    conn.close()
    return sid, prompt


def with_a_title(db: Path, title: str) -> Path:
    """``db``, a copy of samples/task's store whose top-level session is titled ``title``."""
    shutil.copyfile(SAMPLES / "task" / "opencode.db", db)
    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE session SET title = ? WHERE parent_id IS NULL", (title,))
    return db


# Environments whose standard output is not UTF-8: an ASCII one named, and the C locale
# with Python's UTF-8 mode and locale coercion off (else Python 3.7+ makes it UTF-8).
LOCALES_WITHOUT_UTF8 = [
    {"PYTHONIOENCODING": "ascii"},
    {"LC_ALL": "C", "PYTHONUTF8": "0", "PYTHONCOERCECLOCALE": "0"},
]


def in_locale(locale: dict[str, str]) -> dict[str, str]:
    """This process's environment, its locale and Python I/O settings replaced by ``locale``."""
    import os

    kept = {k: v for k, v in os.environ.items() if not k.startswith(("LC_", "LANG", "PYTHONIO"))}
    return {**kept, **locale}
