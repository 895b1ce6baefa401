"""One case per row of seed 000's tables (records, tools) and per status word (SPEC §2)."""

from __future__ import annotations

import pytest

from opencode_events.core.mapping import STATUS_SUCCESS, success_of
from tests.records import SESSION, normalize_lines, record, step_finish, tool_use


def kinds(events: list[dict]) -> list[str]:
    return [e["kind"] for e in events]


# ----------------------------------------------------------------- raw record mapping

RECORD_CASES = [
    pytest.param(record("step_start", {"type": "step-start"}), [], id="step_start-consumed"),
    pytest.param(step_finish(), ["usage"], id="step_finish-usage"),
    pytest.param(
        record("reasoning", {"type": "reasoning", "text": "hmm", "time": {"start": 1, "end": 2}}),
        ["reasoning"],
        id="reasoning-with-text",
    ),
    pytest.param(record("reasoning", {"type": "reasoning", "text": ""}), [], id="reasoning-empty"),
    pytest.param(record("text", {"type": "text", "text": "hello"}), ["message"], id="text"),
    pytest.param(record("text", {"type": "text", "text": ""}), [], id="text-empty-consumed"),
    pytest.param(record("text", {"type": "text"}), [], id="text-missing-consumed"),
    pytest.param(tool_use("read", {"filePath": "a.py"}), ["read"], id="tool_use"),
    pytest.param(
        {
            "type": "error",
            "timestamp": 1,
            "sessionID": SESSION,
            "error": {"name": "APIError", "data": {"message": "mock bad request"}},
        },
        ["error"],
        id="error",
    ),
    pytest.param(record("telemetry", reason="idle"), ["unknown"], id="other-type-unknown"),
    pytest.param(record("done", reason="idle"), [], id="done-ends-the-run"),
    pytest.param(record("step_start"), ["unknown"], id="part-record-without-part"),
]


@pytest.mark.parametrize("rec, expected", RECORD_CASES)
def test_record_mapping(rec, expected):
    assert kinds(normalize_lines([rec])) == expected


STEP_START = record("step_start", {"type": "step-start"})
SYNTHETIC = {"type": "text", "text": "Continue if you have next steps", "synthetic": True}


@pytest.mark.parametrize(
    "lines, expected",
    [
        pytest.param([record("text", SYNTHETIC)], ["prompt"], id="synthetic-outside-a-step"),
        pytest.param(
            [step_finish(), record("text", SYNTHETIC)], ["usage", "prompt"], id="after-a-step"
        ),
        pytest.param([STEP_START, record("text", SYNTHETIC)], ["message"], id="inside-a-step"),
        pytest.param(
            [record("text", {"type": "text", "text": "hi"})], ["message"], id="not-synthetic"
        ),
        pytest.param(
            [record("text", {**SYNTHETIC, "synthetic": "yes"})], ["message"], id="not-a-boolean"
        ),
    ],
)
def test_a_synthetic_text_outside_a_step_is_a_prompt(lines, expected):
    # OpenCode's own user text (after an auto-compaction) reaches the stream as a `text`
    # record between steps; the store and export call it a prompt, so the stream does too.
    assert kinds(normalize_lines(lines)) == expected


def test_text_and_reasoning_carry_their_text():
    msg, thought = normalize_lines(
        [
            record("text", {"type": "text", "text": "hello"}),
            record("reasoning", {"type": "reasoning", "text": "thinking"}),
        ]
    )
    assert msg["text"] == "hello" and thought["text"] == "thinking"


def test_error_record_fields():
    (event,) = normalize_lines(
        [
            {
                "type": "error",
                "timestamp": 7,
                "sessionID": SESSION,
                "error": {
                    "name": "APIError",
                    "data": {"message": "mock bad request", "statusCode": 400},
                },
            }
        ]
    )
    assert event["name"] == "APIError"
    assert event["message"] == "mock bad request"
    assert event["time"] == 7 and event["session_id"] == SESSION


def test_error_record_without_data_keeps_name():
    (event,) = normalize_lines(
        [{"type": "error", "error": {"name": "MessageOutputLengthError", "data": {}}}]
    )
    assert event["name"] == "MessageOutputLengthError" and "message" not in event


@pytest.mark.parametrize(
    ("error", "name", "message"),
    [
        pytest.param(
            {"name": "APIError", "data": {"message": "m"}}, "APIError", "m", id="named-error"
        ),
        # OpenCode's HTTP API answers with Effect's tagged errors (`_tag`, then the fields)
        pytest.param(
            {"_tag": "InvalidRequestError", "message": "bad field", "field": "parts"},
            "InvalidRequestError",
            "bad field",
            id="tagged-http-error",
        ),
        pytest.param({"_tag": "BadRequest"}, "BadRequest", None, id="tagged-without-message"),
        pytest.param(
            {"name": "UnknownError", "_tag": "X", "data": {"message": "m"}},
            "UnknownError",
            "m",
            id="name-wins-over-tag",
        ),
        pytest.param({"_tag": 3, "message": "m"}, None, "m", id="tag-not-text"),
    ],
)
def test_error_names(error, name, message):
    (event,) = normalize_lines([{"type": "error", "error": error}])
    assert event.get("name") == name and event.get("message") == message


def test_unknown_record_keeps_the_whole_record():
    rec = record("telemetry", reason="idle", rejected=["bash"])
    (event,) = normalize_lines([rec])
    assert event["type"] == "telemetry"
    assert event["raw"] == rec
    assert "success" not in event


# -------------------------------------------------------------------------- usage


def test_usage_fields_follow_opencode():
    (usage,) = normalize_lines(
        [
            step_finish(
                input_=100,
                output=20,
                reasoning=7,
                read=50,
                write=3,
                cost=0.0125,
                reason="tool-calls",
            )
        ]
    )
    assert usage["turn"] == 1
    assert usage["reason"] == "tool-calls"
    assert (usage["input_tokens"], usage["output_tokens"], usage["reasoning_tokens"]) == (
        100,
        20,
        7,
    )
    assert (usage["cache_read_tokens"], usage["cache_write_tokens"]) == (50, 3)
    assert usage["total_tokens"] == 100 + 20 + 7 + 50 + 3  # no total given: the sum
    assert usage["cost"] == 0.0125


def test_usage_total_given_by_opencode_wins():
    (usage,) = normalize_lines([step_finish(input_=1, output=1, total=999)])
    assert usage["total_tokens"] == 999


def test_usage_turns_count_steps():
    events = normalize_lines([step_finish(), step_finish(), step_finish()])
    assert [e["turn"] for e in events] == [1, 2, 3]


def test_usage_zero_tokens_are_written():
    (usage,) = normalize_lines([step_finish(input_=0, output=0)])
    assert usage["input_tokens"] == 0 and usage["cost"] == 0.0


# -------------------------------------------------------------------------- tools

PATCH = """*** Begin Patch
*** Add File: new.txt
+hello
*** Update File: src/app.py
@@ def main():
-    pass
+    run()
*** Delete File: old.txt
*** Update File: a/from.py
*** Move to: b/to.py
@@
-x
+y
*** End Patch"""

TOOL_CASES = [
    pytest.param(
        tool_use("read", {"filePath": "/w/a.py"}), [{"kind": "read", "path": "/w/a.py"}], id="read"
    ),
    pytest.param(
        tool_use("write", {"filePath": "/w/b.py", "content": "x"}),
        [{"kind": "write", "path": "/w/b.py", "op": "write"}],
        id="write",
    ),
    pytest.param(
        tool_use("edit", {"filePath": "/w/b.py", "oldString": "a", "newString": "b"}),
        [{"kind": "write", "path": "/w/b.py", "op": "edit"}],
        id="edit",
    ),
    pytest.param(
        tool_use("apply_patch", {"patchText": PATCH}),
        [
            {"kind": "write", "path": "new.txt", "op": "add"},
            {"kind": "write", "path": "src/app.py", "op": "update"},
            {"kind": "write", "path": "old.txt", "op": "delete"},
            {"kind": "write", "path": "a/from.py", "op": "move", "to": "b/to.py"},
        ],
        id="apply_patch-one-write-per-file",
    ),
    pytest.param(
        tool_use("apply_patch", {"patchText": "nothing here"}),
        [{"kind": "unknown", "tool": "apply_patch"}],
        id="apply_patch-no-markers",
    ),
    pytest.param(
        tool_use(
            "apply_patch",
            {"patchText": PATCH},
            metadata={
                "files": [
                    {"filePath": "/w/new.txt", "relativePath": "new.txt", "type": "add"},
                    {
                        "filePath": "/w/a/from.py",
                        "relativePath": "b/to.py",
                        "type": "move",
                        "movePath": "/w/b/to.py",
                    },
                ]
            },
        ),
        [
            {"kind": "write", "path": "/w/new.txt", "op": "add"},
            {"kind": "write", "path": "/w/a/from.py", "op": "move", "to": "/w/b/to.py"},
        ],
        id="apply_patch-what-opencode-recorded-wins",
    ),
    pytest.param(
        tool_use("apply_patch", {"patchText": PATCH}, status="error", error="verification failed"),
        [
            {"kind": "write", "path": "new.txt", "op": "add", "success": False},
            {"kind": "write", "path": "src/app.py", "op": "update", "success": False},
            {"kind": "write", "path": "old.txt", "op": "delete", "success": False},
            {"kind": "write", "path": "a/from.py", "op": "move", "to": "b/to.py", "success": False},
        ],
        id="apply_patch-failed-read-from-the-patch",
    ),
    pytest.param(
        tool_use(
            "bash",
            {"command": "sleep 5", "timeout": 1000},
            output="\n\n<shell_metadata>\nshell tool terminated command after exceeding "
            "timeout 1000 ms.",
            metadata={"exit": None, "output": ""},
        ),
        [{"kind": "command", "command": "sleep 5", "interrupted": "timeout", "success": True}],
        id="bash-timed-out",
    ),
    pytest.param(
        tool_use(
            "bash",
            {"command": "sleep 5"},
            output="\n\n<shell_metadata>\nUser aborted the command\n</shell_metadata>",
            metadata={"exit": None},
        ),
        [{"kind": "command", "command": "sleep 5", "interrupted": "abort"}],
        id="bash-aborted",
    ),
    pytest.param(
        tool_use("bash", {"command": "true"}, metadata={"exit": 0}),
        [{"kind": "command", "command": "true", "exit_code": 0, "interrupted": None}],
        id="bash-exit-0-not-interrupted",
    ),
    pytest.param(
        tool_use("grep", {"pattern": "TODO", "path": "src", "include": "*.py"}),
        [{"kind": "search", "pattern": "TODO", "path": "src"}],
        id="grep",
    ),
    pytest.param(
        tool_use("glob", {"pattern": "**/*.py"}),
        [{"kind": "search", "pattern": "**/*.py"}],
        id="glob",
    ),
    pytest.param(
        tool_use("bash", {"command": "pytest -q"}, metadata={"exit": 1, "output": "F"}),
        [{"kind": "command", "command": "pytest -q", "exit_code": 1}],
        id="bash-command",
    ),
    pytest.param(
        tool_use("bash", {"command": "cat README.md"}, metadata={"exit": 0}),
        [{"kind": "read", "path": "README.md", "command": "cat README.md", "exit_code": 0}],
        id="bash-recognized-read",
    ),
    pytest.param(
        tool_use("bash", {"command": "cat missing.txt"}, metadata={"exit": 1}),
        [{"kind": "read", "path": "missing.txt", "command": "cat missing.txt", "exit_code": 1}],
        id="bash-recognized-read-that-failed-keeps-its-exit-code",
    ),
    pytest.param(
        tool_use("bash", {"command": "ls src tests"}, metadata={"exit": 2}),
        [
            {"kind": "search", "path": "src", "command": "ls src tests", "exit_code": 2},
            {"kind": "search", "path": "tests", "command": "ls src tests", "exit_code": 2},
        ],
        id="bash-recognized-search-each-event-keeps-the-command",
    ),
    pytest.param(
        tool_use("bash", {"command": "rm old.txt"}),
        [{"kind": "write", "op": "delete", "command": "rm old.txt", "exit_code": None}],
        id="bash-recognized-change-without-exit-code",
    ),
    pytest.param(
        tool_use("background_process", {"command": "npm run dev"}),
        [{"kind": "command", "command": "npm run dev"}],
        id="background_process-command",
    ),
    pytest.param(
        tool_use("background_process", {"action": "list"}),
        [],
        id="background_process-no-command-consumed",
    ),
    pytest.param(
        tool_use(
            "task",
            {"description": "Find tests", "prompt": "…", "subagent_type": "explore"},
            metadata={"sessionId": "ses_child", "parentSessionId": SESSION},
        ),
        [
            {
                "kind": "orchestration",
                "agent": "explore",
                "child_session_id": "ses_child",
                "description": "Find tests",
            }
        ],
        id="task-metadata-session",
    ),
    pytest.param(
        tool_use(
            "task",
            {"description": "d", "prompt": "p"},
            output='<task id="ses_fromoutput" state="completed">\n<task_result>\nok\n'
            "</task_result>\n</task>",
        ),
        [{"kind": "orchestration", "child_session_id": "ses_fromoutput", "description": "d"}],
        id="task-output-session",
    ),
    pytest.param(
        tool_use("task", {"prompt": "p"}),
        [{"kind": "unknown", "tool": "task"}],
        id="task-unidentified-unknown",
    ),
    pytest.param(
        tool_use("agent_manager", {"agent": "review", "session_id": "ses_am"}),
        [{"kind": "orchestration", "agent": "review", "child_session_id": "ses_am"}],
        id="agent_manager",
    ),
    pytest.param(
        tool_use("skill", {"name": "release-notes"}),
        [{"kind": "skill", "name": "release-notes"}],
        id="skill",
    ),
    pytest.param(
        tool_use(
            "lsp",
            {
                "operation": "workspaceSymbol",
                "query": "Foo",
                "filePath": "a.ts",
                "line": 1,
                "character": 1,
            },
        ),
        [{"kind": "search", "pattern": "Foo", "operation": "workspaceSymbol", "path": None}],
        id="lsp-workspace-symbol-query",
    ),
    pytest.param(
        tool_use("lsp", {"operation": "workspaceSymbol", "filePath": "a.ts", "line": 1}),
        [{"kind": "search", "pattern": "", "operation": "workspaceSymbol"}],
        id="lsp-workspace-symbol-every-symbol",
    ),
    pytest.param(
        tool_use(
            "lsp", {"operation": "findReferences", "filePath": "/w/a.ts", "line": 3, "character": 7}
        ),
        [
            {
                "kind": "search",
                "path": "/w/a.ts",
                "position": "3:7",
                "operation": "findReferences",
            }
        ],
        id="lsp-symbol-at-a-position",
    ),
    pytest.param(
        tool_use("lsp", {"operation": "hover", "filePath": "a.ts"}),
        [{"kind": "unknown", "tool": "lsp"}],
        id="lsp-position-missing-unknown",
    ),
    pytest.param(
        tool_use(
            "lsp", {"operation": "documentSymbol", "filePath": "a.ts", "line": 1, "character": 1}
        ),
        [{"kind": "unknown", "tool": "lsp"}],
        id="lsp-document-outline-unknown",
    ),
    pytest.param(
        tool_use("lsp", {"symbol": "Foo", "filePath": "a.ts"}),
        [{"kind": "unknown", "tool": "lsp"}],
        id="lsp-no-operation-unknown",
    ),
    pytest.param(tool_use("todo", {}), [], id="todo-consumed"),
    pytest.param(tool_use("todowrite", {"todos": []}), [], id="todowrite-consumed"),
    pytest.param(tool_use("todoread", {}), [], id="todoread-consumed"),
    pytest.param(
        tool_use("webfetch", {"url": "http://127.0.0.1/"}),
        [{"kind": "unknown", "tool": "webfetch"}],
        id="other-tool-unknown",
    ),
    pytest.param(
        tool_use("invalid", {"tool": "nope", "error": "x"}),
        [{"kind": "unknown", "tool": "invalid"}],
        id="invalid-unknown",
    ),
    pytest.param(
        tool_use("my-tools_v1_echo", {"text": "x"}),
        [{"kind": "unknown", "tool": "my-tools_v1_echo"}],
        id="mcp-unknown",
    ),
    pytest.param(
        tool_use(
            "task",
            {"description": "d", "prompt": "p", "subagent_type": "general", "background": True},
            metadata={"sessionId": "ses_c", "background": True, "jobId": "ses_c"},
        ),
        [{"kind": "orchestration", "child_session_id": "ses_c", "background": True}],
        id="task-in-the-background",
    ),
    pytest.param(
        tool_use(
            "task",
            {"description": "d", "prompt": "p", "subagent_type": "general", "background": True},
            metadata={"sessionId": "ses_c"},
        ),
        [{"kind": "orchestration", "child_session_id": "ses_c", "background": None}],
        id="task-background-asked-but-not-offered",
    ),
    pytest.param(
        tool_use(
            "task",
            {"description": "d", "prompt": "p", "subagent_type": "general", "background": True},
            status="error",
            error="no such agent",
        ),
        [{"kind": "orchestration", "agent": "general", "background": True, "success": False}],
        id="task-background-failed-before-it-started",
    ),
    pytest.param(
        tool_use("task", {"description": "d", "subagent_type": "general", "background": "yes"}),
        [{"kind": "orchestration", "background": None}],
        id="task-background-not-a-boolean",
    ),
    pytest.param(
        tool_use("READ", {"filePath": "x"}),
        [{"kind": "read", "tool": "READ"}],
        id="case-insensitive-name-kept",
    ),
]


@pytest.mark.parametrize("rec, expected", TOOL_CASES)
def test_tool_mapping(rec, expected):
    events = normalize_lines([rec])
    assert len(events) == len(expected)
    for event, want in zip(events, expected, strict=True):
        for key, value in want.items():
            assert event.get(key) == value, (key, event)
        assert event["call_id"] == "call_1"
        assert "success" in event  # always written on tool events


def test_tool_common_fields():
    (event,) = normalize_lines([tool_use("read", {"filePath": "a"}, title="a")])
    assert event["tool"] == "read" and event["status"] == "completed"
    assert event["success"] is True and event["title"] == "a" and event["duration_ms"] == 250
    assert "error" not in event


@pytest.mark.parametrize(
    "start, end",
    [
        (0, int("9" * 400)),  # past any float: OverflowError in isfinite
        (0.5, int("9" * 400)),  # a float less an int past any float: OverflowError at once
        (-1.7e308, 1.7e308),  # two finite floats a difference of inf apart
    ],
)
def test_tool_times_out_of_any_float_range_give_no_duration(start, end):
    rec = tool_use("read", {"filePath": "a"}, title="a")
    rec["part"]["state"]["time"] = {"start": start, "end": end}
    (event,) = normalize_lines([rec])
    assert event["kind"] == "read" and "duration_ms" not in event


def test_failed_tool_carries_its_error():
    (event,) = normalize_lines(
        [tool_use("read", {"filePath": "missing"}, status="error", error="File not found")]
    )
    assert event["success"] is False and event["error"] == "File not found"


def test_unknown_tool_keeps_record_and_tool_fields():
    rec = tool_use("webfetch", {"url": "u"})
    (event,) = normalize_lines([rec])
    assert event["raw"] == rec and event["success"] is True and event["status"] == "completed"


QUESTIONS = [
    {"question": "Which colour?", "header": "Colour", "options": [{"label": "Red"}]},
    {"question": "Extras?", "header": "Extras", "options": [], "multiple": True},
]

# Tools seed 000 does not name: unknown, with the fields a user filters them by beside raw.
UNKNOWN_TOOL_CASES = [
    pytest.param(
        tool_use("question", {"questions": QUESTIONS}, metadata={"answers": [["Red"], []]}),
        {"questions": ["Which colour?", "Extras?"], "answers": [["Red"], []]},
        id="question-answered",
    ),
    pytest.param(
        tool_use("question", {"questions": QUESTIONS[:1]}, status="error", error="dismissed"),
        {"questions": ["Which colour?"]},
        id="question-dismissed",
    ),
    pytest.param(
        tool_use("Question", {"questions": QUESTIONS[:1]}, metadata={"answers": "Red"}),
        {"questions": ["Which colour?"]},
        id="question-answers-of-another-shape",
    ),
    pytest.param(
        tool_use("question", {"questions": [{"header": "no text"}]}), {}, id="question-no-text"
    ),
    pytest.param(tool_use("question", {"questions": "why?"}), {}, id="question-not-a-list"),
    pytest.param(tool_use("question", ["not", "an", "object"]), {}, id="question-input-a-list"),
    pytest.param(
        tool_use("webfetch", {"url": "https://example.com/", "format": "markdown"}),
        {"url": "https://example.com/"},
        id="webfetch",
    ),
    pytest.param(
        tool_use("webfetch", {"url": "x"}, status="error", error="403"),
        {"url": "x"},
        id="webfetch-failed",
    ),
    pytest.param(tool_use("WebFetch", {"url": 3}), {}, id="webfetch-url-not-text"),
    pytest.param(
        tool_use("websearch", {"query": "opencode release notes", "numResults": 8}),
        {"query": "opencode release notes"},
        id="websearch",
    ),
    pytest.param(
        tool_use("codesearch", {"query": "parsePatch", "tokensNum": 5000}),
        {"query": "parsePatch"},
        id="codesearch-of-older-releases",
    ),
    pytest.param(tool_use("plan_exit", {}), {}, id="plan_exit-nothing-to-carry"),
    pytest.param(
        tool_use("my-tools_v1_echo", {"url": "u", "query": "q"}), {}, id="mcp-tool-input-not-read"
    ),
]


SCRIPT_CASES = [
    pytest.param(
        {"toolCalls": [{"tool": "gh.search", "status": "completed", "input": {"q": "x"}}]},
        [("gh_search", "call_1/1", "completed", True)],
        id="one-call",
    ),
    pytest.param(
        {
            "toolCalls": [
                {"tool": "a.b.c", "status": "running"},
                {"tool": "x_y.z", "status": "error"},
            ]
        },
        [("a_b.c", "call_1/1", "running", None), ("x_y_z", "call_1/2", "error", False)],
        id="running-and-failed",
    ),
    pytest.param({"toolCalls": []}, [], id="no-calls"),
    pytest.param({"toolCalls": "x"}, [], id="not-a-list"),
    pytest.param({"toolCalls": [{"tool": 3}, {"status": "completed"}]}, [], id="no-tool-names"),
    pytest.param({}, [], id="no-metadata-calls"),
]


@pytest.mark.parametrize("metadata, made", SCRIPT_CASES)
def test_code_mode_script_calls(metadata, made):
    rec = tool_use("execute", {"code": "return 1"}, metadata=metadata)
    execute, *found = normalize_lines([rec])
    assert execute["tool"] == "execute" and "via" not in execute
    assert [(e["tool"], e["call_id"], e["status"], e["success"]) for e in found] == made
    assert all(e["via"] == "execute" and e["kind"] == "unknown" for e in found)


def test_a_failed_execute_still_lists_the_calls_it_made():
    rec = tool_use("execute", {"code": "x"}, status="error", error="ToolFailure")
    rec["part"]["state"]["metadata"] = {"toolCalls": [{"tool": "gh.search", "status": "error"}]}
    execute, made = normalize_lines([rec])
    assert execute["success"] is False and made["success"] is False


@pytest.mark.parametrize("rec, fields", UNKNOWN_TOOL_CASES)
def test_unknown_tools_carry_what_users_filter_on(rec, fields):
    (event,) = normalize_lines([rec])
    assert event["kind"] == "unknown" and event["raw"] == rec
    extra = {k: event[k] for k in ("questions", "answers", "url", "query") if k in event}
    assert extra == fields


# -------------------------------------------------------------------- status words

STATUS_CASES = [(word, True) for word in ("completed", "success", "done", "ok")]
STATUS_CASES += [(word, False) for word in ("error", "failed", "failure", "cancelled", "canceled")]
STATUS_CASES += [("running", None), ("pending", None), ("weird", None)]


@pytest.mark.parametrize("status, expected", STATUS_CASES)
@pytest.mark.parametrize("spelling", [str.lower, str.upper, str.title])
def test_status_to_success(status, expected, spelling):
    assert success_of(spelling(status)) is expected
    (event,) = normalize_lines([tool_use("glob", {"pattern": "*"}, status=spelling(status))])
    assert event["success"] is expected
    assert event["status"] == spelling(status)  # as written


def test_status_table_is_the_seed_list():
    assert set(STATUS_SUCCESS) == {
        "completed",
        "success",
        "done",
        "ok",
        "error",
        "failed",
        "failure",
        "cancelled",
        "canceled",
    }


def test_non_string_status_is_undetermined():
    assert success_of(1) is None and success_of(None) is None


# ------------------------------------------------------------------ user-side parts
# A stored, exported or served message's parts: ``file`` (an attachment), ``subtask`` (a
# command run in a subagent) and ``agent`` (an @mention) have kinds of their own.


def part_events(part: dict, role: str = "user") -> list[dict]:
    import json

    import msgspec

    from opencode_events.core.normalizer import Normalizer, Provenance
    from opencode_events.core.views import PART_DECODER

    norm = Normalizer()
    decoded = PART_DECODER.decode(json.dumps({"id": "prt_1", **part}).encode())
    events = norm.part(decoded, Provenance(session_id=SESSION, raw=b"{}"), role=role)
    return [json.loads(msgspec.json.encode(e)) for e in events]


README_URL = "file:///w/my%20docs/README.md"
PART_CASES = [
    pytest.param(
        {"type": "file", "mime": "text/plain", "filename": "README.md", "url": README_URL},
        {
            "kind": "attachment",
            "name": "README.md",
            "mime": "text/plain",
            "path": "/w/my docs/README.md",
        },
        id="file-by-path",
    ),
    pytest.param(
        {
            "type": "file",
            "mime": "text/plain",
            "filename": "README.md",
            "url": README_URL,
            "source": {"type": "file", "path": "README.md", "text": {"value": "@README.md"}},
        },
        {
            "kind": "attachment",
            "name": "README.md",
            "mime": "text/plain",
            "path": "/w/my docs/README.md",
            "origin": "file",
        },
        id="file-with-its-source",
    ),
    pytest.param(
        {
            "type": "file",
            "mime": "image/png",
            "filename": "shot.png",
            "url": "data:image/png;base64," + "A" * 5000,
        },
        {"kind": "attachment", "name": "shot.png", "mime": "image/png"},
        id="pasted-image-content-not-copied",
    ),
    pytest.param(
        {
            "type": "file",
            "mime": "text/markdown",
            "url": "https://example.com/a.md",
            "source": {"type": "resource", "clientName": "docs", "uri": "docs://a"},
        },
        {
            "kind": "attachment",
            "mime": "text/markdown",
            "url": "https://example.com/a.md",
            "origin": "resource",
        },
        id="mcp-resource",
    ),
    pytest.param(
        {"type": "file", "mime": 3, "filename": ["x"], "url": 7, "source": "file"},
        {"kind": "attachment"},
        id="file-of-another-shape",
    ),
    pytest.param(
        {
            "type": "subtask",
            "agent": "general",
            "description": "Review a file",
            "command": "review",
            "model": {"providerID": "mock", "modelID": "mock-model"},
            "prompt": "Review src/app.py",
        },
        {
            "kind": "subtask",
            "agent": "general",
            "description": "Review a file",
            "command": "review",
            "prompt": "Review src/app.py",
            "model": "mock-model",
            "provider": "mock",
        },
        id="subtask",
    ),
    pytest.param(
        {"type": "subtask", "agent": "general", "prompt": "p", "model": "mock-model"},
        {"kind": "subtask", "agent": "general", "prompt": "p"},
        id="subtask-model-not-an-object",
    ),
    pytest.param(
        {"type": "agent", "name": "explore", "source": {"value": "@explore"}},
        {"kind": "mention", "agent": "explore"},
        id="agent-mention",
    ),
    pytest.param({"type": "agent"}, {"kind": "mention"}, id="agent-without-a-name"),
]


@pytest.mark.parametrize("part, expected", PART_CASES)
def test_user_side_parts(part, expected):
    (event,) = part_events(part)
    drop = {"seq", "session_id", "part_id"}
    assert {k: v for k, v in event.items() if k not in drop} == expected


def test_a_user_side_part_seen_again_is_a_duplicate():
    from opencode_events.core.normalizer import Normalizer, Provenance
    from opencode_events.core.views import PART_DECODER

    norm = Normalizer()
    part = PART_DECODER.decode(b'{"id": "prt_1", "type": "agent", "name": "explore"}')
    assert len(norm.part(part, Provenance(), role="user")) == 1
    assert norm.part(part, Provenance(), role="user") == [] and norm.duplicates == 1


def test_no_kind_redefines_a_common_field():
    """A kind's own field named like a common one (``source``, ``time``) would be overwritten
    by the normalizer's stamp: every kind keeps to its own names."""
    from opencode_events import events

    common = set(events.Event.__struct_fields__)
    for cls in events.ANY_EVENT.__args__:
        for base in cls.__mro__[: cls.__mro__.index(events.Event)]:
            assert not common & set(base.__dict__.get("__annotations__", {})), base
