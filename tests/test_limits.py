"""Subagents' spend and spending limits, with a stand-in OpenCode replaying a real capture.

`run` reads the subagents' costs from the store (samples/task: the parent's stream holds
only its own steps); the real OpenCode does the same in tests/e2e/test_limits_live.py.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from opencode_events.pipeline.spend import RunSpend, SessionCosts
from opencode_events.store.sqlite import Store

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ROOT / "samples"
CMD = [sys.executable, "-m", "opencode_events"]

# Writes the capture's first line (the step's start: the session is known), waits as a
# `task` call does while its subagent works, then the rest; Ctrl-C ends it as OpenCode.
FAKE = """#!{python}
import signal, sys, time
signal.signal(signal.SIGINT, lambda *_: sys.exit(130))
lines = open({stream!r}, "rb").read().splitlines(keepends=True)
sys.stdout.buffer.write(lines[0]); sys.stdout.flush()
time.sleep({pause})
for line in lines[1:]:
    sys.stdout.buffer.write(line); sys.stdout.flush()
"""


def _fake(tmp_path: Path, pause: float) -> Path:
    fake = tmp_path / "opencode"
    stream = SAMPLES / "task" / "stream.jsonl"
    fake.write_text(FAKE.format(python=sys.executable, stream=str(stream), pause=pause))
    fake.chmod(0o755)
    return fake


def _store(tmp_path: Path) -> tuple[Path, float, float]:
    db = tmp_path / "opencode.db"
    shutil.copyfile(SAMPLES / "task" / "opencode.db", db)
    with Store(db) as store:
        rows = store.sessions()
    parent = next(r for r in rows if r.parent_id is None)
    child = next(r for r in rows if r.parent_id is not None)
    return db, parent.cost, child.cost


def _run(tmp_path: Path, *args: str, pause: float) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [*CMD, "run", "--format", "jsonl", *args, "go"],
        capture_output=True,
        timeout=60,
        cwd=ROOT,
        env={**os.environ, "OPENCODE_BIN": str(_fake(tmp_path, pause))},
    )


def test_run_folds_the_subagents_cost_into_its_metrics(tmp_path: Path) -> None:
    db, parent, child = _store(tmp_path)
    done = _run(tmp_path, "--db", str(db), pause=0)
    assert done.returncode == 0, done.stderr.decode()
    metrics = json.loads(done.stdout.splitlines()[-1])
    assert metrics["cost"] == parent  # the stream's own steps: $0.015795
    assert (metrics["subagent_sessions"], metrics["subagent_cost"]) == (1, child)
    assert metrics["total_cost"] == pytest.approx(parent + child, abs=1e-12)  # $0.02064


def test_run_names_its_subagents_steps_calls_and_tokens_as_sessions_does(tmp_path: Path) -> None:
    """Issue 20, item 3: the run's figures with its subagents' agree with `sessions`' row of
    the same session, every one of them, and its closing line says so."""
    db, _, _ = _store(tmp_path)
    done = _run(tmp_path, "--db", str(db), pause=0)
    metrics = json.loads(done.stdout.splitlines()[-1])
    listed = subprocess.run(
        [*CMD, "sessions", "--db", str(db), "-j", "--no-cache"], capture_output=True
    )
    (row,) = json.loads(listed.stdout)
    for name in ("subagent_sessions", "subagent_inferences", "subagent_tool_calls"):
        assert metrics[name] == row[name], name
    assert metrics["subagent_tokens"] == row["subagent_tokens"] == 2909
    assert metrics["turns"] + metrics["subagent_inferences"] == row["inferences"] == 5
    assert metrics["tool_calls"] + metrics["subagent_tool_calls"] == row["tool_calls"] == 3
    assert metrics["total_tokens"] + metrics["subagent_tokens"] == row["total_tokens"]
    assert metrics["total_cost"] == row["cost"]
    pretty = subprocess.run(
        [*CMD, "run", "--db", str(db), "--format", "pretty", "go"],
        capture_output=True,
        timeout=60,
        cwd=ROOT,
        env={**os.environ, "OPENCODE_BIN": str(_fake(tmp_path, 0)), "COLUMNS": "120"},
    )
    assert pretty.stdout.decode().splitlines()[-1] == (
        "── 5 steps · 3 tool calls · 11,384 tokens · $0.0206 +sub (1 subagent: 3 steps, $0.0048)"
    )


def test_without_subagents_the_metrics_say_nothing_of_them(tmp_path: Path) -> None:
    db = tmp_path / "opencode.db"
    shutil.copyfile(SAMPLES / "text" / "opencode.db", db)
    done = _run(tmp_path, "--db", str(db), pause=0)
    metrics = json.loads(done.stdout.splitlines()[-1])
    assert not {"subagent_sessions", "subagent_cost", "total_cost"} & set(metrics)


def test_max_cost_stops_opencode_while_its_stream_is_silent(tmp_path: Path) -> None:
    db, parent, child = _store(tmp_path)
    started = time.monotonic()
    done = _run(tmp_path, "--db", str(db), "--max-cost", "0.02", pause=30)
    assert time.monotonic() - started < 20  # not the fake's 30 s: stopped by SIGINT
    assert done.returncode == 3
    (note,) = done.stderr.decode().splitlines()
    assert note == (
        f"opencode-events: {_root(db)} cost ${parent + child:.4f} with its subagents "
        f"(${child:.4f} in 1), over --max-cost $0.02; OpenCode was stopped"
    )
    assert json.loads(done.stdout.splitlines()[-1])["kind"] == "metrics"


def test_under_the_limit_the_exit_status_is_opencodes(tmp_path: Path) -> None:
    db, _, _ = _store(tmp_path)
    done = _run(tmp_path, "--db", str(db), "--max-cost", "0.03", pause=0)
    assert done.returncode == 0, done.stderr.decode()
    assert done.stderr == b""


def test_max_cost_holds_where_opencode_keeps_no_database(tmp_path: Path) -> None:
    """``OPENCODE_DB=:memory:``: no store to read the subagents' costs from, so the limit
    holds on what the stream alone says (it was not applied at all, without a word)."""
    _, parent, _ = _store(tmp_path)
    done = subprocess.run(
        [*CMD, "run", "--format", "jsonl", "--max-cost", "0.01", "go"],
        capture_output=True,
        timeout=60,
        cwd=ROOT,
        env={
            **os.environ,
            "OPENCODE_BIN": str(_fake(tmp_path, 0)),
            "OPENCODE_DB": ":memory:",
        },
    )
    assert done.returncode == 3, done.stderr.decode()
    (note,) = done.stderr.decode().splitlines()
    # Stopped at the first step past $0.01 ($0.0129), or later if the stand-in wrote on.
    said = re.fullmatch(
        r"opencode-events: ses_\w+ cost \$(\S+), over --max-cost \$0\.01; OpenCode was stopped",
        note,
    )
    assert said is not None, note
    assert 0.01 < float(said[1]) <= round(parent, 4)
    metrics = json.loads(done.stdout.splitlines()[-1])
    assert 0.01 < metrics["cost"] <= parent and "subagent_cost" not in metrics


@pytest.mark.parametrize("limit", ["0", "-1", "lots", "nan", "inf"])
def test_a_limit_must_be_a_positive_amount(tmp_path: Path, limit: str) -> None:
    done = _run(tmp_path, "--max-cost", limit, pause=0)
    assert done.returncode == 2 and done.stderr.startswith(b"error: ")


def _root(db: Path) -> str:
    with Store(db) as store:
        return store.newest_session()


def test_run_spend_reads_the_store_when_it_changed(tmp_path: Path) -> None:
    db, parent, child = _store(tmp_path)
    spend = RunSpend(db)
    assert not spend.refresh()  # no session yet: nothing to read
    spend.session_id = _root(db)
    assert spend.refresh() and not spend.refresh()  # read once; unchanged since
    assert spend.total == pytest.approx(parent + child, abs=1e-12)
    assert (spend.subagents, spend.subagent_cost) == (1, child)
    assert spend.refresh(force=True)


@pytest.mark.parametrize(
    ("seen", "root", "expected"),
    [
        ([("a", None, 1.0), ("b", "a", 0.5), ("c", "b", 0.25)], "a", (1.75, 0.75, 2)),
        ([("a", None, 1.0), ("b", "a", 0.5), ("x", None, 9.0)], "a", (1.5, 0.5, 1)),
        ([("b", "a", 0.5), ("a", None, 1.0), ("b", "a", 0.75)], "a", (1.75, 0.75, 1)),  # updated
        ([("a", "b", 1.0), ("b", "a", 2.0)], "a", (3.0, 2.0, 1)),  # a loop is not followed
        ([("a", None, "free"), ("b", "a", float("nan"))], "a", (0.0, 0.0, 1)),  # not numbers
    ],
)
def test_session_costs_sum_a_session_and_those_below_it(seen, root, expected) -> None:
    costs = SessionCosts()
    for session in seen:
        costs.seen(*session)
    assert costs.total(root) == expected


# ------------------------------------------------------------------ a review's findings

WEDGED = """#!{python}
import os, signal, sys, time
for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
    signal.signal(sig, {handler})
open({pidfile!r}, "w").write(str(os.getpid()))
lines = open({stream!r}, "rb").read().splitlines(keepends=True)
for line in lines:
    sys.stdout.buffer.write(line); sys.stdout.flush()
time.sleep(120)
"""


def _wedged(tmp_path: Path, handler: str) -> tuple[Path, Path]:
    fake, pidfile = tmp_path / "opencode", tmp_path / "opencode.pid"
    stream = SAMPLES / "task" / "stream.jsonl"
    fake.write_text(
        WEDGED.format(
            python=sys.executable, handler=handler, pidfile=str(pidfile), stream=str(stream)
        )
    )
    fake.chmod(0o755)
    return fake, pidfile


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def test_max_cost_kills_an_opencode_that_ignores_sigint_and_sigterm(tmp_path, monkeypatch):
    """A wedged OpenCode kept `run --max-cost` running for good: after SIGINT and SIGTERM
    it is now killed, and the run ends with 3 and its note."""
    from opencode_events.cli import live

    db, _, _ = _store(tmp_path)
    fake, pidfile = _wedged(tmp_path, "signal.SIG_IGN")
    started = time.monotonic()
    done = subprocess.run(
        [*CMD, "run", "--format", "jsonl", "--db", str(db), "--max-cost", "0.01", "go"],
        capture_output=True,
        timeout=90,
        cwd=ROOT,
        env={**os.environ, "OPENCODE_BIN": str(fake)},
    )
    assert done.returncode == 3, done.stderr.decode()
    assert b"over --max-cost $0.01; OpenCode was stopped" in done.stderr
    assert time.monotonic() - started < 3 * live._Limit.GRACE + 10
    assert _gone(int(pidfile.read_text()))


@pytest.mark.parametrize("sig", ["SIGHUP", "SIGQUIT"])
def test_a_closed_terminal_stops_opencode_too(tmp_path, sig):
    """SIGHUP (the terminal closed) or SIGQUIT killed `run` and left OpenCode, in a session
    of its own, running on unwatched: both are passed on now, as Ctrl-C is."""
    import signal

    fake, pidfile = _wedged(tmp_path, "signal.SIG_DFL")
    proc = subprocess.Popen(
        [*CMD, "run", "--format", "jsonl", "go"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        cwd=ROOT,
        env={**os.environ, "OPENCODE_BIN": str(fake), "OPENCODE_DB": str(tmp_path / "x.db")},
    )
    deadline = time.monotonic() + 30
    while not pidfile.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.5)
    proc.send_signal(getattr(signal, sig))
    code = proc.wait(timeout=30)
    opencode = int(pidfile.read_text())
    for _ in range(100):
        if _gone(opencode):
            break
        time.sleep(0.05)
    assert _gone(opencode), f"{sig}: OpenCode still runs after run exited {code}"
    with pytest.raises(ProcessLookupError):
        os.kill(opencode, 0)


@pytest.mark.parametrize("option", ["-o", "--tee", "--otel"])
def test_run_never_writes_over_the_database_it_reads(tmp_path, option):
    """`-o`, `--tee` or `--otel` naming OpenCode's database emptied it (import refuses)."""
    db, _, _ = _store(tmp_path)
    before = db.read_bytes()
    done = _run(tmp_path, "--db", str(db), option, str(db), pause=0)
    assert done.returncode == 2
    assert done.stderr.decode().splitlines()[-1].startswith(f"error: will not write to {db}")
    assert db.read_bytes() == before


def test_tee_and_otel_naming_one_file_is_refused(tmp_path):
    db, _, _ = _store(tmp_path)
    same = tmp_path / "both.jsonl"
    done = _run(tmp_path, "--db", str(db), "--tee", str(same), "--otel", str(same), pause=0)
    assert done.returncode == 2 and not same.exists()
    assert b"--tee and --otel both name" in done.stderr


def test_a_failed_otel_export_keeps_opencode_s_exit_and_the_budget_s(tmp_path):
    """The export runs after OpenCode ended: its failure is said, but the run's own exit
    (3 past --max-cost, else OpenCode's, 2 where that was 0) still tells how it went."""
    import http.server
    import threading

    class Refuses(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # a collector that takes nothing: 400, never retried
            self.rfile.read(int(self.headers.get("Content-Length", 0)))
            self.send_response(400)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Refuses)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    db, _, _ = _store(tmp_path)
    env = {**os.environ, "OPENCODE_BIN": str(_fake(tmp_path, 0))}
    url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        plain = subprocess.run(
            [*CMD, "run", "--format", "jsonl", "--db", str(db), "--otel", url, "go"],
            capture_output=True, timeout=120, cwd=ROOT, env=env,
        )  # fmt: skip
        over = subprocess.run(
            [*CMD, "run", "--format", "jsonl", "--db", str(db), "--otel", url,
             "--max-cost", "0.01", "go"],
            capture_output=True, timeout=120, cwd=ROOT, env=env,
        )  # fmt: skip
    finally:
        server.shutdown()
    assert plain.returncode == 2 and b"error: " in plain.stderr, plain.stderr.decode()
    assert b'"kind":"metrics"' in plain.stdout.splitlines()[-1]
    assert over.returncode == 3, over.stderr.decode()
    assert b"error: " in over.stderr and b"OpenCode was stopped" in over.stderr


@pytest.mark.parametrize(
    "args, theirs, events_to",
    [
        (["-mo", "x"], ["-mo", "x"], None),  # click split the cluster: -o x was run's
        (["--format", "jsonl", "-vo", "x", "go"], ["-vo", "x", "go"], None),
        (["-o", "out.jsonl", "hi", "there"], ["hi", "there"], "out.jsonl"),
        (["-oout.jsonl", "hi"], ["hi"], "out.jsonl"),
        (["--format=jsonl", "hi", "--tee", "x"], ["hi", "--tee", "x"], None),
        (["--tee", "raw.jsonl", "--", "--weird"], ["--weird"], None),
    ],
)
def test_from_the_first_word_not_run_s_own_everything_is_opencode_s(
    tmp_path, args, theirs, events_to
):
    fake = tmp_path / "opencode"
    fake.write_text(
        f"#!{sys.executable}\nimport json, sys\n"
        f"json.dump(sys.argv[1:], open({str(tmp_path / 'argv.json')!r}, 'w'))\n"
    )
    fake.chmod(0o755)
    done = subprocess.run(
        [*CMD, "run", *args],
        capture_output=True,
        timeout=60,
        cwd=tmp_path,
        env={**os.environ, "OPENCODE_BIN": str(fake), "OPENCODE_DB": str(tmp_path / "no.db")},
    )
    assert done.returncode == 0, done.stderr.decode()
    assert json.loads((tmp_path / "argv.json").read_text()) == ["run", "--format", "json", *theirs]
    assert not (tmp_path / "x").exists()
    if events_to is not None:
        assert (tmp_path / events_to).exists()
