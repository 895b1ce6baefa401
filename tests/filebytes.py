"""Digests of files that SQLite connections of this process may hold, read without
dropping their locks.

Closing any descriptor of a file drops every POSIX lock this process holds on it. A test
that hashes a live database's ``-shm`` with ``read_bytes`` while its own writer is open
drops the writer's lock there; the next process to open the database (a forked worker)
then takes the file as unused, truncates it, and the writer's next touch of its mapping
is a SIGBUS that kills the whole test run. So the files are read in a forked child,
whose closes drop nothing of ours::

    before = digests(sorted(folder.iterdir()))   # {name: sha256 hex}
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable
from pathlib import Path

__all__ = ["digests", "folder_digests"]


def digests(paths: Iterable[Path]) -> dict[str, str]:
    """{file name: sha256 of its bytes} for every path that is a file, read in a child."""
    paths = list(paths)
    take, give = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns into the test
        code = 0
        try:
            os.close(take)
            found = {
                p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in paths if p.is_file()
            }
            payload = json.dumps(found).encode()
            while payload:
                payload = payload[os.write(give, payload) :]
        except BaseException:  # noqa: BLE001 - the parent sees no answer and fails
            code = 1
        finally:
            os._exit(code)
    os.close(give)
    chunks = []
    while chunk := os.read(take, 1 << 16):
        chunks.append(chunk)
    os.close(take)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0, "the files could not be read"
    return json.loads(b"".join(chunks))


def folder_digests(folder: Path) -> dict[str, str]:
    """``digests`` of every file in ``folder``."""
    return digests(sorted(folder.iterdir()))
