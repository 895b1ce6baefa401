"""``statusline``: one short line about the session at work, for tmux, starship or a prompt.

What it says (``Glance``): the current session's cost with its subagents folded in (the
session columns, as ``sessions``' ``total_cost`` sums them), today's spend (OpenCode's cost
of every reply created today, local day or ``tz``, as ``usage --by day`` counts that day),
the context size (the prompt tokens of the session's last inference: input + cache read +
cache write, as ``context`` counts a prompt) and whether the session is busy, idle or stale
(``core.activity``).

It must be fast on any store (a status bar runs it every few seconds), so every figure comes
from an index or a few rows at a b-tree's end (``store.rows.Glances``), never a scan of a
table: the current session from the newest message rows, today's messages by their ids'
time prefix, the subagents through the parent index, the newest messages of the session
through its (session, time) index::

    with Store(path) as store:
        glance = take_glance(store)
    print(render("{cost} {today} {context} {state}", glance))   # $0.0623 $1.24 18.2k idle
"""

from __future__ import annotations

import re
import string
import time
from datetime import datetime, timedelta, tzinfo
from typing import Any

import msgspec
from msgspec import Struct

from ..core.activity import (
    BUSY,
    IDLE,
    STALE,
    newest_says_in_flight,
    session_state,
    stale_after_ms,
)
from ..core.figures import summed_cost, token_count
from ..core.text import BIDI_FORMATTING
from ..core.views import Times, Tokens, decode_repairing, number
from ..errors import InputError
from ..store.rows import Glances
from .spend import family_spend

__all__ = [
    "Glance",
    "take_glance",
    "render",
    "FIELDS",
    "DEFAULT_FORMAT",
    "ESCAPES",
    "check_format",
]

DEFAULT_FORMAT = "{state} {cost} | today {today} | ctx {context}"
_NEWEST = 64  # newest messages of the session read at most, for the context and the state

FIELDS = {
    "cost": "the session's cost with its subagents, $0.0623",
    "own_cost": "the session's own cost, without subagents",
    "subagent_cost": "what its subagents cost",
    "subagents": "how many subagent sessions it has",
    "today": "today's spend over every session, $1.24",
    "context": "prompt tokens of the last inference, 18.2k",
    "context_tokens": "the same as a plain number, 18211",
    "state": "busy, idle or stale",
    "session": "the session's id",
    "short_id": "the session id's first 12 characters",
    "title": "the session's title",
    "undone": "what a pending /undo undid, counted in {cost} as OpenCode counts it: "
    "'undo 2 $0.0026', empty without one",
    "fork": "'fork' when the session is a fork, whose {cost} includes the history it "
    "copied (as OpenCode counts it), empty otherwise",
}


class _Reply(Struct, gc=False):
    role: Any = None
    time: Times | None = None
    error: Any = None
    cost: Any = None
    tokens: Tokens | None = None
    finish: Any = None


REPLY = msgspec.json.Decoder(_Reply)  # a message row's data, as the live views read it


class _Spend(Struct, gc=False):
    role: Any = None
    cost: Any = None


_SPEND = msgspec.json.Decoder(_Spend)
_UNREADABLE = (msgspec.DecodeError, RecursionError, TypeError)


class Glance(Struct, kw_only=True):
    session_id: str
    title: str | None = None
    cost: float = 0.0  # with subagents
    own_cost: float = 0.0
    subagent_cost: float = 0.0
    subagents: int = 0
    today: float = 0.0
    context_tokens: int | None = None  # no inference with a prompt yet: None
    state: str = IDLE
    # What the session's pending /undo undid: counted above, as OpenCode's sidebar counts
    # it until the next prompt deletes it (reports.undone).
    undone_inferences: int = 0
    undone_cost: float = 0.0
    # A fork: ``cost`` includes the history it copied, as OpenCode's (reports.sessions).
    forked: bool = False


def take_glance(
    store: Any,
    session_id: str | None = None,
    *,
    now_ms: float | None = None,
    tz: tzinfo | None = None,
    stale_after: int | None = None,
) -> Glance:
    """The figures of ``session_id`` (a whole id; default: the session at work now or
    last, see ``current_session``) and of today (the local day of ``now_ms``, in ``tz``)."""
    if not isinstance(store, Glances):
        raise InputError(f"statusline reads an opencode.db; {store.path} holds legacy files")
    now = time.time() * 1000 if now_ms is None else now_ms
    root = session_id or current_session(store)
    if root is None:
        raise InputError(f"no sessions in {store.path}{_copy_note(store.path)}")
    family = store.family_rows(root)
    if not family:
        raise InputError(f"no session {root} in {store.path}{_copy_note(store.path)}")
    spend = family_spend(store, family)  # the rule every view of this figure shares
    row = store.session(root)
    glance = Glance(
        session_id=root,
        title=row.title if row is not None else None,
        cost=spend.total,
        own_cost=spend.own,
        subagent_cost=spend.below,
        subagents=spend.subagents,
        today=spend_between(store, *day_bounds(now, tz)),
    )
    if row is not None and row.revert:  # a pending /undo: its messages are read, rarely
        from .undone import undone_figures

        for undone in undone_figures(store, [root]).values():
            glance.undone_inferences, glance.undone_cost = undone.inferences, undone.cost
    glance.forked = root in store.forks([root])
    in_flight = _read_newest(store, root, glance, now)
    if in_flight:
        limit = stale_after_ms() if stale_after is None else stale_after
        glance.state = _busy_or_stale(store, family, now, limit)
    return glance


def _copy_note(path: Any) -> str:
    from ..store.open import copy_note  # only on the way to an error: start-up stays small

    return copy_note(path)


def current_session(store: Any) -> str | None:
    """The top-level session at work now, or last: the one whose message (or whose
    subagent's message) was written last among the newest message rows."""
    sid = store.recently_written_session()
    if sid is None:
        return store.newest_session()
    seen = {sid}
    while (parent := store.parent_of(sid)) is not None and parent not in seen:
        if store.session(parent) is None:  # an orphan counts on its own (store.rows)
            break
        seen.add(parent)
        sid = parent
    return sid


def day_bounds(now_ms: float, tz: tzinfo | None) -> tuple[int, int]:
    """[start, end) in epoch ms of the day ``now_ms`` falls on, in ``tz`` (default: local)."""
    day = datetime.fromtimestamp(now_ms / 1000, tz).date()  # local date when tz is None
    return day_start(day, tz), day_start(day + timedelta(days=1), tz)


def day_start(day: Any, tz: tzinfo | None) -> int:
    """The first epoch ms of the date ``day`` in ``tz`` (None: local time): its midnight, or
    where the clocks skip midnight (a change at 00:00), the moment they jump. A naive
    ``timestamp()`` reads a skipped time with the offset before the change, as zoneinfo
    does; ``astimezone()`` would move it an hour back, into the day before."""
    return int(datetime.combine(day, datetime.min.time(), tz).timestamp() * 1000)


def spend_between(store: Any, start_ms: int, end_ms: int) -> float:
    """OpenCode's cost of the replies created in [start_ms, end_ms), every session; a fork's
    copy of older messages (created before its session was) is not counted again."""
    total, figures = 0.0, 0
    for _, created, session_created, data in store.messages_between(start_ms, end_ms):
        if type(session_created) is int and type(created) is int and created < session_created:
            continue  # a fork's copied history
        try:
            spend = decode_repairing(_SPEND, data)[0]
        except (*_UNREADABLE, msgspec.ValidationError):
            continue
        if spend.role == "assistant":
            cost = number(spend.cost)
            total += float(cost) if cost is not None else 0.0
            figures += 1
    return summed_cost(total, figures)


def _read_newest(store: Any, session_id: str, glance: Glance, now: float) -> bool:
    """Fill in the context size from the newest messages; whether a reply is in flight:
    the newest reply has no ``time.completed`` (and no error), or the newest message is a
    prompt awaiting its reply, or the newest reply asked for tools just now (its next step
    follows). An older reply left open is one a killed OpenCode left: OpenCode runs one
    reply at a time in a session."""
    in_flight: bool | None = None
    for index, (_, updated, data) in enumerate(store.newest_messages(session_id)):
        if index >= _NEWEST or (in_flight is not None and glance.context_tokens is not None):
            break
        try:
            reply = decode_repairing(REPLY, data)[0]
        except (*_UNREADABLE, msgspec.ValidationError):
            continue
        if in_flight is None:
            in_flight = reply_says_in_flight(reply, updated, now)
        if reply.role != "assistant":
            continue
        if glance.context_tokens is None:
            glance.context_tokens = prompt_tokens(reply.tokens)
    return bool(in_flight)


def reply_says_in_flight(reply: Any, updated: Any, now: float) -> bool | None:
    """``core.activity.newest_says_in_flight`` of a session's newest message (a ``REPLY``
    view) written at ``updated`` (its row's ``time_updated``)."""
    completed = reply.time.completed if reply.time is not None else None
    return newest_says_in_flight(
        reply.role,
        completed=completed,
        error=reply.error,
        finish=reply.finish,
        written_ms=number(updated) or number(completed) or 0,
        now_ms=now,
    )


def prompt_tokens(tokens: Tokens | None) -> int | None:
    """input + cache read + cache write, or None for a reply that sent no prompt (a failed
    or aborted request: not an inference, as ``context`` counts them)."""
    if tokens is None:
        return None
    cache = tokens.cache
    parts = [tokens.input, cache.read if cache else 0, cache.write if cache else 0]
    prompt = sum(map(token_count, parts))  # the figures' rule for each count
    return prompt or None


def _busy_or_stale(store: Any, family: list[tuple[str, float, int]], now: float, limit: int) -> str:
    """Busy while the session, or a subagent at work under it, was written within ``limit``;
    else stale."""
    for sid, _, updated in family:
        written = max(updated, store.last_write(sid) or 0)
        if (
            session_state(in_flight=True, last_write_ms=written, now_ms=now, stale_after=limit)
            == BUSY
        ):
            return BUSY
    return STALE


# ------------------------------------------------------------------------------ render


def _money(value: float) -> str:
    return f"${value:.2f}" if value >= 1 else f"${value:.4f}" if value else "$0"


def _tokens(value: int | None) -> str:
    if value is None:
        return "-"
    if value < 1000:
        return str(value)
    if value < 1_000_000:
        return f"{value / 1000:.1f}k"
    return f"{value / 1_000_000:.2f}M"


class _Unknown:
    """A number not known (no inference yet): blank, whatever its format spec."""

    def __format__(self, spec: str) -> str:
        return ""


def values(glance: Glance) -> dict[str, Any]:
    """Every template field (``FIELDS``) of ``glance``, written for people; the counts are
    numbers, so that a number's format spec suits them (``{subagents:02d}``)."""
    return {
        "cost": _money(glance.cost),
        "own_cost": _money(glance.own_cost),
        "subagent_cost": _money(glance.subagent_cost),
        "subagents": glance.subagents,
        "today": _money(glance.today),
        "context": _tokens(glance.context_tokens),
        "context_tokens": _Unknown() if glance.context_tokens is None else glance.context_tokens,
        "state": glance.state,
        "session": _one_line(glance.session_id),
        "short_id": _one_line(glance.session_id[:12]),
        "title": _one_line(glance.title or ""),
        "undone": (
            f"undo {glance.undone_inferences} {_money(glance.undone_cost)}"
            if glance.undone_inferences
            else ""
        ),
        "fork": "fork" if glance.forked else "",
    }


# C0 and C1 controls (ESC, CSI, NEL…) and Unicode's line and paragraph separators: every
# character that ends a line (``str.splitlines``) or starts an escape sequence; and the
# bidirectional formatting that would reorder the line (``core.text``).
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029" + "".join(map(chr, BIDI_FORMATTING)) + "]+")


def _one_line(text: str) -> str:
    """A title as one line: a newline or an escape sequence would break a status bar."""
    return _CONTROL.sub(" ", text).strip()


def check_format(template: str) -> None:
    """Raise ``ValueError`` naming the problem unless ``template`` uses only ``FIELDS``
    (plain names, with an optional format spec such as ``{title:.20}``)."""
    try:
        parsed = list(string.Formatter().parse(template))
    except ValueError as exc:
        raise ValueError(f"cannot read the template: {exc}") from None
    for _, name, spec, _ in parsed:
        if name is None:
            continue
        if name not in FIELDS:
            known = ", ".join(FIELDS)
            raise ValueError(f"unknown field {{{name}}} (fields: {known})")
        if spec and "{" in spec:  # a spec may hold fields of its own: {title:{width}}
            check_format(spec)


# What reads the line again, and the character it takes as its own: tmux expands the
# output of ``#()`` as a format (``#[fg=red]`` is a style, ``#{pane_current_path}`` and
# ``#H`` are filled in; ``##`` is one ``#``, and ``##[`` a plain ``#[``), zsh's prompt with
# PROMPT_SUBST reads ``%`` escapes in what ``$(...)`` printed (``%F{red}``; ``%%`` is ``%``).
# Only the fields are escaped: the template is the user's, styles and all.
ESCAPES = {"tmux": "#", "zsh": "%"}


class _Escaping(string.Formatter):
    """``str.format_map`` with each field's text (its conversion and spec applied:
    ``{title:.20}`` cuts the title, not its escapes) written with ``char`` doubled."""

    def __init__(self, char: str) -> None:
        self.char = char

    def format_field(self, value: Any, format_spec: str) -> str:
        return format(value, format_spec).replace(self.char, self.char * 2)


def render(template: str, glance: Glance, escape: str | None = None) -> str:
    """``template`` with its fields filled in (``check_format`` it first); ``escape`` (one
    of ``ESCAPES``) writes the fields' text so that this reader shows it as it is: a title
    written by the model must not restyle a tmux bar or a zsh prompt."""
    fields = values(glance)
    try:
        if escape is not None:
            return _Escaping(ESCAPES[escape]).vformat(template, (), fields)
        return template.format_map(fields)
    except (ValueError, TypeError, LookupError) as exc:  # a spec that does not suit: {cost:d}
        raise ValueError(f"cannot fill in the template: {exc}") from None
