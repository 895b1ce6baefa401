"""What the tests ask of this process's own children (Linux's /proc)."""

from __future__ import annotations

import os
from pathlib import Path


def children_of_this_process() -> set[int]:
    """The pids of this process's children, live or not yet reaped."""
    found = set()
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == os.getpid():
                found.add(int(entry))
    return found
