"""`otel --follow` keeps going when the backend does not take what it is sent (otel.follow).

A follower runs for days: a backend out of reach keeps the bodies queued until it is back; a
body it refuses goes again session by session, and only a session refused alone is let go
(cut smaller first when it was too large); the backend's partial successes and every loss
are told as they happen. The counters begin with the first session read, so a restart sends
the same series again; and what the backend took is kept (``otel.sent``), so a restart does
not send the sessions it already has. Driven through ``FollowSender`` over a generated store, with a
scripted destination in place of the network.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from opencode_events.otel import follow as follow_module
from opencode_events.otel.export import SpanCollector
from opencode_events.otel.follow import FollowSender
from opencode_events.otel.sent import SentLedger
from opencode_events.otel.spans import TraceBuilder
from opencode_events.otel.transport import ExportError, PartialSuccess
from opencode_events.sources.eventlog import StoreFollower
from opencode_events.store.sqlite import Store

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> Path:
    """30 sessions cloned from the captures (bench/gen_db.py: subagents, forks, errors)."""
    from tests.stores import generated

    return generated(tmp_path_factory.mktemp("gen") / "opencode.db")


class Clock:
    def __init__(self) -> None:
        self.now = 1_900_000_000.0

    def __call__(self) -> float:
        return self.now


class Scripted:
    """A destination answering each body with ``answer(signal, body)``: None (taken), a
    ``PartialSuccess``, or an ``ExportError`` raised."""

    max_bytes = 4 << 20
    where = "http://collector:4318"

    def __init__(self, answer: Callable[[str, dict], object]) -> None:
        self.answer = answer
        self.taken: list[tuple[str, dict]] = []
        self.tries = 0

    def send(self, signal: str, body: bytes) -> object:
        self.tries += 1
        doc = json.loads(body)
        found = self.answer(signal, doc)
        if isinstance(found, ExportError):
            raise found
        self.taken.append((signal, doc))
        return found

    def flush(self) -> None:
        pass

    def hurry(self) -> None:
        pass


def conversations(doc: dict) -> set[str]:
    return {
        attribute["value"]["stringValue"]
        for group in doc.get("resourceSpans", [])
        for scope in group["scopeSpans"]
        for span in scope["spans"]
        for attribute in span.get("attributes", [])
        if attribute["key"] == "gen_ai.conversation.id"
    }


def span_ids(taken: list[tuple[str, dict]]) -> list[str]:
    return [
        span["spanId"]
        for signal, doc in taken
        if signal == "traces"
        for group in doc["resourceSpans"]
        for scope in group["scopeSpans"]
        for span in scope["spans"]
    ]


def sender_over(
    db: Path, destination: Scripted, clock: Clock, said: list[str], ledger: SentLedger | None = None
) -> FollowSender:
    """Every session of ``db`` read (all done: history), ready to be sent."""
    collector = SpanCollector(TraceBuilder(parents={}))
    follower = StoreFollower(collector.normalizer(), all_sessions=True)
    with Store(db) as opened:
        collector.write(follower.read(opened, clock() * 1000))
    return FollowSender(
        db, follower, collector, destination, clock=clock, warn=said.append, ledger=ledger
    )


def everything_once(store: Path, least: int = 100) -> list[str]:
    destination = Scripted(lambda signal, doc: None)
    sender = sender_over(store, destination, Clock(), [])
    sender.send(everything=True)
    sender.finish()
    ids = span_ids(destination.taken)
    assert len(ids) == len(set(ids)) > least
    return sorted(ids)


def refusing_one(db: Path) -> tuple[str, Callable[[str, dict], object]]:
    """A top-level session of ``db``, and a backend's answer refusing every body holding
    its spans (400) and taking the others."""
    with Store(db) as opened:
        victim = sorted(row.id for row in opened.sessions(top_level=True))[3]

    def answer(signal: str, doc: dict) -> object:
        if victim in conversations(doc):
            return ExportError("http://collector refused the traces: HTTP 400", status=400)
        return None

    return victim, answer


def test_a_backend_out_of_reach_gets_everything_once_it_is_back(store: Path) -> None:
    down = {"tries": 3}

    def answer(signal: str, doc: dict) -> object:
        if down["tries"]:
            down["tries"] -= 1
            return ExportError("cannot reach http://collector:4318/v1/traces", transient=True)
        return None

    clock, said = Clock(), []
    destination = Scripted(answer)
    sender = sender_over(store, destination, clock, said)
    sender.send()
    assert destination.taken == [] and sender.queue
    assert len(said) == 1 and said[0].startswith("warning: cannot reach")
    assert "kept, tried again from time to time" in said[0]
    sender.poll()  # too soon: not tried again
    assert destination.tries == 1
    for _ in range(3):
        clock.now += 60
        sender.poll()
    assert not sender.queue
    assert said[1:] == ["reached http://collector:4318 again: sending what was kept"]
    assert sorted(span_ids(destination.taken)) == everything_once(store)
    sender.finish()  # nothing left, nothing refused


def test_a_backend_whose_certificate_is_not_trusted_gets_everything_once_it_is(
    store: Path,
) -> None:
    """A TLS failure is no answer about a body (an expired or replaced certificate, fixed
    later): a follower keeps the bodies, as for a backend out of reach, and lets none go."""
    broken = {"tries": 2}

    def answer(signal: str, doc: dict) -> object:
        if broken["tries"]:
            broken["tries"] -= 1
            return ExportError(
                "cannot trust https://collector:4318/v1/traces: certificate verify failed"
            )
        return None

    clock, said = Clock(), []
    destination = Scripted(answer)
    sender = sender_over(store, destination, clock, said)
    sender.send()
    assert destination.taken == [] and sender.queue and not sender.dropped_sessions
    assert said[0].startswith("warning: cannot trust https://collector:4318/v1/traces")
    for _ in range(2):
        clock.now += 60
        sender.poll()
    assert not sender.queue
    assert sorted(span_ids(destination.taken)) == everything_once(store)
    sender.finish()


def test_a_refused_session_is_let_go_and_the_others_in_its_body_still_go(store: Path) -> None:
    collector = SpanCollector(TraceBuilder(parents={}))
    victim, answer = refusing_one(store)
    said: list[str] = []
    destination = Scripted(answer)
    sender = sender_over(store, destination, Clock(), said)
    del collector
    sender.send()
    assert not sender.queue
    dropped = [line for line in said if "dropped" in line]
    assert dropped == [
        f"warning: the spans of 1 session ({victim}) dropped: "
        "http://collector refused the traces: HTTP 400"
    ]
    taken = set(span_ids(destination.taken))
    assert taken < set(everything_once(store))
    assert all(victim not in conversations(doc) for _, doc in destination.taken)
    with pytest.raises(ExportError, match="the spans of 1 session were not accepted"):
        sender.finish()


def test_a_session_too_large_for_the_backend_is_cut_smaller(store: Path, monkeypatch) -> None:
    monkeypatch.setattr(follow_module, "_SMALLEST_BODY", 1 << 10)
    limit = 16 << 10

    def answer(signal: str, doc: dict) -> object:
        if len(json.dumps(doc)) > limit:
            return ExportError("HTTP 413 Payload Too Large", status=413)
        return None

    said: list[str] = []
    destination = Scripted(answer)
    sender = sender_over(store, destination, Clock(), said)
    sender.send()
    assert [line for line in said if "dropped" in line] == []
    assert sorted(span_ids(destination.taken)) == everything_once(store)


def test_counters_a_backend_refuses_are_let_go_once_and_traces_go_on(store: Path) -> None:
    def answer(signal: str, doc: dict) -> object:
        if signal == "metrics":
            return ExportError("HTTP 404 Not Found", status=404)
        return None

    said: list[str] = []
    destination = Scripted(answer)
    sender = sender_over(store, destination, Clock(), said)
    sender.send()
    assert said == [
        "warning: the counters were not sent: HTTP 404 Not Found; no more will be sent "
        "(--only traces leaves them out)"
    ]
    assert not sender.metrics
    assert sorted(span_ids(destination.taken)) == everything_once(store)


def test_partial_successes_are_told_as_they_come(store: Path) -> None:
    said: list[str] = []
    note = PartialSuccess("traces", 3, "bad spans")
    destination = Scripted(lambda signal, doc: note if signal == "traces" else None)
    sender = sender_over(store, destination, Clock(), said)
    sender.send()
    assert said and set(said) == {"warning: the backend rejected 3 spans: bad spans"}
    assert sender.summary.partial == []  # told already: not again in the summary


def test_the_counters_begin_with_the_first_session_read(store: Path) -> None:
    destination = Scripted(lambda signal, doc: None)
    clock = Clock()
    sender = sender_over(store, destination, clock, [])
    sender.send()
    (metrics,) = [doc for signal, doc in destination.taken if signal == "metrics"]
    starts = {
        point["startTimeUnixNano"]
        for group in metrics["resourceMetrics"]
        for scope in group["scopeMetrics"]
        for metric in scope["metrics"]
        for point in (metric.get("sum") or metric["histogram"])["dataPoints"]
    }
    with Store(store) as opened:
        first = min(row.time_created for row in opened.sessions())
    assert starts == {str(first * 1_000_000)}  # not when following began (clock.now)


def test_the_queue_for_a_backend_out_of_reach_is_bounded(store: Path, monkeypatch) -> None:
    monkeypatch.setattr(follow_module, "MAX_QUEUED_BYTES", 40 << 10)
    said: list[str] = []
    out = ExportError("cannot reach http://collector", transient=True)
    destination = Scripted(lambda signal, doc: out)
    sender = sender_over(store, destination, Clock(), said)
    sender.send()
    assert sum(len(item.body) for item in sender.queue) <= 40 << 10 or len(sender.queue) == 1
    assert any("dropped: the queue for a backend out of reach is full" in line for line in said)
    assert sender.dropped_sessions
    left = sender.undelivered()
    assert left is not None and left.endswith("not sent: cannot reach http://collector")
    with pytest.raises(ExportError, match="cannot reach http://collector"):
        sender.finish()


def test_attach_otel_sends_what_it_saw_when_it_is_told_to_stop(tmp_path: Path) -> None:
    """SIGTERM (a service stopped, `docker stop`) sends the spans as Ctrl-C does, and the
    exit is still the signal's."""
    import signal
    import time

    from tests.sseserver import serving_events

    sse = (ROOT / "samples" / "serve_permission" / "events.sse").read_bytes()
    out = tmp_path / "spans.jsonl"
    with serving_events(sse) as (url, served):
        attach = subprocess.Popen(
            [sys.executable, "-m", "opencode_events", "attach", url, "--follow"]
            + ["--format", "jsonl", "--otel", str(out)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd=ROOT,
        )
        try:
            assert served.wait(30)
            attach.stdout.readline()  # an event out: the stream is being read
            time.sleep(1)
            attach.send_signal(signal.SIGTERM)
            _, err = attach.communicate(timeout=30)
        finally:
            attach.kill()
    assert attach.returncode == 143, err
    lines = out.read_bytes().splitlines()
    spans = [json.loads(line) for line in lines if b"resourceSpans" in line]
    assert sum(len(span_ids([("traces", doc)])) for doc in spans) > 0


def test_a_follower_out_of_reach_keeps_going_and_stops_at_once_when_told(tmp_path) -> None:
    """A backend that cannot be reached does not end `--forever`: the bodies are kept, and
    SIGTERM ends it after one more try of each (not the retries), with the signal's exit
    and a line saying what was not sent."""
    import shutil
    import signal
    import socket
    import time

    db = tmp_path / "opencode.db"
    shutil.copyfile(ROOT / "samples" / "task" / "opencode.db", db)
    with socket.socket() as probe:  # a port no one listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    follow = subprocess.Popen(
        [sys.executable, "-m", "opencode_events", "otel", "--db", str(db), "--follow"]
        + ["--all", "--forever", "--retries", "0", "--endpoint", f"http://127.0.0.1:{port}"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=ROOT,
    )
    try:
        first = follow.stderr.readline().decode()
        assert first.startswith("warning: cannot reach http://127.0.0.1:"), first
        assert "kept, tried again from time to time" in first
        time.sleep(2)
        assert follow.poll() is None  # still following
        began = time.monotonic()
        follow.send_signal(signal.SIGTERM)
        _, rest = follow.communicate(timeout=30)
        took = time.monotonic() - began
    finally:
        follow.kill()
    assert follow.returncode == 143, rest
    assert took < 10
    lines = rest.decode().splitlines()
    assert lines[-1].startswith("warning: ") and "(2 sessions) not sent: cannot reach" in lines[-1]


def test_a_session_a_killed_opencode_left_goes_with_the_call_it_died_in() -> None:
    """A run OpenCode was killed in is sent once stale; the call it died in went only when
    the follower itself stopped (the batch export has it, `running`)."""
    db = ROOT / "samples" / "sigint" / "opencode.db"
    clock = Clock()
    with Store(db) as opened:
        written = max(row.time_updated for row in opened.sessions())
    clock.now = written / 1000 + 3600  # an hour later: stale
    destination = Scripted(lambda signal, doc: None)
    sender = sender_over(db, destination, clock, [])
    sender.send()  # what is done now, not everything: the stale session is
    assert not sender.collector.traces
    batch = subprocess.run(
        [sys.executable, "-m", "opencode_events", "otel", "--db", str(db), "--all", "-o", "-"],
        cwd=ROOT,
        capture_output=True,
        check=True,
    )
    exported = [("traces", json.loads(line)) for line in batch.stdout.splitlines()]
    assert sorted(span_ids(destination.taken)) == sorted(
        span_ids([item for item in exported if "resourceSpans" in item[1]])
    )


def tool_statuses(taken: list[tuple[str, dict]]) -> list[tuple[str, str]]:
    found = []
    for signal, doc in taken:
        if signal != "traces":
            continue
        for group in doc["resourceSpans"]:
            for scope in group["scopeSpans"]:
                for span in scope["spans"]:
                    if span["name"].startswith("execute_tool"):
                        attributes = {
                            a["key"]: next(iter(a["value"].values()))
                            for a in span.get("attributes", [])
                        }
                        found.append((span["spanId"], attributes.get("opencode.tool.status")))
    return found


def test_a_call_silent_past_the_stale_limit_still_goes_as_it_ended(tmp_path: Path) -> None:
    """Stale is ten minutes of silence, not always a killed OpenCode (a command given a
    longer timeout): the open call goes as it was, and when it ends after all, as it ended."""
    import shutil
    import sqlite3

    db = tmp_path / "opencode.db"
    shutil.copyfile(ROOT / "samples" / "sigint" / "opencode.db", db)
    conn = sqlite3.connect(db)
    rowid, session_id, seq, data = conn.execute(
        "SELECT rowid, aggregate_id, seq, data FROM event WHERE type = "
        "'message.part.updated.1' AND data LIKE '%\"status\":\"running\"%' "
        "ORDER BY rowid DESC LIMIT 1"
    ).fetchone()
    conn.close()
    running = json.loads(data)
    started = running["part"]["state"]["time"]["start"]
    clock = Clock()
    clock.now = started / 1000 + 700  # past the stale limit
    destination = Scripted(lambda signal, doc: None)
    sender = sender_over(db, destination, clock, [])
    sender.send()
    ((call, status),) = tool_statuses(destination.taken)
    assert status == "running"
    # ... and twelve minutes after it began, the call ends after all
    ended = started + 720_000
    running["part"]["state"] = {
        **running["part"]["state"],
        "status": "completed",
        "output": "started\nfinished\n",
        "metadata": {"output": "started\nfinished\n", "exit": 0},
        "time": {"start": started, "end": ended},
    }
    conn = sqlite3.connect(db)
    top = conn.execute("SELECT max(seq) FROM event WHERE aggregate_id = ?", (session_id,))
    conn.execute(
        "INSERT INTO event (id, aggregate_id, seq, type, data) VALUES (?, ?, ?, ?, ?)",
        (
            "evt_late",
            session_id,
            top.fetchone()[0] + 1,
            "message.part.updated.1",
            json.dumps(running),
        ),
    )
    conn.commit()
    conn.close()
    clock.now = ended / 1000 + 5
    taken = len(destination.taken)
    with Store(db) as opened:
        sender.collector.write(sender.follower.read(opened, clock() * 1000))
    sender.send(everything=True)
    assert tool_statuses(destination.taken[taken:]) == [(call, "completed")]
    assert rowid


def test_the_counters_start_stays_put_when_an_older_session_comes_later(store: Path) -> None:
    """A start time that moves reads as a reset of the counter to a backend."""
    destination = Scripted(lambda signal, doc: None)
    clock = Clock()
    sender = sender_over(store, destination, clock, [])
    with Store(store) as opened:
        oldest = min(opened.sessions(), key=lambda row: row.time_created).id
    at_work = sender.collector.traces.pop(oldest)  # still at work at the first send
    sender.send()
    sender.collector.traces[oldest] = at_work  # done later
    clock.now += 60
    sender.send()
    starts = [
        {
            point["startTimeUnixNano"]
            for group in doc["resourceMetrics"]
            for scope in group["scopeMetrics"]
            for metric in scope["metrics"]
            for point in (metric.get("sum") or metric["histogram"])["dataPoints"]
        }
        for signal, doc in destination.taken
        if signal == "metrics"
    ]
    assert len(starts) == 2 and len(starts[0] | starts[1]) == 1


# ---------------------------------------------------------------- started again (otel.sent)


def write_on(db: Path, session_id: str) -> None:
    """OpenCode wrote to ``session_id`` again: one more event in its log (its last one
    again, under the next number), as every change it makes is logged."""
    import sqlite3

    with sqlite3.connect(db) as conn:
        (seq,) = conn.execute(
            "SELECT max(seq) FROM event WHERE aggregate_id = ?", (session_id,)
        ).fetchone()
        conn.execute(
            "INSERT INTO event (id, aggregate_id, seq, type, data) SELECT id || '-again', "
            "aggregate_id, seq + 1, type, data FROM event WHERE aggregate_id = ? AND seq = ?",
            (session_id, seq),
        )
        conn.execute(
            "UPDATE event_sequence SET seq = ? WHERE aggregate_id = ?", (seq + 1, session_id)
        )
    conn.close()


def follow_again(
    db: Path, folder: Path, answer: Callable[[str, dict], object] = lambda signal, doc: None
) -> tuple[Scripted, FollowSender, list[str]]:
    """A follower started (again) over ``db``, everything it read sent, as ``--forever``
    stopped by SIGTERM does (``last_send``)."""
    destination = Scripted(answer)
    said: list[str] = []
    ledger = SentLedger.open(db, "http://collector:4318/v1/traces", folder=folder)
    sender = sender_over(db, destination, Clock(), said, ledger)
    sender.send()
    sender.last_send()
    return destination, sender, said


def counters(taken: list[tuple[str, dict]]) -> list[dict]:
    return [doc for signal, doc in taken if signal == "metrics"]


CAPTURES = ("task", "fork", "continue3", "text", "bash_ok", "reasoning", "command_subtask")
SESSIONS = 10  # theirs, subagents and forks included


@pytest.fixture(scope="module")
def logged(tmp_path_factory) -> Path:
    """Real captures' stores in one (samples/): 9 sessions, each with OpenCode's event log,
    whose counters say what changed (the generated store has no log)."""
    from tests.stores import merged_captures

    return merged_captures(tmp_path_factory.mktemp("logged") / "opencode.db", CAPTURES)


def test_a_follower_started_again_sends_only_what_the_backend_does_not_have(
    logged: Path, tmp_path: Path
) -> None:
    import shutil

    db = tmp_path / "opencode.db"
    shutil.copyfile(logged, db)
    folder = tmp_path / "state"
    first, sender, said = follow_again(db, folder)
    assert sorted(span_ids(first.taken)) == everything_once(db, 30)
    assert said == [] and sender.summary.left_out == 0
    assert len(list(folder.iterdir())) == 1  # one file per database and backend

    again, sender, said = follow_again(db, folder)
    assert span_ids(again.taken) == []  # the backend has every session as it is
    assert sender.summary.sessions == 0 and sender.summary.left_out == SESSIONS
    assert said == [
        f"otel: {SESSIONS} sessions sent to http://collector:4318 before, unchanged since, "
        "not sent again (--resend sends them)"
    ]
    assert counters(again.taken) == counters(first.taken)  # the history is still counted

    with Store(db) as opened:
        went_on = sorted(row.id for row in opened.sessions(top_level=True))[5]
    write_on(db, went_on)  # worked while no follower ran
    third, sender, _ = follow_again(db, folder)
    sent = {sid for _, doc in third.taken for sid in conversations(doc)}
    assert sent == {went_on}  # sent whole again, the others left out
    assert sender.summary.sessions == 1 and sender.summary.left_out == SESSIONS - 1
    fourth, _, _ = follow_again(db, folder)
    assert span_ids(fourth.taken) == []


def test_what_the_backend_did_not_take_is_sent_by_the_next_follower(
    logged: Path, tmp_path: Path
) -> None:
    """Refused (let go), or never delivered (out of reach when told to stop): not kept as
    sent, so a follower started again sends it."""
    folder = tmp_path / "state"
    victim, refuse_one = refusing_one(logged)
    follow_again(logged, folder, refuse_one)
    again, _, _ = follow_again(logged, folder)
    assert {sid for _, doc in again.taken for sid in conversations(doc)} == {victim}

    other = tmp_path / "other"
    down = ExportError("cannot reach http://collector:4318/v1/traces", transient=True)
    unreached, sender, _ = follow_again(logged, other, lambda signal, doc: down)
    assert unreached.taken == [] and sender.queue
    back, sender, _ = follow_again(logged, other)
    assert sorted(span_ids(back.taken)) == everything_once(logged, 30)
    assert sender.summary.left_out == 0


def test_a_ledger_for_another_database_backend_or_format_is_not_trusted(
    logged: Path, tmp_path: Path
) -> None:
    folder = tmp_path / "state"
    follow_again(logged, folder)
    (file,) = folder.iterdir()
    kept = json.loads(file.read_bytes())
    assert kept["format"] == "opencode-events otel sent 1"
    assert kept["database"] == str(logged.resolve())
    assert kept["destination"] == "http://collector:4318/v1/traces"
    assert len(kept["sessions"]) == SESSIONS
    for damaged in (
        b"",
        b"\x00" * 64,
        file.read_bytes()[:-10],
        json.dumps({**kept, "format": "opencode-events otel sent 2"}).encode(),
        json.dumps({**kept, "database": "/elsewhere/opencode.db"}).encode(),
        json.dumps({**kept, "destination": "http://other:4318/v1/traces"}).encode(),
        json.dumps({**kept, "sessions": {sid: "7" for sid in kept["sessions"]}}).encode(),
    ):
        file.write_bytes(damaged)
        again, sender, _ = follow_again(logged, folder)
        assert sorted(span_ids(again.taken)) == everything_once(logged, 30), damaged[:40]
        assert json.loads(file.read_bytes()) == kept  # written anew
    other = SentLedger.open(logged, "http://other:4318/v1/traces", folder=folder)
    assert other.file != file and other.sessions == {}


def test_a_ledger_that_cannot_be_kept_is_said_once_and_everything_still_goes(
    logged: Path, tmp_path: Path
) -> None:
    blocked = tmp_path / "state"
    blocked.write_text("a file where the folder would be")
    again, sender, said = follow_again(logged, blocked / "otel-sent")
    assert sorted(span_ids(again.taken)) == everything_once(logged, 30)
    assert len(said) == 1 and said[0].startswith("warning: what was sent cannot be kept (")
    assert said[0].endswith("started again, the follower sends the history again")
    sender.finish()  # no error: everything was delivered


def test_a_change_that_gives_no_event_after_a_send_is_kept_as_delivered(tmp_path: Path) -> None:
    """OpenCode writes a session's title and diff summary (`session.updated`) a few ms after
    it went idle: a follower that sent it in that gap saw its counter move with no event to
    send, and kept the older counter, so every later start sent the whole session again."""
    db = tmp_path / "opencode.db"
    shutil.copyfile(ROOT / "samples" / "bash_ok" / "opencode.db", db)
    with sqlite3.connect(db) as conn:
        cols = [d[1] for d in conn.execute("PRAGMA table_info(event)")]
        last = conn.execute("SELECT * FROM event ORDER BY rowid DESC LIMIT 1").fetchone()
        assert last[cols.index("type")] == "session.updated.1"  # as OpenCode ends a run
        conn.execute("DELETE FROM event WHERE id = ?", (last[cols.index("id")],))
        conn.execute("UPDATE event_sequence SET seq = seq - 1")
    conn.close()
    folder, clock = tmp_path / "state", Clock()
    ledger = SentLedger.open(db, "http://collector:4318/v1/traces", folder=folder)
    sender = sender_over(db, Scripted(lambda signal, doc: None), clock, [], ledger)
    sender.send()  # done: sent, before its last row came
    with sqlite3.connect(db) as conn:
        conn.execute(
            f"INSERT INTO event ({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))})", last
        )
        conn.execute("UPDATE event_sequence SET seq = seq + 1")
    conn.close()
    clock.now += 2
    with Store(db) as opened:
        sender.collector.write(sender.follower.read(opened, clock() * 1000))
    sender.poll()
    sender.last_send()
    again, sender, said = follow_again(db, folder)
    assert span_ids(again.taken) == [] and sender.summary.left_out == 1


def test_what_was_delivered_is_written_within_seconds_not_at_the_next_delivery(
    logged: Path, tmp_path: Path
) -> None:
    """A follower killed (-9, out of memory, power lost) sends again only what it delivered
    in its last seconds: a delivery soon after a save is written once its time comes, not
    at the next delivery, which may be hours later."""
    db = tmp_path / "opencode.db"
    shutil.copyfile(logged, db)
    folder, clock = tmp_path / "state", Clock()
    ledger = SentLedger.open(db, "http://collector:4318/v1/traces", folder=folder)
    sender = sender_over(db, Scripted(lambda signal, doc: None), clock, [], ledger)
    sender.send()  # the history: delivered, and saved
    (file,) = folder.iterdir()
    with Store(db) as opened:
        sid = sorted(row.id for row in opened.sessions(top_level=True))[2]
    before = json.loads(file.read_bytes())["sessions"][sid]
    write_on(db, sid)  # worked on, and done 2 s after that save
    clock.now += 2
    with Store(db) as opened:
        sender.collector.write(sender.follower.read(opened, clock() * 1000))
    clock.now += 1
    sender.poll()
    assert ledger.sessions[sid] == before + 1  # delivered
    for _ in range(3):  # the store idle from then on
        clock.now += 10
        sender.poll()
    assert json.loads(file.read_bytes())["sessions"][sid] == before + 1


def test_cli_a_follower_started_again_sends_only_what_is_new(tmp_path: Path) -> None:
    """`otel --follow --all --forever` twice to one backend, stopped by SIGTERM each time:
    the second sends the counters, not the spans again; `--resend` sends them."""
    import os
    import shutil
    import signal
    import time

    from tests.test_otel import backend

    db = tmp_path / "opencode.db"
    shutil.copyfile(ROOT / "samples" / "task" / "opencode.db", db)
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("OTEL_")},
        "XDG_STATE_HOME": str(tmp_path / "state"),
    }

    def follow(url: str, state, *extra: str) -> tuple[list[str], str]:
        """The paths the backend was sent, and stderr, once the counters came."""
        before = len(state.requests)
        args = ["otel", "--db", str(db), "--follow", "--all", "--forever", "--endpoint", url]
        run = subprocess.Popen(
            [sys.executable, "-m", "opencode_events", *args, *extra],
            stderr=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            cwd=ROOT,
            env=env,
        )
        try:
            deadline = time.monotonic() + 60
            while not any(p == "/v1/metrics" for p, _, _ in state.requests[before:]):
                assert time.monotonic() < deadline and run.poll() is None
                time.sleep(0.05)
            run.send_signal(signal.SIGTERM)
            _, err = run.communicate(timeout=30)
        finally:
            run.kill()
        assert run.returncode == 143, err
        return [p for p, _, _ in state.requests[before:]], err.decode()

    with backend([200]) as (state, url):
        sent, err = follow(url, state)
        assert sent[:2] == ["/v1/traces", "/v1/metrics"] and err == ""
        sent, err = follow(url, state)
        assert "/v1/traces" not in sent  # the counters only (as often as it looked)
        assert err == (
            f"otel: 2 sessions sent to {url} before, unchanged since, not sent again "
            "(--resend sends them)\n"
        )
        sent, err = follow(url, state, "--resend")
        assert sent[:2] == ["/v1/traces", "/v1/metrics"] and err == ""
    (kept,) = (tmp_path / "state" / "opencode-events" / "otel-sent").iterdir()
    assert kept.suffix == ".json"
    assert db.read_bytes() == (ROOT / "samples" / "task" / "opencode.db").read_bytes()
