"""Fast live tests proving the harness drives the real OpenCode 1.18.33."""

from __future__ import annotations

import json
import math
import urllib.request

import pytest

from tests.harness.scenarios import MEASURED, U, call, say, tools

pytestmark = pytest.mark.e2e


def test_mock_model_answers(mock_model):
    m = mock_model([say("hi", usage=U(10, 2))])
    with urllib.request.urlopen(f"{m.base_url}/models", timeout=5) as r:
        ids = [d["id"] for d in json.load(r)["data"]]
    assert "mock-model" in ids
    body = json.dumps(
        {"model": "mock-model", "stream": True, "messages": [{"role": "user", "content": "x"}]}
    ).encode()
    req = urllib.request.Request(
        f"{m.base_url}/chat/completions", data=body, headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=5) as r:
        text = r.read().decode()
    frames = [f[len("data: ") :] for f in text.split("\n\n") if f.startswith("data: ")]
    assert frames[-1] == "[DONE]"
    chunks = [json.loads(f) for f in frames[:-1]]
    assert (
        "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
        == "hi"
    )
    assert chunks[-1]["usage"]["prompt_tokens"] == 10
    assert m.remaining() == 0
    assert m.chat_requests("main")[0].summary["last_user"] == "x"


def _post(m, body: dict) -> dict:
    """POST a non-streaming chat completion; the answer's JSON."""
    req = urllib.request.Request(
        f"{m.base_url}/chat/completions",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=5) as r:
        return json.load(r)


def test_mock_model_measures_usage_from_the_request(mock_model):
    m = mock_model(
        [
            tools(call("bash", {"command": "echo hi"}, "call_m"), usage=MEASURED),
            say("héllo", reasoning=["why"], usage=MEASURED),
            say("", usage=MEASURED),
            say("scripted", usage=U(10, 2)),
        ]
    )
    tool = {"type": "function", "function": {"name": "bash", "parameters": {}}}
    first = [{"role": "system", "content": "sys"}, {"role": "user", "content": "é"}]
    second = [*first, {"role": "assistant", "content": "ok"}]
    compact = {"separators": (",", ":"), "ensure_ascii": False}

    def size(*parts: object) -> int:
        return sum(len(json.dumps(p, **compact).encode()) for p in parts)

    a = _post(m, {"model": "mock-model", "messages": first, "tools": [tool]})["usage"]
    assert a["prompt_tokens"] == math.ceil(size(first, [tool]) / 4)
    assert a["prompt_tokens_details"]["cached_tokens"] == 0  # no previous request
    assert a["completion_tokens"] == math.ceil(len('{"command": "echo hi"}') / 4)
    b = _post(m, {"model": "mock-model", "messages": second, "tools": [tool]})["usage"]
    assert b["prompt_tokens"] == math.ceil(size(second, [tool]) / 4)
    assert b["prompt_tokens_details"]["cached_tokens"] == a["prompt_tokens"]
    assert b["completion_tokens"] == math.ceil(len("héllowhy".encode()) / 4)
    assert b["completion_tokens_details"]["reasoning_tokens"] == 1
    # a smaller prompt (no tools) caches nothing; an empty answer is still one token
    c = _post(m, {"model": "mock-model", "messages": first})["usage"]
    assert c["prompt_tokens"] == math.ceil(size(first) / 4)
    assert c["prompt_tokens_details"]["cached_tokens"] == 0
    assert c["completion_tokens"] == 1
    d = _post(m, {"model": "mock-model", "messages": first})["usage"]
    assert (d["prompt_tokens"], d["completion_tokens"]) == (10, 2)  # scripted stays scripted
    logged = [r.usage for r in m.chat_requests("main")]
    assert logged[:3] == [
        {k: u[k] for k in ("prompt_tokens", "completion_tokens")}
        | {
            "cached_tokens": u["prompt_tokens_details"]["cached_tokens"],
            "reasoning_tokens": u["completion_tokens_details"]["reasoning_tokens"],
        }
        for u in (a, b, c)
    ]
    assert logged[3] is None and "usage" not in m.chat_requests("main")[3].to_json()


def test_text_run(mock_model, opencode_env):
    m = mock_model([say("Hello ", "world.", usage=U(1200, 34, 200, 0))])
    env = opencode_env(m)
    r = env.run("say", "hello")
    assert r.returncode == 0, r.stderr
    assert r.types == ["step_start", "text", "step_finish"]
    recs = r.records
    assert recs[1]["part"]["text"] == "Hello world."
    tokens = recs[2]["part"]["tokens"]
    # OpenCode: input excludes cached reads; total = prompt + completion
    assert tokens == {
        "total": 1234,
        "input": 1000,
        "output": 34,
        "reasoning": 0,
        "cache": {"write": 0, "read": 200},
    }
    assert all(rec["sessionID"] == r.session_id for rec in recs)
    # the title request was answered without consuming a scripted step
    assert [q.conversation for q in m.chat_requests()].count("title") <= 1
    assert m.unscripted == []
    assert env.db_path.exists()


def test_bash_tool_completed(mock_model, opencode_env):
    m = mock_model(
        [
            tools(call("bash", {"command": "echo harness-ok"}, "call_1")),
            say("done"),
        ]
    )
    env = opencode_env(m)
    r = env.run("run", "echo")
    assert r.returncode == 0, r.stderr
    uses = r.tool_uses()
    assert len(uses) == 1
    part = uses[0]
    assert part["tool"] == "bash" and part["callID"] == "call_1"
    assert part["state"]["status"] == "completed"
    assert part["state"]["output"] == "harness-ok\n"
    assert part["state"]["metadata"]["exit"] == 0
    offered = m.chat_requests("main")[0].summary["tools"]
    assert {"bash", "read", "edit", "write", "glob", "grep", "task"} <= set(offered)


def test_provider_400_is_an_error_record(mock_model, opencode_env, tmp_path):
    m = mock_model([{"error": {"status": 400, "body": {"error": {"message": "nope"}}}}])
    env = opencode_env(m)
    r = env.run("fail", "please")
    assert r.returncode == 1
    assert r.types == ["error"]
    err = r.records[0]["error"]
    assert err["name"] == "APIError"
    assert err["data"]["statusCode"] == 400
    assert err["data"]["message"] == "nope"
    copy = env.copy_db(tmp_path / "copy.db")
    import sqlite3

    con = sqlite3.connect(copy)
    try:
        (n,) = con.execute("select count(*) from session").fetchone()
    finally:
        con.close()
    assert n == 1


def test_serve_event_stream(mock_model, opencode_env):
    m = mock_model([say("Hello ", "SSE.", usage=U(1300, 12, 100, 0))])
    env = opencode_env(m)
    with env.serve() as srv:
        ev = srv.sse("/event")
        sid = srv.create_session()["id"]
        srv.prompt_async(sid, "hi")
        ev.wait_for(
            lambda e: e.get("type") == "session.idle" and e["properties"].get("sessionID") == sid,
            timeout=60,
        )
    raw = bytes(ev.raw).decode()
    frames = [f for f in raw.split("\n\n") if f]
    # exact framing: one `data: <json>` line per event, nothing else
    assert frames and all(f.startswith("data: ") and "\n" not in f for f in frames)
    assert ev.events[0]["type"] == "server.connected"
    deltas = [e["properties"]["delta"] for e in ev.events if e["type"] == "message.part.delta"]
    assert "".join(deltas) == "Hello SSE."
    finishes = [
        e["properties"]["part"]
        for e in ev.events
        if e["type"] == "message.part.updated" and e["properties"]["part"]["type"] == "step-finish"
    ]
    assert finishes[-1]["tokens"]["total"] == 1312


def test_ensure_opencode_says_why_it_cannot_install(tmp_path, monkeypatch):
    from tests.harness.opencode import ensure_opencode

    monkeypatch.setenv("PATH", str(tmp_path))  # no npm here
    monkeypatch.delenv("OPENCODE_EVENTS_OPENCODE_BIN", raising=False)
    with pytest.raises(RuntimeError, match="npm"):
        ensure_opencode(tmp_path / "cache")
