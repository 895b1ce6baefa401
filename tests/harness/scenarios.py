"""Capture scenarios: scripted conversations that drive the real OpenCode 1.18.33.

A :class:`Scenario` says what the mock model answers (``steps`` for the main
conversation, ``conversations`` for subagents / compaction), what the work
directory and config hold, and how OpenCode is driven (``driver``; the
default is one ``opencode run --format json``).  :func:`execute` runs one in
an isolated environment and returns a :class:`Capture` with everything
``scripts/capture.py`` writes to ``samples/<name>/``.

Adding a scenario: write a ``Scenario(...)`` below and append it to
``SCENARIOS``.  See docs/harness.md.
"""

from __future__ import annotations

import json
import shutil
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .mock_model import MEASURED, MockModel, Step
from .opencode import (
    DEFAULT_MODEL,
    PATCH_MODEL,
    PROVIDER_ID,
    HarnessError,
    OpenCodeEnv,
    RunResult,
    event_type,
)

HERE = Path(__file__).resolve().parent

# Fixed token figures so per-turn usage can be checked against the samples.
# (prompt, completion, cached, reasoning) -- all distinct.  ``usage=MEASURED`` instead
# reports figures measured from the request (mock_model's module doc).


def U(prompt: int, completion: int, cached: int = 0, reasoning: int = 0) -> dict[str, int]:
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "cached_tokens": cached,
        "reasoning_tokens": reasoning,
    }


def call(name: str, arguments: Any, id: str | None = None) -> dict[str, Any]:
    d: dict[str, Any] = {"name": name, "arguments": arguments}
    if id:
        d["id"] = id
    return d


def tools(
    *calls: dict[str, Any],
    usage: dict[str, int] | str | None = None,
    text: list[str] | None = None,
    **kw: Any,
) -> Step:
    step: Step = {"tool_calls": list(calls), **kw}
    if text:
        step["text"] = text
    if usage:
        step["usage"] = usage
    return step


def say(*text: str, usage: dict[str, int] | str | None = None, **kw: Any) -> Step:
    step: Step = {"text": list(text), **kw}
    if usage:
        step["usage"] = usage
    return step


# ---------------------------------------------------------------------------------------


@dataclass
class Scenario:
    name: str
    description: str
    steps: list[Step] = field(default_factory=list)
    prompt: list[str] = field(default_factory=lambda: ["please", "do", "the", "task"])
    model: str = DEFAULT_MODEL
    args: list[str] = field(default_factory=list)
    conversations: dict[str, dict[str, Any]] = field(default_factory=dict)
    pages: dict[str, tuple[str, str]] = field(default_factory=dict)
    files: dict[str, str] = field(default_factory=dict)  # work dir files (committed)
    config: dict[str, Any] = field(default_factory=dict)  # merged into opencode.json
    config_files: dict[str, str] = field(default_factory=dict)  # under $XDG_CONFIG_HOME/opencode
    env: dict[str, str] = field(default_factory=dict)
    driver: Callable[[Capture], None] | None = None
    slow: bool = False  # takes more than ~15 s (retries, sleeps)
    timeout: float = 120


@dataclass
class Capture:
    scenario: Scenario
    env: OpenCodeEnv
    mock: MockModel
    runs: list[RunResult] = field(default_factory=list)
    sse: dict[str, bytes] = field(default_factory=dict)  # file name -> raw SSE bytes
    main_session: str | None = None
    notes: list[str] = field(default_factory=list)
    extra_files: dict[str, bytes] = field(default_factory=dict)

    def run(
        self, *prompt: str, args: list[str] | None = None, model: str | None = None, **kw: Any
    ) -> RunResult:
        sc = self.scenario
        r = self.env.run(
            *(prompt or sc.prompt),
            args=sc.args if args is None else args,
            model=model or sc.model,
            timeout=kw.pop("timeout", sc.timeout),
            **kw,
        )
        self.runs.append(r)
        if self.main_session is None:
            self.main_session = r.session_id
        return r


def _sub(obj: Any, subs: dict[str, str]) -> Any:
    text = json.dumps(obj)
    for k, v in subs.items():
        text = text.replace(k, json.dumps(v)[1:-1])
    return json.loads(text)


def execute(
    scenario: Scenario, binary: Path | str, root: Path | str | None = None, *, port: int = 0
) -> Capture:
    """Run ``scenario`` in a fresh environment under ``root`` (deleted first).

    ``port``: preferred port for the mock model (0 = any free port); a fixed port
    keeps URLs in captures stable across reruns.  Falls back to a free port.
    """
    if root is not None and Path(root).exists():
        shutil.rmtree(root)
    mock = MockModel(conversations=scenario.conversations, pages=scenario.pages, port=port)
    try:
        mock.start()
    except OSError:
        mock = MockModel(conversations=scenario.conversations, pages=scenario.pages)
        mock.start()
    env = None
    try:
        env = OpenCodeEnv(
            binary, root, model=scenario.model, files=scenario.files, extra_env=scenario.env
        )
        subs = {
            "{ROOT}": str(env.root),
            "{WORK}": str(env.work),
            "{MOCK_URL}": mock.url,
            "{PYTHON}": _python(),
        }
        mock.substitutions.update(subs)
        shutil.copy(HERE / "mcp_server.py", env.root / "mcp_server.py")
        mock.add_steps(scenario.steps)
        env.extra_config = _sub(scenario.config, subs)
        env.write_config(mock.base_url)
        for rel, content in scenario.config_files.items():
            p = env.config_dir / rel
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_text(_sub(content, subs) if isinstance(content, str) else content)
        cap = Capture(scenario, env, mock)
        (scenario.driver or drive_single_run)(cap)
        if cap.main_session is None:
            sessions = [s for s in env.session_ids() if not s["parent_id"]]
            if sessions:
                cap.main_session = sessions[0]["id"]
        return cap
    finally:
        mock.stop()


def _python() -> str:
    for p in ("/usr/bin/python3", "/usr/local/bin/python3"):
        if Path(p).exists():
            return p
    return sys.executable


# ---------------------------------------------------------------------------------------
# drivers


def drive_single_run(cap: Capture) -> None:
    cap.run()


def drive_continue3(cap: Capture) -> None:
    r1 = cap.run("first", "turn:", "remember", "the", "number", "7")
    cap.run("second", "turn:", "add", "one", args=["--continue"])
    cap.run("third", "turn:", "double", "it", args=["--session", r1.session_id or ""])


def drive_fork(cap: Capture) -> None:
    r1 = cap.run("original", "session", "prompt")
    cap.run("forked", "follow-up", args=["--session", r1.session_id or "", "--fork"])


def drive_sigint(cap: Capture) -> None:
    mock = cap.mock
    t_seen: list[float] = []

    def when(_stdout: bytes) -> bool:
        # interrupt ~1.5 s after the model handed out the slow bash call
        if any(r.conversation == "main" and r.step == 0 for r in mock.requests):
            if not t_seen:
                t_seen.append(time.monotonic())
            return time.monotonic() - t_seen[0] > 1.5
        return False

    r = cap.env.run_interrupted(*cap.scenario.prompt, when=when, model=cap.scenario.model)
    cap.runs.append(r)
    cap.main_session = r.session_id
    cap.notes.append(
        f"SIGINT sent to the opencode process ~1.5 s into the bash call; returncode {r.returncode}"
        " (negative = killed by that signal; exit_code file uses the shell's 128+N)"
    )


def _serve_common(cap: Capture, body: Callable[[Any, Any, str], None]) -> None:
    with cap.env.serve() as srv:
        ev = srv.sse("/event")
        gev = srv.sse("/global/event")
        try:
            sess = srv.create_session()
            sid = sess["id"]
            cap.main_session = sid
            body(srv, ev, sid)
            time.sleep(0.5)  # let trailing events (session.idle, diffs) arrive
        finally:
            ev.close()
            gev.close()
            cap.sse["events.sse"] = bytes(ev.raw)
            cap.sse["global-events.sse"] = bytes(gev.raw)


def _idle(sid: str) -> Callable[[dict[str, Any]], bool]:
    return lambda e: e.get("type") == "session.idle" and e["properties"].get("sessionID") == sid


def drive_serve_permission(cap: Capture) -> None:
    def body(srv: Any, ev: Any, sid: str) -> None:
        srv.prompt_async(sid, "run the two commands")
        first = ev.wait_for(lambda e: e.get("type") == "permission.asked")
        pid1 = first["properties"]["id"]
        srv.json("POST", f"/permission/{pid1}/reply", {"reply": "once"})
        second = ev.wait_for(
            lambda e: e.get("type") == "permission.asked" and e["properties"]["id"] != pid1
        )
        pid2 = second["properties"]["id"]
        srv.json(
            "POST", f"/permission/{pid2}/reply", {"reply": "reject", "message": "not this one"}
        )
        third = ev.wait_for(
            lambda e: (
                e.get("type") == "permission.asked" and e["properties"]["id"] not in (pid1, pid2)
            )
        )
        srv.json("POST", f"/permission/{third['properties']['id']}/reply", {"reply": "reject"})
        ev.wait_for(_idle(sid))

    _serve_common(cap, body)


def drive_serve_compaction(cap: Capture) -> None:
    def body(srv: Any, ev: Any, sid: str) -> None:
        srv.prompt(sid, "inspect the repo")
        ev.wait_for(_idle(sid))
        n_idle = sum(1 for e in ev.events if _idle(sid)(e))
        srv.json(
            "POST",
            f"/session/{sid}/summarize",
            {"providerID": PROVIDER_ID, "modelID": cap.scenario.model, "auto": False},
        )
        ev.wait_for(lambda e: e.get("type") == "session.compacted")
        # wait for the idle that follows the compaction
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if sum(1 for e in ev.events if _idle(sid)(e)) > n_idle:
                break
            time.sleep(0.1)
        srv.prompt(sid, "continue after the summary")
        time.sleep(0.3)

    _serve_common(cap, body)


def drive_run_attached(cap: Capture) -> None:
    """``opencode run --attach <serve url>`` while /event and /global/event are
    captured: the same session seen as a run stream AND as server events."""
    with cap.env.serve() as srv:
        ev = srv.sse("/event")
        gev = srv.sse("/global/event")
        try:
            r = cap.run(args=[*cap.scenario.args, "--attach", srv.url])
            if r.session_id:
                try:
                    ev.wait_for(_idle(r.session_id), timeout=10)
                except HarnessError:
                    cap.notes.append("no session.idle seen on /event after the run")
            time.sleep(0.5)
        finally:
            ev.close()
            gev.close()
            cap.sse["events.sse"] = bytes(ev.raw)
            cap.sse["global-events.sse"] = bytes(gev.raw)


def drive_serve_text(cap: Capture) -> None:
    """A plain prompt through the server API: the SSE framing reference."""

    def body(srv: Any, ev: Any, sid: str) -> None:
        srv.prompt_async(sid, "say hello over the server")
        ev.wait_for(_idle(sid))

    _serve_common(cap, body)


def drive_serve_overflow(cap: Capture) -> None:
    """One prompt whose first request the provider refuses as too long for the context."""

    def body(srv: Any, ev: Any, sid: str) -> None:
        srv.prompt_async(sid, "read everything")
        ev.wait_for(lambda e: e.get("type") == "session.compacted", timeout=60)
        deadline = time.monotonic() + 60  # the prompt goes on after the compaction
        while time.monotonic() < deadline:
            events = list(ev.events)
            compacted = max(i for i, e in enumerate(events) if e.get("type") == "session.compacted")
            if any(_idle(sid)(e) for e in events[compacted:]):
                break
            time.sleep(0.1)

    _serve_common(cap, body)


def drive_serve_shell(cap: Capture) -> None:
    """A user `!shell` command (POST /session/{id}/shell), then a prompt."""

    def body(srv: Any, ev: Any, sid: str) -> None:
        srv.json("POST", f"/session/{sid}/shell", {"agent": "build", "command": "echo from-user"})
        ev.wait_for(_idle(sid))
        n_idle = sum(1 for e in ev.events if _idle(sid)(e))
        srv.prompt_async(sid, "what did my command print?")
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if sum(1 for e in ev.events if _idle(sid)(e)) > n_idle:
                break
            time.sleep(0.1)

    _serve_common(cap, body)


def drive_serve_question(cap: Capture) -> None:
    """The question tool, offered in served sessions: the first call (two questions) is
    answered via POST /question/{id}/reply, the second dismissed via .../reject."""

    def asked(known: tuple[str, ...]) -> Callable[[dict[str, Any]], bool]:
        return lambda e: e.get("type") == "question.asked" and e["properties"]["id"] not in known

    def body(srv: Any, ev: Any, sid: str) -> None:
        srv.prompt_async(sid, "ask me what to do")
        first = ev.wait_for(asked(()))["properties"]["id"]
        srv.json("POST", f"/question/{first}/reply", {"answers": [["Blue"], ["Tests", "Docs"]]})
        second = ev.wait_for(asked((first,)))["properties"]["id"]
        srv.json("POST", f"/question/{second}/reject")
        ev.wait_for(_idle(sid))

    _serve_common(cap, body)


def drive_serve_mention(cap: Capture) -> None:
    """A prompt whose parts are text, an attached file (by file:// URL) and an @agent
    mention, as the TUI and the SDK send them."""

    def body(srv: Any, ev: Any, sid: str) -> None:
        readme = cap.env.work / "README.md"
        parts = [
            {"type": "text", "text": "look at this with @explore"},
            {
                "type": "file",
                "mime": "text/plain",
                "filename": "README.md",
                "url": readme.as_uri(),
                "source": {
                    "type": "file",
                    "path": "README.md",
                    "text": {"value": "@README.md", "start": 0, "end": 10},
                },
            },
            {
                "type": "agent",
                "name": "explore",
                "source": {"value": "@explore", "start": 18, "end": 26},
            },
        ]
        srv.json(
            "POST",
            f"/session/{sid}/prompt_async",
            {"parts": parts, "model": {"providerID": PROVIDER_ID, "modelID": cap.scenario.model}},
        )
        ev.wait_for(_idle(sid))

    _serve_common(cap, body)


def drive_serve_revert(cap: Capture) -> None:
    """Two prompts, then POST /session/{id}/revert to the second prompt's message (the TUI's
    /undo): its messages stay stored, marked by the session's ``revert``, until the next
    prompt; then PATCH /session/{id} archives the session (``time_archived``)."""

    def body(srv: Any, ev: Any, sid: str) -> None:
        srv.prompt(sid, "write the notes file")
        ev.wait_for(_idle(sid))
        n_idle = sum(1 for e in ev.events if _idle(sid)(e))
        srv.prompt(sid, "now run a command")
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if sum(1 for e in ev.events if _idle(sid)(e)) > n_idle:
                break
            time.sleep(0.1)
        users = [
            m for m in srv.json("GET", f"/session/{sid}/message") if m["info"]["role"] == "user"
        ]
        srv.json("POST", f"/session/{sid}/revert", {"messageID": users[-1]["info"]["id"]})
        srv.json("PATCH", f"/session/{sid}", {"time": {"archived": int(time.time() * 1000)}})
        time.sleep(0.3)

    _serve_common(cap, body)


def drive_prune(cap: Capture) -> None:
    """Four runs in one session: OpenCode prunes (when ``compaction.prune`` is on) at the end
    of a run, so the prune of turn 1's outputs shows in turn 4's requests."""
    first = cap.run("read", "the", "big", "file", "five", "times")
    sid = first.session_id or ""
    for word in ("two", "three", "four"):
        cap.run("echo", word, args=["--session", sid])


LEGACY_JSON_VERSION = "1.1.65"  # the last release on npm that keeps sessions in JSON files
FIRST_DB_VERSION = "1.2.27"  # a release of the first SQLite schema; it imports those files


def drive_legacy_mixed(cap: Capture) -> None:
    """One data directory used by three releases in turn, as a user's is: 1.1.65 writes a
    session in storage/ JSON files; 1.2.27 imports them into a new opencode.db (the files
    stay) and adds a session there (its database is kept as older/opencode.db, an older
    schema); 1.1.65 again (a downgrade) writes a session only the files hold; 1.18.33
    migrates the database and adds one more, and does not read the files."""
    from .opencode import ensure_opencode

    env = cap.env
    json_binary = str(ensure_opencode(version=LEGACY_JSON_VERSION))
    db_binary = str(ensure_opencode(version=FIRST_DB_VERSION))

    def run(binary: str, *words: str) -> None:
        argv = [binary, "run", "--format", "json", "-m", f"{PROVIDER_ID}/{cap.scenario.model}"]
        result = env._run([*argv, *words], timeout=cap.scenario.timeout)
        cap.runs.append(result)
        if result.returncode != 0:
            raise HarnessError(f"{binary} run failed: {result.stderr[-1000:]!r}")

    run(json_binary, "first", "session", "in", "JSON", "files")
    run(db_binary, "second", "session", "in", "the", "first", "database")
    older = cap.scenario.name + "-older.db"
    env.copy_db(env.root / older)
    cap.extra_files["older/opencode.db"] = (env.root / older).read_bytes()
    run(json_binary, "third", "session", "after", "a", "downgrade")
    run(env.binary, "fourth", "session", "in", "today's", "database")
    cap.main_session = cap.runs[-1].session_id
    storage = env.db_path.parent / "storage"
    for file in sorted(storage.rglob("*.json")):
        cap.extra_files[f"storage/{file.relative_to(storage)}"] = file.read_bytes()
    cap.notes.append(
        f"runs: {LEGACY_JSON_VERSION}, {FIRST_DB_VERSION}, {LEGACY_JSON_VERSION}, 1.18.33 in one "
        "data directory; storage/ is its JSON files, older/opencode.db the database as "
        f"{FIRST_DB_VERSION} left it"
    )


# ---------------------------------------------------------------------------------------
# the scenarios

README = "# Demo project\n\nhello from the demo project\n"
APP_PY = "def greet(name):\n    return 'hello ' + name\n\n\nprint(greet('world'))\n"
WORK_FILES = {"README.md": README, "src/app.py": APP_PY, "notes/todo.txt": "hello todo\n"}
# 1,900 lines of 25 bytes: 47,500 bytes, under bash's truncation (51,200 bytes, 2,000 lines);
# OpenCode estimates it at 11,875 tokens (4 characters a token).
BIG_TXT = "".join(f"line {i:06d} xxxxxxxxxxxx\n" for i in range(1900))

SKILL_MD = """---
name: demo-skill
description: A demo skill used by the capture harness. Use it when asked to demo a skill.
---

# Demo skill

When this skill is loaded, answer with the word DEMO.
"""

PAGE_HTML = (
    "<!doctype html><html><head><title>Mock page</title></head>"
    "<body><h1>Mock page</h1><p>Served by the <b>mock model</b> server on loopback.</p>"
    "</body></html>"
)

MCP_NAME = "my-tools.v1"


def _patch(*lines: str) -> str:
    return "\n".join(["*** Begin Patch", *lines, "*** End Patch"])


SCENARIOS: list[Scenario] = [
    Scenario(
        "text",
        "Plain text answer, one step, no tools.",
        steps=[say("Hello ", "from the ", "mock model.", usage=U(1200, 34, 200, 0))],
        prompt=["say", "hello"],
    ),
    Scenario(
        "bash_ok",
        "bash that succeeds (exit 0), then a text answer. Two steps.",
        steps=[
            tools(
                call(
                    "bash",
                    {"command": "echo hello; ls", "description": "List files"},
                    "call_bash_ok",
                ),
                text=["Let me look."],
                usage=U(1500, 40, 100, 0),
            ),
            say("The directory has README.md, notes and src.", usage=U(1650, 25, 1400, 0)),
        ],
        files=WORK_FILES,
    ),
    Scenario(
        "bash_fail",
        "bash that exits non-zero (exit 3, stderr output), then a text answer.",
        steps=[
            tools(
                call("bash", {"command": "echo partial; echo oops >&2; exit 3"}, "call_bash_fail"),
                usage=U(1500, 41, 0, 0),
            ),
            say("The command failed with exit code 3.", usage=U(1620, 22, 1400, 0)),
        ],
    ),
    Scenario(
        "file_tools",
        "read, write, edit, glob and grep (glob+grep as two parallel calls in one step).",
        steps=[
            tools(
                call("read", {"filePath": "{WORK}/README.md"}, "call_read"), usage=U(2000, 30, 0, 0)
            ),
            tools(
                call(
                    "write",
                    {"filePath": "{WORK}/notes/new.txt", "content": "alpha\nbeta\ngamma\n"},
                    "call_write",
                ),
                usage=U(2100, 31, 1900, 0),
            ),
            tools(
                call(
                    "edit",
                    {"filePath": "{WORK}/notes/new.txt", "oldString": "beta", "newString": "BETA"},
                    "call_edit",
                ),
                usage=U(2200, 32, 2000, 0),
            ),
            tools(
                call("glob", {"pattern": "**/*.txt"}, "call_glob"),
                call("grep", {"pattern": "hello", "include": "*.md"}, "call_grep"),
                usage=U(2300, 33, 2100, 0),
            ),
            say("Read, wrote, edited, globbed and grepped.", usage=U(2400, 12, 2200, 0)),
        ],
        files=WORK_FILES,
    ),
    Scenario(
        "read_missing",
        "read of a file that does not exist: tool_use with status error.",
        steps=[
            tools(
                call("read", {"filePath": "{WORK}/does-not-exist.txt"}, "call_read_missing"),
                usage=U(1300, 20, 0, 0),
            ),
            say("That file does not exist.", usage=U(1350, 9, 1200, 0)),
        ],
        files=WORK_FILES,
    ),
    Scenario(
        "apply_patch",
        "apply_patch: one patch adds, updates and deletes; a second updates and moves a file.",
        model=PATCH_MODEL,
        files={**WORK_FILES, "old.txt": "obsolete\n", "rename_me.txt": "line one\nline two\n"},
        steps=[
            tools(
                call(
                    "apply_patch",
                    {
                        "patchText": _patch(
                            "*** Add File: added.txt",
                            "+brand new file",
                            "+second line",
                            "*** Update File: src/app.py",
                            "@@ def greet(name):",
                            "-    return 'hello ' + name",
                            "+    return 'hi ' + name",
                            "*** Delete File: old.txt",
                        )
                    },
                    "call_patch_1",
                ),
                usage=U(3000, 120, 0, 0),
            ),
            tools(
                call(
                    "apply_patch",
                    {
                        "patchText": _patch(
                            "*** Update File: rename_me.txt",
                            "*** Move to: moved/renamed.txt",
                            "@@",
                            " line one",
                            "-line two",
                            "+line 2",
                        )
                    },
                    "call_patch_2",
                ),
                usage=U(3200, 80, 2900, 0),
            ),
            say("Patched.", usage=U(3300, 5, 3100, 0)),
        ],
    ),
    Scenario(
        "task",
        "task tool starting a general subagent whose child session runs its own tools "
        "(bash, read).  The child's parts are not in the stream; see opencode.db.",
        files=WORK_FILES,
        steps=[
            tools(
                call(
                    "task",
                    {
                        "description": "Inspect the repo",
                        "prompt": "[child-task] List the files and read README.md",
                        "subagent_type": "general",
                    },
                    "call_task",
                ),
                usage=U(4000, 60, 0, 0),
            ),
            say("The subagent reports a demo project.", usage=U(4400, 15, 3900, 0)),
        ],
        conversations={
            "child": {
                "match": "[child-task]",
                "steps": [
                    tools(
                        call("bash", {"command": "ls"}, "call_child_bash"), usage=U(900, 20, 0, 0)
                    ),
                    tools(
                        call("read", {"filePath": "{WORK}/README.md"}, "call_child_read"),
                        usage=U(950, 21, 800, 0),
                    ),
                    say(
                        "Child result: a demo project with README.md and src/app.py.",
                        usage=U(1000, 18, 900, 0),
                    ),
                ],
            },
        },
    ),
    Scenario(
        "todowrite",
        "todowrite with three todos in different states.",
        steps=[
            tools(
                call(
                    "todowrite",
                    {
                        "todos": [
                            {"content": "Read the code", "status": "completed", "priority": "high"},
                            {
                                "content": "Write the fix",
                                "status": "in_progress",
                                "priority": "medium",
                            },
                            {"content": "Run the tests", "status": "pending", "priority": "low"},
                        ]
                    },
                    "call_todo",
                ),
                usage=U(1700, 50, 0, 0),
            ),
            say("Planned.", usage=U(1800, 4, 1600, 0)),
        ],
    ),
    Scenario(
        "invalid_tool",
        "The model calls a tool that does not exist; OpenCode records it as tool `invalid`.",
        steps=[
            tools(
                call("frobnicate", {"target": "everything"}, "call_invalid"),
                usage=U(1400, 16, 0, 0),
            ),
            say("Sorry, that tool does not exist.", usage=U(1450, 8, 1300, 0)),
        ],
    ),
    Scenario(
        "reasoning",
        "A step with reasoning_content deltas, run WITHOUT --thinking (no reasoning record).",
        steps=[
            {
                "reasoning": ["Let me think ", "about this."],
                "text": ["The answer is 42."],
                "usage": U(1100, 60, 0, 40),
            }
        ],
    ),
    Scenario(
        "reasoning_thinking",
        "The same reasoning step, run WITH --thinking (reasoning record emitted).",
        args=["--thinking"],
        steps=[
            {
                "reasoning": ["Let me think ", "about this."],
                "text": ["The answer is 42."],
                "usage": U(1100, 60, 0, 40),
            }
        ],
    ),
    Scenario(
        "error400",
        "The provider answers HTTP 400: an error record, exit code 1.",
        steps=[
            {
                "error": {
                    "status": 400,
                    "body": {
                        "error": {
                            "message": "mock bad request",
                            "type": "invalid_request_error",
                            "code": 400,
                        }
                    },
                }
            }
        ],
    ),
    Scenario(
        "error401",
        "The provider answers HTTP 401 (bad API key).",
        steps=[
            {
                "error": {
                    "status": 401,
                    "body": {
                        "error": {
                            "message": "mock invalid api key",
                            "type": "authentication_error",
                            "code": "invalid_api_key",
                        }
                    },
                }
            }
        ],
    ),
    Scenario(
        "error500_retry",
        "HTTP 500 once, then success: OpenCode retries and recovers. Run with --attach to a "
        "served instance so events.sse shows the session.status retry events.",
        driver=drive_run_attached,
        slow=True,
        timeout=240,
        steps=[
            {
                "error": {
                    "status": 500,
                    "body": {"error": {"message": "mock server error", "type": "server_error"}},
                }
            },
            say("Recovered after a retry.", usage=U(1250, 11, 0, 0)),
        ],
    ),
    Scenario(
        "error500_exhausted",
        "HTTP 500 on every request: OpenCode retries with back-off until it gives up "
        "(about 70 s), then an error record. Run with --attach (events.sse has the retries).",
        driver=drive_run_attached,
        slow=True,
        timeout=300,
        steps=[
            {
                "error": {
                    "status": 500,
                    "body": {"error": {"message": "mock server error", "type": "server_error"}},
                }
            }
        ]
        * 12,
    ),
    Scenario(
        "skill",
        "The skill tool loads a SKILL.md from the config dir's skills/ folder.",
        config_files={"skills/demo-skill/SKILL.md": SKILL_MD},
        steps=[
            tools(call("skill", {"name": "demo-skill"}, "call_skill"), usage=U(2500, 14, 0, 0)),
            say("DEMO", usage=U(2700, 3, 2400, 0)),
        ],
    ),
    Scenario(
        "webfetch",
        "webfetch of a small HTML page served by the mock server on 127.0.0.1.",
        pages={"hello.html": ("text/html; charset=utf-8", PAGE_HTML)},
        steps=[
            tools(
                call(
                    "webfetch",
                    {"url": "{MOCK_URL}/pages/hello.html", "format": "markdown"},
                    "call_webfetch",
                ),
                usage=U(1900, 22, 0, 0),
            ),
            tools(
                call(
                    "webfetch",
                    {"url": "{MOCK_URL}/pages/missing.html", "format": "text"},
                    "call_webfetch_404",
                ),
                usage=U(2000, 23, 1800, 0),
            ),
            say("Fetched the page.", usage=U(2100, 6, 1900, 0)),
        ],
    ),
    Scenario(
        "mcp",
        f"A stdio MCP server named {MCP_NAME!r}: one call succeeds, one is rejected with a "
        "JSON-RPC error, one returns isError.",
        config={
            "mcp": {
                MCP_NAME: {
                    "type": "local",
                    "command": ["{PYTHON}", "{ROOT}/mcp_server.py"],
                    "environment": {"MCP_LOG": "{ROOT}/mcp.log"},
                    "timeout": 10000,
                }
            }
        },
        steps=[
            tools(
                call("my-tools_v1_echo", {"text": "ping"}, "call_mcp_echo"), usage=U(2600, 18, 0, 0)
            ),
            tools(
                call("my-tools_v1_reject", {"reason": "not allowed"}, "call_mcp_reject"),
                usage=U(2700, 19, 2500, 0),
            ),
            tools(call("my-tools_v1_broken", {}, "call_mcp_broken"), usage=U(2800, 17, 2600, 0)),
            say("MCP done.", usage=U(2900, 4, 2700, 0)),
        ],
    ),
    Scenario(
        "continue3",
        "One session over three `opencode run` calls: new, --continue, --session <id>. "
        "stream.jsonl is the three stdouts concatenated.",
        driver=drive_continue3,
        steps=[
            say("Remembered 7.", usage=U(1000, 5, 0, 0)),
            tools(
                call("bash", {"command": "echo $((7+1))"}, "call_add"), usage=U(1100, 15, 900, 0)
            ),
            say("It is 8.", usage=U(1200, 5, 1000, 0)),
            say("Doubled: 16.", usage=U(1300, 6, 1100, 0)),
        ],
    ),
    Scenario(
        "fork",
        "`run --session <id> --fork`: the follow-up goes to a new session copied from the "
        "first. stream.jsonl holds both runs (two session ids).",
        driver=drive_fork,
        steps=[
            say("Original answer.", usage=U(1000, 5, 0, 0)),
            say("Answer in the fork.", usage=U(1100, 6, 900, 0)),
        ],
    ),
    Scenario(
        "big_output",
        "bash printing ~2 MB (55,000 numbered lines); OpenCode truncates the tool output "
        "and saves the full text under $DATA/tool-output/.",
        steps=[
            tools(
                call(
                    "bash",
                    {"command": "seq -f 'line %07g abcdefghijklmnopqrstuvwxyz' 1 55000"},
                    "call_big",
                ),
                usage=U(1500, 30, 0, 0),
            ),
            say("That was a lot of output.", usage=U(9000, 9, 1400, 0)),
        ],
    ),
    Scenario(
        "sigint",
        "SIGINT sent to `opencode run` while a slow bash (sleep 30) runs.",
        driver=drive_sigint,
        steps=[
            tools(
                call("bash", {"command": "echo started; sleep 30; echo finished"}, "call_sleep"),
                usage=U(1500, 20, 0, 0),
            ),
            say("Should not be reached.", usage=U(1600, 5, 0, 0)),
        ],
    ),
    Scenario(
        "file_attach",
        "`run -f README.md`: the prompt carries a file attachment (a `file` part on the user "
        "message; the stream has none of it).",
        files=WORK_FILES,
        # -f is a yargs array option: it would swallow prompt words that follow it,
        # so the prompt goes first and -f last.
        args=["summarise", "the", "attached", "file", "-f", "README.md"],
        prompt=[],
        steps=[say("It is a demo README.", usage=U(1600, 7, 0, 0))],
    ),
    Scenario(
        "command_subtask",
        "`run --command review src/app.py` for a config command with agent=general and "
        "subtask=true: OpenCode records a `subtask` part and runs it in a child session.",
        files=WORK_FILES,
        config={
            "command": {
                "review": {
                    "template": "[child-review] Review the file $ARGUMENTS",
                    "description": "Review a file in a subagent",
                    "agent": "general",
                    "subtask": True,
                }
            }
        },
        args=["--command", "review"],
        prompt=["src/app.py"],
        steps=[say("The review subagent is done.", usage=U(2200, 9, 0, 0))],
        conversations={
            "child": {
                "match": "[child-review]",
                "steps": [
                    tools(
                        call("read", {"filePath": "{WORK}/src/app.py"}, "call_review_read"),
                        usage=U(700, 12, 0, 0),
                    ),
                    say("Looks fine.", usage=U(760, 4, 650, 0)),
                ],
            }
        },
    ),
    Scenario(
        "serve_text",
        "`opencode serve`: one prompt via POST /session/{id}/prompt_async; raw /event and "
        "/global/event SSE captured.",
        driver=drive_serve_text,
        steps=[
            {
                "reasoning": ["Thinking over ", "SSE."],
                "text": ["Hello ", "over SSE."],
                "usage": U(1234, 56, 78, 9),
            }
        ],
    ),
    Scenario(
        "serve_permission",
        "`opencode serve` with permission bash=ask, answered via POST /permission/{id}/reply: "
        "bash 1 approved (once); bash 2 rejected WITH a message (the turn goes on, the "
        "message is fed back); bash 3 rejected without a message (the turn stops).",
        driver=drive_serve_permission,
        config={"permission": {"bash": "ask"}},
        steps=[
            tools(
                call("bash", {"command": "echo approved"}, "call_perm_1"), usage=U(1500, 20, 0, 0)
            ),
            tools(
                call("bash", {"command": "echo rejected-with-feedback"}, "call_perm_2"),
                usage=U(1600, 21, 1400, 0),
            ),
            tools(
                call("bash", {"command": "echo rejected-plain"}, "call_perm_3"),
                usage=U(1700, 22, 1500, 0),
            ),
            say("Not reached after a plain rejection.", usage=U(1800, 5, 1600, 0)),
        ],
    ),
    Scenario(
        "compaction",
        "`opencode serve`: a prompt with a tool call, then POST /session/{id}/summarize "
        "(compaction), then another prompt.",
        driver=drive_serve_compaction,
        files=WORK_FILES,
        steps=[
            tools(call("bash", {"command": "cat README.md"}, "call_cat"), usage=MEASURED),
            say("The README says hello.", usage=MEASURED),
            say("Continuing after the summary.", usage=MEASURED),
        ],
        conversations={
            "compaction": {
                "match_system": "context summarization agent",
                "steps": [
                    say(
                        "## Summary\n\nThe user asked to inspect the repo; README says hello.",
                        usage=MEASURED,
                    ),
                ],
            },
        },
    ),
    Scenario(
        "auto_compact",
        "The model's context limit is 8,800 tokens (1,000 for output): the first step, a "
        "long prompt, overflows it, OpenCode compacts inside the run (the compaction agent) "
        "and goes on after a synthetic user text, which the stream shows as a `text` record "
        "outside any step.",
        files=WORK_FILES,
        # Measured usage: OpenCode compacts after any step whose prompt + output reaches
        # context - output (7,800). The agent's system prompt and tools are ~7,650 tokens,
        # and they come back after the compaction with the summary: the long prompt (gone
        # after it) makes the first step the larger, so that only it overflows.
        prompt=["please", "do", "the", "task", "with", "this", "log:"]
        + [f"log-line-{i:03d}" for i in range(1, 81)],
        config={
            "provider": {
                "mock": {"models": {"mock-model": {"limit": {"context": 8800, "output": 1000}}}}
            }
        },
        steps=[
            tools(call("bash", {"command": "echo big"}, "call_ac_bash"), usage=MEASURED),
            say("Continued after compaction.", usage=MEASURED),
        ],
        conversations={
            "compaction": {
                "match_system": "context summarization agent",
                "steps": [say("## Summary\n\nRan echo big.", usage=MEASURED)],
            },
        },
    ),
    Scenario(
        "prune",
        "`compaction.prune: true`, four runs in one session: the first cats a 47.5 KB file "
        "five times, the others run one small bash each. At the end of the third run "
        "OpenCode prunes the two oldest outputs (`state.time.compacted`; it keeps the last "
        "two turns and, before them, the newest 40,000 estimated tokens of tool output), "
        "and the fourth run's requests carry `[Old tool result content cleared]` for them.",
        driver=drive_prune,
        files={**WORK_FILES, "big.txt": BIG_TXT},
        config={"compaction": {"prune": True}},
        steps=[
            *(
                tools(call("bash", {"command": "cat big.txt"}, f"call_big_{i}"), usage=MEASURED)
                for i in range(1, 6)
            ),
            say("Read it five times.", usage=MEASURED),
            *(
                step
                for word in ("two", "three", "four")
                for step in (
                    tools(
                        call("bash", {"command": f"echo {word}"}, f"call_{word}"), usage=MEASURED
                    ),
                    say(f"Echoed {word}.", usage=MEASURED),
                )
            ),
        ],
    ),
    Scenario(
        "task_compact",
        "The model's context limit is 16,000 tokens (1,000 for output): the parent calls "
        "task; the subagent cats a 47.5 KB file, and after its next step (a small bash) "
        "OpenCode compacts the CHILD session (the compaction agent), which goes on after "
        "the synthetic user text and answers; then the parent answers.",
        files={**WORK_FILES, "big.txt": BIG_TXT},
        config={
            "provider": {
                "mock": {"models": {"mock-model": {"limit": {"context": 16000, "output": 1000}}}}
            }
        },
        steps=[
            tools(
                call(
                    "task",
                    {
                        "description": "Read big file",
                        "prompt": "[child-compact] cat big.txt then report",
                        "subagent_type": "general",
                    },
                    "call_task",
                ),
                usage=MEASURED,
            ),
            say("The subagent read the big file.", usage=MEASURED),
        ],
        conversations={
            "compaction": {
                "match_system": "context summarization agent",
                "steps": [
                    say("## Summary\n\nThe subagent ran cat big.txt (1900 lines).", usage=MEASURED)
                ],
            },
            "child": {
                "match": "[child-compact]",
                "steps": [
                    tools(
                        call("bash", {"command": "cat big.txt"}, "call_child_big"), usage=MEASURED
                    ),
                    tools(
                        call("bash", {"command": "echo small"}, "call_child_small"), usage=MEASURED
                    ),
                ],
            },
            # After the compaction the child's first user message is the summary, no longer
            # the marker: its next request is known by the synthetic text that ends it.
            "child_after": {
                "match_last": "Continue if you have next steps",
                "steps": [say("Child result: big.txt has 1900 lines.", usage=MEASURED)],
            },
        },
    ),
    Scenario(
        "parallel_tools",
        "--thinking; one step with reasoning, text and four tool calls at once (bash that "
        "works, `ls` of a missing folder that exits 2, a read of a missing file, grep), "
        "then the answer.",
        args=["--thinking"],
        files=WORK_FILES,
        steps=[
            tools(
                call("bash", {"command": "echo one"}, "call_p_bash_ok"),
                call("bash", {"command": "ls /nonexistent-dir-xyz"}, "call_p_bash_fail"),
                call("read", {"filePath": "{WORK}/nope.txt"}, "call_p_read_missing"),
                call("grep", {"pattern": "hello", "path": "{WORK}/src"}, "call_p_grep"),
                reasoning=["Plan: ", "run four tools."],
                text=["Running four tools at once."],
                usage=U(3000, 80, 500, 30),
            ),
            say("Two worked, two failed.", usage=U(3300, 20, 2900, 0)),
        ],
    ),
    Scenario(
        "serve_overflow",
        "`opencode serve`: the provider refuses the first request as longer than the "
        "context (HTTP 400 `context_length_exceeded`): OpenCode publishes session.error "
        "without setting the message's error, compacts (`overflow: true`) and answers.",
        driver=drive_serve_overflow,
        files=WORK_FILES,
        steps=[
            {
                "error": {
                    "status": 400,
                    "body": {
                        "error": {
                            "message": "This model's maximum context length is 8000 tokens.",
                            "type": "invalid_request_error",
                            "code": "context_length_exceeded",
                        }
                    },
                }
            },
            say("Answered after the overflow compaction.", usage=U(900, 7, 0, 0)),
        ],
        conversations={
            "compaction": {
                "match_system": "context summarization agent",
                "steps": [
                    say("## Summary\n\nThe user asked to read everything.", usage=U(3000, 25, 0, 0))
                ],
            },
        },
    ),
    Scenario(
        "serve_shell",
        "`opencode serve`: a user shell command (POST /session/{id}/shell, the TUI's `!`): "
        "OpenCode runs bash itself, with no model call; then a prompt the model answers.",
        driver=drive_serve_shell,
        files=WORK_FILES,
        steps=[say("Your command printed from-user.", usage=U(1300, 8, 0, 0))],
    ),
    Scenario(
        "lsp",
        "OPENCODE_EXPERIMENTAL_LSP_TOOL=1: the lsp tool, workspaceSymbol with a query and "
        "goToDefinition at a position (no LSP server for .txt: both calls fail).",
        env={"OPENCODE_EXPERIMENTAL_LSP_TOOL": "1"},
        files=WORK_FILES,
        steps=[
            tools(
                call(
                    "lsp",
                    {
                        "operation": "workspaceSymbol",
                        "filePath": "notes/todo.txt",
                        "line": 1,
                        "character": 1,
                        "query": "greet",
                    },
                    "call_lsp_symbol",
                ),
                call(
                    "lsp",
                    {
                        "operation": "goToDefinition",
                        "filePath": "{WORK}/notes/todo.txt",
                        "line": 1,
                        "character": 3,
                    },
                    "call_lsp_definition",
                ),
                usage=U(1400, 40, 0, 0),
            ),
            say("No language server here.", usage=U(1500, 6, 1300, 0)),
        ],
    ),
    Scenario(
        "bash_timeout",
        "bash with `timeout: 1000` running `sleep 5`: OpenCode kills it; `metadata.exit` is "
        "null and the output gains a <shell_metadata> block.",
        steps=[
            tools(
                call("bash", {"command": "echo waiting; sleep 5", "timeout": 1000}, "call_slow"),
                usage=U(1200, 18, 0, 0),
            ),
            say("It timed out.", usage=U(1300, 5, 1100, 0)),
        ],
    ),
    Scenario(
        "serve_question",
        "`opencode serve` (which offers the question tool): the model asks two questions "
        "at once, answered via POST /question/{id}/reply; then one more, dismissed via "
        "POST /question/{id}/reject (the tool fails, the turn stops).",
        driver=drive_serve_question,
        steps=[
            tools(
                call(
                    "question",
                    {
                        "questions": [
                            {
                                "question": "Which colour should the button be?",
                                "header": "Colour",
                                "options": [
                                    {"label": "Red", "description": "warm"},
                                    {"label": "Blue", "description": "cool"},
                                ],
                            },
                            {
                                "question": "What else should I do?",
                                "header": "Extras",
                                "options": [
                                    {"label": "Tests", "description": "add tests"},
                                    {"label": "Docs", "description": "update the docs"},
                                ],
                                "multiple": True,
                            },
                        ]
                    },
                    "call_question_1",
                ),
                usage=U(1500, 40, 0, 0),
            ),
            tools(
                call(
                    "question",
                    {
                        "questions": [
                            {
                                "question": "Shall I commit?",
                                "header": "Commit",
                                "options": [
                                    {"label": "Yes", "description": "commit now"},
                                    {"label": "No", "description": "leave it"},
                                ],
                            }
                        ]
                    },
                    "call_question_2",
                ),
                usage=U(1600, 30, 1400, 0),
            ),
            say("Not reached after a dismissed question.", usage=U(1700, 5, 1500, 0)),
        ],
    ),
    Scenario(
        "serve_mention",
        "`opencode serve`: one prompt of three parts, text, a `file` attachment (file:// URL, "
        "source path) and an `agent` mention (@explore); OpenCode reads the file into "
        "synthetic text parts and adds its note on the agent.",
        driver=drive_serve_mention,
        files=WORK_FILES,
        steps=[say("Noted the README and the explore agent.", usage=U(1800, 9, 0, 0))],
    ),
    Scenario(
        "serve_revert",
        "`opencode serve`: two prompts (a write, then a bash command), then POST "
        "/session/{id}/revert to the second prompt (the TUI's /undo: its messages stay "
        "stored until the next prompt, the session's `revert` marks them) and PATCH "
        "/session/{id} archiving the session (`time_archived`).",
        driver=drive_serve_revert,
        files=WORK_FILES,
        steps=[
            tools(
                call(
                    "write", {"filePath": "{WORK}/notes/kept.txt", "content": "kept\n"}, "call_kept"
                ),
                usage=U(1500, 30, 0, 0),
            ),
            say("Wrote the notes file.", usage=U(1600, 6, 1400, 0)),
            tools(
                call("bash", {"command": "echo undone > notes/undone.txt"}, "call_undone"),
                usage=U(1700, 25, 1500, 0),
            ),
            say("Ran the command.", usage=U(1800, 5, 1600, 0)),
        ],
    ),
    Scenario(
        "task_background",
        "OPENCODE_EXPERIMENTAL_BACKGROUND_SUBAGENTS=1: a `task` with `background: true` "
        "returns at once (its `completed` means launched); the subagent runs on in its child "
        "session (`run` may exit before OpenCode tells the parent it is done).",
        env={"OPENCODE_EXPERIMENTAL_BACKGROUND_SUBAGENTS": "1"},
        files=WORK_FILES,
        steps=[
            tools(
                call(
                    "task",
                    {
                        "description": "Check the README",
                        "prompt": "[bg-child] read the README",
                        "subagent_type": "general",
                        "background": True,
                    },
                    "call_bg_task",
                ),
                usage=U(2000, 30, 0, 0),
            ),
            say("Started the check in the background.", usage=U(2100, 8, 1900, 0)),
            # OpenCode tells the parent when the subagent is done (a synthetic prompt), if
            # the run is still there then
            say("The background check found a hello.", usage=U(2300, 9, 2000, 0)),
        ],
        conversations={
            "child": {
                "match": "[bg-child]",
                "steps": [say("The README says hello.", usage=U(600, 7, 0, 0))],
            }
        },
    ),
    Scenario(
        "code_mode",
        "OPENCODE_EXPERIMENTAL_CODE_MODE=1 with the MCP server of `mcp`: one `execute` call "
        "whose script calls two MCP tools (one works, one is rejected and caught); OpenCode "
        "lists them in the call's `metadata.toolCalls`.",
        env={"OPENCODE_EXPERIMENTAL_CODE_MODE": "1"},
        config={
            "mcp": {
                MCP_NAME: {
                    "type": "local",
                    "command": ["{PYTHON}", "{ROOT}/mcp_server.py"],
                    "environment": {"MCP_LOG": "{ROOT}/mcp.log"},
                    "timeout": 10000,
                }
            }
        },
        steps=[
            tools(
                call(
                    "execute",
                    {
                        "code": 'const a = await tools["my-tools_v1"].echo({text: "ping"});\n'
                        'let b = "";\n'
                        'try { await tools["my-tools_v1"].reject({reason: "no"}); }'
                        ' catch (e) { b = "rejected"; }\n'
                        "return {a, b};"
                    },
                    "call_exec",
                ),
                usage=U(2600, 60, 0, 0),
            ),
            say("Code mode done.", usage=U(2700, 4, 2500, 0)),
        ],
    ),
    Scenario(
        "legacy_mixed",
        "One data directory used by opencode-ai 1.1.65 (JSON files in storage/), 1.2.27 (imports "
        "them into opencode.db, keeps the files; its database is older/opencode.db), 1.1.65 "
        "again (a session only the files hold) and 1.18.33 (migrates the database, adds one). "
        "stream.jsonl is the four runs (the older releases are installed from npm).",
        driver=drive_legacy_mixed,
        slow=True,  # two npm installs the first time, four runs
        timeout=180,
        files=WORK_FILES,
        steps=[
            say("Answer from 1.1.65.", usage=U(1000, 5, 0, 0)),
            say("Answer from 1.2.27.", usage=U(1100, 6, 0, 0)),
            say("Answer from 1.1.65 again.", usage=U(1150, 7, 0, 0)),
            say("Answer from 1.18.33.", usage=U(1200, 8, 0, 0)),
        ],
    ),
]

BY_NAME: dict[str, Scenario] = {s.name: s for s in SCENARIOS}


def get(name: str) -> Scenario:
    try:
        return BY_NAME[name]
    except KeyError:
        raise HarnessError(f"unknown scenario {name!r}; known: {', '.join(BY_NAME)}") from None


__all__ = [
    "MEASURED",
    "SCENARIOS",
    "BY_NAME",
    "Capture",
    "Scenario",
    "execute",
    "get",
    "event_type",
]
