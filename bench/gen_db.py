"""Generate a large OpenCode 1.18.33 database from the real captures in samples/*/opencode.db.

The schema and the ``migration`` rows are copied from a real capture (SQLite backup), and
every message and part row is a clone of a captured one: OpenCode's own ``data`` JSON with
fresh ids, shifted times, a session directory, a real model id and new token counts.

- A *unit* is one captured top-level session (one scenario: text, tools, reasoning, MCP,
  compaction, errors, a ``task`` subagent ...) with its subagent sessions. A generated
  session is a run of units, one after another with pauses between them, as if the user
  kept prompting in the same session. A unit that spawned a subagent brings a clone of
  the child session (``parent_id`` set) inside the same time span.
- Ids have OpenCode's shape and order: ``msg_``/``prt_`` are 12 hex digits of
  ``time_ms * 0x1000 + counter`` (low 48 bits) then 14 base62 characters, ascending;
  ``ses_`` ids are the bitwise NOT of that, so newer sessions sort first. A cloned id keeps
  its captured counter and moves by the same time shift as its row.
- Tokens are redrawn per inference (context growing along the session, cache reads and
  writes as the provider reports them, reasoning for reasoning models) and priced with
  list prices; the assistant message and its ``step-finish`` part carry the same figures,
  and the session columns are the sums of the session's own assistant messages, as
  OpenCode keeps them.
- Large tool outputs are clones of the captured ``big_output`` bash part (OpenCode's own
  truncated 2 MB output, 83 KB stored), whole or cut at a line to 40/16/6 KB; how often a
  unit brings one is steered so the database lands near ``--target-gb``.
- Some sessions are forks (``run --fork``): OpenCode copies every message and part under
  new ids (messages keep their time_created, so cross-session totals must dedupe them),
  titles the copy ``… (fork #1)``, and the session columns include the copied costs.
- The ``event`` log (OpenCode's sync events) is left empty: nothing we or the peers
  measure reads it, and it would only double the file.

Deterministic for a seed. Usage::

    python bench/gen_db.py [--sessions 10000] [--parts 1000000] [--days 60] [--seed 7]
                           [--target-gb 3] [--out bench/out/opencode-10k.db]
"""

from __future__ import annotations

import argparse
import hashlib
import heapq
import json
import os
import random
import re
import sqlite3
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ROOT / "samples"
DEFAULT_OUT = ROOT / "bench" / "out" / "opencode-10k.db"

MASK48 = (1 << 48) - 1
DAY_MS = 86_400_000
# The last day of the generated window (UTC midnight ending 2026-11-29, the captures' day).
END_MS = 1_795_910_400_000
BASE62 = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"

# (provider, model, price per million: input, output, cache read, cache write, reasoning?)
MODELS = [
    (("anthropic", "claude-sonnet-4-5", 3.0, 15.0, 0.30, 3.75, False), 55),
    (("anthropic", "claude-opus-4-1", 15.0, 75.0, 1.50, 18.75, False), 5),
    (("anthropic", "claude-haiku-4-5", 1.0, 5.0, 0.10, 1.25, False), 5),
    (("openai", "gpt-5", 1.25, 10.0, 0.125, 0.0, True), 20),
    (("google", "gemini-2.5-pro", 1.25, 10.0, 0.31, 0.0, True), 10),
    (("opencode", "grok-code", 0.0, 0.0, 0.0, 0.0, False), 5),
]
PROJECTS = [
    "api-gateway", "billing", "web-app", "mobile", "infra", "docs", "ml-pipeline",
    "cli", "auth-service", "search", "data-warehouse", "design-system", "etl", "sdk",
    "payments", "notifications", "admin", "analytics", "scheduler", "edge-proxy",
]  # fmt: skip
ADJECTIVES = [
    "brave",
    "calm",
    "eager",
    "gentle",
    "happy",
    "jolly",
    "keen",
    "lucky",
    "mighty",
    "nimble",
    "proud",
    "quiet",
    "swift",
    "tidy",
    "witty",
]  # noqa: E501
NOUNS = [
    "harbor",
    "mountain",
    "river",
    "forest",
    "meadow",
    "canyon",
    "island",
    "garden",
    "comet",
    "falcon",
    "lagoon",
    "panda",
    "otter",
    "cedar",
]  # noqa: E501

# One pattern for everything a clone changes inside a data JSON (checked in this order).
_USAGE_MESSAGE = (
    r'"cost":[-0-9.eE+]+,"tokens":\{"total":\d+,"input":\d+,"output":\d+,"reasoning":\d+,'
    r'"cache":\{"write":\d+,"read":\d+\}\}'
)
_USAGE_PART = (
    r'"tokens":\{"total":\d+,"input":\d+,"output":\d+,"reasoning":\d+,'
    r'"cache":\{"write":\d+,"read":\d+\}\},"cost":[-0-9.eE+]+'
)
TOKEN_RE = re.compile(
    rf"(?P<um>{_USAGE_MESSAGE})|(?P<up>{_USAGE_PART})"
    r"|(?P<id>\b(?:ses|msg|prt)_[0-9a-f]{12}[0-9A-Za-z]{14}\b)"
    r"|(?P<dir>/tmp/oc-capture/[A-Za-z0-9_]+/work)"
    r'|(?P<model>"modelID":"[^"]*")|(?P<provider>"providerID":"[^"]*")'
    r"|(?P<t>(?<![0-9])1\d{12}(?![0-9]))"
)
ANY_ID = re.compile(r"\b(?:ses|msg|prt)_[0-9a-f]{12}[0-9A-Za-z]{14}\b")
ID, TIME, DIR, MODEL, PROVIDER, USAGE_M, USAGE_P = range(7)
KINDS = {"id": ID, "t": TIME, "dir": DIR, "model": MODEL, "provider": PROVIDER}
KINDS.update(um=USAGE_M, up=USAGE_P)


# ---------------------------------------------------------------------------- templates


@dataclass
class Template:
    """A data JSON split at the places a clone changes: str literals and (kind, value)."""

    pieces: tuple
    size: int


def compile_template(data: str, tmin: int, tmax: int) -> Template:
    pieces: list = []
    pos = 0
    for m in TOKEN_RE.finditer(data):
        kind = KINDS[m.lastgroup]
        value: object = m.group()
        if kind == TIME:
            value = int(value)
            if not tmin <= value <= tmax:
                continue
        pieces.append(data[pos : m.start()])
        pieces.append((kind, value))
        pos = m.end()
    pieces.append(data[pos:])
    return Template(tuple(p for p in pieces if p != ""), len(data.encode()))


@dataclass
class MessageT:
    id: str
    session_id: str
    time_created: int
    time_updated: int
    data: Template
    assistant: bool
    priced: bool  # carries a "cost","tokens" block to redraw
    user: bool = False  # a turn: the user's prompt
    # An assistant message whose usage block is written otherwise (1.1's key order) stays
    # as captured: its figures, which the session's columns count as OpenCode's do.
    captured: Captured | None = None


@dataclass
class PartT:
    id: str
    message_id: str
    session_id: str
    time_created: int
    time_updated: int
    data: Template
    step_finish: bool
    big: bool = False


@dataclass
class SessionT:
    row: dict
    messages: list[MessageT]
    parts: list[PartT]
    children: list[SessionT] = field(default_factory=list)
    kind: str = "normal"  # normal | task | big | error | inflight
    ids: list[str] = field(default_factory=list)  # every id the unit names
    n_parts: int = 0
    n_bytes: int = 0
    n_turns: int = 0  # the top-level session's user messages
    start: int = 0
    end: int = 0


def load_units() -> list[SessionT]:
    """Every captured top-level session (but a fork's copy) as a unit, children attached."""
    dbs = sorted(SAMPLES.glob("*/opencode.db"))
    if not dbs:
        raise SystemExit("error: no samples/*/opencode.db to build from (run `make samples`)")
    raw = []
    tmin, tmax = 1 << 62, 0
    for db in dbs:
        conn = sqlite3.connect(f"{db.resolve().as_uri()}?immutable=1", uri=True)
        conn.row_factory = sqlite3.Row
        sessions = [dict(r) for r in conn.execute("SELECT * FROM session ORDER BY time_created")]
        messages = [tuple(r) for r in conn.execute(
            "SELECT id, session_id, time_created, time_updated, data FROM message "
            "ORDER BY time_created, id")]  # fmt: skip
        parts = [tuple(r) for r in conn.execute(
            "SELECT id, message_id, session_id, time_created, time_updated, data FROM part "
            "ORDER BY id")]  # fmt: skip
        conn.close()
        for s in sessions:
            tmin, tmax = min(tmin, s["time_created"]), max(tmax, s["time_updated"])
        for m in messages:
            tmin, tmax = min(tmin, m[2]), max(tmax, m[3])
        for p in parts:
            tmin, tmax = min(tmin, p[3]), max(tmax, p[4])
        raw.append((db.parent.name, sessions, messages, parts))
    tmin, tmax = tmin - 600_000, tmax + 600_000

    units = []
    for name, sessions, messages, parts in raw:
        by_id: dict[str, SessionT] = {}
        for s in sessions:
            msgs = []
            for mid, sid, created, updated, data in messages:
                if sid != s["id"]:
                    continue
                tpl = compile_template(data, tmin, tmax)
                doc = json.loads(data)
                role = doc.get("role")
                priced = any(isinstance(p, tuple) and p[0] == USAGE_M for p in tpl.pieces)
                captured = Captured(doc) if role == "assistant" and not priced else None
                msgs.append(
                    MessageT(
                        mid,
                        sid,
                        created,
                        updated,
                        tpl,
                        role == "assistant",
                        priced,
                        role == "user",
                        captured,
                    )
                )
            prts = []
            for pid, mid, sid, created, updated, data in parts:
                if sid != s["id"]:
                    continue
                tpl = compile_template(data, tmin, tmax)
                kind = json.loads(data).get("type")
                prts.append(PartT(pid, mid, sid, created, updated, tpl, kind == "step-finish"))
            finishes = [p.message_id for p in prts if p.step_finish]
            assert len(finishes) == len(set(finishes)), f"{name}: two step-finish in a message"
            by_id[s["id"]] = SessionT(s, msgs, prts)
        for unit in by_id.values():
            parent = unit.row["parent_id"]
            if parent:
                by_id[parent].children.append(unit)
        for unit in by_id.values():
            if unit.row["parent_id"] or "(fork #" in (unit.row["title"] or ""):
                continue
            everything = [unit, *unit.children]
            unit.n_parts = sum(len(u.parts) for u in everything)
            unit.n_bytes = sum(p.data.size for u in everything for p in u.parts)
            unit.n_turns = sum(m.user for m in unit.messages)
            unit.start = min(unit.row["time_created"], *(m.time_created for m in unit.messages))
            unit.end = max(
                [unit.row["time_updated"]]
                + [m.time_updated for u in everything for m in u.messages]
                + [p.time_updated for u in everything for p in u.parts]
            )
            ids = {unit.row["id"]}
            for u in everything:
                ids.add(u.row["id"])
                ids.update(m.id for m in u.messages)
                ids.update(p.id for p in u.parts)
            unit.ids = sorted(ids)
            if unit.children:
                unit.kind = "task"
            elif any(m.assistant and '"completed"' not in _literal(m.data) for m in unit.messages):
                unit.kind = "inflight"
            elif any(m.assistant and '"error":' in _literal(m.data) for m in unit.messages):
                unit.kind = "error"
            elif any(p.data.size > 20_000 for p in unit.parts):
                unit.kind = "big"
            units.append(unit)
    return units


def _literal(tpl: Template) -> str:
    return "".join(p for p in tpl.pieces if isinstance(p, str))


# Part sizes (``--sizes``): the captured big_output part (83 KB stored) whole, with this
# weight, and cut at a line to these sizes with these weights. The steering in ``pick_unit``
# then brings such a unit as often as the target size needs.
SIZES = {
    # a few large outputs: most of the bytes in parts of 6 KB and more
    "steered": (30, ((40_000, 25), (16_000, 25), (6_000, 20))),
    # many middling outputs (file reads, greps): 2-24 KB, each on one to six overflow pages
    "medium": (4, ((24_000, 10), (12_000, 20), (8_000, 20), (5_000, 20), (3_000, 16), (2_000, 10))),
    # the captured output only, as OpenCode stored it
    "captured": (1, ()),
}


def big_variants(
    unit: SessionT, tmin: int, tmax: int, sizes: str = "steered"
) -> list[tuple[SessionT, int]]:
    """The big_output unit whole, and with its big part cut at a line to ``SIZES[sizes]``."""
    whole, cuts = SIZES[sizes]
    out = [(unit, whole)]
    big = max(unit.parts, key=lambda p: p.data.size)
    original = json.loads(_rebuild(big.data))
    for size, weight in cuts:
        doc = json.loads(json.dumps(original))
        state = doc["state"]
        state["output"] = _cut(state["output"], size // 2)
        if isinstance(state.get("metadata"), dict) and "output" in state["metadata"]:
            state["metadata"]["output"] = _cut(state["metadata"]["output"], size // 2)
        data = json.dumps(doc, separators=(",", ":"), ensure_ascii=False)
        part = PartT(**{**big.__dict__, "data": compile_template(data, tmin, tmax)})
        clone = SessionT(**{**unit.__dict__})
        clone.parts = [part if p is big else p for p in unit.parts]
        clone.n_bytes = unit.n_bytes - big.data.size + part.data.size
        out.append((clone, weight))
    return out


def _cut(text: str, size: int) -> str:
    if len(text) <= size:
        return text
    cut = text.rfind("\n", 0, size)
    return text[: cut if cut > 0 else size]


def _rebuild(tpl: Template) -> str:
    return "".join(p if isinstance(p, str) else str(p[1]) for p in tpl.pieces)


# ---------------------------------------------------------------------------- generation


class Ids:
    """OpenCode's identifiers: 12 hex digits of time and counter, 14 base62 characters."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng

    def suffix(self) -> str:
        n = self.rng.getrandbits(84)
        chars = []
        for _ in range(14):
            n, r = divmod(n, 62)
            chars.append(BASE62[r])
        return "".join(chars)

    def new(self, prefix: str, ms: int, counter: int = 1, descending: bool = False) -> str:
        value = ms * 0x1000 + counter
        if descending:
            value = ~value
        return f"{prefix}_{value & MASK48:012x}{self.suffix()}"

    def shifted(self, old: str, delta_ms: int) -> str:
        """A captured id moved by ``delta_ms``, keeping its counter (and so its order)."""
        prefix, value = old[:3], int(old[4:16], 16)
        step = delta_ms * 0x1000
        value = (value - step) if prefix == "ses" else (value + step)
        return f"{prefix}_{value & MASK48:012x}{self.suffix()}"


@dataclass
class Model:
    provider: str
    id: str
    price: tuple[float, float, float, float]
    reasoning: bool

    @property
    def column(self) -> str:
        return json.dumps(
            {"id": self.id, "providerID": self.provider, "variant": "default"},
            separators=(",", ":"),
        )


class Usage:
    """Token counts for one inference, drawn with the session's context growing."""

    __slots__ = ("input", "output", "reasoning", "cache_read", "cache_write", "cost")

    def __init__(self, rng: random.Random, model: Model, context: list[int], big: bool) -> None:
        fresh = int(rng.lognormvariate(7.0, 0.9)) + (12_000 if big else 0)
        output = min(int(rng.lognormvariate(5.6, 1.0)), 16_000)
        reasoning = (
            int(rng.lognormvariate(6.0, 1.0)) if model.reasoning and rng.random() < 0.6 else 0
        )
        ctx = context[0]
        if model.provider == "anthropic":
            self.input, self.cache_read, self.cache_write = rng.randint(2, 12), ctx, fresh
        elif model.provider in ("openai", "google", "opencode"):
            self.input, self.cache_read, self.cache_write = fresh, ctx, 0
        else:  # pragma: no cover
            self.input, self.cache_read, self.cache_write = ctx + fresh, 0, 0
        self.output, self.reasoning = output, reasoning
        context[0] = min(ctx + fresh + output, 160_000)
        p_in, p_out, p_read, p_write = model.price
        self.cost = (
            self.input * p_in
            + (self.output + self.reasoning) * p_out
            + self.cache_read * p_read
            + self.cache_write * p_write
        ) / 1_000_000

    @property
    def total(self) -> int:
        return self.input + self.output + self.reasoning + self.cache_read + self.cache_write

    def message_json(self) -> str:
        return (
            f'"cost":{self.cost!r},"tokens":{{"total":{self.total},"input":{self.input},'
            f'"output":{self.output},"reasoning":{self.reasoning},'
            f'"cache":{{"write":{self.cache_write},"read":{self.cache_read}}}}}'
        )

    def part_json(self) -> str:
        return (
            f'"tokens":{{"total":{self.total},"input":{self.input},"output":{self.output},'
            f'"reasoning":{self.reasoning},"cache":{{"write":{self.cache_write},'
            f'"read":{self.cache_read}}}}},"cost":{self.cost!r}'
        )


ZERO = None  # marker: a message whose usage block stays as captured


class Captured:
    """A captured assistant message's own figures (``Totals.add`` reads them as a Usage)."""

    __slots__ = ("input", "output", "reasoning", "cache_read", "cache_write", "cost")

    def __init__(self, doc: dict) -> None:
        tokens = doc.get("tokens") or {}
        cache = tokens.get("cache") or {}
        self.cost = float(doc.get("cost") or 0.0)
        self.input, self.output = tokens.get("input", 0), tokens.get("output", 0)
        self.reasoning = tokens.get("reasoning", 0)
        self.cache_read, self.cache_write = cache.get("read", 0), cache.get("write", 0)


class Totals:
    __slots__ = ("cost", "input", "output", "reasoning", "cache_read", "cache_write", "updated")

    def __init__(self) -> None:
        self.cost = 0.0
        self.input = self.output = self.reasoning = self.cache_read = self.cache_write = 0
        self.updated = 0

    def add(self, u: Usage | Captured) -> None:
        self.cost += u.cost
        self.input += u.input
        self.output += u.output
        self.reasoning += u.reasoning
        self.cache_read += u.cache_read
        self.cache_write += u.cache_write


class Writer:
    """Inserts in one transaction, in one of two row orders (``--order``).

    ``grouped``: batched per table, a session's rows one after another (messages and parts
    each in runs of 20,000 rows): every session's rows are neighbours in the file.
    ``interleaved``: every row inserted at its write time, across sessions and tables, as a
    live OpenCode writes them (a subagent's rows among its parent's, sessions that overlap in
    time mixed, message and part pages alternating through the file). The rows wait in a heap
    until ``release(ms)``: the generator calls it with each new top-level session's start, and
    nothing written later is older than that.
    """

    BATCH = 20_000
    _SQL = {
        "message": "INSERT INTO message VALUES (?, ?, ?, ?, ?)",
        "part": "INSERT INTO part VALUES (?, ?, ?, ?, ?, ?)",
    }

    def __init__(
        self, conn: sqlite3.Connection, interleaved: bool = False, spaced: bool = False
    ) -> None:
        self.conn = conn
        self.interleaved = interleaved
        self.spaced = spaced
        self.messages: list[tuple] = []
        self.parts: list[tuple] = []
        self.sessions: list[tuple] = []
        self.n_messages = self.n_parts = self.n_sessions = 0
        self.part_bytes = 0
        self.pending: list[tuple] = []  # (write ms, seq, table, row), a heap
        self.seq = 0
        self.released = 0  # rows older than this were inserted already
        self.late = 0  # rows written after their time had been released (count)

    def _push(self, at: int, table: str, row: tuple) -> None:
        if at < self.released:
            self.late += 1
        self.seq += 1
        heapq.heappush(self.pending, (at, self.seq, table, row))

    def message(self, row: tuple, at: int | None = None) -> None:
        if self.spaced:
            row = (*row[:4], _spaced(row[4]))
        if self.interleaved:
            self._push(row[2] if at is None else at, "message", row)
            return
        self.messages.append(row)
        if len(self.messages) >= self.BATCH:
            self.flush()

    def part(self, row: tuple, at: int | None = None) -> None:
        if self.spaced:
            row = (*row[:5], _spaced(row[5]))
        if self.interleaved:
            self._push(row[3] if at is None else at, "part", row)
            return
        self.parts.append(row)
        if len(self.parts) >= self.BATCH:
            self.flush()

    def session(self, row: tuple, at: int) -> None:
        if self.interleaved:
            self._push(at, "session", row)
            return
        self.sessions.append(row)

    def release(self, before_ms: float) -> None:
        """Insert every waiting row written before ``before_ms``, in write order."""
        pending, pop = self.pending, heapq.heappop
        run: list[tuple] = []
        table = None
        while pending and pending[0][0] < before_ms:
            _, _, kind, row = pop(pending)
            if kind != table:
                self._insert(table, run)
                run, table = [], kind
            run.append(row)
        self._insert(table, run)
        self.released = max(self.released, int(min(before_ms, 1 << 62)))

    def _insert(self, table: str | None, rows: list[tuple]) -> None:
        if not rows:
            return
        if table == "session":
            self._insert_sessions(rows)
            return
        self.conn.executemany(self._SQL[table], rows)
        if table == "message":
            self.n_messages += len(rows)
        else:
            self.n_parts += len(rows)

    def _insert_sessions(self, rows: list[tuple]) -> None:
        cols = SESSION_COLUMNS
        self.conn.executemany(
            f"INSERT INTO session ({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))})", rows
        )
        self.n_sessions += len(rows)

    def flush(self) -> None:
        if self.interleaved:
            self.release(float("inf"))
        c = self.conn
        if self.sessions:
            self._insert_sessions(self.sessions)
            self.sessions.clear()
        if self.messages:
            c.executemany(self._SQL["message"], self.messages)
            self.n_messages += len(self.messages)
            self.messages.clear()
        if self.parts:
            c.executemany(self._SQL["part"], self.parts)
            self.n_parts += len(self.parts)
            self.parts.clear()


SESSION_COLUMNS: tuple[str, ...] = ()


def _spaced(data: str) -> str:
    """``data`` as Python's json.dumps writes it (``", "`` and ``": "``, non-ASCII escaped):
    the same JSON values, the same key order, other bytes (``--json spaced``)."""
    return json.dumps(json.loads(data))


@dataclass
class Session:
    id: str
    parent_id: str | None
    template: dict
    project: tuple[str, str]
    model: Model
    created: int
    title: str
    slug: str
    totals: Totals = field(default_factory=Totals)
    context: list[int] = field(default_factory=lambda: [0])
    rows_m: list[tuple] | None = None  # kept when the session will be forked
    rows_p: list[tuple] | None = None


class Generator:
    def __init__(self, args: argparse.Namespace, conn: sqlite3.Connection) -> None:
        self.args = args
        self.rng = random.Random(args.seed)
        self.ids = Ids(self.rng)
        self.writer = Writer(
            conn, interleaved=args.order == "interleaved", spaced=args.json == "spaced"
        )
        units = load_units()
        tmin = min(u.start for u in units) - 600_000
        tmax = max(u.end for u in units) + 600_000
        self.normal = [u for u in units if u.kind == "normal"]
        self.task = [u for u in units if u.kind == "task"]
        self.error = [u for u in units if u.kind == "error"]
        self.inflight = [u for u in units if u.kind == "inflight"]
        bigs = [u for u in units if u.kind == "big"]
        self.big = [v for u in bigs for v in big_variants(u, tmin, tmax, args.sizes)]
        self.small = sorted(self.normal + self.error, key=lambda u: u.n_parts)
        self.bytes_per_part = (
            args.target_gb * 1e9 * 0.835 / args.parts
        )  # the rest: messages, indexes
        self.part_bytes = 0
        self.parts_done = 0
        self.longest_turns = self.longest_parts = 0
        self.projects = [
            (hashlib.sha1(f"project:{name}".encode()).hexdigest(), f"/home/dev/src/{name}")
            for name in PROJECTS[: args.projects]
        ]
        self.model_choices = [Model(p, m, (a, b, c, d), r) for (p, m, a, b, c, d, r), _ in MODELS]
        self.model_weights = [w for _, w in MODELS]

    # -- choosing units

    def pick_unit(self, remaining_parts: int, want_task: bool) -> SessionT:
        rng = self.rng
        if remaining_parts < 1:
            return self.small[0]
        if remaining_parts < 40:
            fitting = [u for u in self.small if u.n_parts <= remaining_parts]
            return rng.choice(fitting[-3:] if remaining_parts > 8 else fitting[:1])
        if want_task:
            return rng.choice(self.task)
        # Steer towards the target size: a big unit when the bytes are behind.
        behind = self.part_bytes < self.bytes_per_part * (self.parts_done + 30)
        if behind and rng.random() < 0.9:
            units, weights = zip(*self.big, strict=True)
            return rng.choices(units, weights)[0]
        roll = rng.random()
        if roll < 0.03:
            return rng.choice(self.error)
        return rng.choice(self.normal)

    # -- cloning

    def clone_unit(self, unit: SessionT, session: Session, start: int) -> int:
        """Write ``unit`` (and its subagents) into ``session`` from ``start``; its end time."""
        delta = start - unit.start
        idmap = {old: self.ids.shifted(old, delta) for old in unit.ids}
        idmap[unit.row["id"]] = session.id
        self._clone_session(unit, session, delta, idmap)
        for child_t in unit.children:
            child = Session(
                id=idmap[child_t.row["id"]],
                parent_id=session.id,
                template=child_t.row,
                project=session.project,
                model=session.model,
                created=child_t.row["time_created"] + delta,
                title=child_t.row["title"],
                slug=self.slug(),
            )
            self._clone_session(child_t, child, delta, idmap)
            self.write_session(child)
        return unit.end + delta

    def _clone_session(self, t: SessionT, s: Session, delta: int, idmap: dict) -> None:
        rng = self.rng
        dir_ = s.project[1]
        model = f'"modelID":"{s.model.id}"'
        provider = f'"providerID":"{s.model.provider}"'
        usages: dict[str, Usage] = {}
        big_messages = {p.message_id for p in t.parts if p.data.size > 4000}
        w = self.writer
        keep = s.rows_m is not None
        for m in t.messages:
            usage = None
            if m.priced:
                usage = Usage(rng, s.model, s.context, m.id in big_messages)
                usages[m.id] = usage
                s.totals.add(usage)
            elif m.captured is not None:
                s.totals.add(m.captured)
            data = render(m.data, idmap, delta, dir_, model, provider, usage)
            row = (idmap[m.id], s.id, m.time_created + delta, m.time_updated + delta, data)
            w.message(row)
            if keep:
                s.rows_m.append(row)
            s.totals.updated = max(s.totals.updated, m.time_updated + delta)
        for p in t.parts:
            usage = usages.get(p.message_id) if p.step_finish else None
            data = render(p.data, idmap, delta, dir_, model, provider, usage)
            row = (
                idmap[p.id],
                idmap[p.message_id],
                s.id,
                p.time_created + delta,
                p.time_updated + delta,
                data,
            )
            w.part(row)
            if keep:
                s.rows_p.append(row)
            self.part_bytes += len(data)
            self.parts_done += 1

    def slug(self) -> str:
        return f"{self.rng.choice(ADJECTIVES)}-{self.rng.choice(NOUNS)}"

    def write_session(self, s: Session) -> None:
        row = dict(s.template)
        t = s.totals
        row.update(
            id=s.id,
            project_id=s.project[0],
            parent_id=s.parent_id,
            slug=s.slug,
            directory=s.project[1],
            title=s.title,
            cost=t.cost,
            tokens_input=t.input,
            tokens_output=t.output,
            tokens_reasoning=t.reasoning,
            tokens_cache_read=t.cache_read,
            tokens_cache_write=t.cache_write,
            model=s.model.column,
            time_created=s.created,
            time_updated=max(t.updated, s.created),
        )
        self.writer.session(tuple(row[c] for c in SESSION_COLUMNS), s.created)

    # -- sessions

    def fork(self, source: Session, at: int) -> Session:
        """OpenCode's ``--fork``: every message and part copied under new ids at ``at``."""
        fork = Session(
            id=self.ids.new("ses", at, descending=True),
            parent_id=None,
            template=source.template,
            project=source.project,
            model=source.model,
            created=at,
            title=f"{source.title} (fork #1)",
            slug=self.slug(),
        )
        counter = 0
        idmap = {source.id: fork.id}
        for row in source.rows_m:
            counter += 1
            idmap[row[0]] = self.ids.new("msg", at, counter)
        for row in source.rows_p:
            counter += 1
            idmap[row[0]] = self.ids.new("prt", at, counter)
        swap = ANY_ID.sub
        sub = lambda m: idmap.get(m.group(), m.group())  # noqa: E731
        for mid, _sid, created, _updated, data in source.rows_m:
            self.writer.message((idmap[mid], fork.id, created, at, swap(sub, data)), at)
        for pid, mid, _sid, _created, _updated, data in source.rows_p:
            data = swap(sub, data)
            self.writer.part((idmap[pid], idmap[mid], fork.id, at, at, data))
            self.part_bytes += len(data)
            self.parts_done += 1
        ft = fork.totals
        st = source.totals
        for name in ("cost", "input", "output", "reasoning", "cache_read", "cache_write"):
            setattr(ft, name, getattr(st, name))
        ft.updated = at
        fork.context = list(source.context)
        return fork

    def run(self) -> None:
        args, rng = self.args, self.rng
        n_children = round(args.sessions * args.subagent_share)
        n_forks = round(args.sessions * args.fork_share)
        n_top = args.sessions - n_children - n_forks
        start_ms = END_MS - args.days * DAY_MS
        starts = sorted(self.session_start(start_ms, args.days) for _ in range(n_top))
        tasks = [0] * n_top
        for _ in range(n_children):
            tasks[rng.randrange(n_top)] += 1
        forked = set(rng.sample([i for i in range(n_top) if not tasks[i]], n_forks))
        # Parts per session: heavy-tailed, scaled so the quotas add up to the target.
        weights = [min(rng.paretovariate(args.tail_alpha), args.tail_cap) for _ in range(n_top)]
        # The one long session (``--longest-turns``) takes its turns whatever its quota; the
        # others share what it leaves (about 8 parts a turn, as the captures have them).
        longest = n_top // 3 if args.longest_turns else -1
        budget = args.parts
        if longest >= 0:
            weights[longest] = 0.0
            budget = max(args.parts - args.longest_turns * 8, args.parts // 2)
        scale = budget / sum(weights)
        cumulative, running = [], 0.0
        for weight in weights:
            running += weight * scale
            cumulative.append(round(running))
        progress = time.monotonic()
        for index, created in enumerate(starts):
            self.writer.release(created)  # nothing written from here on is older
            # Each session fills up to its cumulative target: overshoot (subagents, forks,
            # a unit bigger than what was left) is taken back from the sessions after it.
            quota = max(1, cumulative[index] + self.longest_parts - self.parts_done)
            before = self.parts_done
            project = self.projects[min(int(rng.expovariate(0.25)), len(self.projects) - 1)]
            model = rng.choices(self.model_choices, self.model_weights)[0]
            session = Session(
                id=self.ids.new("ses", created, descending=True),
                parent_id=None,
                template={},
                project=project,
                model=model,
                created=created,
                title="",
                slug=self.slug(),
            )
            if index in forked:
                session.rows_m, session.rows_p = [], []
            session.context[0] = rng.randint(9_000, 14_000)  # system prompt and tools
            at = created + rng.randint(50, 400)
            tasks_left = tasks[index]
            first = True
            turns = 0
            while True:
                remaining_global = args.parts - self.parts_done - self.reserve(index, n_top)
                left = quota - (self.parts_done - before)
                if index == longest:
                    if turns >= args.longest_turns and not tasks_left:
                        break
                    left = remaining_global = 1 << 30
                if not first and (left <= 0 and not tasks_left):
                    break
                if not first and remaining_global <= 0 and not tasks_left:
                    break  # a session takes at least one unit: its row is the unit's
                want_task = tasks_left > 0 and (left < 30 or rng.random() < 0.25)
                unit = self.pick_unit(remaining_global if not want_task else 1 << 30, want_task)
                if unit.kind == "task":
                    tasks_left -= 1
                if first:
                    session.template = unit.row
                    session.title = unit.row["title"]
                    first = False
                if rng.random() < 0.01 and left < 20 and not tasks_left and remaining_global > 40:
                    unit = rng.choice(self.inflight)  # interrupted, the session's last turn
                    at = self.clone_unit(unit, session, at)
                    break
                at = self.clone_unit(unit, session, at)
                turns += unit.n_turns
                at += int(rng.expovariate(1 / 180_000)) + 5_000  # the user reads, then types
            if index == longest:
                self.longest_turns, self.longest_parts = turns, self.parts_done - before
            self.write_session(session)
            if index in forked:
                fork_at = at + int(rng.expovariate(1 / 3_600_000)) + 60_000
                fork = self.fork(session, fork_at)
                session.rows_m = session.rows_p = None
                at2 = fork_at + rng.randint(2_000, 30_000)
                for _ in range(rng.randint(1, 3)):
                    remaining_global = args.parts - self.parts_done - self.reserve(index, n_top)
                    if remaining_global <= 0:
                        break
                    unit = self.pick_unit(remaining_global, False)
                    at2 = self.clone_unit(unit, fork, at2) + rng.randint(5_000, 600_000)
                self.write_session(fork)
            if time.monotonic() - progress > 5:
                progress = time.monotonic()
                print(
                    f"  {index + 1}/{n_top} sessions, {self.parts_done:,} parts, "
                    f"{self.part_bytes / 1e9:.2f} GB",
                    file=sys.stderr,
                )
        self.writer.flush()

    def reserve(self, index: int, n_top: int) -> int:
        """Parts kept back so every later session gets at least a small unit."""
        return (n_top - index - 1) * 2

    def session_start(self, start_ms: int, days: int) -> int:
        rng = self.rng
        while True:
            day = rng.randrange(days)
            weekday = time.gmtime((start_ms + day * DAY_MS) / 1000).tm_wday
            if weekday >= 5 and rng.random() < 0.7:
                continue  # quieter weekends
            break
        hour = min(max(rng.gauss(14, 3.5), 0), 23.99)
        return start_ms + day * DAY_MS + int(hour * 3_600_000) + rng.randrange(60_000)


def render(tpl: Template, idmap, delta, dir_, model, provider, usage) -> str:
    out = []
    for p in tpl.pieces:
        if p.__class__ is str:
            out.append(p)
            continue
        kind, value = p
        if kind == ID:
            out.append(idmap.get(value, value))
        elif kind == TIME:
            out.append(str(value + delta))
        elif kind == DIR:
            out.append(dir_)
        elif kind == MODEL:
            out.append(model)
        elif kind == PROVIDER:
            out.append(provider)
        elif kind == USAGE_M:
            out.append(usage.message_json() if usage is not None else value)
        else:
            out.append(usage.part_json() if usage is not None else value)
    return "".join(out)


# ---------------------------------------------------------------------------- database


def create_schema(out: Path) -> tuple[sqlite3.Connection, list[str]]:
    """A copy of a real capture's schema and migration rows, empty, secondary indexes off."""
    global SESSION_COLUMNS
    source = sqlite3.connect(
        f"{(SAMPLES / 'text' / 'opencode.db').resolve().as_uri()}?immutable=1", uri=True
    )  # noqa: E501
    for suffix in ("", "-wal", "-shm", "-journal"):
        Path(f"{out}{suffix}").unlink(missing_ok=True)
    conn = sqlite3.connect(out, isolation_level=None)
    source.backup(conn)
    source.close()
    conn.execute("PRAGMA journal_mode = OFF")
    conn.execute("PRAGMA synchronous = OFF")
    conn.execute("PRAGMA cache_size = -1000000")
    conn.execute("PRAGMA temp_store = MEMORY")
    tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
    conn.execute("BEGIN")
    for table in tables:
        if table != "migration":
            conn.execute(f'DELETE FROM "{table}"')
    conn.execute("COMMIT")
    indexes = [
        (name, sql)
        for name, sql in conn.execute(
            "SELECT name, sql FROM sqlite_master WHERE type = 'index' AND sql IS NOT NULL"
        )
    ]
    for name, _ in indexes:
        conn.execute(f'DROP INDEX "{name}"')
    conn.execute("VACUUM")
    SESSION_COLUMNS = tuple(r[1] for r in conn.execute("PRAGMA table_info(session)"))
    return conn, [sql for _, sql in indexes]


def write_projects(conn: sqlite3.Connection, projects: list[tuple[str, str]]) -> None:
    created = END_MS - 90 * DAY_MS
    conn.executemany(
        "INSERT INTO project (id, worktree, vcs, name, time_created, time_updated, sandboxes) "
        "VALUES (?, ?, 'git', NULL, ?, ?, '[]')",
        [(pid, d, created, END_MS) for pid, d in projects],
    )
    conn.executemany(
        "INSERT INTO project_directory (project_id, directory, time_created) VALUES (?, ?, ?)",
        [(pid, d, created) for pid, d in projects],
    )


# Named shapes (``--shape``): each a set of defaults for the options below; an option given
# on the command line wins. ``bench`` is the shape `make bench` has always measured.
SHAPES: dict[str, dict] = {
    "bench": {},
    # the same rows, inserted as a live OpenCode writes them
    "interleaved": {"order": "interleaved"},
    # many middling tool outputs instead of a few large ones
    "medium": {"sizes": "medium"},
    # the database of issue 21's report: 6 projects, a fifth of the sessions subagents, one
    # session of 457 turns, rows in write order
    "field": {
        "projects": 6,
        "subagent_share": 0.2,
        "longest_turns": 457,
        "order": "interleaved",
    },
    # the rows' JSON re-written by a generator that edits it as objects (json.dumps)
    "spaced": {"json": "spaced"},
    # all of it, and middling outputs too
    "field-medium": {
        "projects": 6,
        "subagent_share": 0.2,
        "longest_turns": 457,
        "order": "interleaved",
        "sizes": "medium",
    },
}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shape", choices=sorted(SHAPES), default="bench")
    ap.add_argument("--sessions", type=int, default=10_000)
    ap.add_argument("--parts", type=int, default=1_000_000)
    ap.add_argument("--days", type=int, default=60)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--target-gb", type=float, default=3.0)
    ap.add_argument("--subagent-share", type=float, default=0.15)
    ap.add_argument("--fork-share", type=float, default=0.01)
    ap.add_argument("--projects", type=int, default=len(PROJECTS), choices=range(1, 21))
    ap.add_argument("--tail-alpha", type=float, default=1.6, help="Pareto shape of parts a session")
    ap.add_argument("--tail-cap", type=float, default=60.0, help="the largest session, × the least")
    ap.add_argument("--longest-turns", type=int, default=0, help="one session of this many turns")
    ap.add_argument("--order", choices=("grouped", "interleaved"), default="grouped")
    ap.add_argument("--sizes", choices=sorted(SIZES), default="steered")
    ap.add_argument(
        "--json",
        choices=("opencode", "spaced"),
        default="opencode",
        help="data JSON as OpenCode writes it, or as Python's json.dumps does",
    )
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    shape = ap.parse_known_args(argv)[0].shape
    ap.set_defaults(**SHAPES[shape])
    return ap.parse_args(argv)


SHAPE_KEYS = ("projects", "subagent_share", "tail_alpha", "tail_cap", "longest_turns", "order")


def main() -> None:
    args = parse_args()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    tmp = args.out.with_name(args.out.name + ".partial")
    began = time.perf_counter()

    conn, index_sql = create_schema(tmp)
    gen = Generator(args, conn)
    conn.execute("BEGIN")
    write_projects(conn, gen.projects)
    gen.run()
    conn.execute("COMMIT")
    inserted = time.perf_counter() - began
    print(f"  rows written in {inserted:.0f} s; building indexes", file=sys.stderr)
    for sql in index_sql:
        conn.execute(sql)
    conn.execute("PRAGMA journal_mode = WAL")  # as OpenCode leaves its file
    conn.close()
    for suffix in ("-wal", "-shm"):
        Path(f"{tmp}{suffix}").unlink(missing_ok=True)
    os.replace(tmp, args.out)
    elapsed = time.perf_counter() - began
    w = gen.writer
    manifest = {
        "path": str(args.out),
        "sessions": w.n_sessions,
        "subagent_sessions": round(args.sessions * args.subagent_share),
        "forks": round(args.sessions * args.fork_share),
        "messages": w.n_messages,
        "parts": w.n_parts,
        "part_data_gb": round(gen.part_bytes / 1e9, 3),
        "size_gb": round(args.out.stat().st_size / 1e9, 3),
        "days": args.days,
        "seed": args.seed,
        "target_gb": args.target_gb,
        "shape": args.shape,
        **{key: getattr(args, key) for key in (*SHAPE_KEYS, "sizes", "json")},
        "longest_session_turns": gen.longest_turns,
        "rows_out_of_write_order": w.late,
        "seconds": round(elapsed, 1),
        "generator": hashlib.sha1(Path(__file__).read_bytes()).hexdigest()[:12],
    }
    args.out.with_suffix(".json").write_text(json.dumps(manifest, indent=2) + "\n")
    print(json.dumps(manifest, indent=2))


if __name__ == "__main__":
    main()
