"""Context by source (opencode_events/context.py, the `context` command): the ledger on real
captures (samples/*/opencode.db with the config OpenCode ran with), property tests on
generated sessions (plain ledger rows, and SQLite databases with the real schema), prices
from OpenCode's config and models cache, and the command's output and exit codes."""

from __future__ import annotations

import csv
import io
import json
import math
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from opencode_events.reports.context import (
    PRUNED_OUTPUT,
    Addition,
    LedgerMessage,
    Price,
    PriceBook,
    Prune,
    _costs,
    apportion,
    build_ledger,
    catalogue_files,
    context_report,
    load_prices,
    price_files,
)
from opencode_events.store.open import open_store
from tests.stores import with_every_reply_set

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ROOT / "samples"
CLI = [sys.executable, "-m", "opencode_events"]
ALL = sorted(p.parent.name for p in SAMPLES.glob("*/opencode.db"))
REL = 1e-9


def sample_servers(name: str) -> list[str]:
    config = json.loads((SAMPLES / name / "opencode.json").read_text())
    return sorted(config.get("mcp") or {})


def report_of(name: str, session_id: str | None = None, *, priced: bool = True):
    book = PriceBook([SAMPLES / name / "opencode.json"]) if priced else PriceBook()
    servers = sample_servers(name)
    with open_store(str(SAMPLES / name / "opencode.db")) as store:
        if session_id is None:
            session_id = store.sessions(top_level=True)[0].id
        return context_report(
            store, session_id, prices=lambda directory: book, servers=lambda directory: servers
        )


def top_sessions(name: str) -> list[tuple[str, float]]:
    """Top-level sessions and OpenCode's cost of each with its subagents."""
    db = SAMPLES / name / "opencode.db"
    conn = sqlite3.connect(f"{db.resolve().as_uri()}?mode=ro", uri=True)
    try:
        rows = conn.execute("SELECT id, parent_id, cost FROM session").fetchall()
    finally:
        conn.close()
    cost = {sid: c for sid, _, c in rows}
    parent = {sid: p for sid, p, _ in rows}

    def root(sid: str) -> str:
        while parent.get(sid):
            sid = parent[sid]
        return sid

    totals: dict[str, float] = {}
    for sid in cost:
        totals[root(sid)] = totals.get(root(sid), 0.0) + (cost[sid] or 0.0)
    return sorted(totals.items())


def assert_consistent(report) -> None:
    for inference in report.inferences:
        assert sum(inference.sources.values()) == inference.prompt_tokens, inference
        assert all(isinstance(t, int) and t > 0 for t in inference.sources.values())
        assert sum(inference.added.values()) <= inference.prompt_tokens
    own = [i for i in report.inferences if i.session_id == report.session_id]
    if own:
        assert report.context_tokens == own[-1].prompt_tokens
        assert sum(r.tokens for r in report.sources) == report.context_tokens
        assert math.isclose(sum(r.share for r in report.sources), 1.0, abs_tol=1e-4)


def total_split(report) -> float:
    return sum(r.cost for r in report.sources) + report.output_cost


# ------------------------------------------------------------------ real captures


@pytest.mark.parametrize("name", ALL)
def test_every_capture_adds_up(name: str):
    for session_id, opencode_cost in top_sessions(name):
        report = report_of(name, session_id)
        assert_consistent(report)
        assert report.cost == pytest.approx(opencode_cost, rel=REL)
        assert report.unpriced == []
        assert all(r.cost is not None for r in report.sources)
        assert total_split(report) == pytest.approx(opencode_cost, rel=REL, abs=1e-15)


def test_tools_multi_step():
    report = report_of("file_tools")
    sources = {r.source: r for r in report.sources}
    assert {"system", "user", "assistant"} <= set(sources)
    assert {"tool:read", "tool:write", "tool:edit", "tool:glob", "tool:grep"} <= set(sources)
    first = report.inferences[0]
    assert set(first.sources) == {"system", "user"}
    # later inferences only grow by what the previous step added
    for before, after in zip(report.inferences, report.inferences[1:], strict=False):
        assert after.prompt_tokens - before.prompt_tokens == sum(after.added.values())
        for source, tokens in before.sources.items():
            assert after.sources[source] >= tokens


def test_mcp_calls_go_to_their_server():
    report = report_of("mcp")
    sources = {r.source: r for r in report.sources}
    assert sources["mcp:my-tools.v1"].tokens > 0
    assert not any(s.startswith("tool:my-tools") for s in sources)
    # unconfigured, the same calls stay tool calls under their own names
    with open_store(str(SAMPLES / "mcp" / "opencode.db")) as store:
        sid = store.sessions(top_level=True)[0].id
        plain = context_report(store, sid, prices=lambda d: PriceBook(), servers=lambda d: [])
    assert "tool:my-tools_v1_echo" in {r.source for r in plain.sources}


def test_subagent_folded():
    ((parent, opencode_cost),) = top_sessions("task")
    report = report_of("task")
    assert len(report.subagents) == 1
    child = report.subagents[0]
    assert {i.session_id for i in report.inferences} == {parent, child}
    sources = {r.source: r for r in report.sources}
    assert sources["tool:task"].tokens > 0  # the subagent's answer, in the parent's context
    assert sources["tool:bash"].tokens == 0 and sources["tool:bash"].cost > 0  # child only
    assert report.cost == pytest.approx(0.015795 + 0.004845, rel=REL)
    assert total_split(report) == pytest.approx(opencode_cost, rel=REL)
    # the inferences come in time order, the child's between the parent's two
    assert [i.session_id for i in report.inferences] == [parent, child, child, child, parent]
    # the child alone, with nothing folded
    alone = report_of("task", child)
    assert alone.subagents == [] and alone.cost == pytest.approx(0.004845, rel=REL)


def test_compaction_resets():
    report = report_of("compaction")
    flags = [i.compaction for i in report.inferences]
    assert flags == [False, False, True, False]
    before, after = report.inferences[2], report.inferences[3]
    assert "tool:bash" in before.sources
    assert set(after.sources) <= {"system", "compaction", "user", "other"}
    assert after.sources["compaction"] > 0
    assert {r.source: r.tokens for r in report.sources}["tool:bash"] == 0


@pytest.mark.parametrize("name", ["compaction", "auto_compact"])
def test_after_a_real_compaction_the_system_prompt_comes_back_whole(name: str):
    """These captures report usage measured from each request (4 bytes a token,
    docs/harness.md): the summarizer's prompt is small, and the step after it carries the
    agent's system prompt and tools again. That step's `system` is what its request held
    beyond the summary and the new prompt: about the first step's (system prompt + tools
    + first prompt, as the mock measured it), and `user` is only the new prompt."""
    requests = [json.loads(line) for line in (SAMPLES / name / "requests.jsonl").open()]
    first_measured = next(r["usage"] for r in requests if r["conversation"] == "main")
    report = report_of(name)
    (reset,) = [k for k, i in enumerate(report.inferences) if i.compaction]
    first, summarizer, after = report.inferences[0], *report.inferences[reset : reset + 2]
    assert first.prompt_tokens == first_measured["prompt_tokens"]
    assert summarizer.prompt_tokens < after.prompt_tokens / 5  # the summarizer's own prompt
    assert first.sources["system"] > 0.95 * first.prompt_tokens
    system = after.sources["system"]
    assert system > 0.99 * after.prompt_tokens  # the bulk of the prompt
    assert system == pytest.approx(first.sources["system"], rel=0.03)
    assert 0 < after.sources["user"] < 0.01 * after.prompt_tokens
    assert set(after.sources) == {"system", "compaction", "user"}


def measured_prompts(name: str, *conversations: str) -> list[int]:
    """The prompt the mock measured for each request of these conversations, in order."""
    requests = [json.loads(line) for line in (SAMPLES / name / "requests.jsonl").open()]
    return [r["usage"]["prompt_tokens"] for r in requests if r["conversation"] in conversations]


def bash_results(name: str, session_id: str) -> list[dict]:
    """The session's completed bash parts, as the store holds them, in order."""
    db = SAMPLES / name / "opencode.db"
    conn = sqlite3.connect(f"{db.resolve().as_uri()}?mode=ro", uri=True)
    try:
        rows = conn.execute(
            "SELECT data FROM part WHERE session_id = ? ORDER BY id", (session_id,)
        ).fetchall()
    finally:
        conn.close()
    parts = [json.loads(data) for (data,) in rows]
    return [
        p
        for p in parts
        if p["type"] == "tool" and p["tool"] == "bash" and p["state"]["status"] == "completed"
    ]


def sent_bash_tokens(results: list[dict], at: int) -> float:
    """What the bash results weighed in the request made at ``at`` (ms), as the mock measures
    it (compact JSON, 4 bytes a token): each result done by then is a `tool` message holding
    its output, or OpenCode's placeholder once pruned (``state.time.compacted``)."""
    size = 0
    for part in results:
        times = part["state"]["time"]
        if times["end"] > at:
            continue
        pruned = times.get("compacted") and times["compacted"] <= at
        message = {
            "role": "tool",
            "tool_call_id": part["callID"],
            "content": PRUNED_OUTPUT if pruned else part["state"]["output"],
        }
        size += len(json.dumps(message, separators=(",", ":")).encode())
    return size / 4


def test_a_real_prune_gives_back_the_pruned_results_only():
    """samples/prune (measured usage): five 47.5 KB `cat` outputs in the first run; OpenCode
    prunes the two oldest at the end of the third run, and the fourth run's requests carry the
    placeholder for them. Until then the outputs count in full, each in the step after its
    `cat`; at the first step after the prune the system prompt stays what it was and
    tool:bash drops by what the pruned results held, as the mock measured the requests."""
    prompts = measured_prompts("prune", "main")
    report = report_of("prune")
    steps = report.inferences
    assert [i.prompt_tokens for i in steps] == prompts
    results = bash_results("prune", report.session_id)
    pruned = [p for p in results if p["state"]["time"].get("compacted")]
    assert [p["callID"] for p in pruned] == ["call_big_1", "call_big_2"]
    # before the prune: the step after each cat grows by that output, in full
    for k in range(1, 6):
        growth = prompts[k] - prompts[k - 1]
        assert growth > 12_000
        assert steps[k].added["tool:bash"] >= growth - 10
        assert steps[k].added["assistant"] <= 10  # the call's arguments
    # the first step after the prune: the first whose measured prompt is smaller
    (after,) = [k for k in range(1, len(steps)) if prompts[k] < prompts[k - 1]]
    before = after - 1
    pruned_at = [p["state"]["time"]["compacted"] for p in pruned]
    assert steps[before].time < min(pruned_at) and max(pruned_at) < steps[after].time
    assert prompts[before] - prompts[after] > 24_000
    first = steps[0]
    for k in (before, after):
        assert steps[k].sources["system"] == first.sources["system"]  # it never shrinks
        truth = sent_bash_tokens(results, steps[k].time)
        assert steps[k].sources["tool:bash"] == pytest.approx(truth, rel=0.005)
    dropped = steps[before].sources["tool:bash"] - steps[after].sources["tool:bash"]
    truth = sent_bash_tokens(results, steps[before].time) - sent_bash_tokens(
        results, steps[after].time
    )
    assert dropped == pytest.approx(truth, rel=0.01)
    assert steps[after].sources["assistant"] < 500 and steps[after].sources["user"] < 100


def test_a_subagent_that_compacts_resets_its_own_context_not_the_parents(priced_env: dict):
    """samples/task_compact (measured usage): the subagent's session outgrows the context
    (16,000) after a 47.5 KB `cat`; OpenCode compacts the child, which goes on. The child's
    context resets there (the step after is a first inference again); the parent's own steps
    carry none of it."""
    ((parent, _),) = top_sessions("task_compact")
    report = report_of("task_compact")
    (child,) = report.subagents
    alone = report_of("task_compact", child)
    assert [i.prompt_tokens for i in alone.inferences] == measured_prompts(
        "task_compact", "child", "compaction", "child_after"
    )
    assert [i.compaction for i in alone.inferences] == [False, False, True, False]
    first, grown, summarizer, after = alone.inferences
    assert grown.sources["tool:bash"] > 12_000  # the cat's output, in full
    assert summarizer.prompt_tokens < after.prompt_tokens / 5  # the summarizer's own prompt
    assert after.added == after.sources  # all of it new, as in a first inference
    assert after.sources["system"] == pytest.approx(first.sources["system"], rel=0.03)
    assert after.sources["compaction"] > 0
    assert after.sources.get("tool:bash", 0) < 10  # the big output went with the compaction
    assert alone.context_tokens == after.prompt_tokens
    # the same through the command: `context <child id>`
    db = str(SAMPLES / "task_compact" / "opencode.db")
    result = run("context", child, "--db", db, "--format", "json", env=priced_env)
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)
    assert document["session_id"] == child
    assert document["context_tokens"] == after.prompt_tokens
    assert [bool(i.get("compaction")) for i in document["inferences"]] == [
        False,
        False,
        True,
        False,
    ]
    # the parent: its own steps neither reset nor hold the child's compaction
    own = [i for i in report.inferences if i.session_id == parent]
    assert [i.prompt_tokens for i in own] == measured_prompts("task_compact", "main")
    assert not any(i.compaction for i in own)
    assert own[-1].sources["system"] == own[0].sources["system"]
    assert set(own[-1].added) == {"assistant", "tool:task"}
    assert report.context_tokens == own[-1].prompt_tokens
    sources = {r.source: r for r in report.sources}
    assert sources["compaction"].tokens == 0 and sources["compaction"].cost > 0  # child only
    assert sources["tool:bash"].tokens == 0
    assert [i.compaction for i in report.inferences] == [False, False, False, True, False, False]


def test_multi_turn_user_prompts():
    report = report_of("continue3")
    users = [i.added.get("user", 0) for i in report.inferences]
    assert sum(1 for u in users if u) >= 2  # later prompts are added as the session goes on


def test_unpriced_model_gets_tokens_and_no_cost():
    report = report_of("task", priced=False)
    assert_consistent(report)
    assert report.unpriced == ["mock/mock-model"]
    assert all(r.cost is None for r in report.sources)
    assert report.output_cost is None
    assert report.cost == pytest.approx(0.015795 + 0.004845, rel=REL)  # still OpenCode's


def test_price_without_cache_write_is_zero(tmp_path: Path):
    # gpt-5-mock's config cost has no cache_write: OpenCode prices it at 0, so do we
    book = PriceBook([SAMPLES / "apply_patch" / "opencode.json"])
    assert book("mock", "gpt-5-mock") == Price(1.25, 10, 0.125, 0)
    assert book("mock", "nope") is None and book(None, "gpt-5-mock") is None


# ------------------------------------------------------------------ prices


def test_prices_from_config_and_models_cache(tmp_path: Path):
    home, config, cache = tmp_path / "home", tmp_path / "config", tmp_path / "cache"
    (config / "opencode").mkdir(parents=True)
    (cache / "opencode").mkdir(parents=True)
    project = tmp_path / "work"
    (project / ".git").mkdir(parents=True)
    catalogue = {
        "anthropic": {
            "id": "anthropic",
            "models": {
                "claude-x": {
                    "cost": {
                        "input": 3,
                        "output": 15,
                        "cache_read": 0.3,
                        "cache_write": 3.75,
                        "context_over_200k": {"input": 6, "output": 22.5, "cache_read": 0.6},
                    }
                },
                "free": {"cost": {"input": 0, "output": 0}},
                "noprice": {"name": "no cost object"},
            },
        }
    }
    (cache / "opencode" / "models.json").write_text(json.dumps(catalogue))
    (config / "opencode" / "opencode.json").write_text(
        '{"provider": {"anthropic": {"models": {"claude-x": {"cost": {"input": 4}}}}}}'
    )
    (project / "opencode.jsonc").write_text(
        '// project\n{"provider": {"anthropic": {"models": {"claude-x": '
        '{"cost": {"output": 16,},}}}}}'
    )
    env = {"HOME": str(home), "XDG_CONFIG_HOME": str(config), "XDG_CACHE_HOME": str(cache)}
    assert catalogue_files(env)[0] == cache / "opencode" / "models.json"
    files = price_files(str(project), env)
    assert files.index(config / "opencode" / "opencode.json") < files.index(
        project / "opencode.jsonc"
    )
    named = price_files(str(project), {**env, "OPENCODE_CONFIG": str(tmp_path / "named.json")})
    assert named == [*files[:3], tmp_path / "named.json", *files[3:]]  # after the global ones
    book = load_prices(str(project), env)
    price = book("anthropic", "claude-x")
    assert price is not None
    assert (price.input, price.output, price.cache_read, price.cache_write) == (4, 16, 0.3, 3.75)
    assert price.for_prompt(200_001).input == 6
    assert price.for_prompt(200_000) is price
    assert book("anthropic", "free") == Price()
    assert book("anthropic", "noprice") is None
    assert book("openai", "claude-x") is None


def test_price_tiers():
    cost = {
        "input": 1,
        "output": 2,
        "tiers": [
            {"input": 5, "output": 6, "tier": {"type": "context", "size": 1000}},
            {"input": 3, "output": 4, "tier": {"type": "context", "size": 500}},
        ],
    }
    from opencode_events.reports.context import _price

    price = _price(cost)
    assert price.for_prompt(400).input == 1
    assert price.for_prompt(600).input == 3
    assert price.for_prompt(5000).input == 5


def test_bad_config_files_are_ignored(tmp_path: Path):
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    weird = tmp_path / "weird.json"
    weird.write_text('{"provider": {"p": {"models": {"m": {"cost": "cheap"}}}, "q": 3}}')
    book = PriceBook([bad, weird, tmp_path / "missing.json"], [tmp_path])
    assert len(book) == 0 and book("p", "m") is None


@pytest.mark.parametrize("document", ["[1]", '"just a string"', "5", "true", "null"])
def test_a_config_that_is_json_but_no_object_has_no_prices(tmp_path: Path, document: str):
    config = tmp_path / "opencode.json"
    config.write_text(document)
    book = PriceBook([config], [tmp_path])
    assert len(book) == 0 and book("p", "m") is None


def test_a_price_so_large_the_split_overflows_is_no_price():
    message = LedgerMessage(
        id="msg_1", role="assistant", input=1000, output=10, cost=0.5, provider_id="p", model_id="m"
    )
    huge = Price(input=1e308, output=1e308, cache_read=1e308, cache_write=0.0)
    costs, output = _costs(message, {}, {"user": 1000}, huge)
    assert costs is None and output is None  # not split, rather than NaN
    tiny = Price(input=1e-320, output=1e-320, cache_read=0.0, cache_write=0.0)  # subnormal
    assert _costs(message, {}, {"user": 1000}, tiny) == (None, None)


# ------------------------------------------------------------------ properties

sizes = st.integers(min_value=0, max_value=5000)
sources = st.sampled_from(["user", "assistant", "tool:bash", "tool:read", "mcp:fs"])
additions = st.lists(st.builds(Addition, sources, sizes), max_size=4)


@st.composite
def sessions(draw):
    """A plausible session: turns of a user prompt then assistant steps with tool calls."""
    messages: list[LedgerMessage] = []
    prompt = draw(st.integers(min_value=1, max_value=20_000))
    counter = 0

    def ident() -> str:
        nonlocal counter
        counter += 1
        return f"msg_{counter:04d}"

    for _ in range(draw(st.integers(min_value=1, max_value=4))):
        compaction = draw(st.booleans()) and bool(messages)
        user = LedgerMessage(
            id=ident(),
            role="user",
            additions=[] if compaction else [Addition("user", draw(sizes))],
            compaction=compaction,
        )
        messages.append(user)
        for _ in range(draw(st.integers(min_value=1, max_value=4))):
            prompt = max(0, prompt + draw(st.integers(min_value=-3000, max_value=8000)))
            read = draw(st.integers(min_value=0, max_value=prompt))
            write = draw(st.integers(min_value=0, max_value=prompt - read))
            messages.append(
                LedgerMessage(
                    id=ident(),
                    role="assistant",
                    additions=draw(additions),
                    input=prompt - read - write,
                    cache_read=read,
                    cache_write=write,
                    output=draw(st.integers(min_value=0, max_value=2000)),
                    reasoning=draw(st.integers(min_value=0, max_value=500)),
                    cost=draw(st.floats(min_value=0, max_value=5, allow_nan=False)),
                    provider_id="p",
                    model_id=draw(st.sampled_from(["priced", "priced", "free", "unknown"])),
                    parent_id=user.id,
                    summary=compaction,
                    mode="compaction" if compaction else "build",
                )
            )
            if compaction:
                break
    return messages


def book(provider, model):
    return {"priced": Price(3, 15, 0.3, 3.75), "free": Price()}.get(model)


@settings(max_examples=300, deadline=None)
@given(sessions())
def test_ledger_adds_up(messages):
    ledger = build_ledger(messages, book, session_id="ses")
    by_id = {m.id: m for m in messages}
    inferences = [m for m in messages if m.role == "assistant" and m.prompt_tokens > 0]
    assert [i.message_id for i in ledger.inferences] == [m.id for m in inferences]
    for inference in ledger.inferences:
        message = by_id[inference.message_id]
        assert sum(inference.sources.values()) == inference.prompt_tokens
        assert all(t > 0 for t in inference.sources.values())
        if inference.source_costs is None:
            assert message.model_id == "unknown" or (
                message.model_id == "free" and message.cost != 0
            )
            continue
        split = sum(inference.source_costs.values()) + inference.output_cost
        assert split == pytest.approx(message.cost, rel=1e-9, abs=1e-12)
        assert all(c >= -1e-12 for c in inference.source_costs.values())
    # after a compaction reply, the next inference starts from the system prompt and summary
    for index, inference in enumerate(ledger.inferences[:-1]):
        if inference.compaction:
            after = ledger.inferences[index + 1]
            assert set(after.sources) <= {"system", "compaction", "user", "other"} | set(
                after.added
            )


@given(st.integers(min_value=0, max_value=10**9), st.lists(sizes, max_size=8))
def test_apportion(total, weights):
    shares = apportion(total, weights)
    assert len(shares) == len(weights)
    if sum(weights) == 0 or total == 0:
        assert shares == [0] * len(weights)
        return
    assert sum(shares) == total
    for share, weight in zip(shares, weights, strict=True):
        exact = total * weight / sum(weights)
        assert math.floor(exact) <= share <= math.ceil(exact)


def test_first_inference_system_is_what_the_prompt_does_not_explain():
    messages = [
        LedgerMessage(id="u", role="user", additions=[Addition("user", 400)]),
        LedgerMessage(id="a", role="assistant", input=1000, parent_id="u"),
    ]
    (inference,) = build_ledger(messages).inferences
    assert inference.sources == {"system": 900, "user": 100}
    # a prompt smaller than the estimate: all of it goes to what was sent
    messages[1] = LedgerMessage(id="a", role="assistant", input=50, parent_id="u")
    (inference,) = build_ledger(messages).inferences
    assert inference.sources == {"user": 50}


def test_negative_growth_shrinks_in_proportion_and_failed_steps_are_skipped():
    messages = [
        LedgerMessage(id="u", role="user", additions=[Addition("user", 400)]),
        LedgerMessage(id="a1", role="assistant", input=1000, additions=[Addition("tool:x", 10)]),
        LedgerMessage(id="a2", role="assistant", error=True),  # no usage: not an inference
        LedgerMessage(id="a3", role="assistant", input=1100),
        LedgerMessage(id="a4", role="assistant", input=550),
    ]
    ledger = build_ledger(messages)
    assert [i.message_id for i in ledger.inferences] == ["a1", "a3", "a4"]
    assert ledger.inferences[1].sources == {"system": 900, "user": 100, "tool:x": 100}
    assert ledger.inferences[2].sources == {"system": 450, "user": 50, "tool:x": 50}
    assert ledger.inferences[2].added == {}


def test_growth_with_nothing_measurable_is_other():
    messages = [
        LedgerMessage(id="u", role="user", additions=[Addition("user", 4)]),
        LedgerMessage(id="a1", role="assistant", input=100),
        LedgerMessage(id="a2", role="assistant", input=130),
    ]
    assert build_ledger(messages).inferences[1].added == {"other": 30}


def test_compaction_keeps_its_tail():
    messages = [
        LedgerMessage(id="u1", role="user", additions=[Addition("user", 40)]),
        LedgerMessage(id="a1", role="assistant", input=1000, additions=[Addition("tool:a", 90)]),
        LedgerMessage(id="u2", role="user", additions=[Addition("user", 10)]),
        LedgerMessage(id="a2", role="assistant", input=1200, additions=[Addition("tool:b", 10)]),
        LedgerMessage(id="u3", role="user", compaction=True, tail_start_id="u2"),
        LedgerMessage(
            id="a3",
            role="assistant",
            input=1300,
            output=50,
            parent_id="u3",
            summary=True,
            mode="compaction",
        ),
        LedgerMessage(id="u4", role="user", additions=[Addition("user", 20)]),
        LedgerMessage(id="a4", role="assistant", input=1100),
    ]
    ledger = build_ledger(messages)
    assert ledger.inferences[2].compaction
    after = ledger.inferences[3]
    # A first inference again: the summary (its 50 output tokens), the kept tail (u2, a2
    # with its tool result) and the new prompt at 4 bytes a token; the rest is the system
    # prompt, measured afresh (the summarizer's prompt is not the agent's).
    pieces = {"compaction": 50, "user": 8, "tool:b": 3}  # user: 10 + 20 bytes
    assert after.sources == {"system": 1100 - sum(pieces.values()), **pieces}
    assert after.added == after.sources
    assert "tool:a" not in after.sources


def test_after_a_compaction_the_system_prompt_is_measured_afresh():
    """OpenCode 1.18.33's summarizer sends a small prompt of its own (no tools, a short
    system prompt, the conversation as one message): the agent's system prompt and tools
    come back with the next step, and are `system`, not what that step added."""
    messages = [
        LedgerMessage(id="u1", role="user", additions=[Addition("user", 40)]),
        LedgerMessage(id="a1", role="assistant", input=8000, additions=[Addition("tool:a", 9000)]),
        LedgerMessage(id="u2", role="user", additions=[Addition("user", 40)]),
        LedgerMessage(id="a2", role="assistant", input=11000),
        LedgerMessage(id="u3", role="user", compaction=True),
        LedgerMessage(
            id="a3",
            role="assistant",
            input=1240,  # the summarizer's prompt: far less than the agent's system prompt
            output=20,
            parent_id="u3",
            summary=True,
            mode="compaction",
        ),
        LedgerMessage(id="u4", role="user", additions=[Addition("user", 25)]),
        LedgerMessage(id="a4", role="assistant", input=8082),
    ]
    after = build_ledger(messages).inferences[3]
    assert after.sources == {"system": 8082 - 20 - 7, "compaction": 20, "user": 7}


def test_a_summary_without_a_compaction_request_does_not_reset():
    messages = [
        LedgerMessage(id="u", role="user", additions=[Addition("user", 4)]),
        LedgerMessage(id="a", role="assistant", input=100, summary=True, mode="compaction"),
    ]
    assert not build_ledger(messages).inferences[0].compaction


# ------------------------------------------------------------------ generated databases


def _insert_session(db: Path, sid: str, turns: list[list[dict]]) -> float:
    """Rows for a session with the real schema; returns OpenCode's (the rows') total cost."""
    conn = sqlite3.connect(db)
    now = 1_800_000_000_000
    total = 0.0
    counter = 0
    conn.execute(
        "INSERT INTO session (id, project_id, slug, directory, title, version, cost, "
        "tokens_input, tokens_output, tokens_reasoning, tokens_cache_read, tokens_cache_write, "
        "time_created, time_updated) VALUES (?, 'global', 'slug', '/nowhere', 't', '1.18.33', "
        "0, 0, 0, 0, 0, 0, ?, ?)",
        (sid, now, now),
    )

    def add(role: str, data: dict, parts: list[dict]) -> str:
        nonlocal counter
        counter += 1
        mid = f"msg_{sid[-6:]}{counter:06d}"
        conn.execute(
            "INSERT INTO message (id, session_id, time_created, time_updated, data) "
            "VALUES (?, ?, ?, ?, ?)",
            (mid, sid, now + counter, now + counter, json.dumps({"role": role, **data})),
        )
        for index, part in enumerate(parts):
            conn.execute(
                "INSERT INTO part (id, message_id, session_id, time_created, time_updated, "
                "data) VALUES (?, ?, ?, ?, ?, ?)",
                (
                    f"prt_{mid[4:]}{index:03d}",
                    mid,
                    sid,
                    now + counter,
                    now + counter,
                    json.dumps(part),
                ),
            )
        return mid

    prompt = 0
    for turn in turns:
        user = add("user", {"time": {"created": now}}, [{"type": "text", "text": "hi " * 20}])
        for step in turn:
            prompt += step["growth"]
            tokens = {
                "input": prompt - step["read"],
                "output": step["out"],
                "reasoning": 0,
                "cache": {"read": step["read"], "write": 0},
            }
            cost = (tokens["input"] * 3 + step["read"] * 0.3 + step["out"] * 15) / 1e6
            total += cost
            parts = [{"type": "text", "text": "ok"}]
            if step["tool"]:
                parts.append(
                    {
                        "type": "tool",
                        "tool": step["tool"],
                        "callID": "c",
                        "state": {
                            "status": "completed",
                            "input": {"a": 1},
                            "output": "x" * step["size"],
                            "title": "",
                            "time": {"start": 1, "end": 2},
                        },
                    }
                )
            parts.append("not a part")  # a bad row must not crash
            add(
                "assistant",
                {
                    "parentID": user,
                    "modelID": "m",
                    "providerID": "p",
                    "cost": cost,
                    "tokens": tokens,
                    "mode": "build",
                },
                parts,
            )
    conn.execute("UPDATE session SET cost = ? WHERE id = ?", (total, sid))
    conn.commit()
    conn.close()
    return total


steps = st.fixed_dictionaries(
    {
        "growth": st.integers(min_value=0, max_value=5000),
        "read": st.just(0),
        "out": st.integers(min_value=0, max_value=300),
        "tool": st.sampled_from([None, "bash", "fs_read"]),
        "size": st.integers(min_value=0, max_value=3000),
    }
)


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(st.lists(st.lists(steps, min_size=1, max_size=4), min_size=1, max_size=3))
def test_generated_database(tmp_path_factory, turns):
    db = tmp_path_factory.mktemp("gen") / "opencode.db"
    shutil.copyfile(SAMPLES / "text" / "opencode.db", db)
    turns[0][0]["growth"] += 500  # the first prompt holds the system prompt
    cost = _insert_session(db, "ses_zzzzgenerated", turns)
    prices = {("p", "m"): Price(3, 15, 0.3, 3.75)}
    with open_store(str(db)) as store:
        report = context_report(
            store,
            "ses_zzzzgenerated",
            prices=lambda d: lambda p, m: prices.get((p, m)),
            servers=lambda d: ["fs"],
        )
    assert_consistent(report)
    assert report.skipped_rows == sum(len(t) for t in turns)
    assert report.cost == pytest.approx(cost, rel=REL)
    assert total_split(report) == pytest.approx(cost, rel=REL, abs=1e-15)
    assert not any(r.source == "tool:fs_read" for r in report.sources)


def test_pruned_tool_output_counts_in_full_until_pruned():
    # OpenCode sent the whole output until the prune (state.time.compacted), the placeholder
    # after: the piece is the full output, and the prune is recorded with its time.
    from opencode_events.reports.context import _PART, _part_additions, _pruned

    part = _PART.decode(
        b'{"type":"tool","tool":"bash","state":{"status":"completed","input":{},'
        b'"output":"' + b"x" * 1000 + b'","time":{"start":1,"end":2,"compacted":3}}}'
    )
    assert _part_additions(part, "assistant", ()) == [
        Addition("assistant", 2),
        Addition("tool:bash", 1000),
    ]
    assert _pruned(part, ()) == Prune("tool:bash", 3, 1000 - len(PRUNED_OUTPUT))


def test_a_prune_shrinks_the_pruned_tool_not_every_source():
    # samples-like: two 40 KB outputs carried, then pruned at t=50; the next prompt
    # is 20,000 tokens smaller. Before the fix the drop was spread over system, user and
    # the tool in proportion (system 8,000 -> 5,000); the pruned output was counted as the
    # 33-byte placeholder even in the steps that carried it in full.
    big = 40_000
    prune = Prune("tool:bash", 50, big - len(PRUNED_OUTPUT))
    msgs = [
        LedgerMessage(id="u1", role="user", time=1, additions=[Addition("user", 40)]),
        LedgerMessage(
            id="a1",
            role="assistant",
            time=2,
            input=8_010,
            additions=[Addition("assistant", 20), Addition("tool:bash", big)],
            prunes=[prune],
        ),
        LedgerMessage(id="a2", role="assistant", time=3, input=18_015),
        LedgerMessage(id="u2", role="user", time=60, additions=[Addition("user", 40)]),
        LedgerMessage(id="a3", role="assistant", time=61, input=8_025),
    ]
    first, second, third = build_ledger(msgs).inferences
    assert first.sources == {"system": 8_000, "user": 10}
    assert second.sources["tool:bash"] >= 9_990  # the full output, not the placeholder
    assert third.sources["system"] == 8_000  # the system prompt did not shrink
    assert third.sources["tool:bash"] < 20  # only the placeholder's share is left
    assert third.added.get("user", 0) > 0  # the new prompt got its growth
    assert sum(third.sources.values()) == 8_025


# ------------------------------------------------------------------ the command


def run(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(CLI + list(args), capture_output=True, timeout=120, env=env)


@pytest.fixture
def priced_env(tmp_path: Path) -> dict:
    """An environment whose OpenCode config is the one the captures ran with."""
    (tmp_path / "config" / "opencode").mkdir(parents=True)
    shutil.copyfile(SAMPLES / "task" / "opencode.json", tmp_path / "config/opencode/opencode.json")
    return {
        "PATH": "/usr/bin:/bin",
        "HOME": str(tmp_path / "home"),
        "XDG_CONFIG_HOME": str(tmp_path / "config"),
        "XDG_CACHE_HOME": str(tmp_path / "cache"),
        "XDG_DATA_HOME": str(tmp_path / "data"),
    }


def test_cli_json(priced_env: dict):
    result = run(
        "context", "--db", str(SAMPLES / "task" / "opencode.db"), "--format", "json", env=priced_env
    )
    assert result.returncode == 0, result.stderr
    assert result.stderr == b""
    document = json.loads(result.stdout)
    assert {"session_id", "context_tokens", "cost", "sources", "inferences"} <= set(document)
    assert document["session_id"] == "ses_dd8083e0bffePGJlLQX9qavHXI"
    assert document["context_tokens"] == 4400
    assert set(document["sources"][0]) == {"source", "tokens", "share", "cost"}
    split = sum(s["cost"] for s in document["sources"]) + document["output"]["cost"]
    assert split == pytest.approx(document["cost"], rel=REL)
    for inference in document["inferences"]:
        assert sum(inference["sources"].values()) == inference["prompt_tokens"]
    # piped, json is the default
    assert (
        json.loads(
            run("context", "--db", str(SAMPLES / "task" / "opencode.db"), env=priced_env).stdout
        )
        == document
    )


def test_cli_session_prefix_and_csv(priced_env: dict):
    db = str(SAMPLES / "mcp" / "opencode.db")
    result = run("context", "ses_dd8064", "--db", db, "--format", "csv", env=priced_env)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.decode().splitlines()
    assert lines[0] == "source,tokens,share,cost"
    assert lines[-1].startswith("output,58,,")
    per = run(
        "context", "ses_dd8064", "--db", db, "--format", "csv", "--per-inference", env=priced_env
    )
    rows = list(csv.DictReader(io.StringIO(per.stdout.decode())))
    assert list(rows[0]) == [
        *("session_id", "message_id", "prompt_tokens", "source", "tokens", "added", "cost"),
        *("compaction", "undone"),
    ]
    assert len(rows) > 4
    document = json.loads(run("context", "ses_dd8064", "--db", db, "-j", env=priced_env).stdout)
    # each step's rows end with its output: their costs add up to the step's own
    for inference in document["inferences"]:
        mine = [row for row in rows if row["message_id"] == inference["message_id"]]
        assert mine[-1]["source"] == "output" and mine[-1]["added"] == ""
        assert sum(float(row["cost"]) for row in mine) == pytest.approx(inference["cost"])
        assert {row["compaction"] for row in mine} == {"false"}


def test_per_step_rows_mark_the_compaction_reply(priced_env: dict):
    db = str(SAMPLES / "compaction" / "opencode.db")
    per = run("context", "--db", db, "--format", "jsonl", "--per-step", env=priced_env)
    rows = [json.loads(line) for line in per.stdout.splitlines()]
    document = json.loads(run("context", "--db", db, "-j", env=priced_env).stdout)
    marked = {i["message_id"] for i in document["inferences"] if i.get("compaction")}
    assert len(marked) == 1
    assert {row["message_id"] for row in rows if row["compaction"]} == marked
    assert not any(row["undone"] for row in rows)


def compaction_table(env: dict, steps: str = "--per-step") -> str:
    """``context --format table`` of the real compaction capture, with its steps."""
    db = str(SAMPLES / "compaction" / "opencode.db")
    result = run("context", "--db", db, "--format", "table", steps, env=env)
    assert result.returncode == 0, result.stderr
    return result.stdout.decode()


def test_cli_table(priced_env: dict):
    text = compaction_table(priced_env, "--per-inference")
    assert "Context of ses_db2ca84b0ffe6A4C7zjq6p68O0" in text
    assert "compaction (reset after)" in text and "total" in text and "$0.0532" in text


def test_cli_unpriced(priced_env: dict, tmp_path: Path):
    env = {**priced_env, "XDG_CONFIG_HOME": str(tmp_path / "empty")}
    result = run(
        "context", "--db", str(SAMPLES / "task" / "opencode.db"), "--format", "json", env=env
    )
    assert result.returncode == 0
    assert b"no usable price for mock/mock-model" in result.stderr
    document = json.loads(result.stdout)
    assert all(s["cost"] is None for s in document["sources"])
    assert document["unpriced_models"] == ["mock/mock-model"]
    table = run(
        "context", "--db", str(SAMPLES / "task" / "opencode.db"), "--format", "table", env=env
    )
    assert " - " in table.stdout.decode()


def test_cli_errors(priced_env: dict, tmp_path: Path):
    db = str(SAMPLES / "task" / "opencode.db")
    missing = run("context", "ses_nope", "--db", db, env=priced_env)
    assert missing.returncode == 2
    assert missing.stderr.decode().startswith("error: no session ses_nope")
    assert missing.stdout == b""
    bad = tmp_path / "bad.db"
    bad.write_text("not a database")
    result = run("context", "--db", str(bad), env=priced_env)
    assert result.returncode == 2 and result.stderr.startswith(b"error: ")
    assert b"Traceback" not in result.stderr
    nodb = run("context", "--db", str(tmp_path / "none.db"), env=priced_env)
    assert nodb.returncode == 2 and b"no OpenCode database" in nodb.stderr
    usage = run("context", "--format", "xml", "--db", db, env=priced_env)
    assert usage.returncode == 2


def test_cli_closed_pipe(priced_env: dict):
    cli = " ".join(CLI)
    result = subprocess.run(
        f"{cli} context --db {SAMPLES / 'task' / 'opencode.db'} --format csv --per-inference"
        " | head -1",
        shell=True,
        capture_output=True,
        env=priced_env,
        timeout=60,
    )
    assert result.returncode == 0 and b"Traceback" not in result.stderr


def test_document_is_json_serialisable():

    msgspec.json.encode(report_of("file_tools").document())


@pytest.mark.parametrize("oldest", [False, True])
def test_legacy_json_storage_reads_like_the_database(tmp_path: Path, oldest: bool):
    from tests.test_legacy import write_legacy

    data = tmp_path / "data"
    write_legacy(SAMPLES / "task" / "opencode.db", data, oldest=oldest)
    book = PriceBook([SAMPLES / "task" / "opencode.json"])
    with open_store(str(data)) as store:
        sid = store.sessions(top_level=True)[0].id
        legacy = context_report(store, sid, prices=lambda d: book, servers=lambda d: [])
    expected = report_of("task", sid)
    assert [i.sources for i in legacy.inferences] == [i.sources for i in expected.inferences]
    assert legacy.sources == expected.sources
    assert total_split(legacy) == pytest.approx(expected.cost, rel=REL)


def test_a_prefix_shared_with_a_subagent_names_the_top_level_session(priced_env: dict):
    """OpenCode's ids start with the time, so a session and its subagents share a prefix;
    in every command it names the only top-level session among its matches (a subagent
    is named by more of its id)."""
    db = str(SAMPLES / "task" / "opencode.db")
    ids = [row[0] for row in sqlite3.connect(db).execute("SELECT id FROM session")]
    prefix = "ses_dd80"
    assert len([i for i in ids if i.startswith(prefix)]) == 2
    result = run("context", prefix, "--db", db, "--format", "json", env=priced_env)
    assert result.returncode == 0, result.stderr
    (top,) = sqlite3.connect(db).execute("SELECT id FROM session WHERE parent_id IS NULL")
    assert json.loads(result.stdout)["session_id"] == top[0]
    imported = run("import", prefix, "--db", db, "--no-metrics", env=priced_env)
    assert {e["session_id"] for e in map(json.loads, imported.stdout.splitlines())} == {top[0]}
    used = run("usage", "--session", prefix, "--db", db, "--format", "json", env=priced_env)
    assert json.loads(used.stdout)["rows"][0]["subagent_cost"]  # the parent's turn
    (child,) = sqlite3.connect(db).execute("SELECT id FROM session WHERE parent_id IS NOT NULL")
    longer = child[0][: next(i for i in range(len(child[0])) if child[0][i] != top[0][i]) + 1]
    imported = run("import", longer, "--db", db, "--no-metrics", env=priced_env)
    assert {e["session_id"] for e in map(json.loads, imported.stdout.splitlines())} == {child[0]}


def test_computed_costs_are_written_as_the_docs_show_them(priced_env: dict, tmp_path: Path):
    """A split cost is a computed float: written to 12 significant digits, as `usage` writes
    a sum of costs, so docs/context.md's figures are what the command prints."""
    db = tmp_path / "opencode.db"
    shutil.copyfile(SAMPLES / "task" / "opencode.db", db)
    result = run("context", "--db", str(db), "--format", "json", env=priced_env)
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)
    assert document["inferences"][0]["source_costs"] == {"system": 0.011985, "user": 1.5e-05}
    assert document["output"] == {"tokens": 134, "cost": 0.00201}
    costs = [s["cost"] for s in document["sources"]] + [document["output"]["cost"]]
    costs.append(document["cost"])  # the session's and its subagent's, summed
    for inference in document["inferences"]:
        costs += inference["source_costs"].values()
    assert all(cost == float(f"{cost:.12g}") for cost in costs)
    doc = (ROOT / "docs" / "context.md").read_text()
    assert '"source_costs": {"system": 0.011985, "user": 1.5e-05}' in doc
    assert '"output": {"tokens": 134, "cost": 0.00201}' in doc


@pytest.mark.parametrize("name", ["bash_ok", "mcp", "task", "text"])
def test_the_cost_is_written_as_sessions_and_usage_write_the_session(name, priced_env):
    """A session's stored cost is OpenCode's running sum (0.0063750000000000005 for two
    inferences): `context` writes it as `sessions` and `usage --by session` do."""
    db = str(SAMPLES / name / "opencode.db")
    context = run("context", "--db", db, "--format", "json", env=priced_env)
    assert context.returncode == 0, context.stderr
    doc = json.loads(context.stdout)
    listed = json.loads(run("sessions", "--db", db, "--format", "json", env=priced_env).stdout)
    (row,) = [s for s in listed if s["id"] == doc["session_id"]]
    used = run("usage", "--db", db, "--session", doc["session_id"], "--by", "session", "-j")
    assert doc["cost"] == row["total_cost"] == json.loads(used.stdout)["total"]["cost"]


def test_a_reply_of_nothing_on_an_unpriced_model_leaves_the_output_priced(
    priced_env, tmp_path: Path
):
    """A failed attempt (no tokens, no cost) naming a model without a price has nothing to
    split: the output cost stays, and nothing is said of the model."""
    db = tmp_path / "opencode.db"
    shutil.copyfile(SAMPLES / "command_subtask" / "opencode.db", db)
    before = json.loads(run("context", "--db", str(db), "-j", env=priced_env).stdout)
    with sqlite3.connect(db) as conn:
        (nothing,) = conn.execute(
            "SELECT id FROM message WHERE json_extract(data, '$.role') = 'assistant' "
            "AND json_extract(data, '$.cost') = 0 "
            "AND json_extract(data, '$.tokens.input') + json_extract(data, '$.tokens.output') "
            "+ json_extract(data, '$.tokens.cache.read') = 0"
        ).fetchone()
        conn.execute(
            "UPDATE message SET data = json_set(data, '$.providerID', 'elsewhere', "
            "'$.modelID', 'unpriced') WHERE id = ?",
            (nothing,),
        )
    after = run("context", "--db", str(db), "-j", env=priced_env)
    assert after.returncode == 0 and after.stderr == b""
    assert json.loads(after.stdout)["output"] == before["output"]


def test_a_model_id_s_control_characters_are_shown_in_the_note(priced_env, tmp_path: Path):
    db = tmp_path / "opencode.db"
    with_every_reply_set(db, "bash_ok", "$.modelID", "'evil' || char(27) || '[2J'")
    done = run("context", "--db", str(db), "-j", env=priced_env)
    assert done.returncode == 0 and b"\x1b" not in done.stderr
    assert "evil\\x1b[2J" in done.stderr.decode()


def test_a_model_without_a_price_that_charged_nothing_is_split_exactly():
    """Its messages cost 0: every source's share of them is 0, and the priced model's split
    stands (it was all lost to `null` before)."""
    messages = [
        LedgerMessage(id="u1", role="user", additions=[Addition("user", 40)]),
        LedgerMessage(
            id="a1", role="assistant", input=1000, output=10, cost=0.01, model_id="priced"
        ),
        LedgerMessage(id="u2", role="user", additions=[Addition("user", 40)]),
        LedgerMessage(id="a2", role="assistant", input=1200, output=10, cost=0, model_id="free"),
        LedgerMessage(id="u3", role="user", additions=[Addition("user", 40)]),
        LedgerMessage(id="a3", role="assistant", input=1300, output=10, cost=0.2, model_id="free"),
    ]
    prices = {"priced": Price(input=5, output=50)}
    ledger = build_ledger(messages, lambda provider, model: prices.get(model))
    first, free, charged = ledger.inferences
    assert sum(first.source_costs.values()) + first.output_cost == pytest.approx(0.01)
    assert free.source_costs == dict.fromkeys(free.sources, 0.0) and free.output_cost == 0.0
    # charged without a price: not split, and named
    assert charged.source_costs is None and ledger.unpriced == ["free"]


def test_the_narrowest_steps_table_still_marks_the_compaction(priced_env: dict):
    """At 80 columns the note column goes first: the mark beside the step stays."""
    text = compaction_table({**priced_env, "COLUMNS": "80"})
    assert "compaction (reset after)" not in text.split("growth:")[0]  # no note column
    assert "│  3 ⟲ │" in text
    assert "⟲ compaction (reset after)" in " ".join(text.split())
