"""Reading the files OpenCode leaves around (config, models cache, legacy JSON) without
being stalled or flooded by what sits at their names.

A library module: it never prints, never exits; a file it cannot use is ``None``.
"""

from __future__ import annotations

import os
import stat

__all__ = ["read_regular_file"]


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
