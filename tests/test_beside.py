"""reports.beside.made_beside: the items of a report made by this process and a forked
helper come out in the rows' order, the same as made here alone; a helper that cannot
start, fails, dies or sends what does not decode leaves its rounds to this process; a
report closed early stops and reaps it; small reports and one-process settings fork none."""

from __future__ import annotations

import os
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
