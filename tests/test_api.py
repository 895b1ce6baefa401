"""The public Python API (docs/python-api.md): its names are pinned, and each function gives
what its command gives, checked against the goldens of the real captures in samples/."""

from __future__ import annotations

import asyncio
import gc
import io
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
import warnings
from datetime import UTC, date
from pathlib import Path

import msgspec
import pytest

import opencode_events
from scripts.update_goldens import GOLDEN, cases

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ROOT / "samples"
CLI = [sys.executable, "-m", "opencode_events"]

PROMISED = [
    "__version__",
    "iter_events",
    "aiter_events",
    "ServerEvents",
    "open_store",
    "stored_events",
    "sessions_report",
    "usage_report",
    "context_report",
    "SessionStore",
    "SessionsReport",
    "SessionSummary",
    "UsageReport",
    "UsageRow",
    "ContextReport",
    "Event",
    "ToolEvent",
    "AnyEvent",
    "Message",
    "Reasoning",
    "Prompt",
    "Read",
    "Write",
    "Search",
    "Command",
    "Orchestration",
    "Skill",
    "Usage",
    "Error",
    "Permission",
    "Question",
    "Compaction",
    "Attachment",
    "Subtask",
    "Mention",
    "Patch",
    "Retry",
    "Delta",
    "Warning",
    "Unknown",
    "Metrics",
    "schema",
    "OpencodeEventsError",
    "InputError",
    "OutputError",
    "GroupingError",
]


def encoded(events) -> bytes:
    encode = msgspec.json.Encoder().encode
    return b"".join(encode(event) + b"\n" for event in events)


def stream_cases() -> list[tuple[Path, Path]]:
    return [(source, golden) for source, golden, _ in cases() if source.name != "opencode.db"]


def store_cases() -> list[tuple[Path, Path]]:
    return [(source, golden) for source, golden, _ in cases() if source.name == "opencode.db"]


# ------------------------------------------------------------------ the promise


def test_the_public_names_are_pinned():
    assert opencode_events.__all__ == PROMISED
    assert sorted(dir(opencode_events)) == sorted(PROMISED)


@pytest.mark.parametrize("name", PROMISED)
def test_every_public_name_resolves(name: str):
    assert getattr(opencode_events, name) is not None


def test_an_unknown_name_is_an_attribute_error():
    with pytest.raises(AttributeError, match="no attribute 'normalizer'"):
        opencode_events.normalizer  # noqa: B018


def test_importing_the_package_imports_nothing_else():
    # `import opencode_events` must cost the command line's start-up nothing.
    code = (
        "import sys, opencode_events; "
        "print(sorted(m for m in sys.modules if m.startswith('opencode_events')))"
    )
    found = subprocess.run([sys.executable, "-c", code], capture_output=True, check=True)
    assert json.loads(found.stdout.decode().replace("'", '"')) == [
        "opencode_events",
        "opencode_events._version",
    ]


def test_the_error_hierarchy():
    assert issubclass(opencode_events.InputError, opencode_events.OpencodeEventsError)
    assert issubclass(opencode_events.OutputError, opencode_events.OpencodeEventsError)
    assert issubclass(opencode_events.OutputError, OSError)
    assert issubclass(opencode_events.GroupingError, ValueError)


# ------------------------------------------------------------------ iter_events


@pytest.mark.parametrize("source, golden", stream_cases(), ids=lambda v: getattr(v, "name", v))
def test_iter_events_gives_what_normalize_writes(source: Path, golden: Path):
    expected = golden.read_bytes()
    assert encoded(opencode_events.iter_events(source)) == expected  # a path
    assert encoded(opencode_events.iter_events(str(source))) == expected
    with open(source, "rb") as file:  # a binary file
        assert encoded(opencode_events.iter_events(file)) == expected
    lines = source.read_bytes().splitlines(keepends=True)  # an iterable of byte lines
    assert encoded(opencode_events.iter_events(iter(lines))) == expected


def test_iter_events_takes_lines_without_their_newlines():
    lines = (SAMPLES / "bash_ok" / "stream.jsonl").read_bytes().splitlines()
    assert encoded(opencode_events.iter_events(lines)) == (GOLDEN / "bash_ok.jsonl").read_bytes()


@pytest.mark.parametrize("how", ["dropped", "closed", "half read", "read"])
def test_iter_events_closes_the_file_it_opened(how: str):
    """A path's file is closed however its events end: read to the end, closed or dropped,
    started or not (a generator never started runs no ``finally``)."""
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always", ResourceWarning)
        events = opencode_events.iter_events(SAMPLES / "bash_ok" / "stream.jsonl")
        if how == "closed":
            events.close()
        elif how == "half read":
            next(events)
        elif how == "read":
            assert list(events)[-1].kind == "metrics"
        del events
        gc.collect()
    assert [str(w.message) for w in said if issubclass(w.category, ResourceWarning)] == []


def test_iter_events_options():
    source = SAMPLES / "bash_ok" / "stream.jsonl"
    events = list(opencode_events.iter_events(source, raw=True, metrics=False))
    assert events and all(e.kind != "metrics" for e in events)
    records = [json.loads(line) for line in source.read_bytes().splitlines() if line.strip()]
    assert json.loads(bytes(events[0].raw)) in records
    usage = [e for e in events if isinstance(e, opencode_events.Usage)]
    assert [u.kind for u in usage] == ["usage"] * len(usage) and usage


def test_iter_events_refuses_what_it_cannot_read(tmp_path: Path):
    with pytest.raises(opencode_events.InputError, match="cannot read"):
        opencode_events.iter_events(tmp_path / "missing.jsonl")  # the call, not the first event
    with pytest.raises(TypeError, match="bytes"):
        list(opencode_events.iter_events(["a text line, not bytes"]))
    for text in (open(SAMPLES / "bash_ok" / "stream.jsonl"), io.StringIO("{}\n")):  # noqa: SIM115
        with text, pytest.raises(TypeError, match=r"binary mode \('rb'\)"):
            opencode_events.iter_events(text)
    with pytest.raises(opencode_events.InputError, match="SQLite database"):
        list(opencode_events.iter_events(SAMPLES / "task" / "opencode.db"))


@pytest.mark.parametrize("buffered", [True, False])
def test_iter_events_follows_a_pipe_as_it_is_written(buffered: bool):
    """A reply at a time, each read as it comes, from Popen's default (buffered) stdout as
    from an unbuffered one: no event waits for the writer to end."""
    lines = (SAMPLES / "bash_ok" / "stream.jsonl").read_bytes().splitlines(keepends=True)
    read, write = os.pipe()
    reader = os.fdopen(read, "rb", buffering=-1 if buffered else 0)
    writer = os.fdopen(write, "wb", buffering=0)
    seen: list[tuple[str, int]] = []
    written = [0]

    def slowly() -> None:
        for line in lines:
            writer.write(line)
            written[0] += 1
            time.sleep(0.05)
        writer.close()

    feeder = threading.Thread(target=slowly)
    feeder.start()
    with reader:
        for event in opencode_events.iter_events(reader):
            seen.append((event.kind, written[0]))
    feeder.join()
    assert [kind for kind, _ in seen] == [
        json.loads(line)["kind"] for line in (GOLDEN / "bash_ok.jsonl").read_bytes().splitlines()
    ]
    assert seen[0][1] < len(lines)  # the first event came before the last line was written


def test_events_convert_to_dicts_and_decode_back_as_any_event():
    """``to_dict`` is the JSON line's object, ``raw`` too (``msgspec.to_builtins`` cannot
    turn a ``Raw`` into one), and every line decodes back into its own class."""
    for name in ("mcp", "code_mode", "serve_permission", "bash_ok"):
        source = next((SAMPLES / name).glob("*.jsonl"), None) or SAMPLES / name / "events.sse"
        for event in opencode_events.iter_events(source, raw=True):
            line = msgspec.json.encode(event)
            assert event.to_dict() == json.loads(line)
            back = msgspec.json.decode(line, type=opencode_events.AnyEvent)
            assert type(back) is type(event) and msgspec.json.encode(back) == line


def test_every_kind_of_event_has_its_public_class():
    import typing

    from opencode_events.events import ANY_EVENT

    for cls in typing.get_args(ANY_EVENT):
        assert getattr(opencode_events, cls.__name__) is cls
        assert cls.__name__ in opencode_events.__all__


def test_a_bad_line_is_a_warning_not_an_exception():
    events = list(opencode_events.iter_events([b"not json", b'{"type":"x","k":1}']))
    assert [e.kind for e in events] == ["warning", "unknown", "metrics"]


# ------------------------------------------------------------------ aiter_events


async def _pieces(data: bytes, size: int):
    for start in range(0, len(data), size):
        await asyncio.sleep(0)
        yield data[start : start + size]


async def _collect(source) -> list:
    return [event async for event in opencode_events.aiter_events(source)]


@pytest.mark.parametrize("source, golden", stream_cases(), ids=lambda v: getattr(v, "name", v))
@pytest.mark.parametrize("size", [7, 4096, 1 << 20])
def test_aiter_events_gives_what_normalize_writes_in_pieces_of_any_size(
    source: Path, golden: Path, size: int
):
    events = asyncio.run(_collect(_pieces(source.read_bytes(), size)))
    assert encoded(events) == golden.read_bytes()


@pytest.mark.parametrize("sample", ["file_tools", "big_output"])
def test_aiter_events_reads_a_subprocess_stdout(sample):
    """big_output's 84 KB line too: an asyncio.StreamReader (64 KiB a line) iterated line by
    line raised ValueError ("chunk is longer than limit"); it is read, not iterated."""
    source = SAMPLES / sample / "stream.jsonl"

    async def main() -> list:
        process = await asyncio.create_subprocess_exec(
            "cat", str(source), stdout=asyncio.subprocess.PIPE
        )
        found = await _collect(process.stdout)
        await process.wait()
        return found

    found = encoded(asyncio.run(main()))
    assert found == encoded(opencode_events.iter_events(source))
    if sample == "file_tools":
        assert found == (GOLDEN / "file_tools.jsonl").read_bytes()


@pytest.mark.parametrize(
    ("call", "error", "said"),
    [
        (lambda s: opencode_events.usage_report(store=s, since=10**30), ValueError, "range"),
        (lambda s: opencode_events.usage_report(store=s, until=1e300), ValueError, "range"),
        (lambda s: opencode_events.sessions_report(s, since=-(10**19)), ValueError, "range"),
        (lambda s: opencode_events.usage_report(store=s, until=date.max), ValueError, "range"),
        (lambda s: opencode_events.iter_events("a\0b"), opencode_events.InputError, "NUL"),
        (lambda s: opencode_events.ServerEvents(session=5), TypeError, "session id"),
        (lambda s: opencode_events.ServerEvents(session=["x"]), TypeError, "session id"),
    ],
)
def test_an_argument_out_of_range_or_of_the_wrong_kind_is_the_documented_error(call, error, said):
    """A time past SQLite's integers raised OverflowError from the query; a NUL in a path
    ValueError; a session id of another type a TypeError later, from ``feed``."""
    with (
        opencode_events.open_store(SAMPLES / "task" / "opencode.db") as store,
        pytest.raises(error, match=said),
    ):
        found = call(store)
        list(found) if hasattr(found, "__next__") else found


def test_a_private_copy_goes_with_a_store_never_closed(tmp_path, monkeypatch):
    """A database with a -wal and no -shm is read from a copy in a folder of its own; a
    store dropped without close() left it (a copy as large as the database) in /tmp."""
    import shutil

    monkeypatch.setenv("TMPDIR", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", None)  # TMPDIR read again
    data = tmp_path / "data"
    data.mkdir()
    shutil.copyfile(SAMPLES / "task" / "opencode.db", data / "opencode.db")
    (data / "opencode.db-wal").write_bytes(b"")
    store = opencode_events.open_store(data / "opencode.db")
    assert opencode_events.sessions_report(store).sessions
    assert list((tmp_path / "tmp").iterdir())  # the copy
    del store
    gc.collect()
    assert not list((tmp_path / "tmp").iterdir())


def test_a_deleted_databases_descriptor_is_not_kept_open(tmp_path):
    """``cache=True`` keeps a few descriptors of the databases it read (closing one would
    drop SQLite's locks on that file); one of a file deleted since held its disk space
    until the process ended."""
    import shutil

    def open_deleted() -> list[str]:
        fds = Path("/proc/self/fd")
        return [os.readlink(fd) for fd in fds.iterdir() if "(deleted)" in _link(fd)]

    for round_ in range(5):
        data = tmp_path / f"data{round_}"
        data.mkdir()
        shutil.copyfile(SAMPLES / "task" / "opencode.db", data / "opencode.db")
        with opencode_events.open_store(data / "opencode.db") as store:
            opencode_events.sessions_report(store, cache=True)
        shutil.rmtree(data)
    assert len([link for link in open_deleted() if str(tmp_path) in link]) <= 1


def _link(fd: Path) -> str:
    try:
        return os.readlink(fd)
    except OSError:
        return ""


# ------------------------------------------------------------------ ServerEvents

SERVED = sorted(SAMPLES.glob("*/events.sse"))


def _payloads(sse: Path) -> list[tuple[int, str]]:
    """(line of the frame's data, its JSON text) of a captured stream with one-line frames."""
    return [
        (number, line[5:].strip())
        for number, line in enumerate(sse.read_text().splitlines(), 1)
        if line.startswith("data:")
    ]


def _without_lines(events) -> list[dict]:
    found = [msgspec.json.decode(msgspec.json.encode(event)) for event in events]
    for event in found:
        event.pop("line", None)
    return found


@pytest.mark.parametrize("sse", SERVED, ids=lambda p: p.parent.name)
@pytest.mark.parametrize("shape", ["dict", "bytes", "text", "sdk-object"])
def test_server_events_fed_payloads_give_what_normalize_gives(sse: Path, shape: str):
    class SdkEvent:  # an SDK's event: its payload in `raw` (seed 003)
        def __init__(self, raw):
            self.raw, self.type = raw, raw.get("type")

    expected = list(opencode_events.iter_events(sse))
    events = opencode_events.ServerEvents()
    found = []
    shapes = {
        "dict": json.loads,
        "bytes": str.encode,
        "text": str,
        "sdk-object": lambda text: SdkEvent(json.loads(text)),
    }
    for _, text in _payloads(sse):
        found += events.feed(shapes[shape](text))
    found += events.finish()
    found.append(events.metrics())
    assert _without_lines(found) == _without_lines(expected)
    # a payload's number stands for its line
    numbered = [e.line for e in found[:-1] if e.line is not None]
    assert numbered == sorted(numbered) and all(n >= 1 for n in numbered)


def test_server_events_say_when_the_run_is_idle():
    sse = SAMPLES / "serve_text" / "events.sse"
    events = opencode_events.ServerEvents()
    seen_idle_at = None
    payloads = _payloads(sse)
    for index, (_, text) in enumerate(payloads):
        events.feed(text)
        if events.idle:
            seen_idle_at = index
            break
    assert seen_idle_at is not None
    assert json.loads(payloads[seen_idle_at][1])["type"] in ("session.idle", "session.status")
    assert events.session and events.session.startswith("ses_")


def test_server_events_read_a_pydantic_model_by_its_wire_names(recwarn):
    """The official SDK (opencode-ai) hands over pydantic models whose aliased fields have
    Python names (``session_id`` for ``sessionID``): ``model_dump()`` as called bare gives
    those names, fields never sent as None, and serializer warnings on stderr."""

    def python_names(value):
        if isinstance(value, dict):
            return {
                re.sub(r"ID$", "_id", key).lower() if key.endswith("ID") else key: (
                    python_names(item)
                )
                for key, item in value.items()
            }
        return [python_names(item) for item in value] if isinstance(value, list) else value

    class Model:  # pydantic v2's model_dump, as the SDK's event models have it
        def __init__(self, payload):
            self._payload = payload

        def model_dump(self, *, mode="python", by_alias=False, exclude_unset=False, warnings=True):
            if warnings:
                import warnings as w

                w.warn("Pydantic serializer warnings: …", UserWarning, stacklevel=2)
            return self._payload if by_alias else python_names(self._payload)

    sse = SAMPLES / "serve_text" / "events.sse"
    expected = list(opencode_events.iter_events(sse))
    events = opencode_events.ServerEvents()
    found = []
    for _, text in _payloads(sse):
        found += events.feed(Model(json.loads(text)))
    found += events.finish()
    found.append(events.metrics())
    assert _without_lines(found) == _without_lines(expected)
    assert not [w for w in recwarn if issubclass(w.category, UserWarning)]


def test_server_events_refuse_what_is_no_payload():
    with pytest.raises(TypeError, match="not a server event payload"):
        opencode_events.ServerEvents().feed(object())


# ------------------------------------------------------------------ the store


@pytest.mark.parametrize("db, golden", store_cases(), ids=lambda v: getattr(v, "parent", v).name)
def test_stored_events_give_what_import_writes(db: Path, golden: Path):
    with opencode_events.open_store(db) as store:
        events = opencode_events.stored_events(store, all_sessions=True)
        assert encoded(events) == golden.read_bytes()


def test_a_store_with_the_protocols_methods_alone_is_read():
    """``SessionStore`` is a promise: a store of another program offering its methods alone
    (none of the optional ones: pending undos, forks, parts without times) is read."""

    class Minimal:
        def __init__(self, inner):
            self.inner, self.path = inner, inner.path

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return None

        def close(self):
            return None

        def __getattr__(self, name):
            if name in ("reverted_sessions", "forked_sessions", "sessions_with_untimed_parts"):
                raise AttributeError(name)
            if name not in {n for n in dir(opencode_events.SessionStore) if not n.startswith("_")}:
                raise AttributeError(name)
            return getattr(self.inner, name)

    with opencode_events.open_store(SAMPLES / "task" / "opencode.db") as store:
        whole = encoded(opencode_events.stored_events(store, all_sessions=True))
        assert encoded(opencode_events.stored_events(Minimal(store), all_sessions=True)) == whole
        # 3.12 looks a protocol's names up on the class: a forwarding wrapper is no instance
        # there, but the functions take it as 3.11's isinstance did (hasattr).
        forwarded = isinstance(Minimal(store), opencode_events.SessionStore)
        assert forwarded == (sys.version_info < (3, 12))
    assert not isinstance(object(), opencode_events.SessionStore)
    with pytest.raises(TypeError, match="stored_events reads a store"):
        opencode_events.stored_events(object(), all_sessions=True)


@pytest.mark.parametrize(
    "where", ["task/opencode.db", "legacy_mixed/storage", "legacy_mixed"], ids=str
)
def test_every_store_is_a_session_store(where: str):
    """A database, the legacy files, and a data folder holding both (read as one store)."""
    with opencode_events.open_store(SAMPLES / where) as store:
        assert isinstance(store, opencode_events.SessionStore)


def _cli_json(*args: str) -> object:
    result = subprocess.run([*CLI, *args], capture_output=True, check=True)
    return json.loads(result.stdout)


STORED = ["task", "parallel_tools", "fork", "mcp", "compaction"]


@pytest.mark.parametrize("scenario", STORED)
def test_the_reports_are_the_commands_reports(scenario: str):
    db = str(SAMPLES / scenario / "opencode.db")
    with opencode_events.open_store(db) as store:
        sessions = opencode_events.sessions_report(store).document()
        assert sessions == _cli_json("sessions", "--db", db, "--format", "json")
        for by in ("turn", "step", "model", "day"):
            usage = opencode_events.usage_report(store=store, all_sessions=True, by=by, tz=None)
            assert usage.document() == _cli_json(
                "usage", "--db", db, "--all", "--by", by, "--format", "json"
            ), by
        context = opencode_events.context_report(store).document()
        assert context == _cli_json("context", "--db", db, "--format", "json")


def test_the_cached_reports_close_every_file_they_read(tmp_path: Path, monkeypatch):
    """``cache=True``: the same reports, first made and then read from the cache, and no file
    of the cache left open for the garbage collector (a ResourceWarning each, in a harness
    that runs for hours)."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    db = SAMPLES / "task" / "opencode.db"
    with opencode_events.open_store(db) as store:
        wanted = {
            by: opencode_events.usage_report(store=store, all_sessions=True, by=by)
            for by in ("turn", "step", "session", "day")
        }
        sessions = opencode_events.sessions_report(store, all_sessions=True).document()
        context = opencode_events.context_report(store).document()
        with warnings.catch_warnings(record=True) as said:
            warnings.simplefilter("always", ResourceWarning)
            for _ in range(3):  # made, then read from the memos
                for by, report in wanted.items():
                    again = opencode_events.usage_report(
                        store=store, all_sessions=True, by=by, cache=True
                    )
                    assert again.document() == report.document(), by
                assert (
                    sessions
                    == opencode_events.sessions_report(
                        store, all_sessions=True, cache=True
                    ).document()
                )
                assert context == opencode_events.context_report(store, cache=True).document()
            gc.collect()
    assert list((tmp_path / "cache").rglob("memo-*")), "nothing was kept"
    assert [str(w.message) for w in said if issubclass(w.category, ResourceWarning)] == []


def test_a_store_copied_to_roll_its_journal_back_is_shared_with_workers(
    tmp_path: Path, monkeypatch
):
    """A database in rollback mode with a transaction under way is read from a private copy
    that SQLite rolls back: the forked workers of a whole-table report open that copy again,
    read-only (apsw's flags refuse a URI asking for ``mode=rw``)."""
    import sqlite3

    from opencode_events.reports import sessions as summary_module

    source, db = tmp_path / "source.db", tmp_path / "opencode.db"
    shutil.copyfile(SAMPLES / "task" / "opencode.db", source)
    writer = sqlite3.connect(source, isolation_level=None)
    writer.execute("PRAGMA journal_mode=delete")
    writer.execute("PRAGMA cache_size=1")  # uncommitted pages spill into the file
    writer.execute("BEGIN EXCLUSIVE")
    writer.execute("UPDATE part SET data = ?", ('{"type":"text","text":"UNCOMMITTED"}',))
    shutil.copyfile(source, db)  # the file and its journal as a writer cut off left them
    shutil.copyfile(f"{source}-journal", f"{db}-journal")
    writer.execute("ROLLBACK")
    writer.close()
    with opencode_events.open_store(SAMPLES / "task" / "opencode.db") as store:
        expected = opencode_events.sessions_report(store, all_sessions=True).document()
    monkeypatch.setenv("OPENCODE_EVENTS_WORKERS", "2")
    monkeypatch.setattr(summary_module, "WHOLE_TABLE_SESSIONS", 1)
    monkeypatch.setattr(summary_module, "_PARALLEL_MIN_PARTS", 0)
    with opencode_events.open_store(db) as store:
        scan = summary_module._start_scan(store)
        assert scan is not None  # the workers do run
        scan.cancel()  # and are reaped: no test after this one finds them
        found = opencode_events.sessions_report(store, all_sessions=True).document()
    for row in found + expected:
        row.pop("path")  # where each database is
    assert found == expected and found[0]["tool_calls"] > 0


def test_usage_of_a_stream_and_its_groupings():
    source = SAMPLES / "bash_ok" / "stream.jsonl"
    report = opencode_events.usage_report(source)
    assert report.document() == _cli_json("usage", str(source), "--format", "json")
    with pytest.raises(opencode_events.GroupingError, match="grouping by project needs the store"):
        opencode_events.usage_report(source, by="project")  # in the library's words, not --by
    with pytest.raises(TypeError):
        opencode_events.usage_report()
    for stored_only in (
        {"since": "2h"},
        {"since": 0},  # the epoch is a time too
        {"until": 0},
        {"all_sessions": True},
        {"sessions": "ses_x"},
        {"sessions": ""},
        {"cache": True},
    ):
        with pytest.raises(TypeError, match="of a source takes no"):
            opencode_events.usage_report(source, **stored_only)


def test_times_and_zones_as_python_gives_them():
    """A zone by its name, a ``date`` as a day (``since`` from its start, ``until`` through
    its end), as the strings the command line takes give them."""
    db = SAMPLES / "task" / "opencode.db"
    with opencode_events.open_store(db) as store:
        by_name = opencode_events.usage_report(store=store, all_sessions=True, by="day", tz="UTC")
        by_zone = opencode_events.usage_report(store=store, all_sessions=True, by="day", tz=UTC)
        assert by_name.document() == by_zone.document()
        day = date(2026, 11, 29)
        as_dates = opencode_events.usage_report(
            store=store, all_sessions=True, by="day", tz="UTC", since=day, until=day
        )
        as_text = opencode_events.usage_report(
            store=store,
            all_sessions=True,
            by="day",
            tz="UTC",
            since="2026-11-29",
            until="2026-11-29",
        )
        assert as_dates.document() == as_text.document() and as_dates.rows
        with pytest.raises(ValueError, match="unknown time zone"):
            opencode_events.usage_report(store=store, tz="Mars/Olympus")
        with pytest.raises(TypeError, match="a time is"):
            opencode_events.usage_report(store=store, since=[2026])


def test_stored_events_select_as_import_does():
    db = SAMPLES / "task" / "opencode.db"
    with opencode_events.open_store(db) as store:
        parent = opencode_events.sessions_report(store).sessions[0].id
        alone = list(opencode_events.stored_events(store, parent[:14], metrics=False))
        both = list(opencode_events.stored_events(store, [parent], children=True, metrics=False))
    assert {e.session_id for e in alone} == {parent}
    assert len({e.session_id for e in both}) == 2
    with (
        pytest.raises(opencode_events.InputError, match="no session"),
        opencode_events.open_store(db) as store,
    ):
        list(opencode_events.stored_events(store, "ses_nothing_like_it"))
    with opencode_events.open_store(db) as store:  # as the command line refuses --all with them
        for chosen in ({"since": "2h"}, {"sessions": parent}):
            with pytest.raises(ValueError, match="all_sessions reads every session"):
                opencode_events.stored_events(store, all_sessions=True, **chosen)
        with pytest.raises(ValueError, match="all_sessions reads every session"):
            opencode_events.usage_report(store=store, all_sessions=True, sessions=parent)
        with pytest.raises(opencode_events.InputError, match="empty session id"):
            opencode_events.context_report(store, "")


def test_arguments_that_are_no_such_thing_are_said_so():
    """A value of the wrong kind is a ``TypeError`` (an impossible one a ``ValueError``)
    naming what to give, from the call, not an error from deep inside."""
    db = SAMPLES / "task" / "opencode.db"
    stream = SAMPLES / "bash_ok" / "stream.jsonl"
    for call in (
        lambda: opencode_events.stored_events(str(db)),
        lambda: opencode_events.sessions_report(db),
        lambda: opencode_events.usage_report(store=str(db)),
        lambda: opencode_events.context_report(None),
    ):
        with pytest.raises(TypeError, match=r"reads a store: give it what open_store\(path\)"):
            call()
    with pytest.raises(TypeError, match="iterable of byte lines, not None"):
        opencode_events.iter_events(None)
    with opencode_events.open_store(db) as store:
        for sessions in (None, 123, [b"ses_x"]):
            with pytest.raises(TypeError, match="sessions are a str or a sequence of str"):
                opencode_events.stored_events(store, sessions)
            with pytest.raises(TypeError, match="sessions are a str or a sequence of str"):
                opencode_events.usage_report(store=store, sessions=sessions)
        with pytest.raises(TypeError, match="a session is a str"):
            opencode_events.context_report(store, 5)
        with pytest.raises(TypeError, match="limit is an int"):
            opencode_events.sessions_report(store, limit="3")
        for limit in (0, -1):
            with pytest.raises(ValueError, match="limit is 1 or more"):
                opencode_events.sessions_report(store, limit=limit)
        with pytest.raises(TypeError, match="tz is a tzinfo or a zone's name"):
            opencode_events.usage_report(store=store, all_sessions=True, by="day", tz=5)
        for when in (float("nan"), float("inf")):
            with pytest.raises(ValueError, match="a finite number"):
                opencode_events.usage_report(store=store, since=when)

    async def first(source):
        async for event in opencode_events.aiter_events(source):
            return event

    async def pieces_of_text():
        yield '{"type":"text"}\n'

    with open(stream, "rb") as binary:  # a file's read is no coroutine
        for source in (str(stream), stream, binary, 42):
            with pytest.raises(TypeError, match="a path or a file: iter_events"):
                opencode_events.aiter_events(source)  # from the call, as iter_events
    with pytest.raises(TypeError, match="aiter_events reads bytes, not str"):
        asyncio.run(first(pieces_of_text()))


def test_open_store_refuses_what_is_no_store(tmp_path: Path):
    with pytest.raises(opencode_events.InputError):
        opencode_events.open_store(SAMPLES / "README.md")
    with pytest.raises(opencode_events.InputError, match="path is empty"):
        opencode_events.open_store("")  # os.environ.get("MY_DB", ""): not the user's own store


# ------------------------------------------------------------------ the docs


def _doc_blocks() -> list[str]:
    text = (ROOT / "docs" / "python-api.md").read_text()
    return re.findall(r"```python\n(.*?)```", text, re.S)


@pytest.mark.parametrize("index", range(len(_doc_blocks())))
def test_docs_examples_run(index: int, monkeypatch, capsys):
    monkeypatch.chdir(ROOT)
    exec(compile(_doc_blocks()[index], f"docs/python-api.md block {index}", "exec"), {})
    assert capsys.readouterr().out  # every example shows something


def test_every_promised_name_is_documented():
    text = (ROOT / "docs" / "python-api.md").read_text()
    assert [n for n in PROMISED if f"`{n}" not in text] == []


# ------------------------------------------------------------------ installed from a wheel


def test_the_api_works_from_an_installed_wheel(tmp_path: Path):
    """`pip install .` installs every package of the tree (a missed subpackage would only
    show here), and the docs' first example runs from it. Built from a copy of what the
    build reads: a `pip wheel` of the checkout itself leaves `build/` there, whose modules
    (deleted ones too) go into every later wheel built from it."""
    tree = tmp_path / "tree"
    shutil.copytree(
        ROOT / "opencode_events",
        tree / "opencode_events",
        ignore=shutil.ignore_patterns("__pycache__"),
    )
    for name in ("pyproject.toml", "README.md", "LICENSE", "MANIFEST.in"):
        shutil.copy2(ROOT / name, tree / name)
    wheels = tmp_path / "wheels"
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(wheels), str(tree)],
        check=True,
        capture_output=True,
    )
    (wheel,) = wheels.glob("opencode_events-*.whl")
    target = tmp_path / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-deps", "-q", "-t", str(target), wheel],
        check=True,
        capture_output=True,
    )
    code = (
        f"import sys; sys.path.insert(0, {str(target)!r}); import opencode_events; "
        f"assert opencode_events.__file__.startswith({str(target)!r}), opencode_events.__file__; "
        f"print(sum(1 for e in opencode_events.iter_events({str(SAMPLES / 'task/stream.jsonl')!r})"
        " if e.kind == 'usage'))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, cwd=tmp_path)
    assert result.returncode == 0, result.stderr.decode()
    assert int(result.stdout) > 0


def test_every_kind_is_a_literal_a_type_checker_narrows_on():
    """``iter_events`` and the others give ``AnyEvent``, the union of every kind; each
    class tells a type checker its ``kind`` as a literal (a stub under TYPE_CHECKING), so
    ``if event.kind == "command": event.command`` checks under mypy, as the docs write it.
    A kind added without its stub would be the one a checker cannot tell apart."""
    import ast
    import typing

    from opencode_events import events

    tree = ast.parse(Path(events.__file__).read_text())
    stubs = {}
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            for inner in node.body:
                if isinstance(inner, ast.If) and ast.unparse(inner.test) == "TYPE_CHECKING":
                    (kind,) = [f for f in inner.body if isinstance(f, ast.FunctionDef)]
                    stubs[node.name] = ast.literal_eval(kind.returns.slice)
    union = {cls.__name__: cls.__struct_config__.tag for cls in typing.get_args(events.AnyEvent)}
    assert stubs == union


@pytest.mark.parametrize("call", ["sessions_report", "usage_report", "context_report"])
@pytest.mark.parametrize("store", [42, object(), {}, []])
def test_what_is_no_store_is_a_type_error(call, store):
    with pytest.raises(TypeError, match="give it what open_store"):
        if call == "usage_report":
            opencode_events.usage_report(store=store, all_sessions=True)
        else:
            getattr(opencode_events, call)(store)
    with pytest.raises(TypeError, match="give it what open_store"):
        list(opencode_events.stored_events(store, all_sessions=True))


def test_lines_without_their_newlines_keep_the_blank_lines_server_events_need():
    """``requests``' ``iter_lines()`` drops every newline: a blank line ends a server
    event, and was dropped too, gluing the stream into one unreadable record."""
    text = (SAMPLES / "serve_text" / "events.sse").read_bytes()
    whole = [e.kind for e in opencode_events.iter_events(SAMPLES / "serve_text" / "events.sse")]
    assert "warning" not in whole and len(whole) > 3
    assert [e.kind for e in opencode_events.iter_events(text.splitlines())] == whole
    assert [e.kind for e in opencode_events.iter_events(text.splitlines(keepends=True))] == whole
