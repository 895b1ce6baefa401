"""``import --follow``: the command-line end of ``pipeline.follow`` (docs/live.md).

Chooses the database and the sessions, writes events as they come (flushed per batch),
and turns how following ended into the exit status: 0 when the session went idle (or
stale), ``ExitStatus.OVER_BUDGET`` (3) when ``--max-cost`` was crossed, 130 on Ctrl-C.
"""

from __future__ import annotations

import contextlib
import errno
import os
from pathlib import Path
from typing import Any

from ..errors import InputError
from .exits import echo_error as _say
from .io import open_output
from .status import ExitStatus

__all__ = ["follow_import", "follow_path"]


def _note(message: str) -> None:
    _say(f"opencode-events: {message}")


def follow_path(db_path: str | None) -> Path:
    """The database to follow: as ``import`` finds it, which need not exist yet."""
    from ..paths import locate_db

    path = locate_db(db_path)
    if path.is_dir():
        if not (path / "opencode.db").is_file():
            raise InputError(f"no opencode.db in {path} to follow (legacy files do not change)")
        path = path / "opencode.db"
    return path


def follow_import(
    *,
    sessions: tuple[str, ...],
    db_path: str | None,
    all_sessions: bool,
    children: bool,
    forever: bool,
    max_cost: float | None,
    output: str | None,
    keep_raw: bool,
    no_metrics: bool,
    fmt: str | None,
    tags: dict[str, str] | None = None,
) -> None:
    from ..core.activity import stale_after_ms
    from ..core.normalizer import Normalizer
    from ..output.jsonl import make_writer
    from ..pipeline.follow import FollowEnd, catch_up, follow_store
    from ..sources.eventlog import StoreFollower
    from ..store.open import select_sessions, store_files
    from .quick import event_mcp_servers

    path = follow_path(db_path)
    if not path.exists():
        _note(f"waiting for {path}")
    reads = store_files(_Path(path))
    out = open_output(output, reads=reads)
    fmt = fmt or ("pretty" if out.isatty() else "jsonl")
    writer = make_writer(fmt, out, buffered=False, tags=tags)
    normalizer = Normalizer(keep_raw=keep_raw, mcp_servers=event_mcp_servers)
    follower = StoreFollower(
        normalizer,
        sessions=sessions,
        all_sessions=all_sessions,
        children=children,
        resolve=lambda store, wanted: select_sessions(store, wanted),
    )
    try:
        end = follow_store(
            path,
            follower,
            writer,
            until_idle=not forever,
            max_cost=max_cost,
            stale_after=stale_after_ms(),
            waiting=lambda roots: _say_waiting(writer, roots, newer=not sessions),
            stop=_reader_gone(out),
        )
        writer.write(follower.finish())
        if not no_metrics:
            writer.write([normalizer.metrics()])
    except (KeyboardInterrupt, SystemExit):
        # Ctrl-C or SIGTERM (how --forever ends): a part still open is written as it last
        # was, as when following ends by itself (a call OpenCode was killed in, as `import`
        # shows it); no metrics, as any interrupted command. A write that fails now (the
        # reader gone too) must not hide how the command ended.
        with contextlib.suppress(Exception):  # a store unreadable now: what was read
            catch_up(path, follower, writer)
        with contextlib.suppress(Exception):
            writer.write(follower.finish())
        raise
    finally:
        writer.flush()
    name, many = _named(follower)
    if end is FollowEnd.STALE:
        are, them = ("are", "them") if many else ("is", "it")
        _note(f"{name} {are} stale: in flight, but nothing written to {them} for a while")
    if end is FollowEnd.OVER_BUDGET:
        _note(
            f"{name} cost ${follower.total_cost:.4f} with {'their' if many else 'its'} "
            f"subagents, over --max-cost ${max_cost:g}"
        )
        raise SystemExit(ExitStatus.OVER_BUDGET)


def _reader_gone(out: Any) -> Any:
    """For output into a pipe: a check, between looks, that raises ``BrokenPipeError`` once
    its reader has gone (`| head` done), which ends the follow as a failed write would
    (141). Without it, a follow of an idle store writes nothing that could fail, and runs
    on after its reader. None for anything but a pipe."""
    import select
    import stat

    try:
        fd = out.fileno()
        if not stat.S_ISFIFO(os.fstat(fd).st_mode) or not hasattr(select, "poll"):
            return None
    except (OSError, ValueError, AttributeError):
        return None
    poller = select.poll()
    poller.register(fd, 0)  # POLLERR is always reported: the pipe's reader closed it

    def gone() -> bool:
        if any(flags & (select.POLLERR | select.POLLHUP) for _, flags in poller.poll(0)):
            raise BrokenPipeError(errno.EPIPE, "the reader of the output has gone")
        return False

    return gone


def _say_waiting(writer: Any, roots: list[str], *, newer: bool = False) -> None:
    """That the followed session is idle and waited on: in the pretty view's footer where
    it has one (a line on stderr would leave a copy of the footer above it), else a line
    on stderr. ``newer``: the session was chosen as the newest, and a newer one that
    begins to work takes its place."""
    which = "it, or a newer session," if newer else "it"
    text = (
        f"{', '.join(roots)} is idle: its history is written; waiting for {which} to work "
        "and be idle again (Ctrl-C to stop)"
    )
    say = getattr(writer, "waiting", None)
    if say is None or not say(text):
        _note(text)


def _named(follower: Any) -> tuple[str, bool]:
    """The sessions followed, for a sentence, and whether they are more than one."""
    roots = follower.roots
    if not roots:
        return "the sessions followed", True
    return ", ".join(roots), len(roots) > 1


class _Path:
    """``store_files`` takes a store; only its path is needed before one is opened."""

    def __init__(self, path: Path) -> None:
        self.path = path
