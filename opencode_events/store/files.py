"""Reading the files OpenCode leaves around (config, models cache, legacy JSON, the
headers of its database and WAL index) without being stalled or flooded by what sits at
their names, and without dropping a lock this process holds; and making files of our own
(the report cache's, what ``otel --follow`` sent) only in a folder no one else can write.

A library module: it never prints, never exits; a file it cannot use is ``None``::

    config = read_regular_file(path, limit=1 << 20)     # its bytes, or None
    state = read_head("opencode.db-shm", 48)            # (stat, first bytes), or None
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pathlib import Path

__all__ = [
    "new_private_file",
    "private_folder",
    "read_head",
    "read_regular_file",
    "why_unreadable",
]

# path → (descriptor, device, inode) of the files ``read_head`` keeps open
_kept: dict[str, tuple[int, int, int]] = {}
_kept_lock = threading.Lock()
KEPT_FILES = 32  # paths kept open at most; past it the least recently opened is closed


def _new_lock_in_child() -> None:
    global _kept_lock
    _kept_lock = threading.Lock()  # a fork taken while another thread held it


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_new_lock_in_child)


def read_regular_file(path: str | os.PathLike[str], limit: int | None = None) -> bytes | None:
    """The bytes of the regular file ``path``; None for anything else: missing, unreadable,
    larger than ``limit``, a FIFO (never waited on) or a device such as /dev/zero (never read
    without end)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except (OSError, ValueError):  # ValueError: a NUL in the name
        return None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or (limit is not None and info.st_size > limit):
            return None
        with os.fdopen(fd, "rb", closefd=False) as file:
            return file.read() if limit is None else file.read(limit + 1)
    except OSError:
        return None
    finally:
        os.close(fd)


def why_unreadable(path: str | os.PathLike[str]) -> str | None:
    """Why the file at ``path``, which ``read_regular_file`` gave no bytes of, could not be
    read (permission denied, an I/O error), for a note; None when nothing stands in the way
    of reading it but what it is (gone, a folder, a FIFO, a device, too large)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except FileNotFoundError:
        return None
    except OSError as exc:
        return None if exc.errno in _NOT_A_FILE else (exc.strerror or str(exc))
    except ValueError:  # a NUL in the name
        return None
    try:
        if stat.S_ISREG(os.fstat(fd).st_mode):
            os.read(fd, 1 << 16)  # a bad sector says so here
    except OSError as exc:
        return exc.strerror or str(exc)
    finally:
        os.close(fd)
    return None


_NOT_A_FILE = {errno.EISDIR, errno.ENOTDIR, errno.ELOOP, errno.ENXIO}


def read_head(
    path: str | os.PathLike[str],
    size: int,
    tail: Callable[[os.stat_result, bytes], tuple[int, int] | None] | None = None,
) -> tuple[os.stat_result, bytes] | None:
    """The ``stat`` and first ``size`` bytes of the regular file at ``path``; None when there
    is none (missing, unreadable, a directory, a FIFO).

    Why the file stays open. Closing any descriptor of a file drops every POSIX lock this
    process holds on it (fcntl's rule, sqlite.org "How To Corrupt" 2.2), and the SQLite
    connections of this process (ours while a report looks at the files, or a harness's own)
    hold theirs on the database and its ``-shm``: the database's SHARED lock tells OpenCode's
    last connection not to remove the WAL, the ``-shm``'s tells the next one to open it not
    to truncate the index that this process has mapped (touched after that: a SIGBUS). So
    the descriptor a header is read through is kept, one per path, until the path names
    another file (the old one is closed then) or the process ends; at most ``KEPT_FILES``.
    A kept descriptor takes no lock and writes nothing: OpenCode still checkpoints and
    removes its files as it likes."""
    name = os.fspath(path)
    try:
        info = os.stat(name)
    except (OSError, ValueError):  # ValueError: a NUL in the name
        return None
    if not stat.S_ISREG(info.st_mode):
        return None
    with _kept_lock:
        _drop_unlinked()
        kept = _kept.get(name)
        if kept is None or kept[1:] != (info.st_dev, info.st_ino):
            fd = _open_kept(name)
            if fd is None:
                return None
            info = os.fstat(fd)  # the file opened, should the name have moved meanwhile
            if not stat.S_ISREG(info.st_mode):
                _close_quietly(fd)
                return None
            if kept is not None:
                _close_quietly(kept[0])  # the path names another file now
                del _kept[name]
            if len(_kept) >= KEPT_FILES:
                _close_quietly(_kept.pop(next(iter(_kept)))[0])
            kept = _kept[name] = (fd, info.st_dev, info.st_ino)
        try:
            head = os.pread(kept[0], size, 0) if size else b""
            where = tail(info, head) if tail is not None else None  # (offset, length) more
            return info, head + os.pread(kept[0], where[1], where[0]) if where else head
        except OSError:
            return None


def _drop_unlinked() -> None:
    """Close the kept descriptors of files no longer linked anywhere (a data folder the
    caller removed): no process can open such a file again, so no lock on it matters, and
    a descriptor kept would hold its disk space until this process ends."""
    for name, (fd, _dev, _ino) in list(_kept.items()):
        try:
            gone = os.fstat(fd).st_nlink == 0
        except OSError:
            gone = True
        if gone:
            _close_quietly(fd)
            del _kept[name]


def _open_kept(name: str) -> int | None:
    try:
        return os.open(name, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except (OSError, ValueError):
        return None


def _close_quietly(fd: int) -> None:
    with contextlib.suppress(OSError):
        os.close(fd)


def private_folder(folder: Path) -> bool:
    """``folder`` made if need be (0700, as the parents ``mkdir -p`` would make), and then a
    real folder of this user's that no one else may write: a cache in a shared place
    (``XDG_CACHE_HOME=/tmp``) that another user made first, or a link planted there, is
    not used (its files could be read as this user's reports, or be FIFOs that hang)."""
    try:
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        found = os.lstat(folder)
    except OSError:
        return False
    if not stat.S_ISDIR(found.st_mode) or found.st_uid != os.geteuid():
        return False
    if found.st_mode & (stat.S_IWGRP | stat.S_IWOTH):  # ours, made under umask 002 by an older run
        try:
            os.chmod(folder, 0o700, follow_symlinks=False)
        except OSError:
            return False
    return True


def new_private_file(folder: Path, access: int = os.O_WRONLY) -> tuple[int, Path]:
    """A new file of this user's alone in ``folder``, open for writing, as ``mkstemp`` makes
    one (``tempfile`` itself costs a command's start-up 4 ms to import)."""
    for _ in range(100):
        path = folder / f".tmp-{os.urandom(8).hex()}"
        try:
            return os.open(path, access | os.O_CREAT | os.O_EXCL, 0o600), path
        except FileExistsError:
            continue
    raise FileExistsError(f"no new file could be made in {folder}")
