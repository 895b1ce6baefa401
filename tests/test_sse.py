"""The server event stream reader: SSE framing, the event mapping, dedupe, bad input."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from opencode_events.core.normalizer import Normalizer
from opencode_events.output.jsonl import JsonlWriter
from opencode_events.pipeline.normalize import normalize_streams
from opencode_events.sources.sse import CONSUMED, SseReader

SAMPLES = Path(__file__).resolve().parents[1] / "samples"
SERVE_SAMPLES = sorted(p.parent.name for p in SAMPLES.glob("*/events.sse"))
SID = "ses_main"
UNNAMED_TOOLS = {"question"}  # tools of the captures seed 000 leaves unknown
_ENCODE = msgspec.json.Encoder()


def read(text: bytes | str, **kw: Any) -> tuple[list[dict[str, Any]], SseReader]:
    """Feed ``text`` line by line as the pipeline does; the events as dicts."""
    if isinstance(text, str):
        text = text.encode()
    reader = SseReader(Normalizer(keep_raw=kw.pop("keep_raw", False)), **kw)
    events = []
    lines = text.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    for n, line in enumerate(lines, 1):
        events += reader.feed(n, line)
    events += reader.finish()
    return [json.loads(_ENCODE.encode(e)) for e in events], reader


def frame(type_: str, **props: Any) -> str:
    return "data: " + json.dumps({"id": "evt_1", "type": type_, "properties": props}) + "\n\n"


def part(type_: str, id_: str = "prt_1", msg: str = "msg_a", **fields: Any) -> str:
    body = {"type": type_, "id": id_, "messageID": msg, "sessionID": SID, **fields}
    return frame("message.part.updated", sessionID=SID, part=body, time=1000)


def tool(status: str, id_: str = "prt_t", **state: Any) -> str:
    return part(
        "tool",
        id_,
        tool="bash",
        callID="call_1",
        state={"status": status, "input": {"command": "echo hi"}, **state},
    )


def message(role: str, id_: str = "msg_a", completed: int | None = None, **info: Any) -> str:
    time = {"created": 1}
    if completed is not None:
        time["completed"] = completed
    body = {"id": id_, "sessionID": SID, "role": role, "time": time, **info}
    return frame("message.updated", sessionID=SID, info=body)


TOKENS = {"input": 100, "output": 20, "reasoning": 3, "cache": {"read": 50, "write": 0}}


def kinds(events: list[dict[str, Any]]) -> list[str]:
    return [e["kind"] for e in events]


# ------------------------------------------------------------------ the mapping table

CASES = [
    # (name, SSE text, expected kinds)
    ("server bookkeeping", frame("server.connected") + frame("server.heartbeat"), []),
    # Usage comes from a step-finish part, as in every other source (the store's rule).
    ("step-start consumed", part("step-start"), []),
    (
        "step-finish: usage",
        part("step-start") + part("step-finish", "prt_2", tokens=TOKENS),
        ["usage"],
    ),
    (
        "tool: one event when terminal",
        tool("pending")
        + tool("running")
        + tool("running", title="t")
        + tool("completed", metadata={"exit": 0}, time={"start": 1, "end": 5})
        + tool("completed"),
        ["command"],
    ),
    ("tool error", tool("running") + tool("error", error="boom"), ["command"]),
    ("tool never finished", tool("pending") + tool("running"), []),
    # SPEC §2's other statuses end a call too, as the run stream reports them; so does one
    # OpenCode may add later (success null), while pending and running, in any case, do not.
    ("tool cancelled", tool("Running") + tool("cancelled") + tool("cancelled"), ["command"]),
    ("tool failed", tool("PENDING") + tool("failed"), ["command"]),
    ("tool of a status never seen", tool("running") + tool("aborted"), ["command"]),
    (
        "text only when complete",
        part("text", text="")
        + part("text", text="Hel")
        + part("text", text="Hello", time={"start": 1, "end": 2}),
        ["message"],
    ),
    (
        "reasoning only when complete",
        part("reasoning", text="hm") + part("reasoning", text="hmm", time={"start": 1, "end": 2}),
        ["reasoning"],
    ),
    (
        "user text is a prompt",
        message("user", "msg_u") + part("text", msg="msg_u", text="hi"),
        ["prompt"],
    ),
    ("compaction part", part("compaction", auto=True), ["compaction"]),
    ("unknown part type", part("snapshot", snapshot="abc"), ["unknown"]),
    ("retry part", part("retry", attempt=1, error={"name": "APIError"}), ["retry"]),
    ("assistant in flight: no usage", message("assistant", tokens=TOKENS), []),
    (
        "assistant completed with its step: one usage",
        message("assistant", tokens=TOKENS)
        + part("step-finish", "prt_2", tokens=TOKENS)
        + message("assistant", completed=9, tokens=TOKENS)
        + message("assistant", completed=9, tokens=TOKENS),
        ["usage"],
    ),
    # No step-finish, no usage: a reply with no model call behind it (a user shell
    # command's, a context-overflow attempt's, a subtask command's), whatever it says it
    # cost; the store has no step-finish part for it either.
    ("completed without a step: no usage", message("assistant", completed=9, tokens=TOKENS), []),
    (
        "failed request: no usage",
        message("assistant", completed=9, error={"name": "APIError", "data": {"message": "x"}}),
        [],
    ),
    (
        "provider retry",
        frame(
            "session.status",
            sessionID=SID,
            status={"type": "retry", "attempt": 2, "message": "overloaded", "next": 5000},
        ),
        ["retry"],
    ),
    ("patch part", part("patch", hash="abc", files=["/w/a.txt"]), ["patch"]),
    ("patch part without a list of paths", part("patch", hash="abc", files="a"), ["unknown"]),
    (
        "session.error",
        frame(
            "session.error", sessionID=SID, error={"name": "APIError", "data": {"message": "mock"}}
        ),
        ["error"],
    ),
    (
        "permission asked and replied",
        frame(
            "permission.asked",
            id="per_1",
            sessionID=SID,
            permission="bash",
            patterns=["echo hi"],
            metadata={},
            always=[],
        )
        + frame("permission.replied", sessionID=SID, requestID="per_1", reply="once"),
        ["permission", "permission"],
    ),
    (
        "delta consumed by default",
        frame(
            "message.part.delta", sessionID=SID, messageID="m", partID="p", field="text", delta="He"
        ),
        [],
    ),
    ("consumed bookkeeping types", "".join(frame(t, sessionID=SID) for t in sorted(CONSUMED)), []),
    ("v2 family consumed", frame("session.next.text.delta", sessionID=SID), []),
    (
        "unrecognised type",
        frame("mcp.browser.open.failed", mcpName="m", url="http://x", sessionID=SID),
        ["unknown"],
    ),
    (
        "question asked, answered, dismissed",
        frame("question.asked", id="que_1", sessionID=SID, questions=[])
        + frame("question.replied", sessionID=SID, requestID="que_1", answers=[])
        + frame("question.rejected", sessionID=SID, requestID="que_2"),
        ["question", "question", "question"],
    ),
    ("question of the wrong shape", frame("question.asked", sessionID=SID, tool=3), ["question"]),
    ("not JSON", "data: {not json\n\n", ["warning"]),
    ("JSON but not an object", "data: [1, 2]\n\n", ["warning"]),
    ("object without a type", 'data: {"hello": 1}\n\n', ["unknown"]),
    (
        "part of the wrong shape",
        'data: {"type":"message.part.updated","properties":{"sessionID":"s","part":"oops"}}\n\n',
        ["unknown"],
    ),
    (
        "properties of the wrong shape",
        'data: {"type":"message.updated","properties":[1]}\n\n',
        ["unknown"],
    ),
    ("payload of the wrong shape", 'data: {"payload": 3}\n\n', ["unknown"]),
]


@pytest.mark.parametrize(("text", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_mapping_table(text: str, expected: list[str]) -> None:
    events, _ = read(text)
    assert kinds(events) == expected


def test_tool_event_fields_and_provenance() -> None:
    text = tool("pending") + tool("completed", metadata={"exit": 3}, time={"start": 1, "end": 6})
    (event,), _ = read(text)
    assert event["command"] == "echo hi" and event["exit_code"] == 3
    assert event["success"] is True and event["duration_ms"] == 5
    assert event["session_id"] == SID and event["part_id"] == "prt_t"
    assert event["message_id"] == "msg_a" and event["time"] == 1000
    assert event["line"] == 3  # the first data line of the terminal frame


def test_usage_from_the_step_finish_labelled_by_its_message() -> None:
    labels = {"modelID": "m1", "providerID": "p1", "agent": "build"}
    text = message("assistant", **labels)
    text += part("step-finish", "prt_f", tokens=TOKENS, cost=0.5, reason="stop")
    text += message("assistant", completed=7, tokens=TOKENS, cost=0.5, finish="stop", **labels)
    (usage,), _ = read(text)
    assert usage["input_tokens"] == 100 and usage["output_tokens"] == 20
    assert usage["reasoning_tokens"] == 3 and usage["cache_read_tokens"] == 50
    assert usage["total_tokens"] == 173 and usage["cost"] == 0.5
    assert usage["reason"] == "stop" and usage["turn"] == 1 and usage["time"] == 1000
    assert usage["message_id"] == "msg_a" and usage["part_id"] == "prt_f"
    assert (usage["model"], usage["provider"], usage["agent"]) == ("m1", "p1", "build")


def test_retry_fields() -> None:
    status = {
        "type": "retry",
        "attempt": 3,
        "message": "Provider is overloaded",
        "next": 1796163035866,
        "action": {"reason": "free_tier_limit", "provider": "x", "title": "t"},
    }
    (retry,), _ = read(frame("session.status", sessionID=SID, status=status))
    assert retry["kind"] == "retry" and retry["session_id"] == SID
    assert retry["attempt"] == 3 and retry["message"] == "Provider is overloaded"
    assert retry["next"] == 1796163035866 and retry["reason"] == "free_tier_limit"


def test_sample_provider_retry() -> None:
    """error500_retry: HTTP 500 once, then success; the server says it retries."""
    events, _ = read((SAMPLES / "error500_retry" / "events.sse").read_bytes())
    retries = [e for e in events if e["kind"] == "retry"]
    assert [(r["attempt"], r["message"]) for r in retries] == [(1, "mock server error")]
    assert kinds(events).index("retry") < kinds(events).index("usage")


def test_error_and_permission_fields() -> None:
    text = frame(
        "session.error",
        sessionID=SID,
        error={"name": "APIError", "data": {"message": "mock server error", "statusCode": 500}},
    )
    text += frame(
        "permission.asked", id="per_1", sessionID=SID, permission="bash", patterns=["echo hi"]
    )
    text += frame("permission.replied", sessionID=SID, requestID="per_1", reply="reject")
    error, asked, replied = read(text)[0]
    assert (error["name"], error["message"]) == ("APIError", "mock server error")
    assert asked["id"] == "per_1" and asked["permission"] == "bash"
    assert asked["patterns"] == ["echo hi"] and "reply" not in asked
    assert replied["id"] == "per_1" and replied["reply"] == "reject"


QUESTIONS = [
    {"question": "Which?", "header": "Pick", "options": [{"label": "A", "description": "a"}]},
    {"question": "More?", "header": "More", "options": [], "multiple": True},
]


@pytest.mark.parametrize(
    ("asked", "replied", "expected"),
    [
        (  # OpenCode's shapes: texts, answers, the ask's call and message on the reply too
            {"id": "que_1", "questions": QUESTIONS, "tool": {"messageID": "m", "callID": "c"}},
            {"requestID": "que_1", "answers": [["A"], []]},
            [
                {
                    "id": "que_1",
                    "questions": ["Which?", "More?"],
                    "call_id": "c",
                    "message_id": "m",
                },
                {
                    "id": "que_1",
                    "answers": [["A"], []],
                    "reply": "answer",
                    "call_id": "c",
                    "message_id": "m",
                },
            ],
        ),
        (  # no tool (a question a plugin asked): nothing to link
            {"id": "que_1", "questions": QUESTIONS[:1]},
            {"requestID": "que_1", "answers": [["A"]]},
            [
                {"id": "que_1", "questions": ["Which?"]},
                {"id": "que_1", "answers": [["A"]], "reply": "answer"},
            ],
        ),
        (  # a reply to an ask never seen (attached later): its own id only
            None,
            {"requestID": "que_9", "answers": [["x", "y"]]},
            [{"id": "que_9", "answers": [["x", "y"]], "reply": "answer"}],
        ),
        (  # shapes OpenCode never sends: left out, the event kept
            {"id": 7, "questions": [{"question": 1}], "tool": "call"},
            {"requestID": ["que_1"], "answers": [[1]]},
            [{}, {"reply": "answer"}],
        ),
        (
            {"id": "que_1", "questions": "Which?"},
            {"requestID": "que_1", "answers": "A"},
            [{"id": "que_1"}, {"id": "que_1", "reply": "answer"}],
        ),
    ],
)
def test_question_fields(asked: Any, replied: Any, expected: list[dict[str, Any]]) -> None:
    text = frame("question.asked", sessionID=SID, **asked) if asked else ""
    text += frame("question.replied", sessionID=SID, **replied)
    keep = {"id", "questions", "answers", "reply", "call_id", "message_id"}
    events = read(text)[0]
    assert [{k: v for k, v in e.items() if k in keep} for e in events] == expected
    assert {e["kind"] for e in events} == {"question"} and all(
        e["session_id"] == SID for e in events
    )


def test_a_dismissed_question_has_no_answers_and_other_sessions_are_not_followed() -> None:
    text = frame("question.asked", id="que_1", sessionID="ses_other", questions=QUESTIONS)
    text += frame("question.rejected", sessionID=SID, requestID="que_1", answers=[["A"]])
    events = read(text, session=SID)[0]
    assert [(e["kind"], e["id"], e["reply"]) for e in events] == [("question", "que_1", "reject")]
    assert "answers" not in events[0] and "call_id" not in events[0]


def test_deltas_when_asked() -> None:
    text = frame(
        "message.part.delta", sessionID=SID, messageID="m", partID="p", field="text", delta="He"
    ) + frame(
        "message.part.delta", sessionID=SID, messageID="m", partID="p", field="text", delta="llo"
    )
    events, _ = read(text, deltas=True)
    assert [(e["kind"], e["field"], e["delta"]) for e in events] == [
        ("delta", "text", "He"),
        ("delta", "text", "llo"),
    ]
    assert events[0]["part_id"] == "p" and events[0]["message_id"] == "m"


def test_unknown_keeps_the_frame() -> None:
    text = frame("mcp.browser.open.failed", mcpName="q", sessionID=SID, url="http://x")
    (event,), _ = read(text)
    assert event["type"] == "mcp.browser.open.failed" and event["session_id"] == SID
    assert event["raw"]["properties"]["mcpName"] == "q"


def test_raw_is_the_frame_json() -> None:
    text = tool("completed")
    (event,), _ = read(text, keep_raw=True)
    assert event["raw"] == json.loads(text.removeprefix("data: "))


def test_text_without_end_is_flushed_when_its_message_completes() -> None:
    text = part("text", text="partial answer") + message("assistant", completed=5, tokens=TOKENS)
    events, _ = read(text)
    assert kinds(events) == ["message"]
    text = part("text", text="partial answer") + part("step-finish", "prt_f", tokens=TOKENS)
    events, _ = read(text + message("assistant", completed=5, tokens=TOKENS))
    assert kinds(events) == ["message", "usage"]
    assert events[0]["text"] == "partial answer"


def test_text_of_an_unfinished_message_is_written_at_the_end() -> None:
    events, _ = read(part("text", text="cut off") + part("reasoning", "prt_2", text="hm"))
    assert [(e["kind"], e["text"]) for e in events] == [("message", "cut off"), ("reasoning", "hm")]


@pytest.mark.parametrize("deltas", [False, True])
@pytest.mark.parametrize(
    ("cut", "expected"),
    [
        # serve_text: reasoning, then text, each sent in deltas after an empty update
        (64, []),  # nothing yet: an empty part is no event
        (65, [("reasoning", "Thinking over ")]),
        (66, [("reasoning", "Thinking over SSE.")]),
        (69, [("reasoning", "Thinking over SSE."), ("message", "Hello ")]),
        (70, [("reasoning", "Thinking over SSE."), ("message", "Hello over SSE.")]),
    ],
)
def test_a_reply_cut_off_keeps_the_text_its_deltas_carried(cut, expected, deltas) -> None:
    """OpenCode 1.18 sends a part's text only in deltas until the part ends: a capture cut
    before that ends with the text the deltas brought (the last update's, then theirs)."""
    frames = (SAMPLES / "serve_text" / "events.sse").read_text().split("\n\n")
    events, _ = read("\n\n".join(frames[:cut]) + "\n\n", deltas=deltas)
    texts = [(e["kind"], e["text"]) for e in events if e["kind"] in ("reasoning", "message")]
    assert texts == expected
    whole, _ = read((SAMPLES / "serve_text" / "events.sse").read_text(), deltas=deltas)
    assert [e for e in whole if e["kind"] in ("reasoning", "message")][-1]["text"] == (
        "Hello over SSE."
    )


def test_user_role_learned_after_the_part() -> None:
    events, _ = read(part("text", msg="msg_u", text="hi") + message("user", "msg_u"))
    assert kinds(events) == ["prompt"]


# ------------------------------------------------------------------------ SSE framing


def test_multiline_data_is_joined_with_newlines() -> None:
    text = 'data: {"type": "session.error",\ndata: "properties": {"error": "two\\nlines"}}\n\n'
    (event,), _ = read(text)
    assert event["kind"] == "error" and event["message"] == "two\nlines"
    assert event["line"] == 1


def test_comments_fields_and_no_space_after_colon() -> None:
    text = (
        ": a comment\n"
        "event: message\n"
        "id: 42\n"
        "retry: 1500\n"
        'data:{"type":"session.error","properties":{"error":"x"}}\n'
        "\n"
    )
    events, reader = read(text)
    assert kinds(events) == ["error"] and events[0]["line"] == 5
    assert reader.last_event_id == "42" and reader.retry_ms == 1500


def test_crlf_lone_cr_and_bom() -> None:
    body = '{"type":"session.error","properties":{"error":"x"}}'
    crlf = "\ufeffdata: " + body + "\r\n\r\n" + "data: " + body + "\r\n\r\n"
    assert kinds(read(crlf)[0]) == ["error", "error"]
    assert kinds(read(crlf + crlf)[0]) == ["error"] * 4  # `cat a.sse a.sse`: a BOM each
    lone_cr = "data: " + body + "\r\r" + "data: " + body + "\r\r"
    events = read(lone_cr)[0]
    assert kinds(events) == ["error", "error"]
    assert [e["line"] for e in events] == [1, 3]  # a lone CR ends a line: numbered as such
    mixed = "data: " + body + "\r\r\n" + "data: " + body + "\r\r"
    assert [e["line"] for e in read(mixed)[0]] == [1, 3]


def test_last_frame_without_blank_line_is_dispatched_by_finish() -> None:
    events, _ = read('data: {"type":"session.error","properties":{"error":"x"}}')
    assert kinds(events) == ["error"]


def test_blank_lines_and_empty_data() -> None:
    assert read("\n\n\n: only a comment\n\n")[0] == []
    assert read("data\n\n")[0] == []  # an empty data buffer: nothing dispatched (WHATWG)
    assert kinds(read("data\ndata\n\n")[0]) == ["warning"]  # a buffer of "\n": not JSON


def test_drop_frame_forgets_a_cut_frame() -> None:
    reader = SseReader(Normalizer())
    reader.feed(1, b'data: {"type":"session.err')
    reader.drop_frame()
    assert reader.feed(2, b"") == [] and reader.finish() == []


# -------------------------------------------------- /global/event, sessions and idle


def wrap(text: str, **outer: Any) -> str:
    out = []
    for block in text.split("\n\n"):
        if block.startswith("data: "):
            payload = json.loads(block[6:])
            out.append("data: " + json.dumps({"directory": "/w", **outer, "payload": payload}))
            sync = {
                "type": "sync",
                "syncEvent": {
                    "id": "x",
                    "type": payload["type"] + ".1",
                    "seq": 1,
                    "aggregateID": SID,
                    "data": payload["properties"],
                },
            }
            out.append("data: " + json.dumps({"directory": "/w", "payload": sync}))
    return "\n\n".join(out) + "\n\n"


def test_global_wrapper_and_sync_copies() -> None:
    text = message("user", "msg_u") + part("text", msg="msg_u", text="hi") + tool("completed")
    text += part("step-finish", "prt_f", tokens=TOKENS)
    text += message("assistant", completed=5, tokens=TOKENS)
    plain, _ = read(text)
    wrapped, _ = read(wrap(text))
    strip = [{k: v for k, v in e.items() if k != "line"} for e in plain]
    assert [{k: v for k, v in e.items() if k != "line"} for e in wrapped] == strip
    assert kinds(wrapped) == ["prompt", "command", "usage"]


@pytest.mark.parametrize("name", SERVE_SAMPLES)
def test_samples_event_and_global_streams_agree(name: str) -> None:
    plain, _ = read((SAMPLES / name / "events.sse").read_bytes())
    wrapped, _ = read((SAMPLES / name / "global-events.sse").read_bytes())
    assert plain, name
    assert "warning" not in kinds(plain)
    # every frame of the server's is mapped: an unknown is only a tool seed 000 does not name
    unknown = {e.get("tool") for e in plain if e["kind"] == "unknown"}
    assert unknown <= UNNAMED_TOOLS, unknown
    drop = {"line", "seq", "raw"}  # an unknown's raw is its frame: the global one is wrapped
    assert [{k: v for k, v in e.items() if k not in drop} for e in wrapped] == [
        {k: v for k, v in e.items() if k not in drop} for e in plain
    ]


@pytest.mark.parametrize("name", SERVE_SAMPLES)
def test_a_capture_read_twice_is_written_once_and_counted_as_duplicates(name: str) -> None:
    """Server events are deduplicated as the run stream is: a part or a finished message that
    comes again, complete, is skipped and tallied in ``metrics.duplicates`` (once per part
    or message written, not once per progress update sent again)."""
    capture = (SAMPLES / name / "events.sse").read_bytes()
    once, reader = read(capture)
    twice, reader_twice = read(capture + capture)
    drop = {"line", "seq"}
    apart = {"error", "permission", "question", "retry"}  # no part id to know them again by

    def parts_and_usage(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [
            {k: v for k, v in e.items() if k not in drop} for e in events if e["kind"] not in apart
        ]

    assert parts_and_usage(twice) == parts_and_usage(once)
    again = [e for e in twice if e["kind"] in apart]
    assert len(again) == 2 * len([e for e in once if e["kind"] in apart])
    written = {e["part_id"] for e in once if "part_id" in e}
    assert reader.normalizer.duplicates == 0 and written  # nothing comes twice in one capture
    assert reader_twice.normalizer.duplicates == len(written)


def test_sample_permission_flow() -> None:
    events, reader = read((SAMPLES / "serve_permission" / "events.sse").read_bytes())
    assert kinds(events).count("command") == 3
    perms = [e for e in events if e["kind"] == "permission"]
    assert [p.get("reply") for p in perms] == [None, "once", None, "reject", None, "reject"]
    commands = [e for e in events if e["kind"] == "command"]
    assert [c["success"] for c in commands] == [True, False, False]
    assert reader.idle


def test_idle_follows_the_first_busy_session() -> None:
    other = "ses_other"
    text = frame("session.status", sessionID=SID, status={"type": "busy"})
    text += frame("session.idle", sessionID=other)
    _, reader = read(text)
    assert reader.session == SID and not reader.idle
    _, reader = read(text + frame("session.status", sessionID=SID, status={"type": "idle"}))
    assert reader.idle


def test_session_filter_keeps_the_session_and_its_children() -> None:
    child, other = "ses_child", "ses_other"
    text = frame("session.created", sessionID=child, info={"id": child, "parentID": SID})
    text += frame("session.error", sessionID=child, error="in child")
    text += frame("session.error", sessionID=other, error="elsewhere")
    text += frame("session.error", sessionID=SID, error="here")
    text += frame("question.asked", id="q", sessionID=other)
    text += frame("session.idle", sessionID=other)
    events, reader = read(text, session=SID)
    assert [e["message"] for e in events] == ["in child", "here"]
    assert not reader.idle
    _, reader = read(text + frame("session.idle", sessionID=SID), session=SID)
    assert reader.idle


@pytest.mark.parametrize("created_first", [True, False], ids=["created-first", "busy-first"])
def test_a_session_is_followed_by_the_start_of_its_id(created_first) -> None:
    prefix = SID[:6]
    child, other = "ses_child", prefix + "zz"  # another id with the same start
    text = frame("session.status", sessionID="ses_x", status={"type": "busy"})
    text += frame("session.error", sessionID="ses_x", error="elsewhere")
    if created_first:
        text += frame("session.created", sessionID=SID, info={"id": SID})
    text += frame("session.status", sessionID=SID, status={"type": "busy"})
    text += frame("session.created", sessionID=child, info={"id": child, "parentID": SID})
    text += frame("session.error", sessionID=child, error="in child")
    text += frame("session.error", sessionID=other, error="a later match is not it")
    text += frame("session.error", sessionID=SID, error="here")
    events, reader = read(text, session=prefix)
    assert [e["message"] for e in events] == ["in child", "here"]
    assert reader.session == SID and not reader.idle
    _, reader = read(text + frame("session.idle", sessionID=SID), session=prefix)
    assert reader.idle


@pytest.mark.parametrize("parent_known_first", [True, False], ids=["parent-first", "busy-first"])
def test_attached_mid_run_a_subagents_idle_does_not_end_the_run(parent_known_first) -> None:
    child = "ses_child"
    created = frame("session.updated", sessionID=child, info={"id": child, "parentID": SID})
    busy = frame("session.status", sessionID=child, status={"type": "busy"})
    text = (created + busy) if parent_known_first else (busy + created)
    text += frame("session.status", sessionID=child, status={"type": "idle"})
    text += frame("session.error", sessionID=SID, error="the parent goes on")
    events, reader = read(text)
    assert reader.session == SID and not reader.idle
    assert [e["message"] for e in events] == ["the parent goes on"]
    _, reader = read(text + frame("session.idle", sessionID=SID))
    assert reader.idle


@pytest.mark.parametrize("session", [SID, SID[:6]], ids=["id", "prefix"])
def test_an_idle_before_the_session_was_at_work_is_the_state_before_the_run(session) -> None:
    idle = frame("session.status", sessionID=SID, status={"type": "idle"})
    busy = frame("session.status", sessionID=SID, status={"type": "busy"})
    _, reader = read(idle + busy, session=session)
    assert not reader.idle
    _, reader = read(idle + busy + idle, session=session)
    assert reader.idle


@pytest.mark.parametrize("session", [None, SID, SID[:6]], ids=["first-busy", "id", "prefix"])
def test_the_followed_session_s_next_run_is_not_over_until_its_own_idle(session) -> None:
    """`idle` once stayed true through a second prompt in the same session: a harness that
    stops at `idle` stopped at the second run's first payload, and `attach --follow
    --max-cost` crossed in a later run ended there, before that run's end."""
    idle = frame("session.status", sessionID=SID, status={"type": "idle"})
    busy = frame("session.status", sessionID=SID, status={"type": "busy"})
    late = frame("message.updated", info={"id": "msg_x", "sessionID": SID, "role": "assistant"})
    _, reader = read(busy + idle, session=session)
    assert reader.idle
    _, reader = read(busy + idle + late, session=session)
    assert reader.idle  # a frame of the run just ended, after its idle, ends nothing
    _, reader = read(busy + idle + busy, session=session)
    assert not reader.idle
    _, reader = read(busy + idle + busy + idle, session=session)
    assert reader.idle


@pytest.mark.parametrize("blank", ["data:\n\n", "data: \n\n", "data\n\n", ":\ndata:\n\n"])
def test_an_empty_data_frame_is_not_dispatched(blank: str) -> None:
    """WHATWG: an empty data buffer dispatches nothing (proxies send such keep-alives)."""
    events, reader = read(blank + tool("completed"))
    assert kinds(events) == ["command"]


def test_interleaved_sessions_do_not_double_events() -> None:
    child = "ses_child"
    child_tool = tool("completed", id_="prt_c").replace(SID, child)
    text = tool("running") + child_tool + tool("completed") + child_tool + tool("completed")
    events, _ = read(text)
    assert kinds(events) == ["command", "command"]


# ----------------------------------------------------------------- the whole pipeline


class _Sink:
    def __init__(self) -> None:
        self.events: list[Any] = []

    def write(self, events: Any) -> None:
        self.events += list(events)

    def end_batch(self) -> None:
        pass

    def flush(self) -> None:
        pass


@pytest.mark.parametrize("name", SERVE_SAMPLES)
def test_normalize_detects_sse_and_matches_the_export(name: str) -> None:
    """The same session read live and from `opencode export` afterwards: the same events
    and figures (usage from the same step-finish parts), except that only the server
    reports permissions, provider retries and a session's errors."""
    export = SAMPLES / name / "export.json"
    assert export.exists(), f"samples/{name} has no export.json: rerun scripts/capture.py"
    results = {}
    for source in ("events.sse", "export.json"):
        sink = _Sink()
        with open(SAMPLES / name / source, "rb") as f:
            normalize_streams([(source, f)], sink, metrics=False)
        results[source] = [json.loads(_ENCODE.encode(e)) for e in sink.events]
    # a revert comes after the events it undoes: only the store and an export mark them
    drop = {"line", "seq", "time", "raw", "source", "reverted"}

    def comparable(events: list[dict[str, Any]], live: bool) -> list[dict[str, Any]]:
        out = []
        for e in events:
            if e["kind"] in ("permission", "question", "retry"):  # the server's alone
                continue
            if e["kind"] == "error" and e.get("name") == "ContextOverflowError":
                continue  # OpenCode compacts and goes on: the message keeps no error
            e = {k: v for k, v in e.items() if k not in drop}
            if e["kind"] == "error":  # the export ties the error to its message
                e.pop("message_id", None)
            out.append(e)
        return out

    assert comparable(results["events.sse"], True) == comparable(results["export.json"], False)


def test_writer_output_is_jsonl(tmp_path: Path) -> None:
    out = tmp_path / "out.jsonl"
    with open(SAMPLES / "serve_text" / "events.sse", "rb") as f, open(out, "wb") as o:
        normalize_streams([("-", f)], JsonlWriter(o))
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert lines[-1]["kind"] == "metrics" and lines[-1]["counts"]["usage"] == 1


# ---------------------------------------------------------------------- robustness


@settings(max_examples=300, deadline=None)
@given(st.lists(st.binary(max_size=60).map(lambda b: b.replace(b"\n", b"")), max_size=30))
def test_any_lines_never_crash(lines: list[bytes]) -> None:
    reader = SseReader(Normalizer(), deltas=True)
    for n, line in enumerate(lines, 1):
        reader.feed(n, line)
    reader.finish()


@settings(max_examples=200, deadline=None)
@given(
    st.recursive(
        st.none() | st.booleans() | st.integers() | st.text(max_size=8),
        lambda inner: (
            st.lists(inner, max_size=3)
            | st.dictionaries(
                st.sampled_from(
                    [
                        "type",
                        "properties",
                        "payload",
                        "part",
                        "info",
                        "sessionID",
                        "state",
                        "status",
                        "time",
                        "id",
                        "error",
                        "patterns",
                        "delta",
                    ]
                ),
                inner,
                max_size=4,
            )
        ),
        max_leaves=12,
    ),
    st.sampled_from(
        [
            "message.part.updated",
            "message.updated",
            "session.error",
            "permission.asked",
            "permission.replied",
            "session.status",
            "message.part.delta",
            "session.created",
            "nope",
        ]
    ),
)
def test_any_properties_never_crash(props: Any, type_: str) -> None:
    for doc in (
        {"type": type_, "properties": props},
        {"payload": {"type": type_, "properties": props}},
    ):
        text = "data: " + json.dumps(doc) + "\n\n"
        events, _ = read(text, deltas=True)
        assert len(events) <= 2


# ------------------------------------------------------------------ attach: credentials


def _rejecting_server() -> tuple[Any, int]:
    """A server on 127.0.0.1 answering one request with 401; (its thread, its port)."""
    import socket
    import threading

    listener = socket.create_server(("127.0.0.1", 0))

    def serve() -> None:
        with listener:
            connection, _ = listener.accept()
            with connection:
                connection.recv(65536)
                connection.sendall(
                    b"HTTP/1.1 401 Unauthorized\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
                )

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    return thread, listener.getsockname()[1]


@pytest.mark.parametrize("given_in", ["url", "environment"])
def test_attach_names_where_the_rejected_password_came_from(given_in: str) -> None:
    import os
    import subprocess
    import sys

    thread, port = _rejecting_server()
    env = {k: v for k, v in os.environ.items() if not k.startswith("OPENCODE_SERVER_")}
    if given_in == "url":
        url = f"http://opencode:bad@127.0.0.1:{port}"
        source = "from the URL"
    else:
        url = f"http://127.0.0.1:{port}"
        env["OPENCODE_SERVER_PASSWORD"] = "bad"
        source = "from OPENCODE_SERVER_PASSWORD"
    result = subprocess.run(
        [sys.executable, "-m", "opencode_events", "attach", url],
        capture_output=True,
        timeout=60,
        env=env,
    )
    thread.join(timeout=10)
    assert (result.returncode, result.stdout) == (2, b"")
    assert result.stderr.decode() == (
        f"error: http://127.0.0.1:{port} rejected the password (user 'opencode', {source})\n"
    )


def test_an_mcp_call_whose_message_was_not_seen_names_the_sessions_servers() -> None:
    """Attached mid-run, a tool part can come before its message's update (which names the
    directory, `path.cwd`): the session's directory from `session.created` stands in.
    samples/mcp's logged events, as the server sends them, without the message updates."""
    import sqlite3

    db = SAMPLES / "mcp" / "opencode.db"
    with sqlite3.connect(f"file:{db}?immutable=1", uri=True) as conn:
        (directory,) = conn.execute("SELECT directory FROM session").fetchone()
        rows = conn.execute("SELECT type, data FROM event ORDER BY rowid").fetchall()
    text = "".join(
        f'data: {{"type":"{t.rsplit(".", 1)[0]}","properties":{d}}}\n\n'
        for t, d in rows
        if not t.startswith("message.updated")
    )
    asked: list[str | None] = []

    def servers(where: str | None) -> list[str]:
        asked.append(where)
        return ["my-tools.v1"]

    reader = SseReader(Normalizer(mcp_servers=servers))
    events = []
    for n, line in enumerate(text.encode().split(b"\n"), 1):
        events += reader.feed(n, line)
    calls = [e for e in events + reader.finish() if e.kind == "unknown" and e.tool]
    assert [c.mcp_server for c in calls] == ["my-tools.v1"] * 3
    assert asked == [directory]


def test_a_forks_copied_messages_are_marked_copied_as_import_marks_them() -> None:
    """A fork stores the history again under new ids with the original times: a message
    older than its session is a copy (`transcript.is_copy`, import's rule)."""
    created = frame("session.created", sessionID=SID, info={"id": SID, "time": {"created": 10}})
    text = (
        created
        + message("user", "msg_old")  # created 1, before the session: copied
        + part("text", "prt_old", "msg_old", text="hi", time={"start": 1, "end": 2})
        + frame(
            "message.updated",
            sessionID=SID,
            info={"id": "msg_new", "sessionID": SID, "role": "user", "time": {"created": 20}},
        )
        + part("text", "prt_new", "msg_new", text="again", time={"start": 20, "end": 21})
    )
    events, _ = read(text)
    marks = {e.get("part_id"): e.get("copied") for e in events if e.get("part_id")}
    assert marks == {"prt_old": True, "prt_new": None}
    events, _ = read(text.replace(created, ""))  # no creation time known: nothing marked
    assert not any(e.get("copied") for e in events)
