"""The line reader and bad input: every line is accounted for, nothing raises."""

from __future__ import annotations

import io
import json

import pytest

from opencode_events.sources.stream import line_batches
from tests.records import (
    SESSION,
    normalize_lines,
    normalize_with_metrics,
    record,
    step_finish,
    tool_use,
)


class Trickle(io.RawIOBase):
    """A raw stream that returns the given chunks one read at a time, like a pipe."""

    def __init__(self, chunks: list[bytes]) -> None:
        self.chunks = list(chunks)

    def readable(self) -> bool:
        return True

    def read(self, n: int = -1) -> bytes:
        return self.chunks.pop(0) if self.chunks else b""


def all_lines(chunks: list[bytes], chunk_size: int = 1 << 20) -> list[bytes]:
    return [
        line for batch in line_batches(Trickle(chunks), chunk_size=chunk_size) for line in batch
    ]


# ------------------------------------------------------------------ line splitting


@pytest.mark.parametrize(
    "chunks, expected",
    [
        ([b"a\nb\n"], [b"a", b"b"]),
        ([b"a\nb"], [b"a", b"b"]),  # last line without newline
        ([b"a", b"b", b"c\n"], [b"abc"]),  # a line across reads
        ([b"a\n", b"\n", b"b\n"], [b"a", b"", b"b"]),  # blank lines keep numbering
        ([b""], []),
        ([b"x\r\ny\r\n"], [b"x\r", b"y\r"]),  # CR is the reader's to strip
    ],
)
def test_line_batches(chunks, expected):
    assert all_lines(chunks) == expected


def test_batches_follow_reads():
    batches = list(line_batches(Trickle([b"1\n2\n", b"3\n"])))
    assert batches == [[b"1", b"2"], [b"3"]]


def test_long_line_is_joined_once():
    piece = b"x" * 1000
    lines = all_lines([piece] * 50 + [b"\n"], chunk_size=1000)
    assert lines == [piece * 50]


# ------------------------------------------------------------- line-level handling


def test_crlf_bom_and_blank_lines():
    text = "\ufeff" + json.dumps(record("text", {"type": "text", "text": "a"}))
    events, metrics = normalize_with_metrics(
        [text.encode() + b"\r", b"", b"   ", json.dumps(step_finish()).encode() + b"\r"]
    )
    assert [e["kind"] for e in events] == ["message", "usage"]
    assert [e["line"] for e in events] == [1, 4]
    assert metrics["records"] == 2


def test_a_bom_starts_any_line_after_blank_lines_or_a_cat():
    """`{ echo; cat a.jsonl; }` and `cat a.jsonl b.jsonl`: each file's BOM is skipped."""
    text = json.dumps(record("text", {"type": "text", "text": "a"}))
    second = json.dumps(step_finish())
    lines = [b"", ("\ufeff" + text).encode(), ("\ufeff" + second).encode()]
    events, metrics = normalize_with_metrics(lines)
    assert [e["kind"] for e in events] == ["message", "usage"]
    assert metrics["records"] == 2 and "warning" not in metrics.get("counts", {})


BAD_LINES = [
    pytest.param(b"not json at all", "warning", id="garbage"),
    pytest.param(b'{"type":"text","part":{"text":"\xff\xfe"}}', "warning", id="invalid-utf8"),
    pytest.param(b'{"type":\x00"text"}', "warning", id="nul-byte"),
    pytest.param(b"[1, 2, 3]", "warning", id="json-array"),
    pytest.param(b'"just a string"', "warning", id="json-string"),
    pytest.param(b"42", "warning", id="json-number"),
    pytest.param(b"null", "warning", id="json-null"),
    pytest.param(b'{"type":"text","part":{"type":"te', "warning", id="truncated"),
    pytest.param(b"[" * 100_000 + b"]" * 100_000, "warning", id="deeply-nested"),
    pytest.param(b'{"type":"tool_use","sessionID":"s"}', "unknown", id="tool_use-no-part"),
    pytest.param(b'{"type":"tool_use","part":"oops"}', "unknown", id="part-not-object"),
    pytest.param(
        b'{"type":"tool_use","part":{"type":"tool","tool":"read","callID":"c"}}',
        "unknown",
        id="tool_use-no-state",
    ),
    pytest.param(
        b'{"type":"tool_use","part":{"type":"tool","tool":"todowrite","state":null}}',
        "unknown",
        id="consumed-tool-no-state",
    ),
    pytest.param(
        b'{"type":"tool_use","part":{"type":"tool","tool":7,"state":{"status":"ok"}}}',
        "unknown",
        id="tool-name-not-string",
    ),
    pytest.param(
        b'{"type":"tool_use","part":{"type":"tool","tool":"read",'
        b'"state":{"status":"completed","input":"a.py"}}}',
        "unknown",
        id="input-not-object",
    ),
    pytest.param(
        b'{"type":"tool_use","part":{"type":"tool","tool":"read",'
        b'"state":{"status":"completed","input":[1]}}}',
        "unknown",
        id="input-array",
    ),
    pytest.param(
        b'{"type":"tool_use","part":{"type":"tool","tool":"bash","state":"completed"}}',
        "unknown",
        id="state-not-object",
    ),
    pytest.param(b'{"type":5}', "unknown", id="type-not-string"),
    pytest.param(b"{}", "unknown", id="empty-object"),
]


@pytest.mark.parametrize("line, kind", BAD_LINES)
def test_bad_line_becomes_one_event_and_the_run_goes_on(line, kind):
    before, after = (
        json.dumps(record("text", {"type": "text", "text": "ok"})).encode() for _ in range(2)
    )
    events = normalize_lines([before, line, after])
    assert [e["kind"] for e in events] == ["message", kind, "message"]
    bad = events[1]
    assert bad["line"] == 2
    if kind == "warning":
        assert bad["message"]
        assert bad["text"] == line.decode("utf-8", "replace")
    else:
        assert "raw" in bad or "tool" in bad


def test_unknown_from_misshapen_tool_names_the_tool():
    (event,) = normalize_lines(
        [
            b'{"type":"tool_use","part":{"type":"tool","tool":"read","state":{"status":"x",'
            b'"metadata":"not an object"}}}'
        ]
    )
    assert event["kind"] == "unknown" and event["tool"] == "read" and event["type"] == "tool_use"


def test_very_long_line():
    text = "y" * (8 << 20)
    (event,) = normalize_lines([json.dumps(record("text", {"type": "text", "text": text}))])
    assert event["text"] == text


# ------------------------------------------------------------------ session and dedupe


def test_session_id_from_first_record_then_inherited():
    events = normalize_lines(
        [
            {"type": "text", "part": {"type": "text", "text": "before"}},
            {"type": "text", "session_id": "ses_a", "part": {"type": "text", "text": "a"}},
            {"type": "text", "part": {"type": "text", "text": "still a"}},
            {"type": "text", "part": {"type": "text", "text": "b", "sessionID": "ses_b"}},
            {"type": "text", "sessionId": "ses_c", "part": {"type": "text", "text": "c"}},
        ]
    )
    assert [e.get("session_id") for e in events] == [None, "ses_a", "ses_a", "ses_b", "ses_c"]


def test_record_level_session_id_wins_over_part():
    (event,) = normalize_lines(
        [
            {
                "type": "text",
                "sessionID": "ses_rec",
                "part": {"type": "text", "text": "x", "sessionID": "ses_part"},
            }
        ]
    )
    assert event["session_id"] == "ses_rec"


def test_re_emitted_part_is_not_counted_twice():
    tool = tool_use("bash", {"command": "make"}, metadata={"exit": 0})
    step = step_finish(input_=10, output=5, cost=0.5)
    events, metrics = normalize_with_metrics([tool, step, tool, step])
    assert [e["kind"] for e in events] == ["command", "usage"]
    assert metrics["tool_calls"] == 1 and metrics["turns"] == 1 and metrics["duplicates"] == 2
    assert metrics["input_tokens"] == 10 and metrics["cost"] == 0.5
    assert metrics["records"] == 4


@pytest.mark.parametrize(
    "part",
    [
        {"type": "text", "text": "hello"},
        {"type": "reasoning", "text": "thinking"},
    ],
    ids=lambda p: p["type"],
)
def test_every_re_emitted_part_is_one_event(part):
    """SPEC §2: a record re-emitted with a part id already seen is not counted twice."""
    line = record(part["type"], part)
    events, metrics = normalize_with_metrics([line, line])
    assert len(events) == 1 and metrics["duplicates"] == 1
    assert sum(metrics["counts"].values()) == 1


def test_a_part_first_seen_without_text_is_written_when_its_text_comes():
    empty = record("text", {"type": "text", "text": ""})
    full = {**empty, "part": {**empty["part"], "text": "now"}}
    events, metrics = normalize_with_metrics([empty, full])
    assert [e["text"] for e in events] == ["now"] and metrics["duplicates"] == 0


def test_interleaved_sessions_still_dedupe():
    step = step_finish(input_=10, cost=1.0)
    other = record("text", {"type": "text", "text": "from another session"}, sessionID="ses_b")
    events, metrics = normalize_with_metrics([step, other, step])
    assert [e["kind"] for e in events] == ["usage", "message"]
    assert metrics["duplicates"] == 1 and metrics["input_tokens"] == 10


def test_same_part_id_in_another_session_counts():
    step = step_finish()
    other = dict(step, sessionID="ses_other")
    events, metrics = normalize_with_metrics([step, other])
    assert [e["turn"] for e in events] == [1, 1]
    assert metrics["turns"] == 2


def test_metrics_sum_tokens_and_count_kinds():
    lines = [
        tool_use("read", {"filePath": "a"}),
        tool_use("read", {"filePath": "b"}, status="error"),
        tool_use("todowrite", {"todos": []}),
        step_finish(input_=1, output=2, reasoning=3, read=4, write=5, cost=0.1),
        step_finish(input_=10, output=20, cost=0.2),
        b"garbage",
    ]
    _, metrics = normalize_with_metrics(lines)
    assert metrics["counts"] == {"read": 2, "usage": 2, "warning": 1}
    assert metrics["tool_calls"] == 3 and metrics["tool_failures"] == 1
    assert metrics["turns"] == 2
    assert (metrics["input_tokens"], metrics["output_tokens"]) == (11, 22)
    assert metrics["total_tokens"] == 15 + 30
    assert metrics["cost"] == pytest.approx(0.3)
    assert metrics["session_id"] == SESSION


def test_raw_attaches_source_record():
    rec = tool_use("read", {"filePath": "a"})
    (event,) = normalize_lines([rec], keep_raw=True)
    assert event["raw"] == rec
    (plain,) = normalize_lines([rec])
    assert "raw" not in plain


# A string JSON.stringify cut inside a surrogate pair: valid JSON text, no character.
_CUT_EMOJI = '"output":"cut \\ud83d"'
_LONE_SURROGATE_INPUTS = {
    "stream": (
        '{"type":"tool_use","sessionID":"ses_x","part":{"id":"prt_1","type":"tool",'
        '"tool":"bash","callID":"c","state":{"status":"completed","input":{"command":"echo hi"},'
        + _CUT_EMOJI
        + ',"metadata":{"exit":0},"time":{"start":1,"end":2}}}}\n'
    ),
    "sse": (
        'data: {"type":"message.part.updated","properties":{"part":{"id":"prt_1",'
        '"sessionID":"ses_x","messageID":"msg_1","type":"tool","tool":"bash","callID":"c",'
        '"state":{"status":"completed","input":{"command":"echo hi"},'
        + _CUT_EMOJI
        + ',"metadata":{"exit":0},"time":{"start":1,"end":2}}}}}\n\n'
    ),
    "export": (
        '{"info":{"id":"ses_x"},"messages":[{"info":{"id":"msg_1","sessionID":"ses_x",'
        '"role":"assistant","time":{"created":1}},"parts":[{"id":"prt_1","sessionID":"ses_x",'
        '"messageID":"msg_1","type":"tool","tool":"bash","callID":"c","state":{"status":'
        '"completed","input":{"command":"echo hi"},' + _CUT_EMOJI + ',"metadata":{"exit":0},'
        '"time":{"start":1,"end":2}}}]}]}\n'
    ),
}


@pytest.mark.parametrize("source", sorted(_LONE_SURROGATE_INPUTS))
def test_a_string_cut_inside_a_surrogate_pair_is_read(source: str, tmp_path):
    """The record is mapped (its lone surrogate read as U+FFFD, as a lenient decoder reads
    it), and `raw` is JSON every strict reader takes."""
    import subprocess
    import sys

    path = tmp_path / "input"
    path.write_text(_LONE_SURROGATE_INPUTS[source])
    result = subprocess.run(
        [sys.executable, "-m", "opencode_events", "normalize", "--raw", str(path)],
        capture_output=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    events = [json.loads(line) for line in result.stdout.splitlines()]
    (command,) = [e for e in events if e["kind"] == "command"]
    assert command["command"] == "echo hi"
    assert "cut \ufffd" in json.dumps(command["raw"], ensure_ascii=False)
    assert b"\\ud83d" not in result.stdout


# ------------------------------------------------------------------ upstream's done record


@pytest.mark.parametrize(
    "record, permissions",
    [
        ({"type": "done", "reason": "idle", "rejected": []}, []),
        ({"type": "done", "reason": "idle"}, []),
        (
            {"type": "done", "reason": "idle", "rejected": ["question", "bash"]},
            ["question", "bash"],
        ),
        ({"type": "done", "rejected": [{"permission": "edit", "id": "per_1"}]}, ["edit"]),
    ],
    ids=["nothing-rejected", "no-list", "two-rejected", "request-objects"],
)
def test_the_done_record_ends_the_run_and_names_what_it_rejected(record, permissions):
    """Releases after 1.18.33 end `run --format json` with a `done` record (OPENCODE.md §1):
    the run's end, no unknown event; the permissions it auto-rejected become permission
    events with reply "reject"."""
    record = {**record, "timestamp": 5, "sessionID": "ses_1"}
    body = normalize_lines([json.dumps(record).encode()])
    assert [e["kind"] for e in body] == ["permission"] * len(permissions)
    assert [e["permission"] for e in body] == permissions
    assert all(e["reply"] == "reject" and e["session_id"] == "ses_1" for e in body)


def test_a_step_left_open_by_one_input_is_not_the_next_ones(tmp_path):
    """Every input file of `normalize` is a run of its own: a killed run's last step, left
    open, does not make the next file's auto-compaction prompt (a synthetic text between
    its steps) a message."""
    import subprocess
    import sys

    killed, compacting = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    killed.write_text(
        '{"type":"step_start","sessionID":"ses_a","part":{"id":"prt_s","type":"step-start"}}\n'
    )
    compacting.write_text(
        '{"type":"text","sessionID":"ses_b","part":'
        '{"id":"prt_t","type":"text","text":"Continue","synthetic":true}}\n'
    )
    kinds = []
    for inputs in ([compacting], [killed, compacting]):
        result = subprocess.run(
            [sys.executable, "-m", "opencode_events", "normalize", "--no-metrics", *inputs],
            capture_output=True,
            timeout=60,
        )
        assert result.returncode == 0, result.stderr
        kinds.append([json.loads(line)["kind"] for line in result.stdout.splitlines()])
    assert kinds == [["prompt"], ["prompt"]]
