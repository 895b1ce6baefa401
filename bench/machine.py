"""Is the machine idle enough to measure on? Both benches ask before they start.

Ratios survive a noisy machine, but not a core taken by something else for the whole run: a
stray process left spinning once made `import --all` read 2.45× a bare loop instead of 1.34×.
"""

from __future__ import annotations

import os
import sys
import time


def _cpu_times() -> tuple[int, int]:
    with open("/proc/stat") as stat:
        fields = [int(v) for v in stat.readline().split()[1:]]
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
    return idle, sum(fields[:8])  # guest time is already in user time


def idle_share(seconds: float = 1.0) -> float | None:
    """The share of all cores' time left idle over ``seconds``; None without /proc/stat."""
    try:
        idle0, total0 = _cpu_times()
        time.sleep(seconds)
        idle1, total1 = _cpu_times()
    except (OSError, ValueError, IndexError):
        return None
    return (idle1 - idle0) / max(total1 - total0, 1)


def check_idle(threshold: float = 0.9) -> float | None:
    """Warn on stderr when the cores are busy before a bench; returns the idle share."""
    share = idle_share()
    if share is not None and share < threshold:
        print(
            f"warning: only {share:.0%} of {os.cpu_count()} cores idle before the bench; "
            "something else is running and the figures will be off (see `top`)",
            file=sys.stderr,
        )
    return share
