"""The real OpenCode piped live into `opencode-events normalize`.

`opencode run --format json … | opencode-events normalize`, exactly as a user types it, with
the scripted model behind OpenCode. The checks compare against what OpenCode itself wrote
(its raw stream, captured with a tee) rather than against numbers typed into the test.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading

import pytest

from tests.harness.opencode import PROVIDER_ID
from tests.harness.scenarios import U, call, say, tools

pytestmark = pytest.mark.e2e

CLI = [sys.executable, "-m", "opencode_events", "normalize"]


def piped(env, *prompt: str, model: str | None = None):
    """Run OpenCode with its stdout piped into normalize; return (raw records, events, rcs)."""
    argv = env.command(
        "run", "--format", "json", "-m", f"{PROVIDER_ID}/{model or env.model}", *prompt
    )
    opencode = subprocess.Popen(
        argv,
        cwd=env.work,
        env=env.env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    normalize = subprocess.Popen(
        CLI, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    raw: list[bytes] = []

    def tee() -> None:  # what OpenCode wrote, byte for byte, on its way into normalize
        for line in opencode.stdout:
            raw.append(line)
            normalize.stdin.write(line)
            normalize.stdin.flush()
        normalize.stdin.close()

    thread = threading.Thread(target=tee, daemon=True)
    thread.start()
    try:
        out = normalize.stdout.read()  # until normalize exits (its stdin closes after OpenCode)
        err = normalize.stderr.read()
        normalize.wait(timeout=120)
        opencode.wait(timeout=120)
        thread.join(timeout=10)
    finally:
        for proc in (opencode, normalize):
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    assert err == b"", err.decode()
    records = [json.loads(line) for line in raw if line.strip()]
    events = [json.loads(line) for line in out.splitlines()]
    return records, events, opencode.returncode, normalize.returncode


def test_live_tools_and_usage(mock_model, opencode_env):
    m = mock_model(
        [
            tools(
                call("bash", {"command": "echo live; exit 4"}, "call_b"),
                call("read", {"filePath": "README.md"}, "call_r"),
                usage=U(1700, 30, 200),
            ),
            say("Done.", usage=U(1900, 10, 300, 5)),
        ]
    )
    env = opencode_env(m)
    records, events, oc_rc, rc = piped(env, "look", "around")
    assert oc_rc == 0 and rc == 0
    session = records[0]["sessionID"]
    assert all(e["session_id"] == session for e in events)
    kinds = [e["kind"] for e in events]
    assert kinds.count("usage") == sum(r["type"] == "step_finish" for r in records)
    (command,) = [e for e in events if e["kind"] == "command"]
    assert command["command"] == "echo live; exit 4" and command["exit_code"] == 4
    (read,) = [e for e in events if e["kind"] == "read"]
    assert read["path"] == "README.md" and read["tool"] == "read"
    metrics = events[-1]
    steps = [r["part"] for r in records if r["type"] == "step_finish"]
    assert metrics["input_tokens"] == sum(s["tokens"]["input"] for s in steps)
    assert metrics["cache_read_tokens"] == sum(s["tokens"]["cache"]["read"] for s in steps)
    assert metrics["records"] == len(records)
    assert [u["turn"] for u in events if u["kind"] == "usage"] == list(range(1, len(steps) + 1))


def test_live_provider_error(mock_model, opencode_env):
    m = mock_model([{"error": {"status": 400, "body": {"error": {"message": "mock bad request"}}}}])
    env = opencode_env(m)
    records, events, oc_rc, rc = piped(env, "fail", "please")
    assert oc_rc == 1 and rc == 0
    (error,) = [e for e in events if e["kind"] == "error"]
    assert error["name"] == records[-1]["error"]["name"]
    assert error["message"] == records[-1]["error"]["data"]["message"]


def test_live_apply_patch(mock_model, opencode_env):
    patch = "\n".join(["*** Begin Patch", "*** Add File: fresh.txt", "+new", "*** End Patch"])
    m = mock_model([tools(call("apply_patch", {"patchText": patch}, "call_p")), say("ok")])
    env = opencode_env(m, model="gpt-5-mock")
    records, events, oc_rc, rc = piped(env, "patch", "it", model="gpt-5-mock")
    assert oc_rc == 0 and rc == 0
    (write,) = [e for e in events if e["kind"] == "write"]
    # the path OpenCode recorded in metadata.files: absolute, as write and edit carry it
    assert (write["op"], write["path"], write["success"]) == (
        "add",
        str(env.work / "fresh.txt"),
        True,
    )
    assert (env.work / "fresh.txt").read_text() == "new\n"


def test_live_usage_at_the_end_of_the_pipe(mock_model, opencode_env):
    """`opencode run --format json … | opencode-events usage`: the table when the run ends,
    its totals OpenCode's own step_finish figures."""
    m = mock_model(
        [
            tools(call("bash", {"command": "echo one"}, "call_1"), usage=U(1200, 20, 100)),
            tools(call("read", {"filePath": "README.md"}, "call_2"), usage=U(1400, 30, 300, 7)),
            say("All done.", usage=U(1600, 12, 500)),
        ]
    )
    env = opencode_env(m)
    argv = env.command("run", "--format", "json", "-m", f"{PROVIDER_ID}/{env.model}", "go")
    with subprocess.Popen(
        argv,
        cwd=env.work,
        env=env.env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    ) as opencode:
        raw = opencode.stdout.read()
        opencode.wait(timeout=120)
    result = subprocess.run(
        [sys.executable, "-m", "opencode_events", "usage", "--format", "json"],
        input=raw,
        capture_output=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    steps = [
        json.loads(line)["part"]
        for line in raw.splitlines()
        if json.loads(line)["type"] == "step_finish"
    ]
    assert len(doc["rows"]) == len(steps) == 3
    assert doc["total"]["cost"] == pytest.approx(sum(s["cost"] for s in steps), abs=1e-12)
    assert doc["total"]["cost"] > 0  # the harness prices its models
    assert doc["total"]["reasoning_tokens"] == sum(s["tokens"]["reasoning"] for s in steps)
    assert [r["input_tokens"] for r in doc["rows"]] == [s["tokens"]["input"] for s in steps]
