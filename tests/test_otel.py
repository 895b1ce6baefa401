"""`otel`: sessions as OpenTelemetry GenAI traces and metrics (docs/otel.md).

Every body is parsed with the protocol's own protobuf types (tests/otlp_check.py); span
counts and token sums are checked against the store's own rows and events on the real
captures in samples/; the same session read from its stream, export document or server
events gives the same span ids as from the store.
"""

from __future__ import annotations

import gzip
import http.server
import io
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import threading
import tracemalloc
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import opencode_events
from opencode_events.errors import InputError
from opencode_events.otel import export as otel_export
from opencode_events.otel import transport as otel_transport
from opencode_events.otel.export import (
    Summary,
    export,
    store_builder,
    store_sessions,
    stream_sessions,
)
from opencode_events.otel.otlp import SpanBatches, parse_key_values, resource_attributes
from opencode_events.otel.spans import TraceBuilder, span_id_of, trace_id_of
from opencode_events.otel.transport import ExportError, OtlpHttp, endpoints_from
from opencode_events.paths import otlp_environment
from opencode_events.sources.stream import CHUNK_SIZE
from opencode_events.store.open import every_session
from opencode_events.store.sqlite import Store
from tests.otlp_check import OtlpError, attrs, check, spans_of

SAMPLES = Path(__file__).resolve().parents[1] / "samples"
STORES = sorted(p.parent.name for p in SAMPLES.glob("*/opencode.db"))
CMD = [sys.executable, "-m", "opencode_events"]


def store_export(name: str, ids: list[str] | None = None, **kw) -> tuple[list[dict], Summary]:
    bodies: list[bytes] = []
    with Store(SAMPLES / name / "opencode.db") as store:
        ids = ids if ids is not None else every_session(store)
        builder = store_builder(store)
        summary = export(
            store_sessions(store, ids, builder),
            builder,
            lambda signal, body: bodies.append(body),
            **kw,
        )
    return [json.loads(b) for b in bodies], summary


def file_export(*paths: Path, **kw) -> list[dict]:
    bodies: list[bytes] = []
    inputs = [(str(p), open(p, "rb")) for p in paths]  # noqa: SIM115 - closed below
    try:
        builder = TraceBuilder()
        export(stream_sessions(inputs, builder), builder, lambda s, b: bodies.append(b), **kw)
    finally:
        for _, stream in inputs:
            stream.close()
    return [json.loads(b) for b in bodies]


def all_spans(docs: list[dict]) -> list[dict]:
    return [span for doc in docs for span in spans_of(doc)]


def store_rows(name: str, sql: str) -> list[tuple]:
    with sqlite3.connect(f"file:{SAMPLES / name / 'opencode.db'}?mode=ro", uri=True) as db:
        return db.execute(sql).fetchall()


def events_of(name: str) -> list[dict]:
    result = subprocess.run(
        [*CMD, "import", "--db", str(SAMPLES / name / "opencode.db"), "--all", "--no-metrics"],
        capture_output=True,
        check=True,
    )
    return [json.loads(line) for line in result.stdout.splitlines()]


# -------------------------------------------------------------- the protocol's own types


@pytest.mark.parametrize("name", STORES)
def test_every_body_parses_as_the_protocols_types(name):
    docs, summary = store_export(name)
    assert docs, "no body written"
    for doc in docs:
        check(doc)
    assert "resourceMetrics" in docs[-1]
    assert summary.spans == len(all_spans(docs))


@pytest.mark.parametrize(
    "broken, why",
    [
        (lambda s: s.update(traceId="zz" * 16), "hex"),
        (lambda s: s.update(spanId=s["spanId"][:8]), "16-digit"),
        (lambda s: s.update(kind="SPAN_KIND_CLIENT"), "enum"),
        (lambda s: s.update(start_time_unix_nano=s.pop("startTimeUnixNano")), "snake_case"),
        (lambda s: s.update(startTimeUnixNano=int(s["startTimeUnixNano"])), "decimal string"),
        (lambda s: s.update(nmae=s.pop("name")), "nmae"),
    ],
)
def test_the_check_catches_what_protobuf_alone_lets_through(broken, why):
    (doc, _metrics), _ = store_export("text")
    broken(spans_of(doc)[0])
    with pytest.raises(OtlpError, match=why):
        check(doc)


# ------------------------------------------------------------------ spans and the store


def usage_report(name: str) -> dict:
    """`usage --all --by session` of a sample: every top-level session with its subagents
    folded in, a fork's copied history not counted again."""
    db = SAMPLES / name / "opencode.db"
    result = subprocess.run(
        [*CMD, "usage", "--db", str(db), "--all", "--by", "session", "--format", "json"],
        capture_output=True,
        check=True,
    )
    return json.loads(result.stdout)


def gen_ai_sums(spans: list[dict]) -> dict[str, float]:
    sums = dict.fromkeys(("input", "output", "read", "write", "reasoning", "cost"), 0)
    for span in spans:
        values = attrs(span)
        if "gen_ai.usage.input_tokens" not in values:
            continue
        sums["input"] += values["gen_ai.usage.input_tokens"]
        sums["output"] += values["gen_ai.usage.output_tokens"]
        sums["read"] += values["gen_ai.usage.cache_read.input_tokens"]
        sums["write"] += values["gen_ai.usage.cache_write.input_tokens"]
        assert (
            values["gen_ai.usage.cache_creation.input_tokens"]
            == values["gen_ai.usage.cache_write.input_tokens"]
        )
        sums["reasoning"] += values["gen_ai.usage.reasoning.output_tokens"]
        sums["cost"] += values["gen_ai.usage.cost"]
    return sums


def usage_sums(row: dict) -> dict[str, float]:
    """A usage row in the conventions' terms: input with the cache, output with reasoning."""
    return {
        "input": row["input_tokens"] + row["cache_read_tokens"] + row["cache_write_tokens"],
        "output": row["output_tokens"] + row["reasoning_tokens"],
        "read": row["cache_read_tokens"],
        "write": row["cache_write_tokens"],
        "reasoning": row["reasoning_tokens"],
        "cost": pytest.approx(row["cost"], rel=1e-9, abs=1e-12),
    }


@pytest.mark.parametrize("name", STORES)
def test_span_counts_follow_the_events(name):
    events = events_of(name)
    spans = all_spans(store_export(name)[0])
    by_op: dict[str, int] = {}
    for span in spans:
        op = attrs(span)["gen_ai.operation.name"]
        by_op[op] = by_op.get(op, 0) + 1
    sessions = store_rows(name, "SELECT count(*) FROM session")[0][0]
    copied = forked_copies(name)
    calls = {  # a call code mode's script made shares its execute call's part: one each
        (e["session_id"], e["part_id"], e.get("via") and e["call_id"])
        for e in events
        if e.get("tool") is not None and e["message_id"] not in copied
    }
    inferences = {
        (e["session_id"], e["message_id"])
        for e in events
        if e["kind"] == "usage" and e["message_id"] not in copied
    }
    failed = {(e["session_id"], e["message_id"]) for e in events if e["kind"] == "error"}
    assert by_op.get("invoke_agent", 0) == sessions
    assert by_op.get("execute_tool", 0) == len(calls)
    assert by_op.get("chat", 0) == len(inferences | {f for f in failed if f[1]})
    # usage counts every assistant message; one that never ran a step (an interrupted
    # reply, a command's stand-in: no tokens) is no inference span
    assert len(inferences) <= usage_report(name)["total"]["inferences"]
    assert len({s["spanId"] for s in spans}) == len(spans), "span ids are unique"


def forked_copies(name: str) -> set[str]:
    """Message ids of a fork's copied history: messages older than their own session."""
    rows = store_rows(
        name,
        "SELECT m.id FROM message m JOIN session s ON s.id = m.session_id"
        " WHERE m.time_created < s.time_created",
    )
    return {mid for (mid,) in rows}


@pytest.mark.parametrize("name", STORES)
def test_each_trace_totals_equal_usage_by_session(name):
    """A trace is a top-level session with its subagents: its chat spans add up to the
    session's row of `usage --all --by session`, with the conventions' token rule — input
    includes the cache (read and write), output the reasoning — and OpenCode's cost."""
    report = usage_report(name)
    spans = all_spans(store_export(name)[0])
    by_trace: dict[str, list[dict]] = {}
    for span in spans:
        by_trace.setdefault(span["traceId"], []).append(span)
    for row in report["rows"]:
        assert gen_ai_sums(by_trace.pop(trace_id_of(row["session_id"]))) == usage_sums(row)
    assert by_trace == {}
    assert gen_ai_sums(spans) == usage_sums(report["total"])


@pytest.mark.parametrize("name", [n for n in STORES if n != "fork"])
def test_token_sums_equal_the_store_rows(name):
    """Without forks (whose session row counts the copied history again), the store's own
    session columns say the same."""
    ((input_, output, read, write, reasoning, cost),) = store_rows(
        name,
        "SELECT sum(tokens_input + tokens_cache_read + tokens_cache_write),"
        " sum(tokens_output + tokens_reasoning), sum(tokens_cache_read),"
        " sum(tokens_cache_write), sum(tokens_reasoning), sum(cost) FROM session",
    )
    sums = gen_ai_sums(all_spans(store_export(name)[0]))
    assert (sums["input"], sums["output"], sums["read"], sums["write"], sums["reasoning"]) == (
        input_,
        output,
        read,
        write,
        reasoning,
    )
    assert sums["cost"] == pytest.approx(cost, rel=1e-12)


@pytest.mark.parametrize("name", STORES)
def test_metric_counters_equal_usage(name):
    docs, _ = store_export(name)
    (metrics,) = [d for d in docs if "resourceMetrics" in d]
    by_name = {m["name"]: m for m in metrics["resourceMetrics"][0]["scopeMetrics"][0]["metrics"]}
    none = {"sum": {"dataPoints": []}}  # a metric with no point is left out
    tokens: dict[str, int] = {}
    for point in by_name.get("opencode.token.usage", none)["sum"]["dataPoints"]:
        kind = attrs(point)["type"]
        tokens[kind] = tokens.get(kind, 0) + int(point["asInt"])
    total = usage_report(name)["total"]
    expected = {
        "input": total["input_tokens"],
        "output": total["output_tokens"],
        "reasoning": total["reasoning_tokens"],
        "cacheRead": total["cache_read_tokens"],
        "cacheCreation": total["cache_write_tokens"],
    }
    assert tokens == expected or (tokens == {} and not any(expected.values()))
    cost_points = by_name.get("opencode.cost.usage", none)["sum"]["dataPoints"]
    assert sum(p["asDouble"] for p in cost_points) == pytest.approx(total["cost"], rel=1e-12)
    sessions = by_name["opencode.session.count"]["sum"]["dataPoints"]
    count = store_rows(name, "SELECT count(*) FROM session")[0][0]
    assert sum(int(p["asInt"]) for p in sessions) == count
    # Sessions an older OpenCode wrote (imported into the database by 1.2: legacy_mixed)
    # name no model in their row; their session count names their first step's, as the
    # same session read from its JSON files does.
    for metric in by_name.values():
        if not metric["name"].startswith("opencode."):
            continue  # the conventions' histograms: test_gen_ai_histograms_equal_the_chat_spans
        assert metric["sum"]["aggregationTemporality"] == 2 and metric["sum"]["isMonotonic"]
        for point in metric["sum"]["dataPoints"]:
            assert {"model", "agent", "provider"} <= set(attrs(point)), (metric["name"], point)


TOKEN_BUCKETS = [1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304,
                 16777216, 67108864]  # fmt: skip
DURATION_BUCKETS = [0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48,
                    40.96, 81.92]  # fmt: skip


def _expected_histogram(values: list[float], bounds: list[float]) -> dict[str, Any]:
    """What a cumulative histogram of ``values`` holds (the conventions' buckets: a value
    equal to a bound counts in the bucket it closes)."""
    buckets = [0] * (len(bounds) + 1)
    for value in values:
        buckets[next((i for i, bound in enumerate(bounds) if value <= bound), len(bounds))] += 1
    return {
        "count": len(values),
        "sum": pytest.approx(sum(values), rel=1e-12),
        "min": min(values),
        "max": max(values),
        "buckets": buckets,
        "bounds": bounds,
    }


def _histogram(point: dict) -> dict[str, Any]:
    return {
        "count": int(point["count"]),
        "sum": point["sum"],
        "min": point["min"],
        "max": point["max"],
        "buckets": [int(b) for b in point["bucketCounts"]],
        "bounds": point["explicitBounds"],
    }


@pytest.mark.parametrize("name", STORES)
def test_gen_ai_histograms_equal_the_chat_spans(name):
    """``gen_ai.client.token.usage`` and ``gen_ai.client.operation.duration``, as the GenAI
    conventions define them: one measurement per ``chat`` span, its tokens as the span's
    ``gen_ai.usage.*_tokens`` say and its duration its span's, by the span's provider,
    model (and error type), in their advised buckets."""
    docs, _ = store_export(name)
    (metrics,) = [d for d in docs if "resourceMetrics" in d]
    check(metrics)
    by_name = {m["name"]: m for m in metrics["resourceMetrics"][0]["scopeMetrics"][0]["metrics"]}
    tokens: dict[tuple, list[float]] = {}
    durations: dict[tuple, list[float]] = {}
    for span in all_spans(docs):
        found = attrs(span)
        if found.get("gen_ai.operation.name") != "chat":
            continue
        labels = tuple(
            (key, found[key])
            for key in ("gen_ai.provider.name", "opencode.provider.id", "gen_ai.request.model")
            if key in found
        )
        for kind in ("input", "output"):
            if f"gen_ai.usage.{kind}_tokens" in found:
                key = (*labels, ("gen_ai.token.type", kind))
                tokens.setdefault(key, []).append(found[f"gen_ai.usage.{kind}_tokens"])
        if span.get("status", {}).get("code") == 2:
            labels = (*labels, ("error.type", found["error.type"]))
        seconds = (int(span["endTimeUnixNano"]) - int(span["startTimeUnixNano"])) / 1e9
        durations.setdefault(labels, []).append(seconds)

    def points(metric: str) -> dict[tuple, dict[str, Any]]:
        found = by_name.get(metric, {"histogram": {"dataPoints": []}})["histogram"]
        assert found.get("aggregationTemporality", 2) == 2  # cumulative
        return {
            tuple(
                sorted((k, v) for k, v in attrs(p).items() if k != "gen_ai.operation.name")
            ): _histogram(p)
            for p in found["dataPoints"]
            if attrs(p)["gen_ai.operation.name"] == "chat"
        }

    assert points("gen_ai.client.token.usage") == {
        tuple(sorted(key)): _expected_histogram(values, TOKEN_BUCKETS)
        for key, values in tokens.items()
    }
    assert points("gen_ai.client.operation.duration") == {
        tuple(sorted(key)): _expected_histogram(values, DURATION_BUCKETS)
        for key, values in durations.items()
    }
    if tokens:
        assert by_name["gen_ai.client.token.usage"]["unit"] == "{token}"
        assert by_name["gen_ai.client.operation.duration"]["unit"] == "s"


def test_a_session_whose_row_names_no_model_is_named_by_its_steps():
    """legacy_mixed's sessions OpenCode 1.2 moved in from JSON files keep no model column:
    the invoke_agent span names the model and provider of its steps, as from the files."""
    (moved,) = store_rows(
        "legacy_mixed", "SELECT id FROM session WHERE model IS NULL ORDER BY id LIMIT 1"
    )
    docs, _ = store_export("legacy_mixed", [moved[0]])
    (session,) = [s for s in all_spans(docs) if s["name"].startswith("invoke_agent")]
    chats = [attrs(s) for s in all_spans(docs) if s["name"].startswith("chat")]
    assert chats and attrs(session)["gen_ai.request.model"] == chats[0]["gen_ai.request.model"]
    assert attrs(session)["gen_ai.provider.name"] == chats[0]["gen_ai.provider.name"]


@pytest.mark.parametrize(
    ("opencode_id", "named", "beside"),
    [
        ("amazon-bedrock", "aws.bedrock", "amazon-bedrock"),
        ("google-vertex", "gcp.vertex_ai", "google-vertex"),
        ("xai", "x_ai", "xai"),
        ("moonshotai", "moonshot_ai", "moonshotai"),  # listed since the conventions' move
        ("moonshotai-cn", "moonshot_ai", "moonshotai-cn"),
        ("anthropic", "anthropic", None),  # the same in both: no second attribute
        ("mock", "mock", None),  # no name in the conventions: OpenCode's id as it is
    ],
)
def test_the_provider_is_named_as_the_genai_conventions_name_it(
    tmp_path, opencode_id, named, beside
):
    """``gen_ai.provider.name``: where the conventions list a provider, that name MUST be
    used; OpenCode's own id goes beside it (``opencode.provider.id``, the metrics' label)."""
    document = tmp_path / "export.json"
    text = (SAMPLES / "read_missing" / "export.json").read_text()
    document.write_text(text.replace('"providerID": "mock"', f'"providerID": "{opencode_id}"'))
    spans = all_spans(file_export(document))
    chats = [attrs(s) for s in spans if s["name"].startswith(("chat", "invoke_agent"))]
    assert chats
    for found in chats:
        assert found["gen_ai.provider.name"] == named
        assert found.get("opencode.provider.id") == beside


def test_a_huge_error_text_is_clipped_so_a_span_fits_a_body_and_a_line(tmp_path):
    """A failed tool's 3 MB error went whole into its span's status: a body past the 4 MiB
    limit (OTLP: the client MUST NOT send it) and a line no Collector file reader takes."""
    stream = tmp_path / "stream.jsonl"
    text = (SAMPLES / "read_missing" / "stream.jsonl").read_text()
    stream.write_text(text.replace("File not found:", "x" * 3_000_000 + " File not found:", 1))
    (doc,) = [d for d in file_export(stream) if "resourceSpans" in d]
    assert len(json.dumps(doc)) < 64 * 1024
    (failed,) = [s for s in spans_of(doc) if s.get("status", {}).get("code") == 2]
    message = failed["status"]["message"]
    assert len(message) == 4096 and message.endswith("…") and message.startswith("xxx")


def test_a_subagent_hangs_from_the_task_call_that_spawned_it_in_one_trace():
    spans = all_spans(store_export("task")[0])
    ((parent_id, child_id),) = store_rows(
        "task", "SELECT parent_id, id FROM session WHERE parent_id IS NOT NULL"
    )
    by_id = {s["spanId"]: s for s in spans}
    (child,) = [
        s
        for s in spans
        if attrs(s).get("gen_ai.conversation.id") == child_id
        and s["name"].startswith("invoke_agent")
    ]
    task = by_id[child["parentSpanId"]]
    assert task["name"] == "execute_tool task"
    assert attrs(task)["opencode.subagent.session_id"] == child_id
    parent = by_id[task["parentSpanId"]]
    assert parent["name"] == "invoke_agent build" and "parentSpanId" not in parent
    assert {s["traceId"] for s in spans} == {trace_id_of(parent_id)}
    assert child["name"] == "invoke_agent general"


def test_a_subagent_exported_alone_still_hangs_from_its_call():
    ((child_id,),) = store_rows("task", "SELECT id FROM session WHERE parent_id IS NOT NULL")
    alone = all_spans(store_export("task", [child_id])[0])
    together = all_spans(store_export("task")[0])
    assert [s for s in together if s["spanId"] in {a["spanId"] for a in alone}] == alone


def test_failed_tools_and_inferences_are_errors_with_their_type():
    spans = all_spans(store_export("mcp")[0])
    failed = [s for s in spans if s.get("status", {}).get("code") == 2]
    assert {attrs(s)["gen_ai.tool.call.id"] for s in failed} == {
        "call_mcp_reject",
        "call_mcp_broken",
    }
    assert all(attrs(s)["error.type"] == "error" for s in failed)
    assert "MCP error -32602" in failed[0]["status"]["message"]

    spans = all_spans(store_export("error400")[0])
    (chat,) = [s for s in spans if s["name"].startswith("chat")]
    assert chat["status"] == {"code": 2, "message": "mock bad request"}
    assert attrs(chat)["error.type"] == "APIError"
    (event,) = chat["events"]
    assert event["name"] == "exception" and attrs(event)["exception.type"] == "APIError"
    (session,) = [s for s in spans if s["name"].startswith("invoke_agent")]
    assert session["status"]["code"] == 2 and attrs(session)["error.type"] == "APIError"


def test_calls_a_code_mode_script_made_are_spans_under_its_execute_call():
    spans = all_spans(store_export("code_mode")[0])
    tools = {attrs(s)["gen_ai.tool.call.id"]: s for s in spans if s["name"].startswith("execute")}
    execute = tools.pop("call_exec")
    assert set(tools) == {"call_exec/1", "call_exec/2"}
    for call in tools.values():
        assert call["parentSpanId"] == execute["spanId"]
        assert attrs(call)["opencode.tool.via"] == "execute"
        assert (call["startTimeUnixNano"], call["endTimeUnixNano"]) == (
            execute["startTimeUnixNano"],
            execute["endTimeUnixNano"],
        )
    assert tools["call_exec/2"]["status"]["code"] == 2  # my-tools_v1_reject failed
    assert "status" not in tools["call_exec/1"] and "status" not in execute


def test_a_call_of_a_tool_that_does_not_exist_is_an_error_span():
    """The one rule of a failed call (``call_failed``), as sessions and metrics count it."""
    spans = all_spans(store_export("invalid_tool")[0])
    (call,) = [s for s in spans if s["name"] == "execute_tool invalid"]
    assert call["status"]["code"] == 2 and attrs(call)["error.type"] == "invalid_tool"


def test_a_command_killed_by_opencode_says_so():
    spans = all_spans(store_export("bash_timeout")[0])
    (bash,) = [s for s in spans if s["name"] == "execute_tool bash"]
    assert attrs(bash)["opencode.command.interrupted"] == "timeout"
    assert "status" not in bash  # a bad exit, not a failed call (docs/otel.md)


def test_mcp_calls_name_their_server(tmp_path, monkeypatch):
    config = tmp_path / "opencode"
    config.mkdir()
    (config / "opencode.json").write_text(json.dumps({"mcp": {"my-tools": {"type": "local"}}}))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    monkeypatch.setenv("HOME", str(tmp_path))
    spans = all_spans(store_export("mcp")[0])
    tools = [attrs(s) for s in spans if s["name"].startswith("execute_tool")]
    assert tools and all(a["opencode.mcp.server"] == "my-tools" for a in tools)
    assert all(a["gen_ai.tool.type"] == "extension" for a in tools)


def test_tool_spans_have_the_calls_own_times():
    (row,) = store_rows(
        "task",
        "SELECT json_extract(data, '$.state.time.start'), json_extract(data, '$.state.time.end')"
        " FROM part WHERE json_extract(data, '$.callID') = 'call_task'",
    )
    (task,) = [s for s in all_spans(store_export("task")[0]) if s["name"] == "execute_tool task"]
    assert (int(task["startTimeUnixNano"]), int(task["endTimeUnixNano"])) == (
        row[0] * 1_000_000,
        row[1] * 1_000_000,
    )


_WITH_CALLS = sorted(
    path.parent.name
    for path in SAMPLES.glob("*/stream.jsonl")
    if b'"type":"tool_use"' in path.read_bytes() and (path.parent / "opencode.db").exists()
)


def _outside_every_chat(spans: list[dict]) -> set[str]:
    """The tool spans that no ``chat`` span of their session covers, by span id."""

    def conversation(span: dict) -> Any:
        return attrs(span).get("gen_ai.conversation.id")

    def within(inner: dict, outer: dict) -> bool:
        return int(outer["startTimeUnixNano"]) <= int(inner["startTimeUnixNano"]) and int(
            inner["endTimeUnixNano"]
        ) <= int(outer["endTimeUnixNano"])

    chats = [s for s in spans if s["name"] == "chat"]
    return {
        s["spanId"]
        for s in spans
        if s["name"].startswith("execute_tool ")
        and "opencode.tool.via" not in attrs(s)
        and not any(conversation(c) == conversation(s) and within(s, c) for c in chats)
    }


@pytest.mark.parametrize("name", _WITH_CALLS)
def test_a_streams_chat_spans_cover_their_calls_as_the_stores_do(name):
    """A run stream dates a call when it ended, but its step (and so its ``chat`` span)
    began before the call did: a call outside every chat span from the stream is one
    outside from the store too (a call of no step: a slash command's, a shell's)."""
    from_stream = _outside_every_chat(all_spans(file_export(SAMPLES / name / "stream.jsonl")))
    assert from_stream <= _outside_every_chat(all_spans(store_export(name)[0]))


@pytest.mark.parametrize("name", _WITH_CALLS)
def test_our_own_events_read_again_give_the_calls_spans(name, tmp_path):
    """Events normalized from a stream date a call at its end (``line`` says they came
    from one): read again, its span is the call's, as long and no further off than the
    few ms OpenCode took to write the record, not moved later by its whole length."""
    events = tmp_path / "events.jsonl"
    with events.open("wb") as out:
        for event in opencode_events.iter_events(SAMPLES / name / "stream.jsonl"):
            out.write(msgspec.json.encode(event) + b"\n")
    calls = {
        s["spanId"]: (int(s["startTimeUnixNano"]), int(s["endTimeUnixNano"]))
        for s in all_spans(file_export(SAMPLES / name / "stream.jsonl"))
        if s["name"].startswith("execute_tool ") and "opencode.tool.via" not in attrs(s)
    }
    again = {s["spanId"]: s for s in all_spans(file_export(events))}
    for span_id, (start, end) in calls.items():
        read = again[span_id]
        moved = int(read["startTimeUnixNano"]) - start
        assert int(read["endTimeUnixNano"]) - end == moved, span_id  # as long
        assert 0 <= moved <= 100_000_000, (span_id, moved)  # at most 100 ms off


@pytest.mark.parametrize("duration", [1e300, -5, 0])
def test_a_read_back_calls_duration_no_call_has_is_no_length(tmp_path, duration):
    """Our own events read again, a ``duration_ms`` no call can have (negative, past a
    year) gives a span of no length at the event's time, never a time before 1970."""
    event = {
        "kind": "command", "seq": 0, "session_id": "ses_x", "time": 1000, "line": 1,
        "part_id": "prt_1", "tool": "bash", "call_id": "c", "status": "completed",
        "success": True, "duration_ms": duration, "command": "ls",
    }  # fmt: skip
    path = tmp_path / "events.jsonl"
    path.write_text(json.dumps(event) + "\n")
    docs = file_export(path)
    for doc in docs:
        check(json.dumps(doc))
    (call,) = [s for s in all_spans(docs) if s["name"] == "execute_tool bash"]
    assert (call["startTimeUnixNano"], call["endTimeUnixNano"]) == ("1000000000", "1000000000")


def _numbers(value, wanted):
    """Every integer an OTLP document holds (as a decimal string) under a key ``wanted``
    says yes to: its times, its ``intValue`` and ``asInt``."""
    if isinstance(value, dict):
        for key, item in value.items():
            if wanted(key) and isinstance(item, str):
                yield int(item)
            else:
                yield from _numbers(item, wanted)
    elif isinstance(value, list):
        for item in value:
            yield from _numbers(item, wanted)


@pytest.mark.parametrize("time", [1.7976931348623157e308, -1.7976931348623157e308, 10**400])
@pytest.mark.parametrize("field", ["timestamp", "state.time.end"])
def test_a_record_time_out_of_any_range_is_held_at_the_edge_of_otlps(tmp_path, time, field):
    """A damaged record's time (infinite once made nanoseconds, or past 2^64 ns) ended the
    export in a traceback; it is held at the edge of OTLP's fixed64 instead."""
    lines = (SAMPLES / "parallel_tools" / "stream.jsonl").read_text().splitlines()
    records = [json.loads(line) for line in lines]
    for record in records:
        if record["type"] == "tool_use":
            if field == "timestamp":
                record["timestamp"] = time
            else:
                record["part"]["state"]["time"]["end"] = time
            break
    path = tmp_path / "stream.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    docs = file_export(path)
    for doc in docs:
        check(json.dumps(doc))
    times = [t for doc in docs for t in _numbers(doc, lambda key: key.endswith("TimeUnixNano"))]
    assert times and all(0 <= t < 1 << 64 for t in times)


@pytest.mark.parametrize("edge", [(1 << 63) - 1, -(1 << 63) + 1], ids=["most", "least"])
def test_token_sums_past_int64_are_held_at_its_edge(tmp_path, edge):
    """Each step's count within int64 (the figures' rule counts one beyond it 0), but two
    at its edge add up past it: as it was, the metric's sum made protobuf's JSON parser
    refuse the body, and a collector with it every span of the export."""
    lines = (SAMPLES / "bash_ok" / "stream.jsonl").read_text().splitlines()
    records = [json.loads(line) for line in lines]
    finishes = [r for r in records if r["type"] == "step_finish"]
    assert len(finishes) >= 2
    for finish in finishes:
        finish["part"]["tokens"]["input"] = edge
    path = tmp_path / "stream.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    docs = file_export(path)
    for doc in docs:
        check(json.dumps(doc))
    ints = [n for doc in docs for n in _numbers(doc, lambda key: key in ("intValue", "asInt"))]
    assert ints and all(-(1 << 63) <= n < 1 << 63 for n in ints)
    assert (1 << 63) - 1 in ints if edge > 0 else -(1 << 63) in ints


def test_a_session_row_without_an_id_is_no_trace(tmp_path):
    """`id text PRIMARY KEY` allows NULL: such a row (nothing refers to it) once ended the
    export in a traceback (its trace id of None)."""
    db = tmp_path / "opencode.db"
    shutil.copyfile(SAMPLES / "task" / "opencode.db", db)
    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE session SET id = NULL WHERE parent_id IS NOT NULL")
    for workers in ("1", "2"):
        out = tmp_path / f"otel-{workers}.jsonl"
        done = subprocess.run(
            [*CMD, "otel", "--all", "--db", str(db), "-o", str(out)],
            capture_output=True,
            env={**os.environ, "OPENCODE_EVENTS_WORKERS": workers, "OPENCODE_EVENTS_NO_CACHE": "1"},
            timeout=60,
        )
        assert done.returncode == 0 and b"Traceback" not in done.stderr, done.stderr
        for line in out.read_text().splitlines():
            check(line)


def test_calls_of_two_sessions_sharing_a_part_id_keep_their_own_times(tmp_path):
    """Times are noted per session and part: a copy of a session under another id (as a
    fork copies, or a test generator does) does not lend its calls' times to the first."""
    (line,) = [
        json.loads(text)
        for text in (SAMPLES / "parallel_tools" / "stream.jsonl").read_text().splitlines()
        if '"callID":"call_p_grep"' in text
    ]

    def copy(session: str, shift: int) -> str:
        record = json.loads(json.dumps(line))
        record["sessionID"] = record["part"]["sessionID"] = session
        times = record["part"]["state"]["time"]
        times["start"], times["end"] = times["start"] + shift, times["end"] + 2 * shift
        return json.dumps(record)

    path = tmp_path / "two.jsonl"
    path.write_text(copy("ses_A", 0) + "\n" + copy("ses_B", 5000) + "\n")
    spans = {s["spanId"]: s for s in all_spans(file_export(path))}
    part, times = line["part"]["id"], line["part"]["state"]["time"]
    for session, shift in [("ses_A", 0), ("ses_B", 5000)]:
        span = spans[span_id_of("tool", f"{session}/{part}")]
        assert (int(span["startTimeUnixNano"]), int(span["endTimeUnixNano"])) == (
            (times["start"] + shift) * 1_000_000,
            (times["end"] + 2 * shift) * 1_000_000,
        )


@pytest.mark.parametrize("name", ["task", "parallel_tools", "compaction", "mcp"])
def test_every_span_lies_within_its_session(name):
    """Inferences and calls lie within their session's span. A subagent's session is the
    store's own times: OpenCode creates it a few ms before it stamps the task call's
    start, and the call ends a few ms before the session's last update."""
    spans = all_spans(store_export(name)[0])
    by_id = {s["spanId"]: s for s in spans}
    for span in spans:
        start, end = int(span["startTimeUnixNano"]), int(span["endTimeUnixNano"])
        assert start <= end
        parent = by_id.get(span.get("parentSpanId", ""))
        if parent is None:
            continue
        if parent["name"].startswith("invoke_agent"):
            assert int(parent["startTimeUnixNano"]) <= start
            assert end <= int(parent["endTimeUnixNano"])
        else:  # a subagent's session under its task call
            assert abs(start - int(parent["startTimeUnixNano"])) < 50_000_000
            assert abs(end - int(parent["endTimeUnixNano"])) < 50_000_000


# ---------------------------------------------------------------- ids and idempotence


def test_a_second_export_is_the_same_bytes():
    first, second = store_export("task")[0], store_export("task")[0]
    assert first == second


@pytest.mark.parametrize(
    "name, path",
    [
        ("text", "stream.jsonl"),
        ("parallel_tools", "stream.jsonl"),
        ("mcp", "stream.jsonl"),
        ("task", "stream.jsonl"),
        ("text", "export.json"),
        ("parallel_tools", "export.json"),
        ("serve_text", "events.sse"),
        ("serve_permission", "events.sse"),
    ],
)
def test_a_stream_gives_the_stores_span_ids_and_tokens(name, path):
    """The run stream, an export document and server events name the same messages and
    parts as the store: their spans are the store's (the stream holds no subagent)."""
    from_file = all_spans(file_export(SAMPLES / name / path))
    from_store = {s["spanId"]: s for s in all_spans(store_export(name)[0])}
    assert from_file
    for span in from_file:
        assert span["spanId"] in from_store, span["name"]
        stored = from_store[span["spanId"]]
        assert span["traceId"] == stored["traceId"]
        usage = {k: v for k, v in attrs(span).items() if k.startswith("gen_ai.usage")}
        assert usage == {k: v for k, v in attrs(stored).items() if k.startswith("gen_ai.usage")}
        if span["name"].startswith("execute_tool"):  # the call's own times, from any source
            assert span["startTimeUnixNano"] == stored["startTimeUnixNano"]
            assert span["endTimeUnixNano"] == stored["endTimeUnixNano"]


def test_our_own_events_read_again_give_the_same_spans(tmp_path):
    saved = tmp_path / "events.jsonl"
    saved.write_text("".join(json.dumps(e) + "\n" for e in events_of("parallel_tools")))

    def usage(span: dict) -> dict:
        return {k: v for k, v in attrs(span).items() if k.startswith("gen_ai.usage")}

    again = {s["spanId"]: usage(s) for s in all_spans(file_export(saved))}
    stored = {s["spanId"]: usage(s) for s in all_spans(store_export("parallel_tools")[0])}
    assert again == stored


# ----------------------------------------------------- large files: read twice, held less


def spans_and_counters(docs: list[dict]) -> tuple[dict, list[dict]]:
    """Every span by (trace, span id) with its resource, and the metrics bodies: what an
    export sends, whatever bodies it was cut into and in whatever order."""
    spans: dict[tuple[str, str], tuple[dict, dict]] = {}
    metrics = []
    for doc in docs:
        if "resourceMetrics" in doc:
            metrics.append(doc)
        for resource in doc.get("resourceSpans", []):
            for scope in resource["scopeSpans"]:
                for span in scope["spans"]:
                    key = (span["traceId"], span["spanId"])
                    assert key not in spans, key  # no span sent twice
                    spans[key] = (resource["resource"], span)
    return spans, metrics


def both_ways(monkeypatch, *paths: Path) -> tuple[tuple[dict, list], tuple[dict, list]]:
    """The export of ``paths`` read once (as small inputs are) and read twice."""
    monkeypatch.setattr(otel_export, "TWO_PASSES_BYTES", 1 << 60)
    once = spans_and_counters(file_export(*paths))
    monkeypatch.setattr(otel_export, "TWO_PASSES_BYTES", 0)
    twice = spans_and_counters(file_export(*paths))
    return once, twice


@pytest.fixture(scope="module")
def own_events_of_task(tmp_path_factory) -> Path:
    """Our own events of the ``task`` store: a subagent session and the call that spawned
    it, whose end comes after the subagent's last event."""
    path = tmp_path_factory.mktemp("own") / "task-events.jsonl"
    path.write_text("".join(json.dumps(e) + "\n" for e in events_of("task")))
    return path


@pytest.fixture(scope="module")
def child_first(tmp_path_factory) -> Path:
    """The same events, the subagent's session first, then more than a block read (1 MiB)
    of other sessions, then its parent: the subagent is complete long before the call that
    spawned it is read, and only that call places it in its parent's trace."""
    events = events_of("task")
    children = [json.dumps(e) for e in events if e.get("parent_session_id")]
    parents = [json.dumps(e) for e in events if not e.get("parent_session_id")]
    assert children
    text = [json.dumps(e) for e in events_of("text")]
    sid = json.loads(text[0])["session_id"]
    filler: list[str] = []
    while sum(map(len, filler)) <= CHUNK_SIZE:  # each copy a session of its own
        filler += [line.replace(sid, f"{sid[:-5]}{len(filler):05d}") for line in text]
    path = tmp_path_factory.mktemp("own") / "child-first.jsonl"
    path.write_text("\n".join([*children, *filler, *parents]) + "\n")
    return path


@pytest.mark.parametrize(
    "inputs",
    [
        ["text/stream.jsonl"],
        ["parallel_tools/stream.jsonl"],
        ["task/stream.jsonl"],
        ["mcp/stream.jsonl"],
        ["auto_compact/stream.jsonl"],
        ["compaction/events.sse"],
        ["error400/stream.jsonl"],
        ["text/export.json"],
        ["serve_text/events.sse"],
        ["serve_permission/events.sse"],
        ["fork/stream.jsonl", "text/stream.jsonl", "task/stream.jsonl"],
        ["own"],
        ["child first"],
        ["own", "task/stream.jsonl", "serve_text/events.sse"],
        ["child first", "text/stream.jsonl"],
    ],
)
def test_files_read_twice_give_the_same_spans_and_counters(
    monkeypatch, own_events_of_task, child_first, inputs
):
    made = {"own": own_events_of_task, "child first": child_first}
    paths = [made[i] if i in made else SAMPLES / i for i in inputs]
    once, twice = both_ways(monkeypatch, *paths)
    assert once[0]
    assert twice == once


def test_a_subagent_finished_before_its_parent_still_hangs_from_its_call(monkeypatch, child_first):
    monkeypatch.setattr(otel_export, "TWO_PASSES_BYTES", 0)
    spans = all_spans(file_export(child_first))
    calls = {s["spanId"]: s for s in spans if s["name"] == "execute_tool task"}
    agents = [s for s in spans if s["name"].startswith("invoke_agent") and s.get("parentSpanId")]
    assert calls and agents
    for agent in agents:
        call = calls[agent["parentSpanId"]]
        assert agent["traceId"] == call["traceId"]


class HoldCount(otel_export.SpanCollector):
    made: list[HoldCount] = []

    def __init__(self, builder) -> None:
        super().__init__(builder)
        HoldCount.made.append(self)


def test_a_large_file_holds_only_the_sessions_under_way(monkeypatch, tmp_path):
    run = (SAMPLES / "parallel_tools" / "stream.jsonl").read_text().splitlines()
    sid = json.loads(run[0])["sessionID"]
    lines = []
    for n in range(800):  # 800 runs one after another, each a session of its own
        lines += [line.replace(sid, f"{sid[:-4]}{n:04d}") for line in run]
    path = tmp_path / "runs.jsonl"
    path.write_text("\n".join(lines) + "\n")
    monkeypatch.setattr(otel_export, "SpanCollector", HoldCount)
    HoldCount.made.clear()
    once, twice = both_ways(monkeypatch, path)
    assert twice == once
    read_once, read_twice = HoldCount.made
    assert read_once.most_held == 800  # every session held until the input ends
    # Read twice: the sessions whose events came in one block read (1 MiB), no more.
    per_block = CHUNK_SIZE // (path.stat().st_size // 800) + 2
    assert read_twice.most_held <= per_block < 800 / 2


class Trickle:
    """A file read at most ``piece`` bytes at a time: blocks this small end sessions in
    every batch, which 1 MiB blocks do only on large inputs."""

    def __init__(self, path: Path, piece: int) -> None:
        self._file, self._piece = open(path, "rb"), piece  # noqa: SIM115 - closed below

    def read(self, size: int = -1) -> bytes:
        return self._file.read(self._piece if size < 0 else min(size, self._piece))

    def fileno(self) -> int:
        return self._file.fileno()

    def tell(self) -> int:
        return self._file.tell()

    def seek(self, offset: int) -> int:
        return self._file.seek(offset)

    def close(self) -> None:
        self._file.close()


def trickled(paths: list[Path], piece: int, two_passes: int) -> tuple[dict, list]:
    """The export of ``paths`` read ``piece`` bytes at a time, once or twice."""
    before = otel_export.TWO_PASSES_BYTES
    otel_export.TWO_PASSES_BYTES = two_passes
    inputs = [(str(p), Trickle(p, piece)) for p in paths]
    bodies: list[bytes] = []
    try:
        builder = TraceBuilder()
        export(stream_sessions(inputs, builder), builder, lambda s, b: bodies.append(b))
    finally:
        otel_export.TWO_PASSES_BYTES = before
        for _, stream in inputs:
            stream.close()
    return spans_and_counters([json.loads(b) for b in bodies])


RUNS = ["text", "parallel_tools", "task", "mcp", "bash_fail", "reasoning", "apply_patch"]


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.sampled_from(RUNS), min_size=1, max_size=6),
    st.randoms(use_true_random=False),
    st.integers(1, 3),
    st.integers(40, 2000),
)
def test_any_interleaving_of_runs_read_twice_gives_the_same_spans(
    tmp_path_factory, names, rnd, files, piece
):
    """Runs interleaved line by line (a session leaves and comes back), cut into one to
    three files read a few bytes at a time: read twice, the same spans and counters."""
    runs = []
    for n, name in enumerate(names):  # the same capture twice is two sessions
        lines = (SAMPLES / name / "stream.jsonl").read_text().splitlines()
        sid = json.loads(lines[0])["sessionID"]
        runs.append([line.replace(sid, f"{sid[:-2]}{n:02d}") for line in lines])
    mixed: list[str] = []
    while runs:
        run = rnd.choice(runs)
        mixed.append(run.pop(0))
        if not run:
            runs.remove(run)
    cuts = sorted(rnd.sample(range(1, len(mixed)), min(files - 1, len(mixed) - 1)))
    folder = tmp_path_factory.mktemp("mixed")
    paths = []
    for i, (a, b) in enumerate(zip([0, *cuts], [*cuts, len(mixed)], strict=True)):
        paths.append(folder / f"{i}.jsonl")
        paths[-1].write_text("".join(line + "\n" for line in mixed[a:b]))

    once = trickled(paths, piece, 1 << 60)
    assert once[0]
    assert trickled(paths, piece, 0) == once


def _event(kind: str, session: str, **fields) -> str:
    return json.dumps({"kind": kind, "session_id": f"ses_{session}", **fields})


def _call(session: str, part: str, child: str) -> str:
    fields = {"part_id": part, "tool": "task", "success": True, "child_session_id": f"ses_{child}"}
    return _event("orchestration", session, **fields)


@pytest.mark.parametrize(
    "lines",
    [
        # B and A both claim C; A's session was seen first, B's call came first
        [_event("prompt", "A", text="x"), _call("B", "prt_b1", "C"), _call("A", "prt_a1", "C")]
        + [_event("prompt", "C", text="x")],
        # ... and B ends before C, C after both calls
        [_call("B", "prt_b1", "C"), _call("A", "prt_a1", "C"), _event("prompt", "B", text="x")]
        + [_event("prompt", "C", text="x")],
    ],
)
@pytest.mark.parametrize("piece", [1, 50, 1 << 20])
def test_a_child_two_sessions_claim_hangs_from_the_first_claim_read_once_or_twice(
    tmp_path, lines, piece
):
    """Noted in the stream's order either way: its parent is the session of the first call
    that spawned it, and it hangs from that session's call."""
    path = tmp_path / "claims.jsonl"
    path.write_text("\n".join(lines) + "\n")
    once, twice = trickled([path], piece, 1 << 60), trickled([path], piece, 0)
    assert twice == once
    spans = {span["spanId"]: span for _, span in once[0].values()}
    child = spans[span_id_of("session", "ses_C")]
    assert child["parentSpanId"] == span_id_of("tool", "ses_B/prt_b1")
    assert child["traceId"] == trace_id_of("ses_B")


def test_a_file_rewritten_between_the_readings_is_an_error_not_a_span_twice(monkeypatch, tmp_path):
    path = tmp_path / "rewritten.jsonl"
    line = '{{"kind":"prompt","session_id":"ses_{}","time":1,"text":"x"}}\n'.format
    path.write_text(line("S") + line("T") + line("T"))
    planned = otel_export.plan_sessions

    def plan_then_rewrite(inputs, builder):
        found = planned(inputs, builder)
        path.write_text(line("S") + line("T") + line("S"))  # the same size, S back at the end
        return found

    monkeypatch.setattr(otel_export, "plan_sessions", plan_then_rewrite)
    with pytest.raises(InputError, match="changed while it was read"):
        trickled([path], 10, 0)


def test_a_file_that_grows_meanwhile_is_read_as_the_first_reading_saw_it(monkeypatch, tmp_path):
    path = tmp_path / "growing.jsonl"
    path.write_bytes((SAMPLES / "text" / "stream.jsonl").read_bytes())
    expected = spans_and_counters(file_export(path))
    planned = otel_export.plan_sessions

    def plan_then_grow(inputs, builder):
        found = planned(inputs, builder)
        with open(path, "ab") as f:  # another run appended after the first reading
            f.write((SAMPLES / "task" / "stream.jsonl").read_bytes())
        return found

    monkeypatch.setattr(otel_export, "plan_sessions", plan_then_grow)
    monkeypatch.setattr(otel_export, "TWO_PASSES_BYTES", 0)
    assert spans_and_counters(file_export(path)) == expected


def test_the_commands_unbuffered_inputs_are_read_twice_from_where_they_stand(
    monkeypatch, own_events_of_task, child_first
):
    """``otel -i`` opens its inputs unbuffered (``InputFile``: no ``tell`` nor ``seek``), and
    standard input may be a file already partly read: both are read again by descriptor."""
    from opencode_events.cli.streams import open_inputs

    def export_of(paths: list[Path], skip: int = 0) -> tuple[dict, list]:
        opened = open_inputs(tuple(str(p) for p in paths))
        bodies: list[bytes] = []
        try:
            os.lseek(opened[0][1].fileno(), skip, os.SEEK_SET)
            builder = TraceBuilder()
            export(stream_sessions(opened, builder), builder, lambda s, b: bodies.append(b))
        finally:
            for _, stream in opened:
                stream.close()
        return spans_and_counters([json.loads(b) for b in bodies])

    paths = [child_first, own_events_of_task]
    first_line = len(child_first.read_bytes().split(b"\n")[0]) + 1
    for skip in (0, first_line):
        monkeypatch.setattr(otel_export, "TWO_PASSES_BYTES", 1 << 60)
        once = export_of(paths, skip)
        monkeypatch.setattr(otel_export, "TWO_PASSES_BYTES", 0)
        assert export_of(paths, skip) == once
        assert once[0]


def test_only_regular_files_are_read_twice(tmp_path):
    path = tmp_path / "run.jsonl"
    path.write_bytes((SAMPLES / "text" / "stream.jsonl").read_bytes())
    read_end, write_end = os.pipe()
    with open(path, "rb") as file, open(read_end, "rb") as pipe:
        os.close(write_end)
        assert otel_export._starts_of_files([("f", file)]) is None  # under the size
        file.read(10)
        monkeypatch_size = otel_export.TWO_PASSES_BYTES
        try:
            otel_export.TWO_PASSES_BYTES = 0
            assert otel_export._starts_of_files([("f", file)]) == [10]  # from where it is
            assert otel_export._starts_of_files([("f", file), ("-", pipe)]) is None
            assert otel_export._starts_of_files([("x", io.BytesIO(b"{}"))]) is None
        finally:
            otel_export.TWO_PASSES_BYTES = monkeypatch_size


def test_ids_are_hashes_of_opencodes_ids():
    assert trace_id_of("ses_1") == trace_id_of("ses_1") != trace_id_of("ses_2")
    assert len(trace_id_of("ses_1")) == 32 and len(span_id_of("chat", "ses_1/msg_1")) == 16
    assert span_id_of("chat", "ses_1/x") != span_id_of("tool", "ses_1/x")


# -------------------------------------------------------------------------- batching


def test_bodies_stay_under_the_limit_and_keep_every_span():
    whole, _ = store_export("task", max_bytes=1 << 20)
    small, _ = store_export("task", max_bytes=3000)
    assert len([d for d in small if "resourceSpans" in d]) > 2
    for doc in small:
        check(doc)
        if "resourceSpans" in doc:
            assert len(json.dumps(doc, separators=(",", ":"))) <= 3000
    assert all_spans(small) == all_spans(whole)


def test_a_session_that_fits_is_never_split():
    docs, _ = store_export("task")
    spans_by_session: dict[str, int] = {}
    for span in all_spans(docs):
        sid = attrs(span).get("gen_ai.conversation.id")
        spans_by_session[sid] = spans_by_session.get(sid, 0) + 1
    small, _ = store_export("task", max_bytes=8000)  # the trace is about 11 KB
    assert len(small) == 3  # two bodies of traces, one of metrics
    for doc in small:
        if "resourceSpans" in doc:
            sessions = {attrs(s)["gen_ai.conversation.id"] for s in spans_of(doc)}
            for sid in sessions:
                here = [s for s in spans_of(doc) if attrs(s)["gen_ai.conversation.id"] == sid]
                assert len(here) == spans_by_session[sid]


def test_one_span_larger_than_a_body_goes_alone():
    batches = SpanBatches(max_bytes=100)
    (doc, _), _ = store_export("text")
    spans = spans_of(doc)
    from opencode_events.otel.spans import SpanData

    data = [
        SpanData(
            span_id=s["spanId"],
            trace_id=s["traceId"],
            name=s["name"],
            kind=s["kind"],
            start_ns=int(s["startTimeUnixNano"]),
            end_ns=int(s["endTimeUnixNano"]),
            attributes={},
        )
        for s in spans
    ]
    bodies = [*batches.add({"service.name": "opencode"}, data), *batches.flush()]
    assert len(bodies) == len(spans)
    for body in bodies:
        check(body)


# -------------------------------------------------------------------------- resource


def test_resource_names_the_service_host_version_and_project(monkeypatch):
    monkeypatch.delenv("OTEL_RESOURCE_ATTRIBUTES", raising=False)
    monkeypatch.delenv("OTEL_SERVICE_NAME", raising=False)
    (doc, *_), _ = store_export("text")
    resource = attrs(doc["resourceSpans"][0]["resource"])
    assert resource["service.name"] == "opencode"
    assert resource["service.version"] == "1.18.33"
    assert resource["opencode.project.directory"].endswith("/work")
    assert resource["host.name"]


def test_otel_environment_overrides_the_resource():
    env = {
        "OTEL_RESOURCE_ATTRIBUTES": "deployment.environment=ci,team=a%20b,service.name=x",
        "OTEL_SERVICE_NAME": "agents",
    }
    values = resource_attributes(env=otlp_environment(env))
    assert values["service.name"] == "agents"
    assert values["deployment.environment"] == "ci" and values["team"] == "a b"


@pytest.mark.parametrize(
    "text, expected",
    [
        ("a=1,b=2", {"a": "1", "b": "2"}),
        (" a = 1 , ,junk, b=x%3Dy", {"a": "1", "b": "x=y"}),
        ("Authorization=Basic%20abc", {"Authorization": "Basic abc"}),
        ("", {}),
    ],
)
def test_key_value_lists_as_the_sdks_read_them(text, expected):
    assert parse_key_values(text) == expected


@pytest.mark.parametrize(
    "base, env, expected",
    [
        (
            "http://c:4318",
            {},
            {"traces": "http://c:4318/v1/traces", "metrics": "http://c:4318/v1/metrics"},
        ),
        (
            "http://c:4318/",
            {},
            {"traces": "http://c:4318/v1/traces", "metrics": "http://c:4318/v1/metrics"},
        ),
        (
            None,
            {"OTEL_EXPORTER_OTLP_ENDPOINT": "https://o/otlp"},
            {"traces": "https://o/otlp/v1/traces", "metrics": "https://o/otlp/v1/metrics"},
        ),
        (None, {"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://t/x"}, {"traces": "http://t/x"}),
        # --endpoint given a signal's own URL: its base, not /v1/traces/v1/traces
        (
            "http://c:4318/otlp/v1/traces",
            {},
            {"traces": "http://c:4318/otlp/v1/traces", "metrics": "http://c:4318/otlp/v1/metrics"},
        ),
        (
            "http://c:4318/v1/metrics/",
            {},
            {"traces": "http://c:4318/v1/traces", "metrics": "http://c:4318/v1/metrics"},
        ),
        # a query stays the query: the signal's path goes on the URL's path
        (
            "http://c:4318/?tenant=a",
            {},
            {
                "traces": "http://c:4318/v1/traces?tenant=a",
                "metrics": "http://c:4318/v1/metrics?tenant=a",
            },
        ),
        (
            None,
            {"OTEL_EXPORTER_OTLP_ENDPOINT": "https://o/otlp?k=1"},
            {"traces": "https://o/otlp/v1/traces?k=1", "metrics": "https://o/otlp/v1/metrics?k=1"},
        ),
    ],
)
def test_endpoints_as_the_exporters_build_them(base, env, expected):
    assert endpoints_from(base, otlp_environment(env)) == expected


def test_an_endpoint_that_is_no_url_is_an_error():
    with pytest.raises(ExportError, match="not an http"):
        endpoints_from("localhost:4318")


# ------------------------------------------------------------------------- transport


class Backend:
    """A tiny OTLP/HTTP server on 127.0.0.1 answering with the statuses it is given."""

    def __init__(
        self,
        statuses: list[int],
        headers: dict[str, str] | None = None,
        body: bytes = b"{}",
        content_type: str = "application/json",
        error: bytes = b'{"code":3,"message":"bad spans"}',
    ) -> None:
        self.statuses = list(statuses)
        self.reply_headers = headers or {}
        self.reply_body = body
        self.content_type = content_type
        self.error = error
        self.requests: list[tuple[str, dict[str, str], bytes]] = []
        self.header_lists: list[list[tuple[str, str]]] = []  # as sent, a name twice twice


@contextmanager
def backend(statuses: list[int], **kw) -> Iterator[tuple[Backend, str]]:
    state = Backend(statuses, **kw)

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self) -> None:  # noqa: N802 - http.server's name
            body = self.rfile.read(int(self.headers["Content-Length"]))
            if self.headers.get("Content-Encoding") == "gzip":
                body = gzip.decompress(body)
            state.requests.append((self.path, dict(self.headers), body))
            state.header_lists.append(list(self.headers.items()))
            status = state.statuses.pop(0) if len(state.statuses) > 1 else state.statuses[0]
            reply = state.reply_body if status == 200 else state.error
            self.send_response(status)
            for name, value in state.reply_headers.items():
                self.send_header(name, value)
            self.send_header("Content-Type", state.content_type)
            self.send_header("Content-Length", str(len(reply)))
            self.end_headers()
            self.wfile.write(reply)

        def log_message(self, *args) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield state, f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_retries_on_503_honouring_retry_after():
    waits: list[float] = []
    with backend([503, 503, 200], headers={"Retry-After": "0"}) as (state, url):
        sender = OtlpHttp(endpoints_from(url), sleep=waits.append)
        assert sender.send("traces", b'{"resourceSpans":[]}') is None
    assert waits == [0.0, 0.0]
    assert [r[0] for r in state.requests] == ["/v1/traces"] * 3
    assert state.requests[0][1]["Content-Encoding"] == "gzip"


def test_backoff_without_retry_after_doubles():
    waits: list[float] = []
    with backend([429, 502, 504, 200]) as (_, url):
        OtlpHttp(endpoints_from(url), sleep=waits.append).send("traces", b"{}")
    assert len(waits) == 3
    assert 0.8 <= waits[0] <= 1 and 1.6 <= waits[1] <= 2 and 3.2 <= waits[2] <= 4


@pytest.mark.parametrize("status", [400, 401, 404, 413, 500])
def test_other_refusals_are_not_retried(status):
    with backend([status]) as (state, url), pytest.raises(ExportError) as caught:
        OtlpHttp(endpoints_from(url), sleep=lambda s: None).send("traces", b"{}")
    assert len(state.requests) == 1
    assert f"refused the traces: HTTP {status}" in str(caught.value)
    assert "bad spans" in str(caught.value)


def _gzip_bomb(prefix: bytes, filler: bytes, megabytes: int, suffix: bytes) -> bytes:
    """A small gzip body that unzips to ``megabytes`` MB, made without holding them."""
    zipper = zlib.compressobj(9, zlib.DEFLATED, 31)
    chunks = [zipper.compress(prefix)]
    block = filler * (1 << 20)
    chunks += [zipper.compress(block) for _ in range(megabytes)]
    return b"".join([*chunks, zipper.compress(suffix), zipper.flush()])


def test_a_reply_that_unzips_to_far_more_than_it_says_is_read_only_so_far():
    """A backend's reply is read up to 1 MB; gzip makes that a gigabyte. What a refusal
    says is unzipped no further than a reply can usefully say (and the process's memory
    stays small)."""
    bomb = _gzip_bomb(b'{"code":3,"message":"', b"x", 64, b'"}')
    assert len(bomb) < 1 << 20
    with backend([400], error=bomb, content_type="application/json") as (_, url):
        tracemalloc.start()
        try:
            with pytest.raises(ExportError) as caught:
                OtlpHttp(endpoints_from(url), sleep=lambda s: None).send("traces", b"{}")
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
    assert "refused the traces: HTTP 400" in str(caught.value)
    assert len(str(caught.value)) < 4096
    assert peak < 24 << 20, peak
    assert len(otel_transport._unzipped(bomb)) == otel_transport._MAX_UNZIPPED


def test_a_gzip_reply_is_unzipped_and_a_damaged_one_read_as_none():
    said = b'{"partialSuccess":{"rejectedSpans":"1","errorMessage":"late"}}'
    assert otel_transport._unzipped(gzip.compress(said)) == said
    assert otel_transport._unzipped(said) == said
    assert otel_transport._unzipped(b"\x1f\x8b\x08garbage") is None


def test_a_gzip_reply_in_members_is_read_whole_and_one_cut_short_as_none():
    """As ``gzip.decompress`` read them before the unzip was bounded: a reply gzipped in
    several members (RFC 1952 allows it; zeros may pad them) is all of them, not the first
    alone, and one cut short (no trailer, its bytes never checked) or with bytes after it
    that are no member is damaged: None."""
    said = b'{"code":3,"message":"too many spans in one request"}'
    members = gzip.compress(said[:20]) + gzip.compress(said[20:])
    assert otel_transport._unzipped(members) == said
    assert otel_transport._unzipped(members + b"\x00" * 4) == said
    zipped = gzip.compress(said)
    for cut in (2, 3, 20, len(zipped) - 4, len(zipped) - 1):
        assert otel_transport._unzipped(zipped[:cut]) is None, cut
    assert otel_transport._unzipped(zipped + b"<html>") is None
    reply = gzip.compress(b'{"code":3,') + gzip.compress(b'"message":"late"}')
    assert otel_transport._what_it_said(reply) == "late"


def test_a_partial_success_is_returned_not_retried():
    body = b'{"partialSuccess":{"rejectedSpans":"2","errorMessage":"too old"}}'
    with backend([200], body=body) as (state, url):
        note = OtlpHttp(endpoints_from(url)).send("traces", b"{}")
    assert len(state.requests) == 1
    assert str(note) == "the backend rejected 2 spans: too old"


def test_a_partial_success_that_rejects_none_is_a_warning_not_a_rejection():
    """OTLP: a server may use ``partial_success`` for a warning, with nothing rejected."""
    body = b'{"partialSuccess":{"errorMessage":"attribute names deprecated"}}'
    with backend([200], body=body) as (_, url):
        note = OtlpHttp(endpoints_from(url)).send("metrics", b"{}")
    assert (
        str(note) == "the backend kept all the data points, and warned: attribute names deprecated"
    )


def test_a_header_is_sent_once_whatever_its_case_and_the_body_headers_are_ours():
    """RFC 9110: names are case-insensitive; a second Authorization or Content-Type is a
    request a proxy may refuse."""
    headers = {"authorization": "a", "content-type": "text/plain", "user-agent": "mine"}
    with backend([200]) as (state, url):
        OtlpHttp(endpoints_from(url), headers=headers).send("traces", b"{}")
    sent = [(name.lower(), value) for name, value in state.header_lists[0]]
    names = [name for name, _ in sent]
    assert len(names) == len(set(names)), sent
    assert ("content-type", "application/json") in sent
    assert ("authorization", "a") in sent and ("user-agent", "mine") in sent


@pytest.mark.parametrize("status", [307, 308])
def test_a_redirect_to_the_same_host_is_followed_with_the_body_and_headers(status):
    """RFC 9110: a 307/308 keeps the method and body; a load balancer's move of the path."""
    moved = {"Location": "/otlp/v1/traces?k=1"}
    with backend([status, 200, 200], headers=moved) as (state, url):
        sender = OtlpHttp(endpoints_from(url), headers={"x-key": "s"})
        assert sender.send("traces", b'{"a":1}') is None
        sender.send("traces", b'{"a":2}')
    paths = [path for path, _, _ in state.requests]
    # a 308 is permanent: the next body goes to the new place at once; a 307 is not
    later = "/otlp/v1/traces?k=1" if status == 308 else "/v1/traces"
    assert paths == ["/v1/traces", "/otlp/v1/traces?k=1", later]
    assert state.requests[1][2] == b'{"a":1}' and state.requests[1][1]["x-key"] == "s"


@pytest.mark.parametrize(
    ("location", "path"),
    [
        ("/otlp/caf\u00e9/v1/traces?k=\u20ac", "/otlp/caf%C3%A9/v1/traces?k=%E2%82%AC"),
        ("/otlp/a b/v1/traces", "/otlp/a%20b/v1/traces"),
    ],
)
def test_a_redirect_to_a_path_past_ascii_is_followed_percent_encoded(location, path):
    """A Location's UTF-8 bytes (http.client reads a header as Latin-1) went into the
    request line as they were: UnicodeEncodeError, a traceback (a space: refused as a
    control character, tried 6 times). They go percent-encoded, as curl sends them."""
    utf8 = location.encode().decode("latin-1")
    with backend([307, 200], headers={"Location": utf8}) as (state, url):
        OtlpHttp(endpoints_from(url), sleep=lambda s: None).send("traces", b'{"a":1}')
    paths = [path for path, _, _ in state.requests]
    assert paths == ["/v1/traces", path]
    assert state.requests[1][2] == b'{"a":1}'


@pytest.mark.parametrize(
    ("status", "location", "said"),
    [
        (307, "http://localhost:{port}/v1/traces", "not followed"),  # another host name
        (308, "http://u:p@elsewhere.test/v1/traces?key=s", "not followed"),
        (301, "/otlp/v1/traces", "would be a GET"),
        (302, "/otlp/v1/traces", "would be a GET"),
        (303, "/otlp/v1/traces", "would be a GET"),
    ],
)
def test_a_redirect_that_would_move_the_headers_or_drop_the_body_is_an_error(
    status, location, said
):
    with backend([status], headers={"Location": "x"}) as (state, url):
        port = url.rsplit(":", 1)[1]
        state.reply_headers["Location"] = location.format(port=port)
        with pytest.raises(ExportError) as caught:
            OtlpHttp(endpoints_from(url), sleep=lambda s: None).send("traces", b"{}")
    message = str(caught.value)
    assert len(state.requests) == 1
    assert f"HTTP {status}" in message and said in message
    assert "u:p" not in message and "key=s" not in message  # a credential never printed


def test_a_redirect_loop_ends_in_an_error():
    with (
        backend([307], headers={"Location": "/v1/traces"}) as (state, url),
        pytest.raises(ExportError, match="redirected more than 5 times"),
    ):
        OtlpHttp(endpoints_from(url)).send("traces", b"{}")
    assert len(state.requests) == 6


@pytest.mark.parametrize(
    ("url", "moved", "followed"),
    [
        ("http://c:4318/v1/traces", "https://c/v1/traces", True),  # the upgrade to TLS
        ("https://c/v1/traces", "http://c/v1/traces", False),  # never back to plain text
        ("http://c:4318/v1/traces", "http://C:4319/v1/traces", True),  # host names any case
        ("http://c/v1/traces", "ftp://c/v1/traces", False),
        ("http://c/v1/traces", "http://c.evil/v1/traces", False),
    ],
)
def test_which_redirects_are_followed(url, moved, followed):
    assert otel_transport._may_follow(url, moved, 307) is followed
    assert otel_transport._may_follow(url, moved, 301) is False


def test_an_unreachable_backend_is_retried_then_an_error():
    import socket

    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
    waits: list[float] = []
    sender = OtlpHttp(endpoints_from(f"http://127.0.0.1:{port}"), retries=2, sleep=waits.append)
    with pytest.raises(ExportError, match=r"cannot reach .*\(after 3 attempts\)"):
        sender.send("traces", b"{}")
    assert len(waits) == 2


# ------------------------------------------------------------------------------- CLI


def run(args: list[str], env: dict[str, str] | None = None, stdin: bytes = b""):
    import os

    base = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    return subprocess.run(
        [*CMD, *args], input=stdin, capture_output=True, timeout=120, env={**base, **(env or {})}
    )


def test_cli_writes_json_lines_to_stdout():
    result = run(["otel", "--db", str(SAMPLES / "task" / "opencode.db"), "--all"])
    assert result.returncode == 0, result.stderr
    assert result.stderr == b""
    lines = result.stdout.splitlines()
    assert ["resourceSpans" in json.loads(line) for line in lines] == [True, False]
    for line in lines:
        check(line)


@pytest.mark.parametrize(
    ("args", "note"),
    [
        # cron: stdin is no terminal, and empty
        (
            [],
            "note: no session with events in stdin: nothing exported; for stored sessions "
            "give --last, SESSION, --since or --all",
        ),
        (  # a run stopped before any event: its session is named, but nothing to export
            ["-i", str(SAMPLES / "sigint" / "stream.jsonl")],
            "note: no session with events in the input: nothing exported; for stored "
            "sessions give --last, SESSION, --since or --all",
        ),
        (
            ["--db", str(SAMPLES / "task" / "opencode.db"), "--since", "2100-01-01"],
            "note: no session chosen (none active in that window?): nothing exported",
        ),
    ],
)
def test_cli_says_when_it_had_nothing_to_export(args, note):
    result = run(["otel", *args])
    assert (result.returncode, result.stdout, result.stderr.decode()) == (0, b"", note + "\n")


def test_cli_takes_a_file_or_an_endpoint_not_both(tmp_path):
    out = tmp_path / "spans.jsonl"
    db = str(SAMPLES / "task" / "opencode.db")
    result = run(["otel", "--db", db, "-o", str(out), "--endpoint", "http://127.0.0.1:9"])
    assert result.returncode == 2 and not out.exists()
    assert b"give -o FILE or --endpoint URL, not both" in result.stderr


def test_cli_reads_a_pipe_and_writes_a_file(tmp_path):
    out = tmp_path / "traces.jsonl"
    stream = (SAMPLES / "parallel_tools" / "stream.jsonl").read_bytes()
    result = run(["otel", "-o", str(out), "--only", "traces"], stdin=stream)
    assert result.returncode == 0, result.stderr
    (line,) = out.read_bytes().splitlines()
    assert len(spans_of(json.loads(line))) == 1 + 2 + 4  # session, 2 inferences, 4 calls


def test_cli_posts_to_the_endpoint_with_headers():
    with backend([200]) as (state, url):
        result = run(
            ["otel", "--db", str(SAMPLES / "task" / "opencode.db"), "--all", "-H", "x-team=a"],
            env={"OTEL_EXPORTER_OTLP_ENDPOINT": url, "OTEL_EXPORTER_OTLP_HEADERS": "api-key=k%201"},
        )
    assert result.returncode == 0, result.stderr
    assert result.stdout == b""
    assert [r[0] for r in state.requests] == ["/v1/traces", "/v1/metrics"]
    headers = state.requests[0][1]
    assert headers["api-key"] == "k 1" and headers["x-team"] == "a"
    assert headers["Content-Type"] == "application/json"
    assert (
        len(spans_of(json.loads(state.requests[0][2]))) == 2 + 5 + 3
    )  # sessions, inferences, calls
    assert b"2 sessions, 10 spans in 2 requests to http://127.0.0.1" in result.stderr


def test_cli_a_header_flag_replaces_the_environments_of_that_name_in_any_case():
    """``-H`` is added to ``OTEL_EXPORTER_OTLP_HEADERS`` and wins over a header of the same
    name there, in whatever case it is spelled: one Authorization goes, -H's."""
    with backend([200]) as (state, url):
        result = run(
            [*("otel", "--db", str(SAMPLES / "text" / "opencode.db"), "--all", "--only"), "traces"]
            + ["-H", "Authorization=Bearer cli"],
            env={
                "OTEL_EXPORTER_OTLP_ENDPOINT": url,
                "OTEL_EXPORTER_OTLP_HEADERS": "authorization=Bearer%20env,x-a=1",
            },
        )
    assert result.returncode == 0, result.stderr
    sent = [(name.lower(), value) for name, value in state.header_lists[0]]
    assert [value for name, value in sent if name == "authorization"] == ["Bearer cli"]
    assert ("x-a", "1") in sent


def test_cli_each_signals_own_variables_over_the_general_ones():
    """``OTEL_EXPORTER_OTLP_{TRACES,METRICS}_{HEADERS,COMPRESSION}`` (the OpenTelemetry
    spec's per-signal options): a signal's own value replaces the general one, for it alone
    (Honeycomb's metrics take their dataset in a header the traces must not carry)."""
    with backend([200]) as (state, url):
        result = run(
            ["otel", "--db", str(SAMPLES / "text" / "opencode.db"), "--all"],
            env={
                "OTEL_EXPORTER_OTLP_ENDPOINT": url,
                "OTEL_EXPORTER_OTLP_HEADERS": "x-key=k",
                "OTEL_EXPORTER_OTLP_METRICS_HEADERS": "x-key=k,x-honeycomb-dataset=metrics",
                "OTEL_EXPORTER_OTLP_TRACES_COMPRESSION": "none",
            },
        )
    assert result.returncode == 0, result.stderr
    (traces_path, traces, _), (metrics_path, metrics, _) = state.requests
    assert (traces_path, metrics_path) == ("/v1/traces", "/v1/metrics")
    assert "x-honeycomb-dataset" not in traces and traces["x-key"] == "k"
    assert metrics["x-honeycomb-dataset"] == "metrics" and metrics["x-key"] == "k"
    assert "Content-Encoding" not in traces and metrics["Content-Encoding"] == "gzip"


def test_cli_a_signal_without_a_url_is_an_error_before_anything_is_sent():
    """Only ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` set: no URL for the metrics. Said before
    the traces go (they went, then exit 2, and a retry sent them again)."""
    with backend([200]) as (state, url):
        result = run(
            ["otel", "--db", str(SAMPLES / "text" / "opencode.db"), "--all"],
            env={"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": f"{url}/v1/traces"},
        )
        assert result.returncode == 2
        assert state.requests == []
        (line,) = result.stderr.decode().splitlines()
        assert line.startswith("error: no OTLP endpoint for metrics: set ")
        assert "--only traces" in line
        sent = run(
            ["otel", "--db", str(SAMPLES / "text" / "opencode.db"), "--all", "--only", "traces"],
            env={"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": f"{url}/v1/traces"},
        )
    assert sent.returncode == 0, sent.stderr
    assert [r[0] for r in state.requests] == ["/v1/traces"]


def test_cli_a_signals_own_grpc_protocol_is_refused_too():
    """``OTEL_EXPORTER_OTLP_TRACES_PROTOCOL=grpc`` with its endpoint from the environment
    (a :4317 port): HTTP to a gRPC port fails slowly and oddly; refused at once instead."""
    result = run(
        ["otel", "--db", str(SAMPLES / "text" / "opencode.db")],
        env={
            "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4317",
            "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "grpc",
        },
    )
    assert result.returncode == 2
    assert result.stderr.startswith(b"error: OTEL_EXPORTER_OTLP_TRACES_PROTOCOL is grpc")


@pytest.mark.parametrize(
    ("value", "seconds", "noted"),
    [
        ("2500", 2.5, False),
        (None, 10.0, False),
        ("0", 86400.0, False),
        ("-5", 10.0, True),
        ("x", 10.0, True),
        ("nan", 10.0, True),
        ("inf", 86400.0, False),
        ("1e300", 86400.0, False),
    ],
)
def test_the_timeout_is_a_finite_wait(value, seconds, noted):
    """``OTEL_EXPORTER_OTLP_TIMEOUT=inf`` raised OverflowError from the socket: a traceback.
    ``0`` is no limit (the spec's; it was the 10 s default), so the longest wait, a day; a
    value that is no number of milliseconds is warned of and ignored (the spec's)."""
    from opencode_events.otel.export import HttpDestination

    env = {"OTEL_EXPORTER_OTLP_TIMEOUT": value} if value is not None else {}
    destination = HttpDestination("http://c:4318", env=otlp_environment(env))
    assert {s.timeout for s in destination.senders.values()} == {seconds}
    assert destination.notes == (
        [
            f"OTEL_EXPORTER_OTLP_TIMEOUT={value!r} is no timeout in milliseconds: "
            "ignored, the default (10 s) is used"
        ]
        if noted
        else []
    )


def test_cli_a_bad_timeout_is_a_warning_line():
    with backend([200, 200]) as (state, url):
        result = run(
            ["otel", "--db", str(SAMPLES / "text" / "opencode.db"), "--endpoint", url],
            env={"OTEL_EXPORTER_OTLP_METRICS_TIMEOUT": "5s"},
        )
    assert result.returncode == 0, result.stderr
    said = result.stderr.decode().splitlines()
    assert said[0] == (
        "warning: OTEL_EXPORTER_OTLP_METRICS_TIMEOUT='5s' is no timeout in milliseconds: "
        "ignored, the default (10 s) is used"
    )
    assert len(state.requests) == 2


def test_cli_a_signals_own_url_is_where_it_goes_and_what_it_says():
    """``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` over the base URL (the OpenTelemetry spec's
    order): traces go there, and the closing line names where they went, not the base."""
    with backend([200, 200]) as (state, url):
        result = run(
            ["otel", "--db", str(SAMPLES / "text" / "opencode.db"), "--all"],
            env={
                "OTEL_EXPORTER_OTLP_ENDPOINT": url,
                "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": f"{url}/custom/tr",
            },
        )
    assert result.returncode == 0, result.stderr
    assert [r[0] for r in state.requests] == ["/custom/tr", "/v1/metrics"]
    said = result.stderr.decode()
    assert f"to {url}/custom/tr, {url}/v1/metrics" in said, said


def test_cli_refused_is_one_error_line_and_exit_2():
    with backend([400]) as (_, url):
        result = run(["otel", "--db", str(SAMPLES / "text" / "opencode.db"), "--endpoint", url])
    assert result.returncode == 2
    assert result.stderr.decode() == (
        f"error: {url}/v1/traces refused the traces: HTTP 400 Bad Request: bad spans\n"
    )


def test_cli_busy_backend_gives_up_after_the_retries():
    with backend([503], headers={"Retry-After": "0"}) as (state, url):
        result = run(
            [
                "otel",
                "--db",
                str(SAMPLES / "text" / "opencode.db"),
                "--endpoint",
                url,
                "--retries",
                "2",
            ]
        )
    assert result.returncode == 2
    assert len(state.requests) == 3
    assert b"HTTP 503 Service Unavailable (after 3 attempts)" in result.stderr
    assert result.stderr.count(b"\n") == 1


def test_cli_grpc_protocol_is_refused_with_the_way_out():
    result = run(
        ["otel", "--db", str(SAMPLES / "text" / "opencode.db")],
        env={"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4317", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"},
    )
    assert result.returncode == 2
    assert result.stderr.startswith(b"error: OTEL_EXPORTER_OTLP_PROTOCOL is grpc")


def test_cli_output_file_wins_over_the_environment(tmp_path):
    out = tmp_path / "o.jsonl"
    result = run(
        ["otel", "--db", str(SAMPLES / "text" / "opencode.db"), "-o", str(out)],
        env={"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9"},
    )
    assert result.returncode == 0, result.stderr
    assert len(out.read_bytes().splitlines()) == 2


@pytest.mark.parametrize(
    "args, message",
    [
        (["--all", "ses_x"], "--all already reads every session"),
        (["-i", "x.jsonl", "--all"], "either -i FILE inputs or stored sessions"),
        (["no/such.json"], "cannot read no/such.json"),
    ],
)
def test_cli_usage_errors(args, message):
    result = run(["otel", "--db", str(SAMPLES / "text" / "opencode.db"), *args])
    assert result.returncode == 2
    assert message in result.stderr.decode()


def test_cli_a_database_given_as_input_is_refused():
    result = run(["otel", "-i", str(SAMPLES / "text" / "opencode.db")])
    assert result.returncode == 2
    assert b"is an SQLite database, not a stream: use `otel --db" in result.stderr


def test_cli_never_writes_over_the_database_it_reads(tmp_path):
    db = tmp_path / "opencode.db"
    db.write_bytes((SAMPLES / "text" / "opencode.db").read_bytes())
    before = db.read_bytes()
    result = run(["otel", "--db", str(db), "-o", str(db)])
    assert result.returncode == 2
    assert b"will not write to" in result.stderr and b"it is being read" in result.stderr
    assert db.read_bytes() == before


@pytest.mark.parametrize(
    ("flag", "env", "said"),
    [
        ("x=a\nb", None, "the header x holds a line break"),
        ("x=a\rInjected: yes", None, "the header x holds a line break"),
        ("bad name=1", None, "'bad name' is not an HTTP header name"),
        (None, "x-a=1%0D%0AInjected: yes", "the header x-a holds a line break"),
        (None, "b%0Ad=1", "'b\\nd' is not an HTTP header name"),
        ("x=5 \u20ac", None, "the header x holds a character HTTP cannot carry"),
        ("x=caf\udce9", None, "the header x holds a character HTTP cannot carry"),
        (None, "x-a=%E2%82%AC", "the header x-a holds a character HTTP cannot carry"),
    ],
)
def test_cli_a_header_no_request_can_carry_is_one_error(flag, env, said):
    """A header from -H or OTEL_EXPORTER_OTLP_HEADERS that would break the request (a line
    break smuggling another header in, a name that is no token) is one error line, exit 2,
    before anything is sent (http.client raised ValueError: a traceback, exit 1)."""
    args = ["otel", "--db", str(SAMPLES / "text" / "opencode.db"), "--endpoint", "http://c:1"]
    result = run(
        args + (["-H", flag] if flag else []),
        env={"OTEL_EXPORTER_OTLP_HEADERS": env} if env else None,
    )
    assert result.returncode == 2
    (line,) = result.stderr.decode().splitlines()
    assert line.startswith("error: ") and said in line


@pytest.mark.parametrize(
    "endpoint",
    ["http://127.0.0.1:9/caf\u00e9", "http://127.0.0.1:9/x?k=\u20ac", "http://c\udce9f:9"],
)
def test_cli_an_endpoint_no_request_can_carry_is_one_error(endpoint):
    """An endpoint whose path or query is not ASCII (http.client sends them as they are)
    or whose host has no IDNA form (bytes that are not UTF-8) is one error line, exit 2,
    before anything is sent (it was a traceback, exit 1)."""
    args = ["otel", "--db", str(SAMPLES / "text" / "opencode.db"), "--retries", "0"]
    result = run([*args, "--endpoint", endpoint])
    assert (result.returncode, result.stdout) == (2, b"")
    (line,) = result.stderr.decode().splitlines()
    assert line.startswith("error: not a URL for OTLP: ") and "not ASCII" in line


def test_cli_a_header_that_is_no_pair_is_an_error():
    result = run(
        [
            "otel",
            "--db",
            str(SAMPLES / "text" / "opencode.db"),
            "--endpoint",
            "http://c:1",
            "-H",
            "novalue",
        ]
    )
    assert result.returncode == 2
    assert (
        result.stderr
        == b"error: -H 'novalue'\xe2\x80\xa6 is not a header NAME=VALUE (the rest not shown)\n"
    )


def test_cli_a_curl_style_header_is_an_error_that_does_not_echo_its_secret():
    """``-H "Authorization: Bearer SECRET"`` (curl's form) echoed the whole token."""
    args = ["otel", "--db", str(SAMPLES / "text" / "opencode.db"), "--endpoint", "http://c:1"]
    result = run([*args, "-H", "Authorization: Bearer SECRET4"])
    assert result.returncode == 2
    assert b"'Authorization'" in result.stderr and b"SECRET4" not in result.stderr


def test_cli_credentials_in_the_url_go_as_basic_auth_and_are_never_printed():
    """``http://user:pw@host``: sent as HTTP Basic (as curl and ``attach`` take them), and
    left out of the closing line and of every error (they were printed, and dropped)."""
    with backend([200]) as (state, url):
        secret_url = url.replace("http://", "http://alice:s3cr%40t@") + "/?key=k1"
        result = run(
            ["otel", "--db", str(SAMPLES / "text" / "opencode.db"), "--all"],
            env={"OTEL_EXPORTER_OTLP_ENDPOINT": secret_url},
        )
    assert result.returncode == 0, result.stderr
    assert state.requests[0][1]["Authorization"] == "Basic YWxpY2U6czNjckB0"  # alice:s3cr@t
    assert state.requests[0][0] == "/v1/traces?key=k1"
    said = result.stderr.decode()
    assert "s3cr" not in said and "alice" not in said and "k1" not in said, said
    with backend([400]) as (_, url):
        refused = run(
            ["otel", "--db", str(SAMPLES / "text" / "opencode.db")],
            env={"OTEL_EXPORTER_OTLP_ENDPOINT": url.replace("http://", "http://alice:s3cr@")},
        )
    assert refused.returncode == 2 and b"refused the traces" in refused.stderr
    assert b"s3cr" not in refused.stderr


@pytest.mark.parametrize("url", ["http://u:p@127.0.0.1:99999", "http://u:p@[::1"])
def test_cli_a_url_that_does_not_parse_is_one_error_not_a_traceback(url):
    result = run(["otel", "--db", str(SAMPLES / "text" / "opencode.db"), "--endpoint", url])
    assert result.returncode == 2, result.stderr
    (line,) = result.stderr.decode().splitlines()
    assert line.startswith("error: ") and ":p@" not in line


# ------------------------------------------------------------------- run/attach --otel


def fake_opencode(tmp_path: Path, stream: Path) -> Path:
    """An `opencode` that prints a captured run stream and exits 0."""
    fake = tmp_path / "opencode"
    fake.write_text(f"#!/bin/sh\ncat {stream}\n")
    fake.chmod(0o755)
    return fake


def test_run_otel_sends_the_run_when_it_ends(tmp_path):
    stream = SAMPLES / "parallel_tools" / "stream.jsonl"
    with backend([200]) as (state, url):
        result = run(
            ["run", "--format", "jsonl", "--otel", url, "do", "it"],
            env={"OPENCODE_BIN": str(fake_opencode(tmp_path, stream))},
        )
    assert result.returncode == 0, result.stderr
    events = [json.loads(line) for line in result.stdout.splitlines()]
    assert events[-1]["kind"] == "metrics"  # the events are written as ever
    assert [r[0] for r in state.requests] == ["/v1/traces", "/v1/metrics"]
    sent = spans_of(json.loads(state.requests[0][2]))
    assert [s["spanId"] for s in sent] == [s["spanId"] for s in all_spans(file_export(stream))]
    assert b"otel: 1 session, 7 spans in 2 requests to " in result.stderr


def test_run_otel_to_a_file(tmp_path):
    stream = SAMPLES / "task" / "stream.jsonl"
    out = tmp_path / "run.otlp.jsonl"
    result = run(
        ["run", "--format", "jsonl", "--otel", str(out), "go"],
        env={"OPENCODE_BIN": str(fake_opencode(tmp_path, stream))},
    )
    assert result.returncode == 0, result.stderr
    lines = out.read_bytes().splitlines()
    for line in lines:
        check(line)
    assert all_spans([json.loads(line) for line in lines]) == all_spans(file_export(stream))


def test_run_otel_refuses_the_file_the_events_go_to(tmp_path):
    result = run(
        ["run", "-o", str(tmp_path / "x"), "--otel", str(tmp_path / "x"), "go"],
        env={"OPENCODE_BIN": str(fake_opencode(tmp_path, SAMPLES / "text" / "stream.jsonl"))},
    )
    assert result.returncode == 2
    assert b"the events and the spans need a place each" in result.stderr


def test_attach_otel_sends_what_the_server_streamed(tmp_path):
    from tests.sseserver import serving_events

    sse = (SAMPLES / "serve_permission" / "events.sse").read_bytes()
    out = tmp_path / "spans.jsonl"
    with serving_events(sse, hold=5) as (url, _):  # the session's idle ends attach
        attached = run(["attach", url, "--format", "jsonl", "--otel", str(out)])
    assert attached.returncode == 0, attached.stderr
    sent = all_spans([json.loads(line) for line in out.read_bytes().splitlines()])
    offline = all_spans(file_export(SAMPLES / "serve_permission" / "events.sse"))
    assert [s["spanId"] for s in sent] == [s["spanId"] for s in offline]


def test_a_loop_of_parent_links_is_two_top_level_traces(tmp_path):
    from tests.stores import with_a_parent_loop

    db = tmp_path / "loop.db"
    first, second = with_a_parent_loop(db)
    bodies: list[bytes] = []
    with Store(db) as store:
        builder = store_builder(store)
        ids = every_session(store)
        export(store_sessions(store, ids, builder), builder, lambda s, b: bodies.append(b))
    sessions = [
        s for s in all_spans([json.loads(b) for b in bodies]) if s["name"].startswith("invoke")
    ]
    assert {s["traceId"] for s in sessions} == {trace_id_of(first), trace_id_of(second)}
    assert all("parentSpanId" not in s for s in sessions)


def test_legacy_json_files_give_the_databases_spans(tmp_path):
    """The same spans in the same places (their times are the files' own: docs/store.md)."""
    from tests.test_legacy import write_legacy

    write_legacy(SAMPLES / "task" / "opencode.db", tmp_path / "opencode", oldest=False)
    result = run(["otel", "--db", str(tmp_path / "opencode"), "--all", "--only", "traces"])
    assert result.returncode == 0, result.stderr
    from_files = all_spans([json.loads(line) for line in result.stdout.splitlines()])
    from_db = all_spans(store_export("task")[0])
    assert sorted((s["spanId"], s.get("parentSpanId")) for s in from_files) == sorted(
        (s["spanId"], s.get("parentSpanId")) for s in from_db
    )


# ---------------------------------------------------------------------------- --follow


def follow_while_replayed(tmp_path: Path, name: str, *args: str) -> tuple[list[dict], bytes]:
    """`otel --follow ARGS -o FILE` while the capture ``name`` is written again into a store
    that appears only after following began (tests/replay.py); its JSON Lines, its stderr."""
    root = Path(__file__).resolve().parents[1]
    dst = tmp_path / "data" / "opencode.db"
    dst.parent.mkdir()
    out = tmp_path / "followed.jsonl"
    follow = subprocess.Popen(
        [*CMD, "otel", "--follow", "--db", str(dst), "-o", str(out), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=root,
    )
    writer = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tests.replay",
            str(SAMPLES / name / "opencode.db"),
            str(dst),
            "--delay",
            "0.02",
            "--wait",
            "0.5",
        ],
        cwd=root,
    )
    try:
        _, err = follow.communicate(timeout=120)
    finally:
        writer.wait(timeout=60)
    assert follow.returncode == 0, err.decode()
    return [json.loads(line) for line in out.read_bytes().splitlines()], err


@pytest.mark.parametrize("name", ["task", "parallel_tools", "mcp"])
def test_follow_sends_the_spans_the_finished_store_gives(tmp_path, name):
    docs, err = follow_while_replayed(tmp_path, name, "--children")
    assert b"waiting for" in err
    for doc in docs:
        check(doc)
    followed = all_spans(docs)
    stored = all_spans(store_export(name)[0])
    assert sorted((s["spanId"], s.get("parentSpanId", ""), s["traceId"]) for s in followed) == (
        sorted((s["spanId"], s.get("parentSpanId", ""), s["traceId"]) for s in stored)
    )
    usage = {s["spanId"]: {k: v for k, v in attrs(s).items() if "usage" in k} for s in stored}
    for span in followed:
        assert {k: v for k, v in attrs(span).items() if "usage" in k} == usage[span["spanId"]]
    (metrics,) = [d for d in docs if "resourceMetrics" in d][-1:]
    tokens = [
        m
        for m in metrics["resourceMetrics"][0]["scopeMetrics"][0]["metrics"]
        if m["name"] == "opencode.token.usage"
    ]
    total = usage_report(name)["total"]
    counted = sum(int(p["asInt"]) for p in tokens[0]["sum"]["dataPoints"])
    assert counted == sum(total[k] for k in TOKEN_KINDS)


TOKEN_KINDS = (
    "input_tokens",
    "output_tokens",
    "reasoning_tokens",
    "cache_read_tokens",
    "cache_write_tokens",
)


@pytest.mark.parametrize(
    "args, message",
    [
        (["--forever"], "--forever goes with --follow"),
        (["--resend", "--all"], "--resend goes with --follow"),
        (["--follow", "--last"], "--follow takes SESSION..., or --all"),
        (["--follow", "--all", "ses_x"], "--follow --all follows every session"),
    ],
)
def test_follow_usage_errors(args, message):
    result = run(["otel", "--db", str(SAMPLES / "text" / "opencode.db"), *args])
    assert result.returncode == 2
    assert message in result.stderr.decode()


# ------------------------------------------------------------------------------ workers


@pytest.fixture(scope="module")
def generated_store(tmp_path_factory) -> Path:
    """120 sessions cloned from the captures (bench/gen_db.py: subagents, forks, errors)."""
    db = tmp_path_factory.mktemp("gen") / "opencode.db"
    root = Path(__file__).resolve().parents[1]
    subprocess.run(
        [
            sys.executable,
            "bench/gen_db.py",
            "--sessions",
            "120",
            "--parts",
            "6000",
            "--target-gb",
            "0.005",
            "--out",
            str(db),
        ],
        cwd=root,
        check=True,
        capture_output=True,
    )
    return db


def spans_and_metrics(out: bytes) -> tuple[list[str], dict | None]:
    spans, metrics = [], None
    for line in out.splitlines():
        doc = json.loads(line)
        check(doc)
        if "resourceSpans" in doc:
            spans += [json.dumps(s, sort_keys=True) for s in spans_of(doc)]
        else:
            metrics = doc
    return sorted(spans), metrics


def test_workers_export_the_same_spans_and_counters(generated_store):
    one = run(["otel", "--db", str(generated_store), "--all"], env={"OPENCODE_EVENTS_WORKERS": "1"})
    two = run(["otel", "--db", str(generated_store), "--all"], env={"OPENCODE_EVENTS_WORKERS": "3"})
    assert one.returncode == two.returncode == 0, two.stderr
    spans, metrics = spans_and_metrics(one.stdout)
    assert len(spans) > 1000
    assert spans_and_metrics(two.stdout) == (spans, metrics)


def test_workers_stop_when_the_backend_refuses(generated_store):
    with backend([400]) as (state, url):
        result = run(
            ["otel", "--db", str(generated_store), "--all", "--endpoint", url],
            env={"OPENCODE_EVENTS_WORKERS": "2"},
        )
    assert result.returncode == 2
    assert result.stderr.decode().splitlines() == [
        f"error: {url}/v1/traces refused the traces: HTTP 400 Bad Request: bad spans"
    ]
    assert len(state.requests) == 1
