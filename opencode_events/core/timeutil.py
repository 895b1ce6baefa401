"""Times people type (``--since 2h``, ``--since 2026-11-01``, ``--until 2026-11-30``) and
times people read.

    >>> from datetime import UTC
    >>> parse_until("2026-11-30", tz=UTC)  # a date: through the end of that day
    1796083199999
"""

from __future__ import annotations

import re
import time
from datetime import datetime, tzinfo
from typing import Any

__all__ = ["parse_since", "parse_until", "format_time", "zone_named", "zone_key", "UNITS"]

UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw])\s*$")
_DATE_ONLY = re.compile(r"^\s*\d{4}-?\d{2}-?\d{2}\s*$")  # 2026-11-30, or 20261130 as ccusage


def zone_named(name: str | None) -> tzinfo | None:
    """``--tz ZONE`` as a ``tzinfo`` (None: local time); ValueError for an unknown zone."""
    if name is None:
        return None
    from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise ValueError(f"unknown time zone {name!r}") from None


def zone_key(tz: tzinfo | None) -> tuple[Any, ...]:
    """What the dates of ``tz`` depend on (msgpack holds it; a cache digests it): the zone
    itself, or for local time (None) what the C library makes it of (``TZ``; the zone file
    that names, or ``/etc/localtime``, read whole; the names and offsets it found there),
    so that a report kept under one local zone is not given under another."""
    import os

    if tz is not None:
        return ("zone", repr(tz), _zone_rules(getattr(tz, "key", None)))

    name = os.environ.get("TZ")
    where = "/etc/localtime"
    if name:
        named = name.removeprefix(":")
        zones = os.environ.get("TZDIR") or "/usr/share/zoneinfo"
        where = named if named.startswith("/") else os.path.join(zones, named)
    try:
        with open(where, "rb") as file:
            rules: bytes | None = file.read(1 << 20)  # a zone file is a few KB
    except (OSError, ValueError):  # none there: a POSIX rule in TZ, or UTC
        rules = None
    return ("local", name, where, rules, tuple(time.tzname), time.timezone, time.altzone)


def _zone_rules(key: str | None) -> bytes | None:
    """The rules of the zone ``key`` as ``ZoneInfo`` finds them (the first file of that name
    under ``zoneinfo.TZPATH``, else the ``tzdata`` package's), read whole: a tzdata update
    that moves a zone's offsets changes its days, so a report kept before it is not given
    after it. None when there is no key or no file (a report then keys on the name alone)."""
    if not key:
        return None
    import os
    import zoneinfo

    try:
        for root in zoneinfo.TZPATH:
            where = os.path.join(root, key)
            if os.path.isfile(where):
                with open(where, "rb") as file:
                    return file.read(1 << 20)  # a zone file is a few KB
        from importlib import resources

        package, _, name = f"tzdata.zoneinfo.{key}".replace("/", ".").rpartition(".")
        return resources.files(package).joinpath(name).read_bytes()[: 1 << 20]
    except (OSError, ValueError, ImportError, TypeError):
        return None


def parse_since(text: str, *, now: float | None = None, tz: tzinfo | None = None) -> int:
    """Epoch ms for ``2h``/``30m``/``7d`` ago, or an ISO date/time (in ``tz``, else local
    time, unless it says)."""
    now = time.time() if now is None else now
    match = _DURATION.match(text)
    if match:  # longer ago than any time a database holds is simply "everything"
        return int(max((now - float(match.group(1)) * UNITS[match.group(2)]) * 1000, -(2**62)))
    try:
        moment = datetime.fromisoformat(text.strip())
    except ValueError:
        raise ValueError(
            f"cannot read {text!r} as a time: use a duration like 2h, 30m, 7d "
            "or a date like 2026-11-01"
        ) from None
    try:
        if moment.tzinfo is None and tz is not None:  # the report's zone
            moment = moment.replace(tzinfo=tz)
        # naive: local time, as people mean it; timestamp() reads a time the clocks skipped
        # (a day that begins at 01:00) as zoneinfo does, where astimezone() moves it an hour
        # back into the day before
        return int(moment.timestamp() * 1000)
    except (ValueError, OverflowError, OSError):  # 0001-01-01 in a zone ahead of UTC: year 0
        return -(2**62) if moment.year < 1970 else 2**62  # before or after anything stored


def parse_until(text: str, *, now: float | None = None, tz: tzinfo | None = None) -> int:
    """The last epoch ms of ``--until``: a date (``2026-11-30``, ``20261130``) means through
    the end of that day (in ``tz``, else local time), as ccusage reads it; a duration
    (``2h``) or a date and time is that moment, read as ``parse_since`` reads it."""
    if not _DATE_ONLY.match(text):
        return parse_since(text, now=now, tz=tz)
    from datetime import timedelta

    try:
        day = datetime.fromisoformat(text.strip())
    except ValueError:
        raise ValueError(f"cannot read {text!r} as a date: use one like 2026-11-30") from None
    try:
        following = day + timedelta(days=1)
    except OverflowError:  # 9999-12-31: through the end of time
        return 2**62
    return parse_since(following.isoformat(), tz=tz) - 1


def window_reversed(start: int | None, end: int | None) -> bool:
    """Whether a ``--since``/``--until`` window ends before it begins (names no time)."""
    return start is not None and end is not None and start > end


def format_time(ms: int | float | None, tz: tzinfo | None = None) -> str:
    if not isinstance(ms, int | float) or isinstance(ms, bool):
        return "-"
    try:
        return datetime.fromtimestamp(ms / 1000, tz).astimezone(tz).strftime("%Y-%m-%d %H:%M")
    except (ValueError, OverflowError, OSError):  # a damaged time that names no date
        return "?"
