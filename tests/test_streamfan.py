"""`normalize` of a large file in worker processes (opencode_events/pipeline/streamfan.py):
the same bytes as one process, whatever the file holds; when the chunks cannot be mapped
apart (a session that comes back, a line without a session at a cut, a step left open),
the rest is mapped here, and the bytes are still the same.

The inputs are the real captures (samples/*/stream.jsonl) repeated under fresh session ids,
as a log of many runs reads, and random logs made of OpenCode's record shapes.
"""

from __future__ import annotations

import io
import json
import os
import pickle
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from opencode_events.core.normalizer import Normalizer
from opencode_events.errors import InputError
from opencode_events.output.jsonl import JsonlWriter
from opencode_events.pipeline import normalize as normalize_module
from opencode_events.pipeline import streamfan
from opencode_events.pipeline.normalize import normalize_streams

ROOT = Path(__file__).resolve().parent.parent
CLI = [sys.executable, "-m", "opencode_events"]
_SESSION = re.compile(rb"ses_[0-9A-Za-z]{20,}")

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="workers need fork")


def corpus() -> bytes:
    """Every captured stream's records, in order."""
    lines: list[bytes] = []
    for path in sorted(ROOT.glob("samples/*/stream.jsonl")):
        lines.extend(line for line in path.read_bytes().splitlines() if line.strip())
    return b"\n".join(lines) + b"\n"


def log_of_runs(copies: int) -> bytes:
    """``copies`` of the corpus, each under fresh session ids (same length)."""
    block = corpus()
    sessions = sorted(set(_SESSION.findall(block)))
    out = []
    for copy in range(copies):
        each = block
        for index, session in enumerate(sessions):
            fresh = b"ses_copy%06d%04d" % (copy, index)
            each = each.replace(session, fresh.ljust(len(session), b"x"))
        out.append(each)
    return b"".join(out)


@pytest.fixture
def small_chunks(monkeypatch):
    """Chunks of a few KB, and workers for any file: many cuts in a small input."""
    monkeypatch.setattr(streamfan, "CHUNK_BYTES", 4096)
    monkeypatch.setattr(streamfan, "WINDOW_BYTES", 8192)
    monkeypatch.setattr(normalize_module, "PARALLEL_BYTES", 0)


def normalized(
    paths: list[Path], tmp_path: Path, *, workers: int, keep_raw=False, tags=None
) -> bytes:
    out_path = tmp_path / f"out-{workers}.jsonl"
    streamfan.LAST_RUN.clear()
    files = [open(path, "rb", buffering=0) for path in paths]  # noqa: SIM115
    try:
        with open(out_path, "wb") as out:
            writer = JsonlWriter(out, buffered=True, tags=tags)
            inputs = [(str(path), f) for path, f in zip(paths, files, strict=True)]
            normalize_streams(inputs, writer, keep_raw=keep_raw, workers=workers)
    finally:
        for f in files:
            f.close()
    return out_path.read_bytes()


def cuts_of(path: Path, chunk: int | None = None, end: int | None = None) -> list[int]:
    """``cut_points`` of the whole file at ``path`` (``end``: as if it were that long)."""
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size if end is None else end
        return streamfan.cut_points(f.fileno(), 0, size, chunk)


def same_both_ways(paths: list[Path], tmp_path: Path, **options) -> tuple[bytes, dict]:
    one = normalized(paths, tmp_path, workers=1, **options)
    assert streamfan.LAST_RUN == {}  # one process: no workers were asked
    two = normalized(paths, tmp_path, workers=2, **options)
    run = dict(streamfan.LAST_RUN)
    assert two == one
    return one, run


# ---------------------------------------------------------------------------- real logs


def test_a_log_of_many_runs_is_shared_out_and_written_the_same(small_chunks, tmp_path):
    path = tmp_path / "log.jsonl"
    path.write_bytes(log_of_runs(3))
    one, run = same_both_ways([path], tmp_path)
    # The workers did run, over many chunks, and no chunk had to be mapped again.
    assert run["workers"] == 2 and run["chunks"] > 20 and run["fell_back"] is None
    events = [json.loads(line) for line in one.splitlines()]
    assert [e["seq"] for e in events] == list(range(len(events)))
    assert events[-1]["kind"] == "metrics" and "session_id" not in events[-1]
    assert max(e.get("line", 0) for e in events) == path.read_bytes().count(b"\n")


@pytest.mark.parametrize("workers", [3, 4])
def test_more_workers_than_two_write_the_same(small_chunks, tmp_path, workers):
    path = tmp_path / "log.jsonl"
    path.write_bytes(log_of_runs(2))
    one = normalized([path], tmp_path, workers=1)
    assert normalized([path], tmp_path, workers=workers) == one
    assert streamfan.LAST_RUN["workers"] == workers


def test_raw_and_tags_are_the_same(small_chunks, tmp_path):
    path = tmp_path / "log.jsonl"
    path.write_bytes(log_of_runs(2))
    _, run = same_both_ways([path], tmp_path, keep_raw=True, tags={"team": "a"})
    assert run["fell_back"] is None


def test_inputs_before_and_after_carry_seq_and_metrics(small_chunks, tmp_path):
    small = tmp_path / "small.jsonl"
    small.write_bytes((ROOT / "samples/text/stream.jsonl").read_bytes())
    big = tmp_path / "big.jsonl"
    big.write_bytes(log_of_runs(2))
    one, _ = same_both_ways([small, big, small], tmp_path)
    assert b'"source":"' + str(big).encode() in one


def test_a_session_that_comes_back_is_mapped_here_the_same(small_chunks, tmp_path):
    path = tmp_path / "twice.jsonl"
    path.write_bytes(log_of_runs(1) * 2)  # the log held twice: every part a duplicate later
    one, run = same_both_ways([path], tmp_path)
    assert run["fell_back"] is not None and run["fell_back"] > 0
    assert run["read_again"] is False
    assert json.loads(one.splitlines()[-1])["duplicates"] > 0


def one_long_session(copies: int) -> bytes:
    """One captured run's records ``copies`` times over in one session, each copy's parts
    under new ids: a long run, as one `opencode run` writes it."""
    steps = (ROOT / "samples/parallel_tools/stream.jsonl").read_bytes()
    return b"".join(steps.replace(b"prt_", b"prt_%03d" % n) for n in range(copies))


def usage_turns(out: bytes) -> list[int]:
    return [json.loads(line)["turn"] for line in out.splitlines() if b'"kind":"usage"' in line]


def test_one_long_session_is_shared_out_and_counted_on(small_chunks, tmp_path):
    path = tmp_path / "one.jsonl"
    path.write_bytes(one_long_session(60))
    one, run = same_both_ways([path], tmp_path)
    # Every chunk after the first carries the session on: the workers map it all, and
    # number its turns on from the chunks before.
    assert run["chunks"] > 20 and run["fell_back"] is None
    assert usage_turns(one) == list(range(1, len(usage_turns(one)) + 1))
    assert len(usage_turns(one)) > 60


def test_a_long_run_whose_part_ids_do_not_ascend_is_carried_on_too(small_chunks, tmp_path):
    # Copies numbered down: each chunk's part ids are less than those before the cut, so
    # their ranges meet and the parent reads the sets to find them apart.
    steps = (ROOT / "samples/parallel_tools/stream.jsonl").read_bytes()
    path = tmp_path / "down.jsonl"
    path.write_bytes(b"".join(steps.replace(b"prt_", b"prt_%03d" % n) for n in range(40, 0, -1)))
    one, run = same_both_ways([path], tmp_path)
    assert run["chunks"] > 15 and run["fell_back"] is None
    assert usage_turns(one) == list(range(1, len(usage_turns(one)) + 1))


def span(ids: set[str]) -> tuple[str, str] | None:
    return (min(ids), max(ids)) if ids else None


@pytest.mark.parametrize(
    ("chunks", "chunk", "reads", "disjoint"),
    [
        ([{"p1", "p2"}, {"p3", "p4"}], {"p5", "p6"}, 0, True),  # after every id before
        ([{"p1", "p2"}, {"p3", "p6"}], {"p4", "p7"}, 2, True),  # meets the last: read both
        ([{"p1", "p5"}, {"p6", "p7"}], {"p2", "p4"}, 2, True),  # meets the first alone
        ([{"p1", "p2"}, {"p3", "p6"}], {"p5", "p6"}, 2, False),  # shares p6
        ([{"p1", "p2"}], {"p2", "p9"}, 2, False),  # the greatest again: ranges touch
        ([{"p5"}], {"p1", "p4"}, 0, True),  # before every id
        ([], {"p1"}, 0, True),  # nothing before
        ([{"p1"}], set(), 0, True),  # nothing in the chunk
    ],
)
def test_part_ids_are_read_only_where_their_ranges_meet(
    chunks, chunk, reads, disjoint, monkeypatch
):
    parts = streamfan._Parts(set())
    for ids in chunks:
        parts.add(pickle.dumps(ids), span(ids))
    loads = []
    real_loads = pickle.loads
    monkeypatch.setattr(streamfan.pickle, "loads", lambda data: loads.append(1) or real_loads(data))
    assert parts.disjoint(span(chunk), pickle.dumps(chunk)) is disjoint
    assert len(loads) == reads
    monkeypatch.undo()
    assert parts.whole() == set().union(*chunks)


def test_at_an_inputs_end_the_part_ids_are_left_unread():
    # The next input's reset clears them, and nothing reads them before: a long run's
    # every part id is not made again in the parent just to be dropped.
    def settled(parts: bool) -> Normalizer:
        normalizer = Normalizer()
        carry = streamfan._Carry(normalizer)
        ids = [("ses_a", {"prt_1", "prt_2"})]
        carry.recent.append((1, pickle.dumps(ids), "ses_a"))
        carry.session, carry.seq, carry.turns = "ses_a", 7, {"ses_a": 3}
        carry.settle(normalizer, parts=parts)
        return normalizer

    every, ended = settled(True), settled(False)
    assert every._seen_parts == {"prt_1", "prt_2"} and ended._seen_parts == set()
    for normalizer in (every, ended):
        assert (normalizer.seq, normalizer.session_id) == (7, "ses_a")
        assert normalizer._session_turns == {"ses_a": 3}


def test_a_stray_line_where_a_long_run_is_cut_goes_with_the_chunk_before(small_chunks, tmp_path):
    # Lines that are no records among a long run's: a cut there would leave a warning
    # before the chunk's first session (the rest to one process); the cut moves on to the
    # next line that names a session.
    lines = one_long_session(30).splitlines(keepends=True)
    noisy = b"".join(line + (b"not json\n" if n % 3 == 0 else b"") for n, line in enumerate(lines))
    path = tmp_path / "noisy.jsonl"
    path.write_bytes(noisy)
    cuts = cuts_of(path)
    assert len(cuts) > 10
    assert all(noisy[cut : cut + 8] != b"not json" for cut in cuts)
    one, run = same_both_ways([path], tmp_path)
    assert run["fell_back"] is None
    assert b'"kind":"warning"' in one


def test_a_file_shorter_than_it_was_is_cut_without_looping(tmp_path):
    # Truncated after its size was read: the reads come back empty before the end.
    path = tmp_path / "shrunk.jsonl"
    path.write_bytes(b'{"type":"text","sessionID":"ses_a"}\n' + b"x" * 5000)
    signal.signal(signal.SIGALRM, lambda *_: pytest.fail("cut_points did not return"))
    signal.alarm(10)
    try:
        assert cuts_of(path, 1000, end=1 << 20) == [0]
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, signal.SIG_DFL)


def test_a_part_seen_before_the_cut_falls_back(small_chunks, tmp_path):
    # The same run twice over in one session: its parts are seen again after the cut
    # (one process counts them duplicates and maps them once), so the rest is mapped here.
    path = tmp_path / "again.jsonl"
    path.write_bytes((ROOT / "samples/parallel_tools/stream.jsonl").read_bytes() * 20)
    one, run = same_both_ways([path], tmp_path)
    assert run["fell_back"] == 1 and run["read_again"] is False
    assert json.loads(one.splitlines()[-1])["duplicates"] > 0


def test_a_long_session_among_many_runs_is_carried_on(small_chunks, tmp_path):
    long_session = one_long_session(60)
    data = log_of_runs(1) + long_session + log_of_runs(1).replace(b"copy", b"copz")
    path = tmp_path / "long.jsonl"
    path.write_bytes(data)
    one, run = same_both_ways([path], tmp_path)
    assert run["fell_back"] is None
    cuts = cuts_of(path)
    gaps = [b - a for a, b in zip(cuts, [*cuts[1:], len(data)], strict=True)]
    longest_line = max(map(len, data.splitlines()))
    # A worker holds a chunk's events: no chunk is much longer than CHUNK_BYTES.
    assert max(gaps) <= streamfan.CHUNK_BYTES + streamfan.WINDOW_BYTES + longest_line
    start = data.find(long_session)
    assert sum(start < cut < start + len(long_session) for cut in cuts) > 10
    assert max(usage_turns(one)) > 60  # counted on over the cuts, as one process counts


def test_a_session_carried_on_then_a_fall_back_settles_its_state(small_chunks, tmp_path):
    # The long session is carried on over several chunks, then a part of it comes again:
    # the state made from the summaries (its turns and every part id of it) is the one
    # process's, so what follows is mapped the same.
    steps = (ROOT / "samples/parallel_tools/stream.jsonl").read_bytes()
    data = log_of_runs(1) + one_long_session(30) + steps.replace(b"prt_", b"prt_%03d" % 3)
    data += one_long_session(10).replace(b"prt_", b"prt_x")
    path = tmp_path / "settle.jsonl"
    path.write_bytes(data)
    one, run = same_both_ways([path], tmp_path)
    assert run["fell_back"] is not None and run["fell_back"] > 5
    assert run["read_again"] is False
    assert json.loads(one.splitlines()[-1])["duplicates"] > 0


def test_the_sessions_remembered_count_each_carried_on_session_once(tmp_path, monkeypatch):
    # Found by a review's fuzzer: a chunk of many sessions ending in S, two chunks that
    # carry S on, then the first chunk's session again with a part it had. Counting S twice
    # let the state forget that session while one process still remembers it, and its
    # part went out again instead of being a duplicate.
    from opencode_events.core.normalizer import REMEMBERED_SESSIONS

    width = 240  # every line as long: the cuts fall every ``per_chunk`` lines

    def line(session: str, part: str) -> bytes:
        record = {"type": "text", "sessionID": session, "part": {"id": part, "type": "text"}}
        record["part"]["text"] = ""
        pad = width - 1 - len(json.dumps(record, separators=(",", ":")))
        record["part"]["text"] = "x" * pad
        return json.dumps(record, separators=(",", ":")).encode() + b"\n"

    per_chunk = REMEMBERED_SESSIONS + 8
    monkeypatch.setattr(streamfan, "CHUNK_BYTES", (per_chunk - 1) * width)
    monkeypatch.setattr(streamfan, "WINDOW_BYTES", width + width // 2)
    monkeypatch.setattr(normalize_module, "PARALLEL_BYTES", 0)
    others = [f"ses_p{i:04d}" for i in range(REMEMBERED_SESSIONS - 2)]
    plan = [("ses_q", f"prt_q{i}") for i in range(per_chunk)]
    many = per_chunk - 3
    plan += [(others[i * len(others) // many], f"prt_p{i}") for i in range(many)]
    plan += [("ses_s", f"prt_s{i}") for i in range(3 + 2 * per_chunk)]
    plan += [("ses_q", "prt_q0")] + [("ses_q", f"prt_qq{i}") for i in range(per_chunk - 1)]
    path = tmp_path / "remembered.jsonl"
    path.write_bytes(b"".join(line(session, part) for session, part in plan))
    one, run = same_both_ways([path], tmp_path)
    assert run["fell_back"] == 4  # the first session comes back
    assert json.loads(one.splitlines()[-1])["duplicates"] == 1


def test_a_chunk_of_many_short_lines_is_mapped_here(small_chunks, tmp_path, monkeypatch):
    # Short lines that are no records make a warning each: a hundred times the events of
    # an ordinary chunk. A worker does not hold them (memory stays one process's): the
    # rest, from that chunk on, is mapped here as it comes.
    monkeypatch.setattr(streamfan, "HELD_EVENTS", 300)
    path = tmp_path / "short.jsonl"
    path.write_bytes(b"x\n" * 20000)
    one, run = same_both_ways([path], tmp_path)
    assert run["chunks"] > 5 and run["fell_back"] == 0
    assert one.count(b'"kind":"warning"') == 20000
    runs = log_of_runs(2)
    path.write_bytes(runs + b"x\n" * 20000 + runs.replace(b"copy", b"copz"))
    one, run = same_both_ways([path], tmp_path)
    assert run["fell_back"] is not None and run["fell_back"] > 5


def test_a_last_line_without_its_newline(small_chunks, tmp_path):
    path = tmp_path / "log.jsonl"
    path.write_bytes(log_of_runs(2).rstrip(b"\n"))
    _, run = same_both_ways([path], tmp_path)
    assert run["fell_back"] is None


def test_a_worker_that_fails_is_reported_as_one_process_would(small_chunks, tmp_path, monkeypatch):
    path = tmp_path / "log.jsonl"
    path.write_bytes(log_of_runs(2))
    real = streamfan._map_chunk
    calls = {"n": 0}

    def failing(normalizer, fd, start, end, source, limit):
        calls["n"] += 1
        if start > 0:
            raise InputError("cannot read the input: Input/output error")
        return real(normalizer, fd, start, end, source, limit)

    monkeypatch.setattr(streamfan, "_map_chunk", failing)
    with pytest.raises(InputError, match="Input/output error"):
        normalized([path], tmp_path, workers=2)


# ---------------------------------------------------------------------------- random logs

_SESSIONS = [
    "ses_aaaaaaaaaaaaaaaaaaaaaa",
    "ses_bbbbbbbbbbbbbbbbbbbbbb",
    "ses_cccccccccccccccccccccc",
]
_COSTS = [0.1, 0.2, 0.3, 1e-7, 0.0123456789]


def _record(kind: str, session: str | None, part: int, cost: float, synthetic: bool) -> bytes:
    sid = {} if session is None else {"sessionID": session}
    base = {"id": f"prt_{part:04d}", "messageID": "msg_1", **sid}
    if kind == "step_start":
        record = {"type": "step_start", "part": {**base, "type": "step-start"}}
    elif kind == "text":
        text = {"type": "text", "text": "hi", "time": {"start": 1, "end": 2}}
        if synthetic:
            text["synthetic"] = True
        record = {"type": "text", "part": {**base, **text}}
    elif kind == "step_finish":
        tokens = {"input": 10, "output": 2, "reasoning": 0, "cache": {"read": 5, "write": 0}}
        finish = {"type": "step-finish", "reason": "stop", "cost": cost, "tokens": tokens}
        record = {"type": "step_finish", "part": {**base, **finish}}
    elif kind in ("tool", "todo"):
        state = {"status": "completed", "input": {"command": "ls"}, "output": "x"}
        name = "bash" if kind == "tool" else "todowrite"  # todowrite: consumed, no event
        tool = {"type": "tool", "tool": name, "callID": "c", "state": state}
        record = {"type": "tool_use", "part": {**base, **tool}}
    elif kind == "garbage":
        return f'not json "sessionID":"{session}"'.encode()
    elif kind == "blank":
        return b""
    else:  # error
        record = {"type": "error", "error": {"name": "APIError", "data": {"message": "no"}}}
    return json.dumps({"timestamp": 1, **sid, **record}, separators=(",", ":")).encode()


_RECORDS = st.tuples(
    st.sampled_from(
        ["step_start", "text", "step_finish", "tool", "todo", "garbage", "blank", "error"]
    ),
    st.integers(0, 6),  # part ids from a few: duplicates happen
    st.sampled_from(_COSTS),
    st.booleans(),
    st.booleans(),  # the record leaves out its session
)
_RUNS = st.lists(
    st.tuples(st.sampled_from([*_SESSIONS, None]), st.lists(_RECORDS, min_size=1, max_size=12)),
    min_size=1,
    max_size=12,
)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(runs=_RUNS, crlf=st.booleans(), fresh=st.booleans())
def test_any_log_is_written_as_one_process_writes_it(small_chunks, tmp_path, runs, crlf, fresh):
    lines = []
    for session, records in runs:
        for kind, part, cost, synthetic, headless in records:
            lines.append(_record(kind, None if headless else session, part, cost, synthetic))
    block = b"".join(
        line + (b"\r\n" if crlf and index % 3 == 0 else b"\n") for index, line in enumerate(lines)
    )
    # Copies of the block to make several chunks: under new session ids (``fresh``: a log
    # of many runs, shared out) or the same (sessions come back: mapped here).
    copies = max(3, 20000 // len(block))
    data = b"".join(
        block.replace(b"ses_", b"ses_%04d" % copy) if fresh else block for copy in range(copies)
    )
    path = tmp_path / "random.jsonl"
    path.write_bytes(data)
    _, run = same_both_ways([path], tmp_path)
    if fresh and b'"sessionID":"ses_' in block:
        assert run["chunks"] > 1  # cut where the copies' sessions change, at least


def test_a_step_left_open_then_a_synthetic_text_falls_back(small_chunks, tmp_path):
    first = log_of_runs(1)
    # A run cut off in its step, then a run that opens with a synthetic text: whether it
    # is a prompt depends on the step the run before left open.
    cut_off = _record("step_start", "ses_zzzzzzzzzzzzzzzzzzzzzz", 900, 0.1, False)
    opening = _record("text", "ses_yyyyyyyyyyyyyyyyyyyyyy", 901, 0.1, True)
    padding = b"".join(
        _record("tool", "ses_yyyyyyyyyyyyyyyyyyyyyy", 902 + n, 0.1, False) + b"\n"
        for n in range(50)
    )
    path = tmp_path / "open.jsonl"
    path.write_bytes(first + cut_off + b"\n" + opening + b"\n" + padding + first[: len(first) // 2])
    one, run = same_both_ways([path], tmp_path)
    assert run["fell_back"] is not None
    assert b'"kind":"message","seq"' in one  # the synthetic text after an open step


def _tool_line(session: str | None, part: str, name: str = "bash", state_input=None) -> bytes:
    state = {"status": "completed", "input": state_input or {"command": "ls"}, "output": "x"}
    tool = {"id": part, "type": "tool", "tool": name, "callID": "c", "state": state}
    record = {"type": "tool_use", **({"sessionID": session} if session else {}), "part": tool}
    return json.dumps(record, separators=(",", ":")).encode() + b"\n"


def test_a_sessionless_todo_call_at_a_cut_falls_back(small_chunks, tmp_path, monkeypatch):
    # A todowrite call writes no event, but its part id and counts belong to the session
    # current before it: at the head of a chunk it must not be mapped apart. The cut comes
    # from a "sessionID" the bytes show and the record does not have (in the tool input).
    monkeypatch.setattr(streamfan, "CHUNK_BYTES", 256)
    first = _tool_line("ses_A", "prt_1", "todowrite") + _tool_line("ses_A", "prt_2") * 4
    stray = _tool_line(None, "prt_1", "todowrite", {"sessionID": "ses_B"})
    rest = b"".join(_tool_line("ses_B", f"prt_b{n}") for n in range(5))
    path = tmp_path / "todo.jsonl"
    path.write_bytes(first + stray + rest)
    one, run = same_both_ways([path], tmp_path)
    assert run["fell_back"] == 1
    assert json.loads(one.splitlines()[-1])["duplicates"] == 4  # prt_1 among them


def test_what_an_earlier_input_taught_reaches_the_workers(small_chunks, tmp_path):
    # An export document names a subagent's parent; the stream after it, shared out, still
    # marks that session's events with it.
    export = tmp_path / "export.json"
    document = {"info": {"id": "ses_child", "parentID": "ses_parent"}, "messages": []}
    export.write_text(json.dumps(document) + "\n")
    log = tmp_path / "log.jsonl"
    log.write_bytes(log_of_runs(1) + b"".join(_tool_line("ses_child", f"p{n}") for n in range(9)))
    one, run = same_both_ways([export, log], tmp_path)
    assert run["chunks"] > 1 and run["fell_back"] is None
    assert b'"parent_session_id":"ses_parent"' in one


def test_a_line_without_a_session_at_a_cut_falls_back(small_chunks, tmp_path):
    garbage = b'not json "sessionID":"ses_qqqqqqqqqqqqqqqqqqqqqq"\n'
    block = log_of_runs(1)
    path = tmp_path / "garbage.jsonl"
    path.write_bytes(block + (garbage * 3000) + block)
    one, run = same_both_ways([path], tmp_path)
    assert b'"kind":"warning"' in one


# ---------------------------------------------------------------------------- cuts


def test_cuts_fall_where_the_session_changes(tmp_path):
    path = tmp_path / "log.jsonl"
    data = log_of_runs(2)
    path.write_bytes(data)
    cuts = cuts_of(path, 4096)
    assert cuts[0] == 0 and len(cuts) > 10 and cuts == sorted(set(cuts))
    runs = _session_runs(data)
    for cut in cuts[1:]:
        before = data[data.rfind(b"\n", 0, cut - 1) + 1 : cut]
        after = data[cut : data.find(b"\n", cut)]
        assert data[cut - 1 : cut] == b"\n"
        session = streamfan._session_in(after)
        if streamfan._session_in(before) == session:
            # Only where no session changes in the window looked at: inside a session whose
            # lines run on past a whole window (samples/prune's 47 KB outputs), or the last
            # one, running to the end.
            (start, end) = next((s, e) for s, e in runs if s < cut < e)
            assert end == len(data) or end - start > streamfan.WINDOW_BYTES, (session, cut)


def _session_runs(data: bytes) -> list[tuple[int, int]]:
    """Where each run of lines of one session starts and ends in ``data`` (a line whose
    session is not in its head, a large tool output's, goes on the run it is in)."""
    runs: list[tuple[int, int]] = []
    at, current, start = 0, None, 0
    for line in data.splitlines(keepends=True):
        session = streamfan._session_in(line)
        if session is not None and session != current:
            if at:
                runs.append((start, at))
            current, start = session, at
        at += len(line)
    runs.append((start, at))
    return runs


def test_one_session_is_cut_at_lines_about_every_chunk(tmp_path):
    path = tmp_path / "one.jsonl"
    data = one_long_session(20)
    path.write_bytes(data)
    cuts = cuts_of(path, 4096)
    assert cuts[0] == 0 and cuts == sorted(set(cuts))
    longest_line = max(map(len, data.splitlines()))
    for start, end in zip(cuts, [*cuts[1:], len(data)], strict=True):
        assert data[start - 1 : start] in (b"", b"\n")
        assert end - start <= 4096 + longest_line + 1


# ---------------------------------------------------------------------------- the CLI


@pytest.fixture(scope="module")
def large_log(tmp_path_factory) -> Path:
    """A log over the size from which `normalize` shares a file out (PARALLEL_BYTES)."""
    block = log_of_runs(4)
    path = tmp_path_factory.mktemp("large") / "large.jsonl"
    copies = normalize_module.PARALLEL_BYTES // len(block) + 2
    with open(path, "wb") as f:
        for copy in range(copies):
            f.write(block.replace(b"ses_copy", b"ses_c%03d" % copy))
    return path


def _run(args, env_workers: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "OPENCODE_EVENTS_WORKERS": env_workers}
    return subprocess.run([*CLI, *args], capture_output=True, env=env, cwd=ROOT, check=False)


# The console script's own entry point, which says at exit what the workers did.
_TELLING = (
    "import atexit, sys\n"
    "from opencode_events.pipeline import streamfan\n"
    "atexit.register(lambda: sys.stderr.write(repr(streamfan.LAST_RUN)))\n"
    "from opencode_events.cli.quick import main\n"
    "sys.argv[0] = 'opencode-events'\n"
    "main()\n"
)


def test_the_command_writes_the_same_with_workers(large_log):
    one = _run(["normalize", str(large_log)], "1")
    env = {**os.environ, "OPENCODE_EVENTS_WORKERS": "2"}
    two = subprocess.run(
        [sys.executable, "-c", _TELLING, "normalize", str(large_log)],
        capture_output=True,
        env=env,
        cwd=ROOT,
        check=False,
    )
    assert one.returncode == two.returncode == 0
    assert two.stdout == one.stdout and one.stdout.count(b"\n") > 2_000
    run = eval(two.stderr.decode())  # the dict LAST_RUN printed, and nothing else
    assert run["workers"] == 2 and run["chunks"] >= 4 and run["fell_back"] is None


def test_standard_input_from_the_file_too(large_log):
    with open(large_log, "rb") as f:
        env = {**os.environ, "OPENCODE_EVENTS_WORKERS": "2"}
        two = subprocess.run([*CLI, "normalize"], stdin=f, capture_output=True, env=env, cwd=ROOT)
    one = _run(["normalize", str(large_log)], "1")
    assert two.returncode == 0 and two.stdout == one.stdout


def _started_with_workers(path: Path) -> subprocess.Popen:
    """``normalize PATH`` with two workers, its stdout and stderr pipes to read."""
    env = {**os.environ, "OPENCODE_EVENTS_WORKERS": "2"}
    proc = subprocess.Popen(
        [*CLI, "normalize", str(path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        cwd=ROOT,
    )
    assert proc.stdout is not None and proc.stderr is not None
    return proc


def test_a_closed_pipe_ends_quietly_with_141(large_log):
    proc = _started_with_workers(large_log)
    first = proc.stdout.readline()
    proc.stdout.close()
    stderr = proc.stderr.read()
    assert proc.wait(timeout=60) == 141  # as one process ends (cli/exits.py)
    assert json.loads(first)["seq"] == 0 and stderr == b""


def test_an_output_workers_cannot_share_stays_in_one_process(small_chunks, tmp_path):
    path = tmp_path / "log.jsonl"
    path.write_bytes(log_of_runs(2))
    expected = normalized([path], tmp_path, workers=1)
    out = io.BytesIO()  # in memory: a forked worker's writes would stay in its own copy
    with open(path, "rb", buffering=0) as f:
        normalize_streams([(str(path), f)], JsonlWriter(out, buffered=True), workers=2)
    assert streamfan.LAST_RUN == {} and out.getvalue() == expected


def test_terminated_while_workers_wait_on_a_full_pipe(large_log):
    # The reader stops reading: the workers block in their writes, the parent waits for
    # them. SIGTERM to the parent alone ends all of it: 143, whole lines, no worker left.
    proc = _started_with_workers(large_log)
    first = proc.stdout.read(1 << 16)  # started writing, then nobody reads
    time.sleep(1.0)
    workers = _children(proc.pid)
    assert len(workers) == 2
    proc.send_signal(signal.SIGTERM)
    rest = proc.stdout.read()
    assert proc.wait(timeout=60) == 143
    # Whole lines in order; the last may be cut short, as the README says of an interrupt.
    lines = (first + rest).splitlines()[:-1]
    assert [json.loads(line)["seq"] for line in lines] == list(range(len(lines)))
    assert all(not Path(f"/proc/{pid}").exists() for pid in workers)


def _children(pid: int) -> list[int]:
    """The processes whose parent is ``pid`` (Linux's /proc)."""
    found = []
    for status in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = status.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            found.append(int(status.parent.name))
    return found
