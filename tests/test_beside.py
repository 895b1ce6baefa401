"""reports.beside.made_beside: the items of a report made by this process and a forked
helper come out in the rows' order, the same as made here alone; a helper that cannot
start, fails, dies or sends what does not decode leaves its rounds to this process; a
report closed early stops and reaps it; small reports and one-process settings fork none."""

from __future__ import annotations

import errno
import inspect
import os
import signal
import sys
from collections.abc import Iterator
from pathlib import Path

import msgspec
import pytest

from opencode_events.reports import beside
from opencode_events.reports.beside import made_beside
from opencode_events.reports.cache import ReportCache
from opencode_events.reports.sessions import _kept_counts, each_summary
from opencode_events.store.sqlite import Store
from tests.processes import children_of_this_process
from tests.stores import SAMPLES, merged_captures

pytestmark = pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="one core: no helper")

_ENCODE = msgspec.msgpack.Encoder().encode
_DECODE = msgspec.msgpack.Decoder(list[tuple[int, str]]).decode


@pytest.fixture(autouse=True)
def _any_size_pays(monkeypatch) -> None:
    monkeypatch.setattr(beside, "MIN_JOBS", 0)
    monkeypatch.delenv("OPENCODE_EVENTS_WORKERS", raising=False)


def _here(row: int) -> tuple[int, str]:
    return row * 2, "here"


def _there() -> tuple:
    return (lambda row: (row * 2, "there")), (lambda: None)


def _made(rows: int, there=_there, decode=_DECODE, **kwargs) -> list[tuple[int, str]]:
    return list(made_beside(range(rows), _here, there, _ENCODE, decode, jobs=rows, **kwargs))


@pytest.mark.parametrize("rows", [0, 1, 3, 4, 8, 9, 31, 200])
def test_the_items_come_in_the_rows_order_most_made_by_the_helper(rows: int) -> None:
    made = _made(rows, here=1, helped=3)
    assert [value for value, _where in made] == [row * 2 for row in range(rows)]
    # Rounds of one row here, then three there: the row's place says who made it.
    assert [where for _value, where in made] == [
        "here" if row % 4 == 0 else "there" for row in range(rows)
    ]


def test_rounds_of_the_default_size():
    made = _made(5000)
    assert [value for value, _where in made] == [row * 2 for row in range(5000)]
    rounds, rest = divmod(5000, beside.HERE + beside.THERE)
    there = rounds * beside.THERE + max(0, rest - beside.HERE)
    assert sum(where == "there" for _value, where in made) == there


def _failing_start() -> tuple:
    raise OSError("no connection of its own")


def _dying_at(row_number: int):
    def there() -> tuple:
        def make(row: int) -> tuple[int, str]:
            if row == row_number:
                os._exit(3)
            return row * 2, "there"

        return make, (lambda: None)

    return there


def _unencodable_at(row_number: int):
    def there() -> tuple:
        return (lambda row: (row * 2, object() if row == row_number else "there")), (lambda: None)

    return there


def _decoded_wrong(data: bytes) -> list[tuple[int, str]]:
    return _DECODE(data)[:-1]  # one item short


@pytest.mark.parametrize(
    ("there", "decode", "helped_rows"),
    [
        (_failing_start, _DECODE, 0),  # the helper's own opening fails: nothing made there
        (_dying_at(10), _DECODE, 6),  # dies in its third round: its first two count
        (_unencodable_at(10), _DECODE, 6),  # an item it cannot send back
        (_there, _decoded_wrong, 0),  # what comes back is not the round: made here
    ],
)
def test_a_helper_that_fails_leaves_its_rounds_to_this_process(
    there, decode, helped_rows: int
) -> None:
    before = children_of_this_process()
    made = _made(40, there=there, decode=decode, here=1, helped=3)
    assert [value for value, _where in made] == [row * 2 for row in range(40)]
    assert sum(where == "there" for _value, where in made) == helped_rows
    assert children_of_this_process() == before  # stopped and reaped


def test_what_the_helper_learns_comes_back_with_each_round():
    learned: list[object] = []

    def there() -> tuple:
        seen: list[int] = []

        def make(row: int) -> tuple[int, str]:
            seen.append(row)
            return row * 2, "there"

        def side() -> object:
            rows = list(seen)
            seen.clear()
            return rows

        return make, side

    _made(8, there=there, merge=learned.append, here=1, helped=3)
    assert learned == [[1, 2, 3], [5, 6, 7]]


def test_a_report_closed_early_stops_and_reaps_the_helper():
    before = children_of_this_process()
    items: Iterator = made_beside(range(1000), _here, _there, _ENCODE, _DECODE, jobs=1000)
    assert next(items) == (0, "here")
    assert children_of_this_process() - before  # the helper is at work
    items.close()  # type: ignore[attr-defined]
    assert children_of_this_process() == before


def _open_files() -> int:
    return len(os.listdir("/proc/self/fd"))


def _ctrl_c_at(code: object, line: int) -> object:
    """A tracer that sends this process a real SIGINT (a Ctrl-C) when ``code`` reaches
    ``line``, once, in this process only."""
    me = os.getpid()

    def tracer(frame, event, arg):  # noqa: ARG001 - sys.settrace's signature
        if frame.f_code is not code or os.getpid() != me:
            return None

        def local(frame, event, arg):  # noqa: ARG001
            if event == "line" and frame.f_lineno == line and os.getpid() == me:
                sys.settrace(None)
                os.kill(me, signal.SIGINT)
            return local

        return local

    return tracer


def _lines_of(function: object, start: str, count: int) -> list[int]:
    """The ``count`` source lines of ``function`` from the one holding ``start``."""
    source, first = inspect.getsourcelines(function)  # type: ignore[arg-type]
    at = next(i for i, text in enumerate(source) if start in text)
    return [first + at + offset for offset in range(count)]


@pytest.mark.parametrize("line", _lines_of(made_beside, "_Helper.start(", 12))
def test_a_ctrl_c_as_the_helper_starts_leaves_no_helper_and_no_file(line: int) -> None:
    """A Ctrl-C at any line from the helper's start to its first rounds: the report
    stops, and the helper and the files between the two processes go with it."""
    children, files = children_of_this_process(), _open_files()
    items = made_beside(range(3000), _here, _there, _ENCODE, _DECODE, jobs=3000)
    sys.settrace(_ctrl_c_at(made_beside.__code__, line))
    try:
        list(items)
    except KeyboardInterrupt:
        pass
    finally:
        sys.settrace(None)
        items.close()  # type: ignore[attr-defined]
    assert children_of_this_process() == children
    assert _open_files() == files


def test_a_second_ctrl_c_while_the_helper_is_stopped_still_reaps_it() -> None:
    """The first Ctrl-C stops the report; a second one, while the helper is being
    reaped, waits till it is: no process left unreaped, no file left open."""
    children, files = children_of_this_process(), _open_files()
    items: Iterator = made_beside(range(5000), _here, _there, _ENCODE, _DECODE, jobs=5000)
    next(items)
    (line,) = _lines_of(beside._Helper.stop, "os.waitpid(", 1)
    sys.settrace(_ctrl_c_at(beside._Helper.stop.__code__, line))
    try:
        items.close()  # type: ignore[attr-defined]
    except KeyboardInterrupt:
        pass  # raised once the helper is reaped
    finally:
        sys.settrace(None)
    assert children_of_this_process() == children
    assert _open_files() == files


def test_a_fork_refused_with_a_ctrl_c_waiting_closes_every_file(monkeypatch) -> None:
    """No process to fork (EAGAIN) while a Ctrl-C waits, held: the files are closed
    before the Ctrl-C is let through."""
    files = _open_files()

    def refused() -> int:
        os.kill(os.getpid(), signal.SIGINT)  # waits: SIGINT is held while forking
        raise OSError(errno.EAGAIN, "Resource temporarily unavailable")

    monkeypatch.setattr(os, "fork", refused)
    with pytest.raises(KeyboardInterrupt):
        _made(10)
    assert _open_files() == files


def test_a_fork_that_fails_otherwise_is_raised_with_ctrl_c_let_through_again(monkeypatch):
    """A fork that fails with another error than the system's (Python refusing to fork
    at shutdown, say) is raised; Ctrl-C works again and no file stays open."""
    files = _open_files()

    def refused() -> int:
        raise RuntimeError("can't fork at interpreter shutdown")

    monkeypatch.setattr(os, "fork", refused)
    with pytest.raises(RuntimeError, match="can't fork"):
        _made(10)
    assert signal.SIGINT not in signal.pthread_sigmask(signal.SIG_BLOCK, set())
    assert _open_files() == files


@pytest.mark.parametrize("setting", ["small", "one process"])
def test_no_helper_where_it_does_not_pay_or_is_not_wanted(setting: str, monkeypatch) -> None:
    if setting == "small":
        monkeypatch.setattr(beside, "MIN_JOBS", 10**6)
    else:
        monkeypatch.setenv("OPENCODE_EVENTS_WORKERS", "1")
    made = _made(40, here=1, helped=3)
    assert made == [(row * 2, "here") for row in range(40)]


# ---------------------------------------------------------------- sessions


def test_every_session_summarized_beside_is_summarized_as_here(tmp_path: Path, monkeypatch):
    """``each_summary`` with a helper making every summary (a few rows a round, so that
    the captures' sessions span several rounds, and those in flight are judged there)
    gives the summaries made in one process, field by field, consults the same MCP
    settings (the memo's checks) and keeps the same ledger (the last writes the helper
    read are this process's to keep)."""
    db = merged_captures(tmp_path / "opencode.db", ("continue3", "task", "text", "sigint"))
    made, ledgers, consulted = {}, {}, {}
    received = []
    receive = beside._Helper.receive

    def counted(helper, decode):
        got = receive(helper, decode)
        received.append(got is not None and len(got[0]))
        return got

    monkeypatch.setattr(beside._Helper, "receive", counted)
    for way in ("alone", "beside"):
        with monkeypatch.context() as setting:
            if way == "alone":
                setting.setenv("OPENCODE_EVENTS_WORKERS", "1")
            else:
                setting.setattr(beside, "HERE", 0)  # every summary made there
                setting.setattr(beside, "THERE", 2)
            with Store(db) as store, ReportCache.open(store, root=tmp_path / way) as cache:
                assert cache is not None
                servers: dict = {}
                summaries = each_summary(
                    store,
                    all_sessions=True,
                    now_ms=2e12,
                    cache=cache,
                    mcp_servers=lambda directory: (f"mcp of {directory}",),
                    servers=servers,
                )
                made[way] = msgspec.to_builtins(list(summaries))
            consulted[way] = servers
            with Store(db) as store, ReportCache.open(store, root=tmp_path / way) as cache:
                ledgers[way] = msgspec.to_builtins(_kept_counts(cache))
    assert len(made["alone"]) == 5 and received == [2, 2, 1]
    assert any(s["state"] == "stale" for s in made["alone"])  # a killed run, long ago
    assert made["beside"] == made["alone"]
    assert consulted["alone"] and consulted["beside"] == consulted["alone"]  # the memo's checks
    assert any(entry[5] for entry in ledgers["alone"].values())  # a last write kept
    assert ledgers["beside"] == ledgers["alone"]


def test_mcp_settings_read_otherwise_by_the_helper_keep_no_memo(tmp_path: Path, monkeypatch):
    """A directory's MCP settings edited while the report is made: the helper's summaries
    and this process's were made with different settings, so the memo's check of that
    directory must never be met (no setting names a server None), whichever read first."""
    db = merged_captures(tmp_path / "opencode.db", ("continue3", "task", "text", "sigint"))
    here = os.getpid()

    def edited(directory: str | None) -> tuple[str, ...]:  # read before and after an edit
        return ("before",) if os.getpid() == here else ("after",)

    session_row = Store.session_row

    def in_one_directory(self, cells, shared=None):  # the top-level sessions: read after the fork
        row = session_row(self, cells, shared)
        return row if row.parent_id else row._replace(directory="/same")

    monkeypatch.setattr(Store, "session_row", in_one_directory)
    monkeypatch.setattr(beside, "HERE", 1)
    monkeypatch.setattr(beside, "THERE", 2)
    servers: dict = {}
    with Store(db) as store:
        list(each_summary(store, all_sessions=True, mcp_servers=edited, servers=servers))
    assert servers["/same"] == (None,)
    monkeypatch.setattr(beside, "MIN_JOBS", 10**6)  # one process: one reading, kept
    servers = {}
    with Store(db) as store:
        list(each_summary(store, all_sessions=True, mcp_servers=edited, servers=servers))
    assert servers["/same"] == ("before",)


def test_an_older_schemas_sessions_summarized_beside_are_summarized_as_here(monkeypatch):
    """A database of the first schema keeps no totals on its sessions: the helper makes
    their rows with the totals summed from the messages (``Store.session_row``), as here."""
    older = SAMPLES / "legacy_mixed" / "older" / "opencode.db"
    made = {}
    for way in ("alone", "beside"):
        with monkeypatch.context() as setting:
            if way == "alone":
                setting.setenv("OPENCODE_EVENTS_WORKERS", "1")
            setting.setattr(beside, "HERE", 0)  # beside: every summary made there
            setting.setattr(beside, "THERE", 1)
            with Store(older) as store:
                assert store.totals_from_messages
                made[way] = msgspec.to_builtins(list(each_summary(store, all_sessions=True)))
    assert made["beside"] == made["alone"]
    assert any(summary["cost"] for summary in made["alone"])  # summed from the messages


def test_an_older_schemas_totals_are_summed_once_before_the_helper_starts(
    tmp_path: Path, monkeypatch
) -> None:
    """The helper shares the totals this process summed from the messages (its rows are
    made with the same ones), rather than summing them again from a later snapshot."""
    older = SAMPLES / "legacy_mixed" / "older" / "opencode.db"
    readers = tmp_path / "readers"
    summed = Store._message_totals

    def noted(store: Store) -> object:
        if store._totals is None:  # read now, not shared
            with readers.open("a") as file:
                file.write(f"{os.getpid()}\n")
        return summed(store)

    monkeypatch.setattr(Store, "_message_totals", noted)
    monkeypatch.setattr(beside, "HERE", 0)
    monkeypatch.setattr(beside, "THERE", 1)
    with Store(older) as store:
        list(each_summary(store, all_sessions=True))
    assert readers.read_text().split() == [str(os.getpid())]
