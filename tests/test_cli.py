"""The command line as a user meets it: stdout, stderr, exit codes, pipes and signals."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import select
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.records import record, step_finish, tool_use

CMD = [sys.executable, "-m", "opencode_events"]


def lines_of(*records) -> bytes:
    return b"".join(json.dumps(r).encode() + b"\n" for r in records)


SIMPLE = lines_of(
    record("step_start", {"type": "step-start"}),
    record("text", {"type": "text", "text": "hello"}),
    tool_use("read", {"filePath": "a.py"}),
    step_finish(input_=10, output=2, cost=0.01),
)


def run(args, stdin: bytes = b"", **kwargs):
    return subprocess.run(CMD + args, input=stdin, capture_output=True, timeout=60, **kwargs)


def jsonl(data: bytes) -> list[dict]:
    return [json.loads(line) for line in data.splitlines()]


@contextlib.contextmanager
def one_connection_server(answer: Callable[[socket.socket], None]) -> Iterator[int]:
    """A server on 127.0.0.1 that takes one connection, reads the request and lets
    ``answer`` reply; yields its port."""
    listener = socket.create_server(("127.0.0.1", 0))

    def serve() -> None:
        try:
            connection, _ = listener.accept()
        except OSError:  # no one came: the listener was shut
            return
        with connection:
            connection.recv(65536)
            answer(connection)

    server = threading.Thread(target=serve, daemon=True)
    server.start()
    try:
        yield listener.getsockname()[1]
    finally:
        # A thread left waiting in accept() would keep later tests' reports from forking
        # their workers (workers.worker_count): shut wakes it, close alone does not.
        with contextlib.suppress(OSError):
            listener.shutdown(socket.SHUT_RDWR)
        listener.close()
        server.join(timeout=10)


def test_normalize_stdin_to_stdout():
    result = run(["normalize"], SIMPLE)
    assert result.returncode == 0, result.stderr
    assert result.stderr == b""
    events = jsonl(result.stdout)
    assert [e["kind"] for e in events] == ["message", "read", "usage", "metrics"]
    assert [e["seq"] for e in events] == [0, 1, 2, 3]


def test_dash_means_stdin_and_file_input(tmp_path: Path):
    path = tmp_path / "run.jsonl"
    path.write_bytes(SIMPLE)
    from_file = run(["normalize", str(path)])
    from_dash = run(["normalize", "-"], SIMPLE)
    assert from_file.stdout == from_dash.stdout and from_file.returncode == 0


def test_several_inputs_name_their_source(tmp_path: Path):
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    a.write_bytes(SIMPLE)
    b.write_bytes(SIMPLE)
    events = jsonl(run(["normalize", str(a), str(b)]).stdout)
    assert [e["seq"] for e in events] == list(range(len(events)))
    assert {e.get("source") for e in events[:-1]} == {str(a), str(b)}
    usage = [e for e in events if e["kind"] == "usage"]
    assert [u["turn"] for u in usage] == [1, 1]  # each input is its own run
    assert events[-1]["turns"] == 2


def test_missing_input_is_one_error_line_and_exit_2(tmp_path: Path):
    result = run(["normalize", str(tmp_path / "nope.jsonl")])
    assert result.returncode == 2
    assert result.stdout == b""
    assert result.stderr.decode().startswith("error: cannot read ")
    assert len(result.stderr.decode().strip().splitlines()) == 1


def test_directory_input_is_an_error(tmp_path: Path):
    result = run(["normalize", str(tmp_path)])
    assert result.returncode == 2 and b"Traceback" not in result.stderr
    assert result.stderr.startswith(b"error: ")


@pytest.mark.parametrize(
    "args",
    [
        ["normalize", "--no-such-flag"],
        ["sessions", "--since", "whenever"],
        ["usage", "--tz", "Nowhere/Else", "--by", "day"],
        ["usage", "--by", "project"],
        ["no-such-command"],
    ],
    ids=["unknown-option", "bad-since", "bad-tz", "stream-by-project", "unknown-command"],
)
def test_bad_usage_is_one_error_line_and_exit_2(args):
    result = run(args)
    assert result.returncode == 2 and result.stdout == b""
    lines = result.stderr.decode().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr


def test_output_file(tmp_path: Path):
    out = tmp_path / "events.jsonl"
    result = run(["normalize", "-o", str(out)], SIMPLE)
    assert result.returncode == 0 and result.stdout == b""
    assert jsonl(out.read_bytes())[-1]["kind"] == "metrics"


def test_unwritable_output_is_an_error(tmp_path: Path):
    result = run(["normalize", "-o", str(tmp_path / "no" / "such" / "dir.jsonl")], SIMPLE)
    assert result.returncode == 2 and result.stderr.startswith(b"error: cannot write")


def test_no_metrics_and_buffered():
    events = jsonl(run(["normalize", "--no-metrics", "--buffered"], SIMPLE).stdout)
    assert [e["kind"] for e in events] == ["message", "read", "usage"]


def test_raw_flag():
    events = jsonl(run(["normalize", "--raw", "--no-metrics"], SIMPLE).stdout)
    assert all("raw" in e for e in events)
    assert events[0]["raw"]["part"]["text"] == "hello"


@pytest.mark.parametrize(
    "extra, strict_code",
    [(b"garbage\n", 1), (lines_of({"type": "error", "error": {"name": "APIError"}}), 1), (b"", 0)],
    ids=["warning", "error-record", "clean"],
)
def test_strict(extra, strict_code):
    assert run(["normalize"], SIMPLE + extra).returncode == 0
    strict = run(["normalize", "--strict"], SIMPLE + extra)
    assert strict.returncode == strict_code
    # an exit 1 says why, in one line on stderr (issue 20 §10)
    expected = {b"garbage\n": b"strict: the input held 1 warning\n"}.get(extra)
    if strict_code:
        assert strict.stderr == (expected or b"strict: the input held 1 error\n")
    else:
        assert strict.stderr == b""


def test_garbage_never_tracebacks():
    result = run(["normalize"], b'\x00\xff\xfe garbage\n[1]\n"s"\n{"type":\n' + SIMPLE)
    assert result.returncode == 0 and result.stderr == b""
    kinds = [e["kind"] for e in jsonl(result.stdout)]
    assert kinds[:4] == ["warning"] * 4


def test_schema_describes_every_kind():
    result = run(["schema"])
    assert result.returncode == 0
    doc = json.loads(result.stdout)
    tags = {
        d["properties"]["kind"]["enum"][0]
        for d in doc["$defs"].values()
        if "kind" in d.get("properties", {})
    }
    assert {
        "message",
        "reasoning",
        "prompt",
        "read",
        "write",
        "search",
        "command",
        "orchestration",
        "skill",
        "usage",
        "error",
        "permission",
        "compaction",
        "warning",
        "unknown",
        "metrics",
    } <= tags
    read = next(d for d in doc["$defs"].values() if d.get("title") == "Read")
    assert "success" in read["required"] and "seq" in read["required"]


def test_version():
    result = run(["--version"])
    assert result.returncode == 0 and b"opencode-events" in result.stdout


def test_event_comes_out_before_stdin_closes():
    proc = subprocess.Popen(
        CMD + ["normalize"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    try:
        proc.stdin.write(lines_of(record("text", {"type": "text", "text": "live"})))
        proc.stdin.flush()
        ready, _, _ = select.select([proc.stdout], [], [], 20)
        assert ready, "no event within 20 s while stdin stayed open"
        event = json.loads(proc.stdout.readline())
        assert event["kind"] == "message" and event["text"] == "live"
        assert proc.poll() is None  # still running: stdin is open
    finally:
        proc.stdin.close()
        proc.wait(timeout=20)
    assert proc.returncode == 0


def test_closed_pipe_ends_quietly(tmp_path: Path):
    big = tmp_path / "big.jsonl"
    big.write_bytes(SIMPLE * 20000)
    proc = subprocess.Popen(
        CMD + ["normalize", str(big)], stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    proc.stdout.readline()
    proc.stdout.close()  # like `| head -1`
    stderr = proc.stderr.read()
    proc.wait(timeout=30)
    assert stderr == b""
    assert proc.returncode == 141


@pytest.mark.parametrize(
    "args",
    [
        ["normalize", "--format", "pretty"],
        ["usage", "--format", "csv"],
        ["usage", "--format", "json"],
        ["usage", "--format", "markdown"],
        ["usage", "--format", "table"],
    ],
    ids=" ".join,
)
def test_closed_pipe_ends_quietly_after_one_large_block(tmp_path: Path, args: list[str]):
    """A reader gone in the middle of one large write (`| head -c 100`) is a closed pipe
    too, not a success: the rest of the block is not silently dropped."""
    steps = [step_finish(input_=10, output=2, cost=0.01) for _ in range(5000)]
    big = tmp_path / "big.jsonl"
    big.write_bytes(lines_of(*steps))
    proc = subprocess.Popen(CMD + [*args, str(big)], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.read(100)
    proc.stdout.close()  # like `| head -c 100`
    stderr = proc.stderr.read()
    proc.wait(timeout=60)
    assert stderr == b""
    assert proc.returncode == 141


def test_a_full_disk_is_an_error_not_a_short_file(tmp_path: Path):
    """Output that cannot all be written is one error line and exit 2 (here /dev/full)."""
    result = run(["normalize", "-o", "/dev/full"], stdin=SIMPLE * 2000)
    assert result.returncode == 2
    assert result.stderr == b"error: cannot write /dev/full: No space left on device\n"


ROOT = Path(__file__).resolve().parent.parent
STORE = ROOT / "samples" / "task" / "opencode.db"


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="no /dev/full")
@pytest.mark.parametrize(
    "args",
    [
        ["normalize"],
        ["normalize", "--format", "pretty"],
        ["sessions", "--db", str(STORE)],
        ["sessions", "--db", str(STORE), "--format", "csv"],
        ["usage", "--db", str(STORE), "--all"],
        ["import", "--db", str(STORE), "--all"],
    ],
    ids=lambda a: " ".join(x for x in a if x != str(STORE)),
)
def test_a_full_disk_on_stdout_is_one_error_line_and_exit_2(args):
    # Not a traceback from the interpreter's last flush, and not its exit code 120.
    with open("/dev/full", "wb") as full:
        result = subprocess.run(
            CMD + args, input=SIMPLE, stdout=full, stderr=subprocess.PIPE, timeout=60
        )
    assert result.stderr == b"error: No space left on device\n"
    assert result.returncode == 2


def test_ctrl_c_exits_130_without_traceback():
    proc = subprocess.Popen(
        CMD + ["normalize"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    try:
        proc.stdin.write(SIMPLE)
        proc.stdin.flush()
        proc.stdout.readline()  # it is up and reading
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=20)
        stderr = proc.stderr.read()
    finally:
        proc.stdin.close()
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130
    assert b"Traceback" not in stderr


@pytest.mark.parametrize(
    "args",
    [
        ["normalize"],
        ["normalize", "-o", "/dev/null"],
        ["import", "--db", str(STORE)],
        ["sessions", "--db", str(STORE)],
        ["usage", "--db", str(STORE)],
        ["usage"],
    ],
    ids=lambda a: " ".join(x for x in a if x != str(STORE)),
)
def test_pipe_path_never_imports_rich(args):
    """SPEC §4: rich is not imported on the JSONL path (stdout a pipe, as here)."""
    code = (
        "import sys\n"
        "from opencode_events.cli.main import cli, run\n"
        f"rc = run(cli, {args!r})\n"
        "assert 'rich' not in sys.modules, 'rich was imported'\n"
        "sys.exit(rc)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], input=SIMPLE, capture_output=True, timeout=60
    )
    assert result.returncode == 0, result.stderr.decode()
    assert result.stdout or "-o" in args


def test_python_dash_m_and_console_script_agree():
    script = Path(sys.executable).with_name("opencode-events")
    if not script.exists():
        pytest.skip("console script not installed in this environment")
    via_script = subprocess.run(
        [str(script), "normalize"], input=SIMPLE, capture_output=True, timeout=60
    )
    assert via_script.stdout == run(["normalize"], SIMPLE).stdout


def test_start_up_reads_empty_input_quickly():
    # A smoke check only; the budget itself is measured by `make bench`.
    start = time.monotonic()
    result = run(["normalize"], b"", env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"})
    assert result.returncode == 0
    assert jsonl(result.stdout)[0]["records"] == 0
    assert time.monotonic() - start < 30


def test_a_64_mb_line_is_one_warning_and_the_run_goes_on(tmp_path: Path):
    huge = tmp_path / "huge.jsonl"
    with open(huge, "wb") as f:
        f.write(SIMPLE)
        f.write(b'{"type":"text","part":{"text":"' + b"x" * (64 << 20) + b"\n")  # truncated JSON
        f.write(
            lines_of(
                record("text", {"type": "text", "text": "after"}),
                tool_use("glob", {"pattern": "*"}),
            )
        )
    result = run(["normalize", str(huge), "--no-metrics"])
    assert result.returncode == 0 and result.stderr == b""
    kinds = [json.loads(line)["kind"] for line in result.stdout.splitlines()]
    assert kinds == ["message", "read", "usage", "warning", "message", "search"]


def test_closed_stdout_is_one_error_line():
    result = subprocess.run(
        [*CMD, "normalize"],
        stdin=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        timeout=30,
        preexec_fn=lambda: os.close(1),  # as `opencode-events normalize >&-`
    )
    assert result.returncode == 2
    assert result.stderr == b"error: standard output is closed\n"


def test_normalize_will_not_write_over_its_input(tmp_path: Path):
    source = tmp_path / "run.jsonl"
    source.write_bytes(SIMPLE)
    (tmp_path / "link.jsonl").symlink_to(source)
    for target in (source, tmp_path / "link.jsonl"):
        result = run(["normalize", str(source), "-o", str(target)])
        assert result.returncode == 2 and result.stderr.startswith(b"error: will not write to ")
        assert source.read_bytes() == SIMPLE
    assert run(["normalize", str(source), "-o", str(tmp_path / "out.jsonl")]).returncode == 0


@pytest.mark.parametrize(
    "url, message",
    [
        ("http://[::1", "error: not a server URL: http://[::1"),
        ("http://h:1/ a", "error: not a server URL: http://h:1/ a"),
        ("http://a..b", "error: not a server URL: http://a..b (not ASCII, or a bad host name)"),
        ("ftp://host", "error: not a server URL: ftp://host"),
    ],
)
def test_attach_to_a_bad_url_is_one_error_line(url: str, message: str):
    result = run(["attach", url])
    assert (result.returncode, result.stderr.decode(), result.stdout) == (2, message + "\n", b"")


def test_attach_names_an_ipv6_server_in_brackets():
    """`http://::1:1` is no URL (nor a host and a port one can tell apart)."""
    result = run(["attach", "http://[::1]:1"])
    assert result.returncode == 2 and result.stdout == b""
    assert result.stderr.decode().startswith("error: cannot connect to http://[::1]:1: ")


@pytest.mark.parametrize(
    "reply",
    [b"GARBAGE\r\n\r\n", b"HTTP/1.1 200 OK\r\n" + b"X: " + b"y" * 70000 + b"\r\n\r\n"],
    ids=["not-http", "huge-header"],
)
def test_attach_to_something_that_is_not_an_http_server(reply: bytes):
    def answer(connection: socket.socket) -> None:
        connection.sendall(reply)

    with one_connection_server(answer) as port:
        result = run(["attach", f"http://127.0.0.1:{port}"])
    assert result.returncode == 2, result.stderr
    assert result.stderr.decode().startswith(
        f"error: http://127.0.0.1:{port} did not answer as an HTTP server: "
    )
    assert result.stderr.count(b"\n") == 1 and result.stdout == b""


@pytest.mark.parametrize("args", [["normalize"], ["usage"]])
def test_closed_stdin_is_one_error_line(args):
    # `<&-`: no file descriptor 0 at all
    closed = subprocess.run(
        ["sh", "-c", 'exec "$@" <&-', "sh", *CMD, *args], capture_output=True, timeout=30
    )
    assert closed.returncode == 2, closed.stderr
    assert closed.stderr == b"error: standard input is closed\n" and closed.stdout == b""


def test_normalize_will_not_write_over_the_file_on_its_stdin(tmp_path: Path):
    source = tmp_path / "run.jsonl"
    source.write_bytes(SIMPLE)
    with open(source, "rb") as stdin:
        result = subprocess.run(
            CMD + ["normalize", "-o", str(source)], stdin=stdin, capture_output=True, timeout=60
        )
    assert result.returncode == 2
    assert (
        result.stderr
        == f"error: will not write to {source}: it is being read (standard input)\n".encode()
    )
    assert source.read_bytes() == SIMPLE
    devnull = run(["normalize", str(source), "-o", os.devnull])  # not a file it could empty
    assert devnull.returncode == 0, devnull.stderr


def test_whole_writes_waits_on_a_full_non_blocking_pipe():
    """A non-blocking stdout (left so by another program) that fills up is waited on, not
    an error and not a short write."""
    import io

    from opencode_events.cli.io import WholeWrites

    read_end, write_end = os.pipe()
    os.set_blocking(write_end, False)
    received = bytearray()

    def slow_reader() -> None:
        while chunk := os.read(read_end, 4096):
            received.extend(chunk)
            time.sleep(0.0005)

    reader = threading.Thread(target=slow_reader)
    reader.start()
    data = bytes(range(256)) * 4096  # 1 MiB, far past the pipe's 64 KiB
    with io.BufferedWriter(WholeWrites(write_end)) as out:
        out.write(data)
    reader.join(timeout=30)
    os.close(read_end)
    assert bytes(received) == data


@pytest.mark.parametrize("line_end", [b"\r", b"\r\n"], ids=["cr", "crlf"])
def test_attach_reads_event_streams_whose_lines_end_with_cr(line_end: bytes):
    """SSE lines may end with CR, CRLF or LF; split across reads at any point."""
    samples = Path(__file__).resolve().parent.parent / "samples" / "serve_permission"
    sse = (samples / "events.sse").read_bytes()
    body = sse.replace(b"\n", line_end)

    def serve(connection: socket.socket) -> None:
        connection.sendall(
            b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n"
        )
        for start in range(0, len(body), 7):  # CR and LF of a CRLF in different reads
            try:
                connection.sendall(body[start : start + 7])
            except OSError:  # attach has seen the run end and gone
                return
            time.sleep(0.0002)

    with one_connection_server(serve) as port:
        attached = run(["attach", f"http://127.0.0.1:{port}", "--until-idle", "--format", "jsonl"])
    assert attached.returncode == 0, attached.stderr
    offline = run(["normalize", str(samples / "events.sse")])
    drop = ("line", "seq", "records")
    assert [{k: v for k, v in e.items() if k not in drop} for e in jsonl(attached.stdout)] == [
        {k: v for k, v in e.items() if k not in drop} for e in jsonl(offline.stdout)
    ]


@pytest.mark.parametrize("line_end", [b"\n", b"\r\n", b"\r"], ids=["lf", "crlf", "cr"])
def test_attach_measures_a_line_over_the_limit_without_holding_it(tmp_path, line_end: bytes):
    """A 64 MiB data line against a 1 MiB limit, attach held to 160 MiB of address space
    (it runs in 100): it once held the line whole, and copies of it, and scanned it again on
    every read (out of memory here, 35 s without a limit); now it keeps the line's start and
    counts the rest, and writes a warning with the frame's size, then what the stream holds
    after it."""
    import resource

    def held() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (160 << 20, 160 << 20))

    samples = Path(__file__).resolve().parent.parent / "samples" / "serve_text"
    pad = b"q" * (64 << 20)
    huge = b'data: {"type":"x.y","properties":{"pad":"' + pad + b'"}}' + line_end + line_end
    rest = (samples / "events.sse").read_bytes().replace(b"\n", line_end)
    (tmp_path / "rest.sse").write_bytes(rest)

    def serve(connection: socket.socket) -> None:
        connection.sendall(
            b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n"
        )
        try:
            for start in range(0, len(huge), 1 << 20):
                connection.sendall(huge[start : start + (1 << 20)])
            connection.sendall(rest)
        except OSError:  # attach has seen the run end and gone
            pass

    env = {**os.environ, "OPENCODE_EVENTS_MAX_LINE": "1M"}
    with one_connection_server(serve) as port:
        attached = run(
            ["attach", f"http://127.0.0.1:{port}", "--format", "jsonl"], env=env, preexec_fn=held
        )
    assert attached.returncode == 0, attached.stderr
    offline = run(["normalize", str(tmp_path / "rest.sse")], env=env)
    drop = ("seq", "line", "records", "warnings", "counts")
    events = [{k: v for k, v in e.items() if k not in drop} for e in jsonl(attached.stdout)]
    warning, *others = events
    assert others == [{k: v for k, v in e.items() if k not in drop} for e in jsonl(offline.stdout)]
    value = len(huge) - 6 - 2 * len(line_end)  # the frame's data: the line less `data: `
    assert warning["kind"] == "warning" and f"server event of {value:,} bytes" in warning["message"]
    assert warning["text"].startswith('{"type":"x.y"') and len(warning["text"]) <= 1024


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["int", "term"])
@pytest.mark.parametrize(
    "args",
    [["import", "--all", "--db", "task/opencode.db"], ["normalize", "task/stream.jsonl"]],
    ids=["import", "normalize"],
)
def test_a_signal_while_a_slow_reader_keeps_stdout_full_writes_each_event_once(args, sig):
    """The reader's pipe is full (shrunk to a page) when the signal comes: a write's count
    was lost to the handler's exception, and the exit's flush wrote the block again (each
    event twice). Now what was written stays written, once."""
    samples = Path(__file__).resolve().parent.parent / "samples"
    argv = [*CMD, *[str(samples / a) if "/" in a else a for a in args]]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    fcntl.fcntl(proc.stdout.fileno(), getattr(fcntl, "F_SETPIPE_SZ", 1031), 4096)
    time.sleep(1.5)  # its output waits on the pipe by now
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 128 + sig, err
    seqs = [json.loads(line)["seq"] for line in out.splitlines() if line.endswith(b"}")]
    assert seqs == list(range(len(seqs))) and seqs, seqs


def test_attach_stops_at_the_followed_sessions_idle_by_default():
    """The default is SPEC's "until the session goes idle": here the followed session's idle
    and another session's work arrive in one read, and only what came before the idle is
    written; then the server is still sending, and attach has ended anyway."""
    samples = Path(__file__).resolve().parent.parent / "samples" / "serve_text"
    sse = (samples / "events.sse").read_bytes()
    later = (
        b'data: {"type":"session.error","properties":{"sessionID":"ses_later",'
        b'"error":{"name":"UnknownError","data":{"message":"after the idle"}}}}\n\n'
    )
    done = threading.Event()

    def serve(connection: socket.socket) -> None:
        connection.sendall(
            b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n"
            + sse
            + later
        )
        done.wait(20)  # the stream stays open: only the idle can end attach

    with one_connection_server(serve) as port:
        attached = run(["attach", f"http://127.0.0.1:{port}", "--format", "jsonl"])
        done.set()
    assert attached.returncode == 0, attached.stderr
    events = jsonl(attached.stdout)
    assert "after the idle" not in attached.stdout.decode()
    offline = jsonl(run(["normalize", str(samples / "events.sse")]).stdout)
    assert [e["kind"] for e in events] == [e["kind"] for e in offline]


@pytest.mark.parametrize("same", ["raw.jsonl", "./raw.jsonl", "link.jsonl"])
def test_run_refuses_tee_and_output_in_one_file(tmp_path: Path, same: str):
    fake = tmp_path / "opencode"
    fake.write_text(f"#!/bin/sh\ntouch {tmp_path / 'started'}\n")
    fake.chmod(0o755)
    raw = tmp_path / "raw.jsonl"
    raw.write_bytes(b"kept\n")
    (tmp_path / "link.jsonl").symlink_to(raw)
    result = run(
        ["run", "--tee", "raw.jsonl", "-o", same, "hi"],
        cwd=tmp_path,
        env={**os.environ, "OPENCODE_BIN": str(fake)},
    )
    assert result.returncode == 2
    assert result.stderr.startswith(b"error: --tee and -o both name ")
    assert result.stderr.count(b"\n") == 1
    assert raw.read_bytes() == b"kept\n" and not (tmp_path / "started").exists()


def test_run_refuses_tee_into_the_file_stdout_goes_to(tmp_path: Path):
    fake = tmp_path / "opencode"
    fake.write_text(f"#!/bin/sh\ntouch {tmp_path / 'started'}\n")
    fake.chmod(0o755)
    raw = tmp_path / "raw.jsonl"
    raw.write_bytes(b"kept\n")
    with open(raw, "ab") as stdout:  # `>> raw.jsonl`: nothing emptied by the shell
        result = subprocess.run(
            CMD + ["run", "--tee", str(raw), "hi"],
            stdout=stdout,
            stderr=subprocess.PIPE,
            env={**os.environ, "OPENCODE_BIN": str(fake)},
            timeout=60,
        )
    assert result.returncode == 2
    assert result.stderr.decode() == (
        f"error: --tee {raw} is where stdout goes: the raw stream and the events need a file each\n"
    )
    assert raw.read_bytes() == b"kept\n" and not (tmp_path / "started").exists()


@pytest.mark.parametrize("ignored", [False, True], ids=["terminal", "nohup"])
def test_run_passes_a_hangup_on_unless_it_was_started_ignoring_it(tmp_path: Path, ignored: bool):
    """A closed terminal ends OpenCode with us; under ``nohup`` (SIGHUP ignored) neither
    ends: OpenCode, which installs its own handlers, must not hear a hangup we ignore."""
    fake = tmp_path / "opencode"
    fake.write_text(
        f"#!{sys.executable}\n"
        "import pathlib, signal, sys, time\n"
        f"here = pathlib.Path({str(tmp_path)!r})\n"
        "signal.signal(signal.SIGHUP, lambda *_: (here.joinpath('hup').touch(), sys.exit(1)))\n"
        "here.joinpath('started').touch()\n"
        "time.sleep(60)\n"
    )
    fake.chmod(0o755)

    def as_nohup() -> None:
        signal.signal(signal.SIGHUP, signal.SIG_IGN)

    proc = subprocess.Popen(
        [*CMD, "run", "hi"],
        cwd=tmp_path,
        env={**os.environ, "OPENCODE_BIN": str(fake)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        preexec_fn=as_nohup if ignored else None,
    )
    try:
        deadline = time.monotonic() + 30
        while not (tmp_path / "started").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.3)  # its handlers are installed right after OpenCode starts
        proc.send_signal(signal.SIGHUP)
        if ignored:
            time.sleep(1.0)
            assert proc.poll() is None and not (tmp_path / "hup").exists()
            proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.communicate()
    assert (tmp_path / "hup").exists() is not ignored


@pytest.mark.parametrize(
    "args, message",
    [
        (["usage", "--db", str(STORE), "--last", "s.jsonl"], "give either INPUT files or stored"),
        (["usage", "--db", str(STORE), "--all", "--last"], "--all already reads every session"),
        (["import", "--db", str(STORE), "--all", "ses_"], "--all already reads every session"),
        (["import", "--db", str(STORE), "--all", "--since", "2h"], "--all already reads every"),
        (["import", "--children", "export.json"], "--children reads the store"),
    ],
    ids=[
        "usage-file-and-store",
        "usage-all-and-last",
        "import-all-and-id",
        "import-all-since",
        "import-export-children",
    ],
)
def test_options_that_contradict_each_other_are_refused_not_ignored(tmp_path, args, message):
    (tmp_path / "s.jsonl").write_bytes(SIMPLE)
    (tmp_path / "export.json").write_bytes((ROOT / "samples" / "task" / "export.json").read_bytes())
    result = run(args, cwd=tmp_path)
    assert result.returncode == 2 and result.stdout == b""
    assert result.stderr.startswith(b"error: " + message.encode())
    assert result.stderr.count(b"\n") == 1


def test_no_command_prints_the_help_not_an_error_line():
    result = run([])
    assert result.returncode in (0, 2)  # click 8.1 exits 0, later versions 2
    help_text = result.stdout + result.stderr
    assert help_text.startswith(b"Usage: opencode-events") and b"error:" not in help_text
    assert b"normalize" in help_text and b"sessions" in help_text


def test_a_missing_export_path_is_named_as_such(tmp_path):
    result = run(["import", str(tmp_path / "nope.json")])
    assert result.returncode == 2
    assert (
        result.stderr
        == f"error: cannot read {tmp_path / 'nope.json'}: not a file (nor a session id)\n".encode()
    )


def test_db_may_name_opencodes_data_directory(tmp_path):
    (tmp_path / "opencode.db").write_bytes(STORE.read_bytes())
    by_dir = run(["sessions", "--db", str(tmp_path), "--format", "json"])
    by_file = run(["sessions", "--db", str(tmp_path / "opencode.db"), "--format", "json"])
    assert by_dir.returncode == 0 and by_dir.stdout == by_file.stdout != b"[]\n"


def test_opencode_db_may_name_a_data_directory_with_channel_databases_beside(tmp_path):
    (tmp_path / "opencode.db").write_bytes(STORE.read_bytes())
    (tmp_path / "opencode-dev.db").write_bytes(STORE.read_bytes())
    result = run(["sessions", "--format", "json"], env={**os.environ, "OPENCODE_DB": str(tmp_path)})
    assert result.returncode == 0, result.stderr
    assert len(json.loads(result.stdout)) == 1


def test_opencode_db_in_memory_is_a_clear_error(tmp_path):
    env = {**os.environ, "OPENCODE_DB": ":memory:", "XDG_DATA_HOME": str(tmp_path)}
    result = run(["sessions"], env=env)
    assert result.returncode == 2
    assert result.stderr == (
        b"error: OPENCODE_DB is :memory:, so OpenCode keeps no database to read; pass --db PATH\n"
    )


def test_a_database_path_with_a_space_is_quoted_in_the_hint(tmp_path):
    db = tmp_path / "my store.db"
    db.write_bytes(STORE.read_bytes())
    result = run(["normalize", str(db)])
    assert result.returncode == 2
    assert f"use `import --db '{db}'` (--all for every session)".encode() in result.stderr


def test_db_naming_a_folder_with_only_channel_databases_names_them(tmp_path):
    (tmp_path / "opencode-dev.db").write_bytes(STORE.read_bytes())
    result = run(["sessions", "--db", str(tmp_path)])
    assert result.returncode == 2
    assert result.stderr.decode() == (
        f"error: no opencode.db in {tmp_path} (found {tmp_path / 'opencode-dev.db'}; "
        "pass --db FILE)\n"
    )


def _copied_without_its_wal(tmp_path: Path) -> tuple[Path, Path]:
    """A database in WAL mode whose rows (the real capture's) are all in its -wal still, as
    OpenCode's are between checkpoints, and a copy of its main file alone; (live, copy)."""
    live, copy = tmp_path / "opencode.db", tmp_path / "copy" / "opencode.db"
    source = sqlite3.connect(f"{STORE.as_uri()}?mode=ro", uri=True)
    conn = sqlite3.connect(live)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA wal_autocheckpoint=0")
    for (sql,) in source.execute("SELECT sql FROM sqlite_master WHERE sql IS NOT NULL"):
        conn.execute(sql)
    conn.commit()
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    tables = source.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall()
    for (table,) in tables:
        rows = source.execute(f'SELECT * FROM "{table}"').fetchall()
        if rows:
            marks = ",".join("?" * len(rows[0]))
            conn.executemany(f'INSERT INTO "{table}" VALUES ({marks})', rows)
    conn.commit()
    copy.parent.mkdir()
    shutil.copyfile(live, copy)  # while it is open: its rows stay in opencode.db-wal
    shutil.copyfile(f"{live}-wal", f"{live}-wal.kept")
    conn.close()
    source.close()
    return live, copy


def test_a_copy_without_its_wal_says_what_it_lacks(tmp_path):
    """`cp opencode.db` alone while OpenCode runs: no sessions, and the error says why."""
    _, copy = _copied_without_its_wal(tmp_path)
    note = (
        " (a copy of a database in use needs its -wal file beside it: OpenCode keeps its"
        " newest writes in opencode.db-wal until it checkpoints)"
    )
    result = run(["import", "--db", str(copy)])
    assert result.returncode == 2
    assert result.stderr.decode() == f"error: no sessions in {copy}{note}\n"
    result = run(["statusline", "--db", str(copy)])
    assert result.returncode == 2
    assert result.stderr.decode() == f"error: no sessions in {copy}{note}\n"
    # with its -wal beside it, the copy is whole
    shutil.copyfile(tmp_path / "opencode.db-wal.kept", f"{copy}-wal")
    result = run(["import", "--db", str(copy), "--all"])
    assert result.returncode == 0, result.stderr.decode()
    assert jsonl(result.stdout)[-1]["records"] > 0


def test_a_session_missing_from_a_store_not_in_wal_mode_has_no_copy_note():
    result = run(["import", "--db", str(STORE), "ses_nope"])
    assert result.returncode == 2
    assert result.stderr.decode() == f"error: no session ses_nope in {STORE}\n"


def test_an_error_quoting_a_control_character_stays_one_line():
    result = run(["import", "--db", str(STORE), "ses_dd8083e0\nx\x1b[2J"])
    assert result.returncode == 2
    assert result.stderr == (f"error: no session ses_dd8083e0\\x0ax\\x1b[2J in {STORE}\n".encode())


_ENDLESS_OPENCODE = """#!{python}
import json, os, signal, sys, time
pid_file = {pid_file!r}
with open(pid_file, "w") as out:
    out.write(str(os.getpid()))
signal.signal(signal.SIGPIPE, signal.SIG_IGN)  # as Bun does: a closed pipe is an error, not death
n = 0
while True:  # a run that would go on for a long time
    record = {{"type": "text", "timestamp": 1, "sessionID": "ses_x",
              "part": {{"id": f"prt_{{n}}", "type": "text", "text": "working"}}}}
    try:
        sys.stdout.write(json.dumps(record) + "\\n")
        sys.stdout.flush()
    except OSError:
        pass
    n += 1
    time.sleep(0.05)
"""


def _endless_opencode(tmp_path: Path) -> tuple[Path, Path]:
    fake = tmp_path / "opencode"
    pid_file = tmp_path / "opencode.pid"
    fake.write_text(_ENDLESS_OPENCODE.format(python=sys.executable, pid_file=str(pid_file)))
    fake.chmod(0o755)
    return fake, pid_file


def _gone(pid: int, within: float = 10.0) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.05)
    os.kill(pid, signal.SIGKILL)  # leave nothing behind, whatever the test says
    return False


@pytest.mark.parametrize("how", ["closed-pipe", "full-disk", "full-tee"])
def test_run_stops_opencode_when_its_output_fails(tmp_path: Path, how: str):
    """`run | head -1`, `run -o /dev/full`, `run --tee /dev/full`: OpenCode is stopped, not
    left working with nobody reading; a full disk is one `error:` line naming the file."""
    fake, pid_file = _endless_opencode(tmp_path)
    args = {"closed-pipe": [], "full-disk": ["-o", "/dev/full"], "full-tee": ["--tee", "/dev/full"]}
    proc = subprocess.Popen(
        CMD + ["run", *args[how], "work"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, "OPENCODE_BIN": str(fake)},
    )
    try:
        if how == "closed-pipe":
            assert proc.stdout.readline().startswith(b"{")
            proc.stdout.close()  # `| head -1`
        code = proc.wait(timeout=30)
        err = proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert _gone(int(pid_file.read_text()))
    if how == "closed-pipe":
        assert code == 141 and err == b""
    else:
        assert code == 2 and err == b"error: cannot write /dev/full: No space left on device\n"


def test_a_non_blocking_stdin_is_read_to_its_end():
    """A pipe set non-blocking by whoever shares it returns nothing while its writer pauses:
    that is no end of input; every line is read, however slowly it comes."""
    import fcntl

    lines = (
        (ROOT / "samples" / "file_tools" / "stream.jsonl").read_bytes().splitlines(keepends=True)
    )
    read_end, write_end = os.pipe()
    flags = fcntl.fcntl(read_end, fcntl.F_GETFL)
    fcntl.fcntl(read_end, fcntl.F_SETFL, flags | os.O_NONBLOCK)
    proc = subprocess.Popen(
        CMD + ["normalize"], stdin=read_end, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    os.close(read_end)
    try:
        for line in lines:
            os.write(write_end, line)
            time.sleep(0.03)
    finally:
        os.close(write_end)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0 and err == b""
    assert out == run(["normalize"], stdin=b"".join(lines)).stdout


@pytest.mark.skipif(not Path("/proc/self/mem").exists(), reason="needs Linux's /proc")
def test_an_input_that_fails_to_read_is_named():
    result = run(["normalize", "/proc/self/mem"])
    assert result.returncode == 2 and result.stdout == b""
    assert result.stderr == b"error: cannot read /proc/self/mem: Input/output error\n"


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_buffered_keeps_what_was_normalized_when_stopped(tmp_path: Path, sig: int):
    """`--buffered` batches its writes; Ctrl-C or SIGTERM still writes the events made so
    far (without the closing metrics), as the unbuffered mode has."""
    lines = (ROOT / "samples" / "file_tools" / "stream.jsonl").read_bytes().splitlines(True)
    out = tmp_path / "events.jsonl"
    proc = subprocess.Popen(
        CMD + ["normalize", "--buffered", "-o", str(out)],
        stdin=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    proc.stdin.write(b"".join(lines[:10]))
    proc.stdin.flush()
    expected = run(["normalize", "--no-metrics"], stdin=b"".join(lines[:10])).stdout
    time.sleep(1.0)  # read and normalized, held in the buffer
    proc.send_signal(sig)
    code = proc.wait(timeout=30)
    proc.stdin.close()
    assert code == (130 if sig == signal.SIGINT else 143)
    assert out.read_bytes() == expected and expected.count(b"\n") >= 5


@pytest.mark.parametrize("buffered", [True, False], ids=["buffered", "unbuffered"])
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_stopped_after_the_reader_went_away_exits_quietly(sig: int, buffered: bool):
    """`… | opencode-events normalize --buffered | head -1`, then Ctrl-C: what is left
    for stdout cannot be written, and that is no traceback and no exit code 120."""
    read_end, write_end = os.pipe()
    proc = subprocess.Popen(
        CMD + ["normalize", *(["--buffered"] if buffered else [])],
        stdin=subprocess.PIPE,
        stdout=write_end,
        stderr=subprocess.PIPE,
    )
    os.close(write_end)
    proc.stdin.write((ROOT / "samples" / "bash_ok" / "stream.jsonl").read_bytes())
    proc.stdin.flush()
    time.sleep(0.5)  # read and normalized: written (or held, --buffered)
    os.close(read_end)  # the reader is gone
    time.sleep(0.2)
    proc.send_signal(sig)
    code = proc.wait(timeout=30)
    err = proc.stderr.read()
    proc.stdin.close()
    assert code in ((130 if sig == signal.SIGINT else 143), 141), err
    assert err.strip() == b"", err


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_import_stopped_keeps_what_was_mapped(tmp_path: Path, sig: int):
    """`import` writes in large blocks; stopped, it writes the events mapped so far, each
    once, whole lines."""
    db = tmp_path / "opencode.db"
    shutil.copy(ROOT / "samples" / "task" / "opencode.db", db)
    out = tmp_path / "events.jsonl"
    code = (
        "import sys, os, signal, time\n"
        "import opencode_events.sources.transcript as p\n"
        "from opencode_events.cli.main import main\n"
        "real = p.map_session\n"
        "def slow(*args, **kwargs):\n"  # the first session mapped, then the user stops it
        "    yield from real(*args, **kwargs)\n"
        "    os.kill(os.getpid(), int(os.environ['STOP_WITH']))\n"
        "    time.sleep(5)\n"
        "p.map_session = slow\n"
        "main()\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code, "import", "--db", str(db), "--all", "-o", str(out)],
        env={**os.environ, "STOP_WITH": str(int(sig))},
        capture_output=True,
        timeout=60,
        cwd=ROOT,
    )
    assert proc.returncode == (130 if sig == signal.SIGINT else 143), proc.stderr
    events = [json.loads(line) for line in out.read_bytes().splitlines()]
    assert events and [e["seq"] for e in events] == list(range(len(events)))
    assert events[-1]["kind"] != "metrics"


def test_a_stream_indented_by_jq_is_mapped_as_it_comes():
    """`opencode run --format json | jq . | opencode-events normalize`: each record's
    events are written when the record is complete, not at the end of the input."""
    records = (ROOT / "samples" / "bash_ok" / "stream.jsonl").read_bytes().splitlines()
    indented = [json.dumps(json.loads(r), indent=2).encode() + b"\n" for r in records if r]
    proc = subprocess.Popen(
        CMD + ["normalize"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    try:
        first_events = run(["normalize", "--no-metrics"], stdin=b"".join(indented[:2])).stdout
        assert first_events.count(b"\n") >= 1
        proc.stdin.write(indented[0])
        proc.stdin.write(indented[1][:-40])  # the second record in part, then all of it
        proc.stdin.flush()
        time.sleep(0.3)
        proc.stdin.write(indented[1][-40:])
        proc.stdin.flush()
        got = b""
        deadline = time.monotonic() + 20
        while got.count(b"\n") < first_events.count(b"\n") and time.monotonic() < deadline:
            ready, _, _ = select.select([proc.stdout], [], [], 0.5)
            if ready:
                got += os.read(proc.stdout.fileno(), 65536)
        assert got == first_events  # before the input ended
        proc.stdin.write(b"".join(indented[2:]))
        proc.stdin.close()
        rest = proc.stdout.read()
    finally:
        if not proc.stdin.closed:
            proc.stdin.close()
        proc.wait(timeout=30)
    whole = run(["normalize"], stdin=b"".join(indented)).stdout
    assert got + rest == whole and proc.returncode == 0


@pytest.mark.parametrize(
    "args",
    [
        ["normalize", "{stream}"],
        ["usage", "{stream}"],
        ["import", "--db", "{db}", "--all"],
        ["sessions", "--db", "{db}"],
        ["usage", "--db", "{db}", "--all"],
        ["context", "--db", "{db}"],
    ],
    ids=["normalize", "usage-stream", "import", "sessions", "usage-store", "context"],
)
def test_stdout_appended_to_what_is_read_is_refused(tmp_path: Path, args: list[str]):
    """`opencode-events normalize run.jsonl >> run.jsonl` would read its own output without
    end (until the disk is full); `>> opencode.db` would change the database. Refused, and
    the file is left as it was."""
    stream, db = tmp_path / "run.jsonl", tmp_path / "opencode.db"
    shutil.copy(ROOT / "samples" / "bash_ok" / "stream.jsonl", stream)
    shutil.copy(ROOT / "samples" / "bash_ok" / "opencode.db", db)
    argv = [a.format(stream=stream, db=db) for a in args]
    target = stream if "{stream}" in args else db
    before = target.read_bytes()
    with open(target, "ab") as appended:
        proc = subprocess.run(CMD + argv, stdout=appended, stderr=subprocess.PIPE, timeout=60)
    assert proc.returncode == 2
    assert (
        proc.stderr
        == f"error: will not write to standard output: it is {target}, being read\n".encode()
    )
    assert target.read_bytes() == before


def test_stdout_redirected_to_stdin_is_refused(tmp_path: Path):
    stream = tmp_path / "run.jsonl"
    shutil.copy(ROOT / "samples" / "bash_ok" / "stream.jsonl", stream)
    with open(stream, "rb") as source, open(stream, "ab") as appended:
        proc = subprocess.run(
            CMD + ["normalize"], stdin=source, stdout=appended, stderr=subprocess.PIPE, timeout=60
        )
    assert proc.returncode == 2
    assert proc.stderr == b"error: will not write to standard output: it is standard input\n"


def test_a_database_among_the_inputs_is_refused_before_anything_is_written(tmp_path: Path):
    """The database is found before a line is written: the other inputs' events are not
    left half written, and an `-o` file is not emptied."""
    stream, db, keep = tmp_path / "run.jsonl", tmp_path / "x.db", tmp_path / "keep.jsonl"
    shutil.copy(ROOT / "samples" / "bash_ok" / "stream.jsonl", stream)
    shutil.copy(ROOT / "samples" / "bash_ok" / "opencode.db", db)
    keep.write_bytes(b"kept\n")
    for argv in (["normalize", str(db), "-o", str(keep)], ["normalize", str(stream), str(db)]):
        proc = subprocess.run(CMD + argv, capture_output=True, timeout=60)
        assert proc.returncode == 2 and proc.stdout == b""
        assert proc.stderr.startswith(f"error: {db} is an SQLite database".encode())
    assert keep.read_bytes() == b"kept\n"


def test_filtered_events_are_shown_by_the_pretty_view(tmp_path: Path):
    """`jq -c 'select(.kind == "command")' events.jsonl | opencode-events normalize --format
    pretty`: saved events read again, shown as when they were made; a line that is not an
    event is a warning, as in any input."""
    events = run(["normalize"], stdin=(ROOT / "samples" / "bash_ok" / "stream.jsonl").read_bytes())
    commands = [line for line in events.stdout.splitlines() if b'"kind":"command"' in line]
    assert commands
    filtered = b"\n".join([*commands, b"not an event"]) + b"\n"
    shown = run(["normalize", "--format", "pretty"], stdin=filtered)
    assert shown.returncode == 0
    text = shown.stdout.decode()
    assert "✓ bash" in text and "exit 0" in text and "? unknown" not in text
    again = jsonl(run(["normalize"], stdin=filtered).stdout)
    assert [e["kind"] for e in again] == ["command"] * len(commands) + ["warning", "metrics"]
    assert [e["seq"] for e in again] == list(range(len(again)))
    assert again[-1]["tool_calls"] == len(commands) and again[-1]["records"] == len(commands) + 1


def test_normalize_to_a_pipe_imports_no_database_binding():
    """Start-up: a stream never opens a database, so neither sqlite3 nor apsw is loaded
    (the store's row types live apart from the database code)."""
    code = (
        "import sys\n"
        "from opencode_events.cli.main import cli, run\n"
        "rc = run(cli, ['normalize'])\n"
        "loaded = [m for m in ('sqlite3', 'apsw', 'rich') if m in sys.modules]\n"
        "assert not loaded, loaded\n"
        "sys.exit(rc)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], input=SIMPLE, capture_output=True, timeout=60
    )
    assert result.returncode == 0, result.stderr.decode()


# ------------------------------------------------------------------ MCP servers on events

SAMPLES = Path(__file__).resolve().parents[1] / "samples"


def _served_from_the_log(db: Path) -> bytes:
    """The server's event stream of a captured session, made from its store's event log
    (OpenCode logs each durable bus event with the payload `GET /event` sends), closed by
    the idle the server sends when the run ends."""
    with sqlite3.connect(f"file:{db}?immutable=1", uri=True) as conn:
        (session,) = conn.execute("SELECT id FROM session").fetchone()
        rows = conn.execute("SELECT id, type, data FROM event ORDER BY rowid").fetchall()
    frames = []
    for event_id, kind, data in rows:
        kind = kind.rsplit(".", 1)[0]
        frames.append(f'data: {{"id":"{event_id}","type":"{kind}","properties":{data}}}')
    idle = {"type": "session.idle", "properties": {"sessionID": session}}
    frames.append("data: " + json.dumps(idle))
    return "".join(frame + "\n\n" for frame in frames).encode()


def _mcp_events(how: list[str] | str, tmp_path: Path, env: dict) -> list[dict]:
    """The events of samples/mcp's run as ``how`` writes them: ``run`` (a stand-in for
    opencode that writes the captured stream), ``attach`` (the session served),
    ``import --follow`` (the store followed), or the command line given."""
    if how == "run":
        fake = tmp_path / "opencode"
        fake.write_text(f"#!/bin/sh\ncat {SAMPLES / 'mcp' / 'stream.jsonl'}\n")
        fake.chmod(0o755)
        result = run(
            ["run", "--format", "jsonl", "go"], cwd=tmp_path, env={**env, "OPENCODE_BIN": str(fake)}
        )
    elif how == "attach":
        sse = _served_from_the_log(SAMPLES / "mcp" / "opencode.db")

        def serve(connection: socket.socket) -> None:
            head = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\r\n"
            with contextlib.suppress(OSError):
                connection.sendall(head + sse)
                connection.settimeout(20)
                connection.recv(1)  # the stream stays open until attach goes: the idle ends it

        with one_connection_server(serve) as port:
            result = run(["attach", f"http://127.0.0.1:{port}", "--format", "jsonl"], env=env)
    elif how == "import --follow":
        return _followed_mcp_events(tmp_path, env)
    else:
        result = run(list(how), cwd=tmp_path, env=env)
    assert result.returncode == 0, result.stderr
    return jsonl(result.stdout)


def _followed_mcp_events(tmp_path: Path, env: dict) -> list[dict]:
    """`import --follow --all` of samples/mcp's store, until its three MCP calls came."""
    db = SAMPLES / "mcp" / "opencode.db"
    follow = subprocess.Popen(
        [*CMD, "import", "--follow", "--all", "--forever", "--db", str(db)],
        stdout=subprocess.PIPE,
        env=env,
        cwd=tmp_path,
    )
    events: list[dict] = []
    try:
        assert follow.stdout is not None
        while len([e for e in events if e["kind"] == "unknown"]) < 3:
            ready, _, _ = select.select([follow.stdout], [], [], 30)
            assert ready, "no event within 30 s"
            events.append(json.loads(follow.stdout.readline()))
    finally:
        follow.terminate()
        follow.wait(timeout=30)
    return events


@pytest.mark.parametrize(
    "how",
    [
        ("normalize", str(SAMPLES / "mcp" / "stream.jsonl")),
        ("normalize", str(SAMPLES / "mcp" / "export.json")),
        ("import", "--all", "--db", str(SAMPLES / "mcp" / "opencode.db")),
        "run",
        "attach",
        "import --follow",
    ],
    ids=["stream", "export", "import", "run", "attach", "import --follow"],
)
def test_an_mcp_call_names_its_configured_server(how, tmp_path: Path):
    """samples/mcp: OpenCode names the calls `my-tools_v1_<tool>` for the server
    `my-tools.v1`; a shorter server name that also matches loses to the longest, a tool of
    no configured server names none, and without a config no call names a server. Every
    way in names it: from the stored session's directory (`import`), the server's
    messages' (`attach`, `import --follow`), the run's own for a stream that names none
    (`normalize`, `run`)."""
    config = tmp_path / "config" / "opencode"
    config.mkdir(parents=True)
    servers = {"my-tools.v1": {"type": "local"}, "my-tools": {"type": "local"}}
    (config / "opencode.json").write_text(json.dumps({"mcp": servers}))
    env = {
        **os.environ,
        "XDG_CONFIG_HOME": str(tmp_path / "config"),
        "XDG_DATA_HOME": str(tmp_path / "data"),
        "HOME": str(tmp_path),
    }
    env.pop("OPENCODE_CONFIG", None)
    env.pop("OPENCODE_DB", None)
    calls = [e for e in _mcp_events(how, tmp_path, env) if e["kind"] == "unknown"]
    assert [c["tool"] for c in calls] == [
        "my-tools_v1_echo",
        "my-tools_v1_reject",
        "my-tools_v1_broken",
    ]
    assert [c.get("mcp_server") for c in calls] == ["my-tools.v1"] * 3
    (config / "opencode.json").write_text(json.dumps({"mcp": {"other": {"type": "local"}}}))
    calls = [e for e in _mcp_events(how, tmp_path, env) if e["kind"] == "unknown"]
    assert len(calls) == 3 and not [c for c in calls if "mcp_server" in c]


@pytest.mark.parametrize(
    "argv",
    [["normalize"], ["sessions", "--no-cache", "--db", "samples/task/opencode.db"]],
    ids=["quick path", "through click"],
)
def test_every_command_runs_with_the_cycle_collector_set_seldom(argv: list[str]):
    """The console script sets the cycle collector for a command's work (``exits.
    collect_cycles_seldom``), on either path: what the command line imported frozen, the
    youngest generation collected after 50,000 new objects instead of 700."""
    from opencode_events.cli.exits import GC_YOUNGEST

    code = (
        "import atexit, gc, sys\n"
        "atexit.register(lambda: print(gc.get_threshold()[0], gc.get_freeze_count() > 0,"
        " file=sys.stderr))\n"
        f"sys.argv = ['opencode-events', *{argv!r}]\n"
        "from opencode_events.cli import main\n"
        "main()\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        input=b"",
        capture_output=True,
        cwd=Path(__file__).parent.parent,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr.decode().splitlines()[-1] == f"{GC_YOUNGEST} True"


def test_only_what_may_wait_on_a_reader_is_written_by_room(tmp_path: Path):
    """A pipe is written a page (or its free pages) at a time, with Ctrl-C held; a file and
    /dev/null never wait on a reader, and are written whole (the bench writes to /dev/null:
    a page at a time there cost 3-5 % of `normalize`)."""
    from opencode_events.cli.streams import WholeWrites

    read_end, write_end = os.pipe()
    null = os.open(os.devnull, os.O_WRONLY)
    plain = os.open(tmp_path / "out", os.O_WRONLY | os.O_CREAT)
    try:
        waits = {
            name: WholeWrites(fd, closefd=False)._waits
            for name, fd in (("pipe", write_end), ("null", null), ("file", plain))
        }
    finally:
        for fd in (read_end, write_end, null, plain):
            os.close(fd)
    assert waits == {"pipe": True, "null": False, "file": False}


def test_no_command_shows_the_help_as_lines():
    """The help goes through the line that escapes what stderr quotes of the data: it came
    out as one line of ``\\x0a``."""
    result = subprocess.run(CMD, capture_output=True, timeout=60)
    lines = result.stderr.decode().splitlines()
    assert lines[0].startswith("Usage: opencode-events") and len(lines) > 10
    assert "\\x0a" not in result.stderr.decode()
