"""Context by source: what fills a session's context window, and what it costs (seed 002).

The ledger
----------
A session is read in ``(time_created, id)`` order. Each assistant message is one inference:
its prompt is ``input + cache read + cache write`` tokens (OpenCode's ``input`` excludes
cache reads). Everything a message adds to the conversation is *pending* until the next
inference carries it:

- a user message: its text parts (synthetic ones too, ``ignored`` ones not) → ``user``;
- an assistant message: its own text, reasoning and tool-call arguments → ``assistant``, and
  each tool part's result (output, or error text; a pruned one in full until it was pruned,
  ``state.time.compacted``) → ``tool:<name>``, or ``mcp:<server>`` when the name belongs to a
  configured MCP server (``mcp.mcp_server_of``).

Each inference's prompt is split into sources, in whole tokens that add up exactly to it:

- **The first inference** (of a session, or after a reset with no base): the pending pieces
  are estimated at one token per 4 UTF-8 bytes (rounded up); whatever of the prompt they do
  not explain is ``system`` (system prompt and tool definitions). If the estimate exceeds
  the prompt, the prompt is split over the pieces by size and ``system`` gets 0.
- **Later inferences**: the growth over the previous prompt is split over what was added
  since, in proportion to the pieces' sizes (UTF-8 bytes), with a largest-remainder rounding.
  Growth with nothing measurable added (only empty pieces, or none) goes to ``other``.
- **A prune**: at the first inference after a result was pruned (OpenCode sends its
  placeholder from then on), its source gives back its share by bytes, before the growth.
- **Negative growth** (the prompt shrank without a compaction or prune: a smaller system
  prompt, a provider that counts differently): every source already in the context shrinks
  in proportion to its tokens so that they sum to the new prompt; what was pending gets
  nothing and is dropped.
- An assistant message with no prompt tokens (a failed or aborted request) is not an
  inference: what was pending stays pending, and its own parts are added after it.

Compaction: a user message with a ``compaction`` part followed by an assistant message with
``summary: true`` and mode ``compaction`` resets the ledger after that reply. The inference
after it is a first inference again: its pieces are the summary (``compaction``, at the
reply's output tokens), the messages kept verbatim from the compaction part's
``tail_start_id`` and what came since; the rest of its prompt is ``system``. (The compaction
reply's own prompt is the summarizer's: a short system prompt of its own, no tools, the
conversation flattened; none of it says how large the agent's system prompt is.) The
compaction inference itself is an ordinary inference.

Cost
----
OpenCode's per-message ``cost`` is one total. With the model's price (see ``PriceBook``) the
message's token classes are priced the way OpenCode prices them (input, cache read, cache
write; output and reasoning at the output price; context tiers and ``context_over_200k`` by
the prompt size), then scaled by one factor so that they add up to OpenCode's figure. The
prompt side is charged to sources: cache reads are served from what the previous
inference already had (the oldest part of the prompt), in proportion to its sources, then
from the new pieces; the rest of the prompt pays the blended input/cache-write rate. The
output side (output + reasoning tokens) is the ``output`` cost, not a context source. A
message whose model has no price (or whose price is all zero while OpenCode charged
something) is not split: sources that took tokens from it get no cost (``None``), never a
guess. A cost computed here (a share, or a sum of shares) is written to 12 significant digits,
as ``usage`` and ``metrics`` write a sum of OpenCode's costs (``core.figures.summed_cost``):
its last digits are binary-fraction noise (0.011984999999999999 for 0.011985), and no bill
has them.
The report's ``cost``, OpenCode's figures of the session and its subagents, is written by the
one rule of a session's spend (``spend.written_spend``), as ``sessions`` and ``usage`` write it.

Subagents: each child session has its own ledger; folding adds the child's costs to the
parent's rows by the same source names (a child's ``tool:bash`` adds to ``tool:bash``), and
its inferences to the list. Token counts and shares stay those of the session's own last
inference, so a source only a subagent used shows 0 tokens and a cost.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from functools import lru_cache
from pathlib import Path
from typing import Any, NamedTuple

import msgspec
from msgspec import Raw, Struct

from .. import paths
from ..core.figures import SUM_DIGITS, cost_value, model_label, read_figures, summed_cost
from ..core.views import (
    LedgerMessageView,
    LedgerPart,
    decode_repairing,
)
from ..store.rows import descendants
from .cache import ReportCache
from .mcp import config_files, mcp_server_names, mcp_server_of, read_json_file
from .spend import written_spend

__all__ = [
    "Addition",
    "Prune",
    "LedgerMessage",
    "Inference",
    "SessionLedger",
    "SourceRow",
    "ContextReport",
    "Price",
    "PriceBook",
    "apportion",
    "build_ledger",
    "catalogue_files",
    "price_files",
    "load_prices",
    "read_session",
    "context_report",
    "BYTES_PER_TOKEN",
    "PRUNED_OUTPUT",
]

BYTES_PER_TOKEN = 4  # the first inference's estimate of the pieces it carries
PRUNED_OUTPUT = "[Old tool result content cleared]"  # what OpenCode sends for a pruned result

SYSTEM, USER, ASSISTANT, OTHER, COMPACTION = "system", "user", "assistant", "other", "compaction"


# ------------------------------------------------------------------------ arithmetic


def apportion(total: int, weights: Sequence[int]) -> list[int]:
    """``total`` split in proportion to ``weights``, in integers that add up to it.

    Largest remainder: each share is rounded down, and the units left over go to the
    largest fractional remainders (ties to the earlier weight). All-zero weights get 0.
    """
    weight = sum(weights)
    if total <= 0 or weight <= 0:
        return [0] * len(weights)
    shares = [total * w // weight for w in weights]
    left = total - sum(shares)
    if left:
        order = sorted(range(len(weights)), key=lambda i: (-(total * weights[i] % weight), i))
        for index in order[:left]:
            shares[index] += 1
    return shares


def _split(total: int, pieces: Mapping[str, int]) -> dict[str, int]:
    names = list(pieces)
    return dict(zip(names, apportion(total, [pieces[n] for n in names]), strict=True))


def _float(value: Any) -> float:
    """A price from a config file or the models catalogue: a finite number, else 0."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return 0.0
    try:
        value = float(value)
    except OverflowError:  # an integer beyond any float
        return 0.0
    return value if math.isfinite(value) else 0.0


def _written(cost: float) -> float:
    """A computed cost as it is written: to ``SUM_DIGITS`` significant digits."""
    return float(f"{cost:.{SUM_DIGITS}g}")


def _size(text: Any) -> int:
    if not isinstance(text, str):
        return 0
    return len(text.encode("utf-8", "surrogatepass"))


# ------------------------------------------------------------------------ prices


class Price(NamedTuple):
    """US dollars per million tokens, as OpenCode's model ``cost`` gives them."""

    input: float = 0.0
    output: float = 0.0
    cache_read: float = 0.0
    cache_write: float = 0.0
    over_200k: Price | None = None
    tiers: tuple[tuple[int, Price], ...] = ()  # (context size, price), as OpenCode's ``tiers``

    def for_prompt(self, prompt_tokens: int) -> Price:
        """The price OpenCode applies at this prompt size (tiers, then over 200k)."""
        above = [(size, price) for size, price in self.tiers if prompt_tokens > size]
        if above:
            return max(above, key=lambda item: item[0])[1]
        if self.over_200k is not None and prompt_tokens > 200_000:
            return self.over_200k
        return self


def _price(cost: Any) -> Price | None:
    """A ``Price`` from a config or catalogue ``cost`` object (missing fields are 0)."""
    if not isinstance(cost, dict):
        return None
    tiers = []
    tiers_given = cost.get("tiers")
    for tier in tiers_given if isinstance(tiers_given, list) else ():
        if isinstance(tier, dict) and isinstance(tier.get("tier"), dict):
            size = tier["tier"].get("size")
            price = _price({k: v for k, v in tier.items() if k != "tier"})
            if tier["tier"].get("type") == "context" and price and _float(size) > 0:
                tiers.append((int(_float(size)), price))
    over = cost.get("context_over_200k")
    return Price(
        input=_float(cost.get("input")),
        output=_float(cost.get("output")),
        cache_read=_float(cost.get("cache_read")),
        cache_write=_float(cost.get("cache_write")),
        over_200k=_price(over) if isinstance(over, dict) else None,
        tiers=tuple(tiers),
    )


@lru_cache(maxsize=64)
def _model_costs(path: str, mtime_ns: int, catalogue: bool) -> dict[tuple[str, str], dict]:
    """(provider, model) → the raw ``cost`` object in one config or catalogue file."""
    document = read_json_file(path)
    if catalogue:
        providers = document
    else:  # a config that is JSON but not an object holds no providers
        providers = document.get("provider") if isinstance(document, dict) else None
    found: dict[tuple[str, str], dict] = {}
    if not isinstance(providers, dict):
        return found
    for provider_id, provider in providers.items():
        models = provider.get("models") if isinstance(provider, dict) else None
        if not isinstance(models, dict):
            continue
        for model_id, model in models.items():
            cost = model.get("cost") if isinstance(model, dict) else None
            if isinstance(cost, dict):
                found[(provider_id, model_id)] = cost
    return found


def _costs_in(path: Path, catalogue: bool) -> dict[tuple[str, str], dict]:
    try:
        stat = path.stat()
    except OSError:
        return {}
    if not path.is_file():
        return {}
    return _model_costs(str(path), stat.st_mtime_ns, catalogue)


class PriceBook:
    """Model prices from what OpenCode itself knows, never guessed.

    ``catalogues``: OpenCode's cached models catalogue (models.dev's shape,
    ``{providerID: {models: {modelID: {cost}}}}``); the first file naming a model wins.
    ``configs``: config files in merge order (later wins); their
    ``provider.<id>.models.<model>.cost`` is merged over the catalogue field by field, as
    OpenCode merges its config over models.dev.
    """

    def __init__(self, configs: Sequence[Path] = (), catalogues: Sequence[Path] = ()) -> None:
        merged: dict[tuple[str, str], dict] = {}
        for path in reversed(list(catalogues)):
            merged.update(_costs_in(Path(path), catalogue=True))
        for path in configs:
            for key, cost in _costs_in(Path(path), catalogue=False).items():
                merged[key] = {**merged.get(key, {}), **cost}
        self._costs = merged
        self._prices: dict[tuple[str, str], Price | None] = {}

    def __call__(self, provider_id: str | None, model_id: str | None) -> Price | None:
        """The price of a model, or None when OpenCode's files do not price it."""
        if not isinstance(provider_id, str) or not isinstance(model_id, str):
            return None
        key = (provider_id, model_id)
        if key not in self._prices:
            self._prices[key] = _price(self._costs.get(key))
        return self._prices[key]

    def __len__(self) -> int:
        return len(self._costs)


def catalogue_files(env: Mapping[str, str] | None = None) -> list[Path]:
    """OpenCode's cached models catalogue: ``$XDG_CACHE_HOME/opencode/models.json``.

    OpenCode 1.18 writes ``models.json`` for its default source (models.opencode.ai) and
    ``models-<hash>.json`` when ``OPENCODE_MODELS_URL`` names another; those come after.
    """
    cache = paths.cache_home(env)
    files = [cache / "models.json"]
    with contextlib.suppress(OSError):
        files += sorted(cache.glob("models-*.json"))
    return files


def price_files(directory: str | None, env: Mapping[str, str] | None = None) -> list[Path]:
    """The config files that may price a model, in OpenCode's merge order (later wins).

    The same files ``mcp`` reads (seed 002), ordered global, ``$OPENCODE_CONFIG``, project
    files from the outermost folder to the session's own, ``.opencode/`` folders likewise,
    then ``~/.opencode``.
    """
    files = config_files(directory, env)
    named_count = 1 if paths.named_config(env) is not None else 0
    global_files, named, rest = files[:3], files[3 : 3 + named_count], files[3 + named_count :]
    home_files, project = rest[-2:], rest[:-2]
    plain = [p for p in project if p.parent.name != ".opencode"]
    dotted = [p for p in project if p.parent.name == ".opencode"]

    def outermost_first(paths: list[Path]) -> list[Path]:
        # config_files lists each folder nearest first, .jsonc before .json
        groups: dict[Path, list[Path]] = {}
        for path in paths:
            groups.setdefault(path.parent, []).append(path)
        ordered: list[Path] = []
        for folder in reversed(list(groups)):
            ordered += sorted(groups[folder], key=lambda p: p.suffix == ".jsonc")
        return ordered

    return global_files + named + outermost_first(plain) + outermost_first(dotted) + home_files


def load_prices(directory: str | None, env: Mapping[str, str] | None = None) -> PriceBook:
    """The price book for a session run in ``directory``: its config files and the catalogue."""
    return PriceBook(price_files(directory, env), catalogue_files(env))


PriceLookup = Callable[[str | None, str | None], Price | None]


# ------------------------------------------------------------------------ ledger input


class Addition(NamedTuple):
    """One piece a message adds to the next prompt: its source and its size in bytes."""

    source: str
    size: int


class Prune(NamedTuple):
    """A tool result OpenCode pruned at ``at`` (ms): sent in full before, the placeholder after."""

    source: str
    at: int
    removed: int  # bytes: the full result minus the placeholder


class LedgerMessage(Struct, kw_only=True):
    """What the ledger needs of one message (built from store rows, or directly in tests)."""

    id: str
    role: str  # "user" or "assistant"; anything else is ignored
    session_id: str = ""
    time: int | None = None  # time_created
    additions: list[Addition] = []
    # assistant
    input: int = 0
    output: int = 0
    reasoning: int = 0
    cache_read: int = 0
    cache_write: int = 0
    cost: float = 0.0
    provider_id: str | None = None
    model_id: str | None = None
    parent_id: str | None = None
    summary: bool = False
    mode: str | None = None
    error: bool = False
    summary_size: int = 0  # bytes of the summary text (a compaction reply)
    # user
    compaction: bool = False  # holds a compaction part
    tail_start_id: str | None = None
    prunes: list[Prune] = []  # its tool results pruned later (``state.time.compacted``)

    @property
    def prompt_tokens(self) -> int:
        return self.input + self.cache_read + self.cache_write


# ------------------------------------------------------------------------ ledger output


class Inference(Struct, kw_only=True):
    """One inference: its prompt by source, what was added, and its cost by source."""

    session_id: str
    message_id: str
    time: int | None
    model: str | None
    prompt_tokens: int
    input_tokens: int
    output_tokens: int
    reasoning_tokens: int
    cache_read_tokens: int
    cache_write_tokens: int
    cost: float  # OpenCode's figure for the message
    sources: dict[str, int]  # the whole prompt, by source; adds up to prompt_tokens
    added: dict[str, int]  # growth since the previous inference, by source (may be empty)
    source_costs: dict[str, float] | None  # prompt-side cost by source; None: no price
    output_cost: float | None
    compaction: bool = False  # a compaction reply (the ledger resets after it)
    undone: bool = False  # undone by a pending /undo, counted as OpenCode counts it (undone)


class SessionLedger(Struct, kw_only=True):
    session_id: str
    inferences: list[Inference] = []
    # messages that are not inferences (no prompt tokens): their output side
    other_output_tokens: int = 0
    other_output_cost: float = 0.0
    other_output_priced: bool = True
    unpriced: list[str] = []  # provider/model of messages that could not be split


def _model_name(message: LedgerMessage) -> str | None:
    return model_label(message.provider_id, message.model_id, missing=None)


def _merge(pieces: Iterable[Addition]) -> dict[str, int]:
    merged: dict[str, int] = {}
    for source, size in pieces:
        merged[source] = merged.get(source, 0) + max(0, size)
    return merged


def _first_prompt(prompt: int, pending: list[Addition]) -> dict[str, int]:
    """The first inference: pieces at 4 bytes a token, the rest is the system prompt."""
    sizes = _merge(pending)
    estimates = {s: -(-size // BYTES_PER_TOKEN) for s, size in sizes.items()}
    estimated = sum(estimates.values())
    if estimated > prompt:
        return _split(prompt, sizes)
    added = {SYSTEM: prompt - estimated}
    for source, tokens in estimates.items():
        added[source] = added.get(source, 0) + tokens
    return added


def _grow(growth: int, pending: list[Addition]) -> dict[str, int]:
    sizes = _merge(pending)
    if growth <= 0:
        return {}
    if sum(sizes.values()) <= 0:
        return {OTHER: growth}
    return _split(growth, sizes)


def _costs(
    message: LedgerMessage,
    old: dict[str, int],
    new: dict[str, int],
    price: Price | None,
) -> tuple[dict[str, float] | None, float | None]:
    """OpenCode's cost of one message, split into prompt-side cost by source and output."""
    sources = list(dict.fromkeys([*old, *new]))
    if price is None:
        if message.cost == 0:  # nothing charged: nothing to split, whatever the price
            return dict.fromkeys(sources, 0.0), 0.0
        return None, None
    prompt = message.prompt_tokens
    p = price.for_prompt(prompt)
    raw_input = message.input * p.input
    raw_read = message.cache_read * p.cache_read
    raw_write = message.cache_write * p.cache_write
    raw_output = (message.output + message.reasoning) * p.output
    raw = raw_input + raw_read + raw_write + raw_output
    if not math.isfinite(raw):  # a price so large the products overflow: no split
        return None, None
    if raw <= 0:
        if message.cost != 0:
            return None, None  # priced at nothing, yet OpenCode charged: cannot split
        return dict.fromkeys(sources, 0.0), 0.0
    factor = message.cost / raw
    if not math.isfinite(factor):  # a price so small (subnormal) the ratio overflows
        return None, None
    # Cache reads come from the oldest part of the prompt: what the context had before.
    read = message.cache_read
    from_old = min(read, sum(old.values()))
    cached = dict(zip(old, apportion(from_old, list(old.values())), strict=True))
    if read > from_old:
        for source, tokens in _split(read - from_old, new).items():
            cached[source] = cached.get(source, 0) + tokens
    uncached_tokens = message.input + message.cache_write
    rate = (raw_input + raw_write) / uncached_tokens if uncached_tokens else 0.0
    costs: dict[str, float] = {}
    for source in sources:
        total = old.get(source, 0) + new.get(source, 0)
        hit = cached.get(source, 0)
        costs[source] = _written(factor * (hit * p.cache_read + (total - hit) * rate))
    return costs, _written(factor * raw_output)


def _message_additions(message: LedgerMessage) -> list[Addition]:
    return list(message.additions)


def build_ledger(
    messages: Iterable[LedgerMessage],
    price_of: PriceLookup = lambda provider, model: None,
    *,
    session_id: str = "",
) -> SessionLedger:
    """The ledger of one session's messages, in the order given (``time_created``)."""
    ledger = SessionLedger(session_id=session_id, inferences=[], unpriced=[])
    context: dict[str, int] = {}
    pending: list[Addition] = []
    epoch: list[LedgerMessage] = []  # messages since the last reset, for a kept tail
    compaction_users: dict[str, LedgerMessage] = {}
    last_user: LedgerMessage | None = None
    pending_prunes: list[Prune] = []  # of the pieces pending
    carried_prunes: list[Prune] = []  # of pieces in the context, not yet applied
    carried_bytes: dict[str, int] = {}  # bytes of the pieces each source holds
    for message in messages:
        if message.role == "user":
            pending += _message_additions(message)
            pending_prunes += message.prunes
            epoch.append(message)
            last_user = message
            if message.compaction:
                compaction_users[message.id] = message
            continue
        if message.role != "assistant":
            continue
        prompt = message.prompt_tokens
        price = price_of(message.provider_id, message.model_id)
        if prompt <= 0:
            # Not an inference: nothing was read. Any output it was charged for is output.
            _, output_cost = _costs(message, {}, {}, price)
            ledger.other_output_tokens += message.output + message.reasoning
            if output_cost is None:
                # a reply of no tokens and no cost (a failed attempt) has nothing to price
                if message.cost or message.output or message.reasoning:
                    ledger.other_output_priced = False
                    _note(ledger, message)
            else:
                ledger.other_output_cost += output_cost
            pending += _message_additions(message)
            pending_prunes += message.prunes
            epoch.append(message)
            continue
        if context and message.time is not None:
            # Pruned since the previous inference: those results left the prompt (OpenCode
            # sends the placeholder now); their sources give back what the results held.
            due = [p for p in carried_prunes if p.at <= message.time]
            carried_prunes = [p for p in carried_prunes if p.at > message.time]
            for prune in due:
                # the source's tokens scale with the bytes it carries
                held, carried = context.get(prune.source, 0), carried_bytes.get(prune.source, 0)
                removed = min(prune.removed, carried)
                if carried > 0:
                    context[prune.source] = held - round(held * removed / carried)
                    carried_bytes[prune.source] = carried - removed
        carried_prunes += pending_prunes
        pending_prunes = []
        if not context:
            old: dict[str, int] = {}
            added = _first_prompt(prompt, pending)
        else:
            growth = prompt - sum(context.values())
            if growth >= 0:
                old = dict(context)
                added = _grow(growth, pending)
            else:
                old = _split(prompt, context)
                added = {}
        if added:
            for source, size in _merge(pending).items():
                carried_bytes[source] = carried_bytes.get(source, 0) + size
        context = dict(old)
        for source, tokens in added.items():
            context[source] = context.get(source, 0) + tokens
        context = {s: t for s, t in context.items() if t > 0}
        costs, output_cost = _costs(message, old, added, price)
        if costs is None:
            _note(ledger, message)
        compaction_user = compaction_users.get(message.parent_id or "") or (
            last_user if last_user is not None and last_user.compaction else None
        )
        is_compaction = (
            message.summary is True
            and message.mode == "compaction"
            and compaction_user is not None
            and not message.error
        )
        ledger.inferences.append(
            Inference(
                session_id=message.session_id or session_id,
                message_id=message.id,
                time=message.time,
                model=_model_name(message),
                prompt_tokens=prompt,
                input_tokens=message.input,
                output_tokens=message.output,
                reasoning_tokens=message.reasoning,
                cache_read_tokens=message.cache_read,
                cache_write_tokens=message.cache_write,
                cost=message.cost,
                sources=dict(context),
                added={s: t for s, t in added.items() if t > 0},
                source_costs=costs,
                output_cost=output_cost,
                compaction=is_compaction,
            )
        )
        if is_compaction and compaction_user is not None:
            # A first inference again: the summarizer's prompt had its own system prompt
            # and no tools, so the agent's is measured afresh from the next prompt.
            summary = message.output * BYTES_PER_TOKEN or message.summary_size
            context = {}
            epoch = _tail(epoch, compaction_user)
            pending = [Addition(COMPACTION, summary)]
            pending += [piece for kept in epoch for piece in kept.additions]
            carried_prunes, carried_bytes = [], {}
            pending_prunes = [p for kept in epoch for p in kept.prunes]
            compaction_users.clear()
            last_user = None
            continue
        pending = _message_additions(message)
        pending_prunes = list(message.prunes)
        epoch.append(message)
    return ledger


def _tail(epoch: list[LedgerMessage], compaction_user: LedgerMessage) -> list[LedgerMessage]:
    """The messages kept verbatim by a compaction: from ``tail_start_id`` to the compaction."""
    start = compaction_user.tail_start_id
    if not start:
        return []
    ids = [m.id for m in epoch]
    if start not in ids:
        return []
    end = ids.index(compaction_user.id) if compaction_user.id in ids else len(epoch)
    return epoch[ids.index(start) : end]


def _note(ledger: SessionLedger, message: LedgerMessage) -> None:
    name = _model_name(message) or "unknown model"
    if name not in ledger.unpriced:
        ledger.unpriced.append(name)


# ------------------------------------------------------------------------ reading the store


_PART = msgspec.json.Decoder(LedgerPart)
_MESSAGE = msgspec.json.Decoder(LedgerMessageView)


def _json_size(raw: Raw) -> int:
    """Bytes of a JSON value written compactly (the stored spacing does not count)."""
    if not len(raw):
        return 0
    try:
        return len(msgspec.json.encode(msgspec.json.decode(raw)))
    except (msgspec.DecodeError, RecursionError, TypeError, ValueError):
        return len(raw)


def _tool_source(tool: Any, servers: Sequence[str]) -> str:
    name = tool if isinstance(tool, str) and tool else "unknown"
    server = mcp_server_of(name, servers) if servers else None
    return f"mcp:{server}" if server else f"tool:{name}"


def _part_additions(part: LedgerPart, role: str, servers: Sequence[str]) -> list[Addition]:
    kind = part.type
    if role == "user":
        if kind == "text" and part.ignored is not True:
            return [Addition(USER, _size(part.text))]
        if kind == "subtask":
            return [Addition(USER, _size(part.prompt))]
        if kind == "agent":
            return [Addition(USER, _size(part.name))]
        if kind == "file":
            return [Addition(USER, 0)]  # binary attachments are not measured
        return []
    if kind in ("text", "reasoning"):
        return [Addition(ASSISTANT, _size(part.text))]
    if kind != "tool":
        return []
    state = part.state
    if state is None:
        return [Addition(_tool_source(part.tool, servers), 0)]
    arguments = _json_size(state.input)
    pieces = [Addition(ASSISTANT, arguments)] if arguments else []
    result = _size(state.error) if state.status == "error" else _size(state.output)
    pieces.append(Addition(_tool_source(part.tool, servers), result))
    return pieces


def _pruned(part: LedgerPart, servers: Sequence[str]) -> Prune | None:
    """The prune of a tool part's result, if OpenCode pruned it (``state.time.compacted``)."""
    state = part.state
    if part.type != "tool" or state is None or state.time is None:
        return None
    at = state.time.compacted
    if isinstance(at, bool) or not isinstance(at, int | float) or not at:
        return None
    removed = max(0, _size(state.output) - _size(PRUNED_OUTPUT))
    return Prune(_tool_source(part.tool, servers), int(at), removed)


def read_session(
    store: Any, session_id: str, servers: Sequence[str] = ()
) -> tuple[list[LedgerMessage], int]:
    """A stored session as ledger messages, and how many rows could not be read (skipped)."""
    parts: dict[str, list[LedgerPart]] = {}
    skipped = 0
    for row in store.parts(session_id):
        try:
            parts.setdefault(row.message_id, []).append(decode_repairing(_PART, row.data)[0])
        except (msgspec.DecodeError, RecursionError, TypeError):
            skipped += 1
    messages: list[LedgerMessage] = []
    for row in store.messages(session_id):
        try:
            info = decode_repairing(_MESSAGE, row.data)[0]
        except (msgspec.DecodeError, RecursionError, TypeError):
            skipped += 1
            continue
        role = info.role if isinstance(info.role, str) else ""
        views = parts.get(row.id, [])
        additions: list[Addition] = []
        prunes: list[Prune] = []
        compaction, tail = False, None
        summary_size = 0
        for part in views:
            if part.type == "compaction":
                compaction = True
                tail = part.tail_start_id if isinstance(part.tail_start_id, str) else None
            elif role == "assistant" and info.summary is True and part.type == "text":
                summary_size += _size(part.text)
                continue
            additions += _part_additions(part, role, servers)
            if (prune := _pruned(part, servers)) is not None:
                prunes.append(prune)
        # The one rule for figures; the ledger apportions counts, so a negative one (never
        # written by OpenCode) counts 0 here.
        figures = read_figures(info.tokens, info.cost)
        messages.append(
            LedgerMessage(
                id=row.id,
                role=role,
                session_id=session_id,
                time=row.time_created if isinstance(row.time_created, int) else None,
                additions=additions,
                input=max(0, figures.input),
                output=max(0, figures.output),
                reasoning=max(0, figures.reasoning),
                cache_read=max(0, figures.cache_read),
                cache_write=max(0, figures.cache_write),
                cost=figures.cost,
                provider_id=info.providerID if isinstance(info.providerID, str) else None,
                model_id=info.modelID if isinstance(info.modelID, str) else None,
                parent_id=info.parentID if isinstance(info.parentID, str) else None,
                summary=info.summary is True,
                mode=info.mode if isinstance(info.mode, str) else None,
                error=info.error is not None,
                summary_size=summary_size,
                compaction=compaction,
                tail_start_id=tail,
                prunes=prunes,
            )
        )
    return messages, skipped


# ------------------------------------------------------------------------ the report


class SourceRow(Struct, kw_only=True):
    source: str
    tokens: int  # in the context at the last inference
    share: float  # of that context
    cost: float | None  # over the whole session (subagents folded); None: not priced


class ContextReport(Struct, kw_only=True):
    session_id: str
    context_tokens: int  # the last inference's prompt
    cost: float  # OpenCode's: the session's cost plus its subagents'
    sources: list[SourceRow]
    output_tokens: int  # generated (output + reasoning), subagents folded
    output_cost: float | None
    inferences: list[Inference]
    subagents: list[str] = []
    unpriced: list[str] = []  # models whose messages could not be split
    skipped_rows: int = 0
    # What pending undos (/undo) undid, counted above as OpenCode counts it (``undone``).
    undone_inferences: int = 0
    undone_cost: float = 0.0

    def document(self) -> dict[str, Any]:
        """The JSON document (docs/context.md)."""
        undone = (
            {"undone_inferences": self.undone_inferences, "undone_cost": self.undone_cost}
            if self.undone_inferences
            else {}
        )
        return {
            "session_id": self.session_id,
            "context_tokens": self.context_tokens,
            "cost": self.cost,
            "sources": [
                {"source": r.source, "tokens": r.tokens, "share": r.share, "cost": r.cost}
                for r in self.sources
            ],
            "output": {"tokens": self.output_tokens, "cost": self.output_cost},
            "inferences": [
                {
                    "message_id": i.message_id,
                    "session_id": i.session_id,
                    "model": i.model,
                    "prompt_tokens": i.prompt_tokens,
                    "sources": i.sources,
                    "added": i.added,
                    "cost": i.cost,
                    "source_costs": i.source_costs,
                    **({"compaction": True} if i.compaction else {}),
                    **({"undone": True} if i.undone else {}),
                }
                for i in self.inferences
            ],
            "subagents": self.subagents,
            "unpriced_models": self.unpriced,
            **undone,
        }

    def source_rows(self) -> list[dict[str, Any]]:
        """One CSV row per source, then ``output``."""
        rows = [
            {"source": r.source, "tokens": r.tokens, "share": r.share, "cost": r.cost}
            for r in self.sources
        ]
        rows.append(
            {
                "source": "output",
                "tokens": self.output_tokens,
                "share": None,
                "cost": self.output_cost,
            }
        )
        return rows

    def inference_rows(self) -> list[dict[str, Any]]:
        """One CSV row per inference and source (``--per-inference``), then the inference's
        ``output`` (what it generated, not in its context), so that the costs of an
        inference's rows add up to its ``cost``; each row says whether its inference is a
        compaction reply or was undone, as the JSON document does."""
        rows = []
        for i in self.inferences:
            costs = i.source_costs
            step = {
                "session_id": i.session_id,
                "message_id": i.message_id,
                "prompt_tokens": i.prompt_tokens,
            }
            flags = {"compaction": i.compaction, "undone": i.undone}
            for source, tokens in i.sources.items():
                rows.append(
                    {
                        **step,
                        "source": source,
                        "tokens": tokens,
                        "added": i.added.get(source, 0),
                        "cost": None if costs is None else costs.get(source, 0.0),
                        **flags,
                    }
                )
            generated = i.output_tokens + i.reasoning_tokens
            rows.append(
                {
                    **step,
                    "source": "output",
                    "tokens": generated,
                    "added": None,
                    "cost": i.output_cost,
                    **flags,
                }
            )
        return rows


def context_report(
    store: Any,
    session_id: str,
    *,
    prices: Callable[[str | None], PriceLookup] | None = None,
    servers: Callable[[str | None], Sequence[str]] = mcp_server_names,
    env: Mapping[str, str] | None = None,
    cache: ReportCache | None = None,
) -> ContextReport:
    """The context ledger of ``session_id`` with its subagents folded in.

    ``prices`` maps a session directory to a price lookup (default: ``load_prices``);
    ``servers`` maps it to the configured MCP server names. ``cache``: the report cache,
    whose ledger keeps each session's messages as read (prices are applied afresh); the
    report is the same with or without it.
    """
    if prices is None:
        books: dict[str | None, PriceBook] = {}

        def prices(directory: str | None) -> PriceLookup:
            if directory not in books:
                books[directory] = load_prices(directory, env)
            return books[directory]

    row = store.session(session_id)
    ids = [session_id, *descendants([session_id], store.children())]
    ledgers: list[SessionLedger] = []
    skipped = 0
    costs: list[float] = []  # OpenCode's figure of each session, and its inferences
    inferences: list[int] = []
    kept = cache.ledger("context", _CONTEXT_LEDGER, ContextRows) if cache else {}
    fresh: dict[str, ContextRows] = {}
    for sid in ids:
        session = row if sid == session_id else store.session(sid)
        directory = session.directory if session is not None else None
        names = list(servers(directory))
        entry = kept.get(sid)
        if entry is not None and entry.servers == names:
            messages, bad = entry.messages, entry.skipped
        else:
            messages, bad = read_session(store, sid, names)
            fresh[sid] = ContextRows(names, messages, bad)
        skipped += bad
        ledgers.append(build_ledger(messages, prices(directory), session_id=sid))
        if session is not None:
            costs.append(cost_value(session.cost))
            inferences.append(sum(1 for m in messages if m.role == "assistant"))
    if cache is not None and fresh:
        cache.keep_ledger("context", _CONTEXT_LEDGER, {**kept, **fresh})
    # OpenCode's figures by the one rule of a session's spend (``spend``): as `sessions` and
    # `usage` write the same session's, a stored sum of several inferences to 12 digits
    report = fold(ledgers, cost=written_spend(costs, inferences), skipped=skipped)
    _mark_undone(store, ids, report)
    return report


def _mark_undone(store: Any, ids: Sequence[str], report: ContextReport) -> None:
    """Mark what pending undos undid: counted, as OpenCode's context gauge and cost count
    it until the next prompt deletes it (``undone``)."""
    from .undone import undone_figures

    undone = undone_figures(store, ids)
    if not undone:
        return
    found = {mid for u in undone.values() for mid in u.message_ids}
    for inference in report.inferences:
        inference.undone = inference.message_id in found
    report.undone_inferences = sum(u.inferences for u in undone.values())
    report.undone_cost = summed_cost(sum(u.cost for u in undone.values()), report.undone_inferences)


class ContextRows(Struct, array_like=True):
    """What ``context`` keeps of a session in the report cache: its messages as read with
    these MCP ``servers`` configured, and the rows it could not read."""

    servers: list[str]
    messages: list[LedgerMessage]
    skipped: int


_CONTEXT_LEDGER = ["messages", 1]  # the shape of ContextRows and LedgerMessage


def fold(ledgers: Sequence[SessionLedger], *, cost: float, skipped: int = 0) -> ContextReport:
    """One report from a session's ledger (first) and its subagents' ledgers."""
    own = ledgers[0]
    last = own.inferences[-1] if own.inferences else None
    context = last.sources if last is not None else {}
    context_tokens = last.prompt_tokens if last is not None else 0
    costs: dict[str, float] = {}
    unknown: set[str] = set()
    output_tokens = 0
    output_cost: float | None = 0.0
    unpriced: list[str] = []
    inferences: list[Inference] = []
    for ledger in ledgers:
        for name in ledger.unpriced:
            if name not in unpriced:
                unpriced.append(name)
        output_tokens += ledger.other_output_tokens
        if not ledger.other_output_priced:
            output_cost = None
        elif output_cost is not None:
            output_cost += ledger.other_output_cost
        for inference in ledger.inferences:
            inferences.append(inference)
            output_tokens += inference.output_tokens + inference.reasoning_tokens
            if inference.source_costs is None:
                unknown.update(inference.sources)
            else:
                for source, value in inference.source_costs.items():
                    costs[source] = costs.get(source, 0.0) + value
            if inference.output_cost is None:
                output_cost = None
            elif output_cost is not None:
                output_cost += inference.output_cost
    if all(inference.time is not None for inference in inferences):
        inferences.sort(key=lambda inference: inference.time or 0)  # stable: ties keep order
    names = list(dict.fromkeys([*context, *costs, *unknown]))
    rows = [
        SourceRow(
            source=name,
            tokens=context.get(name, 0),
            share=round(context.get(name, 0) / context_tokens, 6) if context_tokens else 0.0,
            cost=None if name in unknown else _written(costs.get(name, 0.0)),
        )
        for name in names
    ]
    rows.sort(key=lambda r: (-r.tokens, -(r.cost or 0.0), r.source))
    return ContextReport(
        session_id=own.session_id,
        context_tokens=context_tokens,
        cost=cost,
        sources=rows,
        output_tokens=output_tokens,
        output_cost=None if output_cost is None else _written(output_cost),
        inferences=inferences,
        subagents=[ledger.session_id for ledger in ledgers[1:]],
        unpriced=unpriced,
        skipped_rows=skipped,
    )
