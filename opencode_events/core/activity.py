"""Whether a session is at work: busy, idle or stale. One rule for every report and view.

OpenCode marks a reply finished by writing its ``time.completed``; a reply without one is
in flight. A killed OpenCode leaves its last reply that way for good, so in flight alone
does not mean at work: a session in flight with nothing written to it for
``STALE_AFTER_MS`` (ten minutes) is **stale**. OpenCode writes a working session's rows as
it goes (each tool call's start, output and end, each text and reasoning part, each step),
so a live reply is silent that long only inside one very long model response or tool call
(a bash command given a timeout over ten minutes).

A session is **busy** while a reply is in flight, or a prompt waits for its reply, or a step
ended asking for tools (``finish: "tool-calls"``: the next step follows); otherwise it is
**idle**::

    state = session_state(in_flight=True, last_write_ms=row.time_updated, now_ms=now)
    # "busy", "idle" or "stale"
"""

from __future__ import annotations

from collections.abc import Mapping

from ..paths import stale_after_seconds

__all__ = [
    "STALE_AFTER_MS",
    "NEXT_STEP_MS",
    "BUSY",
    "IDLE",
    "STALE",
    "newest_says_in_flight",
    "session_state",
    "stale_after_ms",
]

STALE_AFTER_MS = 10 * 60 * 1000
# A step that asked for tools is followed by the next one within this: OpenCode writes it
# milliseconds later; a turn a rejected permission stopped ends that way too, so only so long.
NEXT_STEP_MS = 2000
BUSY, IDLE, STALE = "busy", "idle", "stale"


def stale_after_ms(env: Mapping[str, str] | None = None) -> int:
    """``STALE_AFTER_MS``, or ``$OPENCODE_EVENTS_STALE_AFTER`` seconds when that is set
    (a test of a killed run need not wait ten minutes)."""
    seconds = stale_after_seconds(env)
    return STALE_AFTER_MS if seconds is None else int(seconds * 1000)


def newest_says_in_flight(
    role: object,
    *,
    completed: object,
    error: object,
    finish: object,
    written_ms: int | float | None,
    now_ms: int | float,
) -> bool | None:
    """Whether a session's newest prompt or reply says it is in flight: a prompt (its reply
    is still to come), a reply without ``completed`` or error, or one that asked for tools
    (``finish: "tool-calls"``) written within ``NEXT_STEP_MS`` (None: when is not known,
    in flight). None for a message that is neither prompt nor reply (read on to an older
    one)::

        newest_says_in_flight("assistant", completed=None, error=None, finish=None,
                              written_ms=None, now_ms=now)   # True
    """
    if role == "user":
        return True
    if role != "assistant":
        return None
    if completed is None and not error:
        return True
    if finish == "tool-calls" and not error:
        return written_ms is None or now_ms - written_ms <= NEXT_STEP_MS
    return False


def session_state(
    *,
    in_flight: bool,
    last_write_ms: int | float | None,
    now_ms: int | float,
    stale_after: int | None = None,
) -> str:
    """``BUSY``, ``IDLE`` or ``STALE`` for a session that is (or is not) ``in_flight`` and
    was last written at ``last_write_ms`` (epoch ms; None: unknown, never stale)."""
    if not in_flight:
        return IDLE
    limit = STALE_AFTER_MS if stale_after is None else stale_after
    if last_write_ms is not None and now_ms - last_write_ms > limit:
        return STALE
    return BUSY
