"""Property tests: any bytes in, no exception, every line accounted for, seq increasing."""

from __future__ import annotations

import io
import json

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from opencode_events.core.normalizer import Normalizer
from opencode_events.errors import InputError
from opencode_events.output.jsonl import JsonlWriter
from opencode_events.pipeline.normalize import SQLITE_MAGIC, normalize_streams
from opencode_events.sources.stream import StreamReader, line_batches

TOOLS = [
    "read",
    "write",
    "edit",
    "apply_patch",
    "grep",
    "glob",
    "bash",
    "background_process",
    "task",
    "agent_manager",
    "skill",
    "lsp",
    "todo",
    "todowrite",
    "todoread",
    "webfetch",
    "invalid",
    "my-mcp_tool",
    "BASH",
]
CONSUMED_TOOLS = {"todo", "todowrite", "todoread"}
scalars = st.one_of(
    st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), st.text(max_size=20)
)
json_values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=10,
)
part_ids = st.sampled_from(["prt_1", "prt_2", "prt_3", None])


@st.composite
def tool_records(draw):
    tool = draw(st.one_of(st.sampled_from(TOOLS), scalars))
    input_ = draw(
        st.one_of(
            st.fixed_dictionaries(
                {},
                optional={
                    "filePath": scalars,
                    "command": st.sampled_from(["ls", "cat a", "rm -rf b", "make"]),
                    "patchText": st.sampled_from(
                        ["*** Begin Patch\n*** Add File: a\n+x\n*** End Patch", "junk"]
                    ),
                    "pattern": scalars,
                    "subagent_type": scalars,
                    "name": scalars,
                    "query": scalars,
                },
            ),
            json_values,
        )
    )
    state = draw(
        st.one_of(
            st.fixed_dictionaries(
                {
                    "status": st.one_of(
                        st.sampled_from(["completed", "error", "ok", "CANCELLED", "running"]),
                        scalars,
                    ),
                    "input": st.just(input_),
                },
                optional={
                    "output": scalars,
                    "title": scalars,
                    "error": scalars,
                    "metadata": st.one_of(
                        st.fixed_dictionaries({}, optional={"exit": scalars, "sessionId": scalars}),
                        json_values,
                    ),
                    "time": st.fixed_dictionaries({}, optional={"start": scalars, "end": scalars}),
                },
            ),
            json_values,
        )
    )
    part = {"type": "tool", "tool": tool, "callID": "c", "state": state}
    pid = draw(part_ids)
    if pid:
        part["id"] = pid
    return {"type": "tool_use", "sessionID": "ses_p", "part": part}


@st.composite
def other_records(draw):
    kind = draw(
        st.sampled_from(["step_start", "step_finish", "text", "reasoning", "error", "done", "x"])
    )
    rec = {"type": kind, "sessionID": draw(st.sampled_from(["ses_p", "ses_q"]))}
    if kind == "error":
        rec["error"] = draw(json_values)
    elif draw(st.booleans()):
        part = draw(
            st.fixed_dictionaries(
                {},
                optional={
                    "text": st.one_of(st.text(max_size=10), scalars),
                    "tokens": st.one_of(
                        json_values,
                        st.fixed_dictionaries(
                            {}, optional={"input": scalars, "output": scalars, "cache": json_values}
                        ),
                    ),
                    "cost": scalars,
                    "reason": scalars,
                },
            )
        )
        pid = draw(part_ids)
        if pid:
            part["id"] = pid
        rec["part"] = part
    return rec


lines_strategy = st.lists(
    st.one_of(
        st.binary(max_size=60),
        tool_records().map(lambda r: json.dumps(r).encode()),
        other_records().map(lambda r: json.dumps(r).encode()),
    ),
    max_size=25,
)


def run(data: bytes) -> tuple[list[dict], Normalizer]:
    """The whole pipeline, format detection included."""
    out = io.BytesIO()
    normalizer = normalize_streams([("-", io.BytesIO(data))], JsonlWriter(out))
    events = [msgspec.json.decode(line) for line in out.getvalue().splitlines()]
    return events, normalizer


def run_stream(data: bytes) -> list[dict]:
    """The `--format json` reader alone (detection would send a `data:` first line to SSE)."""
    normalizer = Normalizer()
    reader = StreamReader(normalizer)
    events = []
    number = 0
    for batch in line_batches(io.BytesIO(data)):
        for line in batch:
            number += 1
            events.extend(reader.feed(number, line))
    events.append(normalizer.metrics())
    return [msgspec.json.decode(msgspec.json.encode(e)) for e in events]


def _reject_non_json(name: str):
    raise ValueError(f"{name} is not JSON")  # Python's json accepts NaN/Infinity; JSON does not


class Oracle:
    """The documented consumptions (SPEC §2, docs/events.md) that produce no event."""

    def __init__(self) -> None:
        self.session = None
        self.seen: set = set()
        self.seen_by_session: dict = {}

    def consumed(self, line: bytes) -> bool:
        """Feed every line in order; True when this one is legitimately consumed."""
        try:
            rec = json.loads(line, parse_constant=_reject_non_json)
        except ValueError:
            return False
        if not isinstance(rec, dict):
            return False
        session = rec.get("sessionID")
        if isinstance(session, str) and session and session != self.session:
            # part ids are remembered per session, across interleaving
            self.session = session
            self.seen = self.seen_by_session.setdefault(session, set())
        part, kind = rec.get("part"), rec.get("type")
        if kind == "done":  # the run's end; only the permissions it rejected are events
            rejected = rec.get("rejected")
            return not (isinstance(rejected, list) and rejected)
        if not isinstance(part, dict):
            return False
        if kind in ("text", "reasoning") and not (
            isinstance(part.get("text"), str) and part["text"]
        ):
            return True  # no text yet: nothing to write, and not yet seen
        if kind in ("tool_use", "step_finish", "text", "reasoning") and isinstance(
            part.get("id"), str
        ):
            if part["id"] in self.seen:
                return True  # a re-emitted part (SPEC §2: an id already seen)
            self.seen.add(part["id"])
        if kind == "step_start":
            return True

        if kind == "tool_use":
            tool, state = part.get("tool"), part.get("state")
            if isinstance(tool, str) and isinstance(state, dict):
                if tool.lower() in CONSUMED_TOOLS:
                    return True  # the agent's own task list
                if tool.lower() == "background_process":  # consumed without a command line
                    args = state.get("input")
                    return isinstance(args, dict) and not (
                        isinstance(args.get("command"), str) and args["command"]
                    )
        return False


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(lines_strategy, st.sampled_from([b"\n", b"\r\n"]))
def test_any_lines_no_exception_and_every_line_accounted_for(lines, newline):
    lines = [line.replace(b"\n", b" ").replace(b"\r", b" ") for line in lines]
    data = newline.join(lines)
    events = run_stream(data)
    assert events[-1]["kind"] == "metrics"
    seqs = [e["seq"] for e in events]
    assert seqs == list(range(len(events)))
    lines_with_events = {e["line"] for e in events if "line" in e}
    oracle = Oracle()
    for number, line in enumerate(lines, 1):
        # A BOM starting a line is not content (each file of a `cat` may start with one).
        line = line.removeprefix(b"\xef\xbb\xbf")
        if not line.strip():
            continue
        is_consumed = oracle.consumed(line)
        if number not in lines_with_events:
            assert is_consumed, (number, line)
    records = sum(1 for line in lines if line.removeprefix(b"\xef\xbb\xbf").strip())
    assert events[-1]["records"] == records


_ODD_LINES = st.sampled_from(
    [
        b"",
        b"   ",
        b"\xef\xbb\xbf" + b'{"type":"text","sessionID":"ses_b","part":{"id":"prt_9","text":"b"}}',
        b'{"type":"text","sessionID":"ses_p","part":{"id":"prt_1","text":"lone \\ud800"}}',
        b'{"type":"text","sessionID":"ses_p","part":{"id":"prt_2","text":"\xff"}}',
        b'{"type":"step_start","sessionID":"ses_q","part":"text"}',
        b'{"type":["step_start"],"part":{}}',
        b"[" * 2000,
    ]
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(
        st.tuples(
            st.one_of(lines_strategy.map(lambda lines: lines[0] if lines else b""), _ODD_LINES),
            st.sampled_from([b"", b"\r"]),  # a CRLF line end's CR stays on the line
        ).map(b"".join),
        max_size=25,
    ),
    st.booleans(),
)
def test_a_batch_maps_as_its_lines_one_by_one(lines, keep_raw):
    """``feed_lines``, the stream's hot loop, is ``feed`` of each line: same events, same
    counts, same state after (raw attached or not)."""
    lines = [line.replace(b"\n", b" ") for line in lines]
    by_line, batched = Normalizer(keep_raw=keep_raw), Normalizer(keep_raw=keep_raw)
    one_reader, batch_reader = StreamReader(by_line), StreamReader(batched)
    expected = [e for number, line in enumerate(lines, 5) for e in one_reader.feed(number, line)]
    got = batch_reader.feed_lines(lines, 5)
    encode = msgspec.json.encode
    assert [encode(e) for e in got] == [encode(e) for e in expected]
    assert encode(batched.metrics()) == encode(by_line.metrics())
    assert (batched.step_open, batched.session_id) == (by_line.step_open, by_line.session_id)


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=300))
def test_arbitrary_bytes(data):
    if data.startswith(SQLITE_MAGIC):  # the one input refused whole, with a clear error
        with pytest.raises(InputError, match="is an SQLite database, not a stream"):
            run(data)
        return
    events, _ = run(data)
    assert [e["seq"] for e in events] == list(range(len(events)))
    for event in events[:-1]:
        assert event["kind"] in {
            "warning",
            "unknown",
            "message",
            "prompt",
            "reasoning",
            "usage",
            "error",
            "read",
            "write",
            "search",
            "command",
            "orchestration",
            "skill",
        }


_MESSAGE_KEYS = ["role", "time", "error", "tokens", "cost", "summary", "modelID", "id", "finish"]


@given(
    st.one_of(
        st.dictionaries(st.sampled_from(_MESSAGE_KEYS), json_values, max_size=6),
        json_values,
    )
)
@settings(max_examples=300)
def test_the_imports_message_view_accepts_what_the_full_view_accepts(value):
    """The import decodes stored messages with ``MessageHead`` (role, error); it must accept
    and reject exactly the rows ``MessageInfo`` does, and read the same role and error."""
    from opencode_events.core.views import MESSAGE_DECODER, MESSAGE_HEAD_DECODER

    data = json.dumps(value).encode()
    try:
        full = MESSAGE_DECODER.decode(data)
    except msgspec.DecodeError:
        full = None
    try:
        head = MESSAGE_HEAD_DECODER.decode(data)
    except msgspec.DecodeError:
        head = None
    assert (full is None) == (head is None)
    if full is not None and head is not None:
        assert (head.role, head.error) == (full.role, full.error)


class _Chunks(io.RawIOBase):
    """A stream that hands over the given chunks one read at a time, as a pipe does."""

    def __init__(self, chunks: list[bytes]) -> None:
        self._chunks = list(chunks)

    def readable(self) -> bool:
        return True

    def read(self, size: int = -1) -> bytes:
        return self._chunks.pop(0) if self._chunks else b""


_PIECES = st.sampled_from([b" ", b"\n", b"\t", b"\r", b"\x0b", b"x", b"{}"])


@given(st.lists(st.lists(_PIECES, min_size=1, max_size=6).map(b"".join), max_size=12))
def test_the_head_is_what_reading_until_the_first_line_ends_gives(chunks: list[bytes]):
    """read_head looks at each chunk once, and stops where the plain definition stops:
    after the chunk in which the first non-blank line ends."""
    from opencode_events.pipeline.normalize import read_head

    expected, stream = b"", list(chunks)
    while stream:
        expected += stream.pop(0)
        if expected.strip() and b"\n" in expected.lstrip():
            break
    assert read_head(_Chunks(chunks)) == expected


def _replaced(text: str) -> str:
    """``text`` with each lone surrogate replaced by U+FFFD (a pair stays a character)."""
    out, i = [], 0
    while i < len(text):
        c = text[i]
        if "\ud800" <= c <= "\udbff" and i + 1 < len(text) and "\udc00" <= text[i + 1] <= "\udfff":
            out.append((c + text[i + 1]).encode("utf-16", "surrogatepass").decode("utf-16"))
            i += 2
            continue
        out.append("\ufffd" if "\ud800" <= c <= "\udfff" else c)
        i += 1
    return "".join(out)


@settings(max_examples=500, deadline=None)
@given(
    st.lists(
        st.one_of(
            st.sampled_from(["\ud800", "\udbff", "\udc00", "\udfff", "\\", "u", "d800", "\\ud800"]),
            st.characters(),
        ),
        max_size=20,
    ).map("".join)
)
def test_a_lone_surrogate_repair_reads_as_a_lenient_decoder_does(text: str):
    """What `json.dumps` writes for any string (lone surrogates as \\u escapes, backslashes
    escaped) decodes after the repair to that string, each lone surrogate U+FFFD."""
    from opencode_events.core.views import without_lone_surrogates

    data = json.dumps({"t": text}).encode()
    fixed = without_lone_surrogates(data) or data
    assert len(fixed) == len(data)
    assert msgspec.json.decode(fixed)["t"] == _replaced(text)


# An input read as JSON values (`opencode export` documents, `jq .` of a stream): values
# of every shape, broken ones too, laid out over lines as jq and OpenCode write them.
_RECORD = {"type": "text", "sessionID": "ses_p", "part": {"type": "text", "text": "hi \\ud800"}}
_DOCUMENT = {
    "info": {"id": "ses_d"},
    "messages": [
        {
            "info": {"id": "msg_1", "role": "user", "sessionID": "ses_d"},
            "parts": [{"id": "prt_1", "type": "text", "text": "x"}],
        }
    ],
}
_VALUES = st.sampled_from(
    [
        json.dumps(_RECORD, indent=2),
        json.dumps(_RECORD),
        json.dumps(_DOCUMENT, indent=2),
        json.dumps(_DOCUMENT),
        "{}",
        "[1,\n 2]",
        '"text"',
        '{"info": oops',
        '{"type": "text",',
        "}",
        "\ufeff{\n}",
        "garbage",
        '{"a": "\\ud800"}',
        "[" * 40 + "]" * 40,
    ]
)


@settings(max_examples=300, deadline=None)
@given(st.lists(_VALUES, max_size=8), st.lists(st.integers(1, 30), min_size=1, max_size=8))
def test_values_read_as_they_come_are_read_as_the_whole_input(values, cuts):
    """Given in pieces of whole lines (as reads return them), an input gives the events the
    whole input gives: waiting for more never changes what a value becomes."""
    from opencode_events.sources.export import ExportReader, export_events

    data = ("{\n}\n" + "\n".join(values) + "\n").encode("utf-8", "surrogatepass")
    whole = export_events(data, Normalizer())
    lines = data.splitlines(keepends=True)
    reader = ExportReader(Normalizer())
    pieces, at = [], 0
    for cut in cuts * len(lines):
        if at >= len(lines):
            break
        pieces += reader.take(b"".join(lines[at : at + cut]))
        at += cut
    pieces += reader.take(b"".join(lines[at:]), final=True)
    assert pieces == whole
