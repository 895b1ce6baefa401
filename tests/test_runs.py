"""``reports.runs``: rows put in order through sorted runs set aside in a file, as one
stable sort of them all would put them, whatever the runs, their sizes and the rows; and
rows spooled to such a file, given back as they came."""

from __future__ import annotations

import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from opencode_events.errors import InputError
from opencode_events.reports import runs as runs_module
from opencode_events.reports.runs import RowSpool, SortedRuns
from opencode_events.reports.usage import UsageRow


def _order(row: UsageRow) -> tuple[int, str]:
    return (row.started or 0, row.message_id or "")


ROWS = st.builds(
    UsageRow,
    # few values: many ties; a damaged row's true now and then (encoded, never read back)
    started=st.none() | st.integers(0, 5) | st.just(True),
    message_id=st.none() | st.sampled_from(["a", "b", "msg_1"]),
    # a lone surrogate now and then (never encoded), or a blob id (never read back)
    session_id=st.text(max_size=3) | st.binary(max_size=3),
    input_tokens=st.integers(-(2**70), 2**70),  # beyond 64 bits now and then: the same
    cost=st.floats(allow_nan=False),
)


def _runs_of(rows: list[UsageRow], cuts: list[int]) -> list[list[UsageRow]]:
    """``rows`` cut where ``cuts`` say, each run sorted stably."""
    runs, start = [], 0
    for cut in sorted({c % (len(rows) + 1) for c in cuts}) + [len(rows)]:
        runs.append(sorted(rows[start:cut], key=_order))
        start = cut
    return runs


@settings(max_examples=200, deadline=None)
@given(
    st.lists(ROWS, max_size=40),
    st.lists(st.integers(0, 40), max_size=12),
    st.integers(2, 4),
    st.integers(1, 3),
    st.lists(ROWS, max_size=5),
)
def test_merged_runs_are_one_stable_sort(rows, cuts, fan_in, group, last) -> None:
    """Any rows, cut into runs of any sizes (each in order), set aside a few at a time and
    merged a few runs at a time, come back as one stable sort of them all (the last rows
    given at the merge after every run's), each as it was."""
    for i, row in enumerate([*rows, *last]):
        row.tool_calls = i  # which row is which, to tell ties apart
    old = runs_module.FAN_IN, runs_module.GROUP
    runs_module.FAN_IN, runs_module.GROUP = fan_in, group
    try:
        runs = SortedRuns(UsageRow, _order)
        for run in _runs_of(rows, cuts):
            runs.add(run)
        last = sorted(last, key=_order)
        merged = list(runs.merged(last))
        runs.close()
    finally:
        runs_module.FAN_IN, runs_module.GROUP = old
    assert merged == sorted([*rows, *last], key=_order)
    assert [r.tool_calls for r in merged] == [
        r.tool_calls for r in sorted([*rows, *last], key=_order)
    ]


def test_runs_go_to_a_file_of_no_name_and_come_back_a_group_at_a_time(tmp_path) -> None:
    """The runs are written to a file in the folder given, with no name (nothing is left
    behind), and merged a group of each run at a time: never all held."""
    rows = [UsageRow(started=i % 97, message_id=f"m{i}") for i in range(6400)]
    runs = SortedRuns(UsageRow, _order, str(tmp_path / "runs"))
    for start in range(0, 6400, 200):
        runs.add(sorted(rows[start : start + 200], key=_order))
    assert list((tmp_path / "runs").iterdir()) == []  # made, and its name gone
    assert len(runs) == 2  # thirty-two runs: each sixteen merged into one as they came
    merged = runs.merged()
    first = next(merged)
    assert first == UsageRow(started=0, message_id="m0")
    assert [first, *merged] == sorted(rows, key=_order)
    runs.close()


def test_a_run_that_cannot_be_written_is_held(monkeypatch) -> None:
    """A full disk (or no file at all): the runs are held in memory, the rows the same."""
    rows = [UsageRow(started=i % 7, message_id=f"m{i}") for i in range(100)]

    def full(*_args):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "pwrite", full)
    monkeypatch.setattr(runs_module, "FAN_IN", 2)
    runs = SortedRuns(UsageRow, _order)
    for start in range(0, 100, 10):
        runs.add(sorted(rows[start : start + 10], key=_order))
    assert list(runs.merged()) == sorted(rows, key=_order)
    runs.close()


@pytest.mark.parametrize("count", [0, 1])
def test_no_run_or_one(count) -> None:
    runs = SortedRuns(UsageRow, _order)
    rows = [UsageRow(started=2), UsageRow(started=1)][:count]
    runs.add(rows)
    assert list(runs.merged([UsageRow(started=3)])) == [*rows, UsageRow(started=3)]
    runs.close()


@settings(max_examples=100, deadline=None)
@given(st.lists(ROWS, max_size=40), st.integers(1, 5), st.integers(1, 3))
def test_a_spool_gives_its_rows_back_in_the_order_given(rows, spooled, group) -> None:
    """Any rows, set aside a few at a time (some cannot be: a lone surrogate, a blob id;
    those are held in their place), come back as they were, in the order given, as often
    as they are read."""
    for i, row in enumerate(rows):
        row.tool_calls = i
    old = runs_module.SPOOLED, runs_module.GROUP
    runs_module.SPOOLED, runs_module.GROUP = spooled, group
    try:
        spool = RowSpool(UsageRow)
        for row in rows:
            spool.add(row)
        first, again = list(spool), list(spool)
        spool.close()
    finally:
        runs_module.SPOOLED, runs_module.GROUP = old
    assert first == again == rows


def test_a_spool_is_a_file_of_no_name_or_held_when_none_can_be_written(
    tmp_path, monkeypatch
) -> None:
    rows = [UsageRow(started=i, message_id=f"m{i}") for i in range(5000)]
    spool = RowSpool(UsageRow, str(tmp_path / "spool"))
    for row in rows:
        spool.add(row)
    assert list((tmp_path / "spool").iterdir()) == []  # made, and its name gone
    assert spool._waiting == rows[-(5000 % runs_module.SPOOLED) :]  # the rest set aside
    assert list(spool) == rows
    spool.close()

    def full(*_args):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "pwrite", full)
    spool = RowSpool(UsageRow)
    for row in rows:
        spool.add(row)
    assert list(spool) == rows
    spool.close()


def test_a_spool_changed_under_it_is_an_input_error(monkeypatch) -> None:
    spool = RowSpool(UsageRow)
    for i in range(runs_module.SPOOLED):
        spool.add(UsageRow(started=i))
    os.ftruncate(spool._file._file.fileno(), 10)
    with pytest.raises(InputError, match="could not be read back"):
        list(spool)
    spool.close()


@settings(max_examples=100, deadline=None)
@given(
    st.lists(ROWS, max_size=40),
    st.lists(st.integers(0, 40), max_size=6),
    st.lists(st.integers(0, 40), max_size=12),
    st.integers(2, 4),
)
def test_runs_set_aside_by_fresh_copies_and_adopted_in_order_merge_as_one(
    rows, ranges, cuts, fan_in
) -> None:
    """Rows cut into ranges, each range's runs set aside by a ``fresh`` copy in the shared
    file (as a worker does) and ``adopt``ed in range order (merged as they come), come
    back as one stable sort of them all, as if every run had been added to one."""
    for i, row in enumerate(rows):
        row.tool_calls = i
    old = runs_module.FAN_IN, runs_module.GROUP
    runs_module.FAN_IN, runs_module.GROUP = fan_in, 2
    try:
        runs, one = SortedRuns(UsageRow, _order), SortedRuns(UsageRow, _order)
        runs.share()
        start = 0
        for end in sorted({r % (len(rows) + 1) for r in ranges}) + [len(rows)]:
            worker = runs.fresh()
            for run in _runs_of(rows[start:end], cuts):
                worker.add(run)
                one.add(run)
            handed = worker.handed_over()
            assert {size for _held, _run, size in handed} <= {0}  # a copy merges none
            runs.adopt(handed)
            assert worker.handed_over() == []
            worker.close()  # a copy's close leaves the file to the runs it came from
            start = end
        assert len(runs) == len(one)  # merged as they came, as if added here
        merged = list(runs.merged())
        runs.close()
        one.close()
    finally:
        runs_module.FAN_IN, runs_module.GROUP = old
    assert [r.tool_calls for r in merged] == [r.tool_calls for r in sorted(rows, key=_order)]
    assert merged == sorted(rows, key=_order)


def test_runs_set_aside_in_a_forked_child_are_adopted(tmp_path) -> None:
    """A child forked after ``share`` writes its runs to the same file of no name (each
    group at its end, under a lock, while this process writes too); what it hands over
    reads back here."""
    import pickle

    rows = [UsageRow(started=(i * 7919) % 1000, message_id=f"m{i}") for i in range(3000)]
    runs = SortedRuns(UsageRow, _order, str(tmp_path / "runs"))
    runs.share()
    reader, writer = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: its half of the rows, then what it set aside
        code = 1
        try:
            os.close(reader)
            child = runs.fresh()
            for start in range(1500, 3000, 100):
                child.add(sorted(rows[start : start + 100], key=_order))
            with os.fdopen(writer, "wb") as out:
                pickle.dump(child.handed_over(), out)
            code = 0
        finally:
            os._exit(code)
    os.close(writer)
    here = runs.fresh()
    for start in range(0, 1500, 100):  # written while the child writes
        here.add(sorted(rows[start : start + 100], key=_order))
    with os.fdopen(reader, "rb") as got:
        theirs = pickle.load(got)
    assert os.waitpid(pid, 0)[1] == 0
    runs.adopt(here.handed_over())
    runs.adopt(theirs)
    assert list(runs.merged()) == sorted(rows, key=_order)
    assert list((tmp_path / "runs").iterdir()) == []
    runs.close()


def test_runs_that_cannot_be_locked_are_not_shared(monkeypatch) -> None:
    """A folder whose file system takes no lock (NFS without its lock daemon): ``share``
    says so at once, and the runs are written as one process writes them."""
    import fcntl

    def no_lock(*_args):
        raise OSError(37, "No locks available")

    runs = SortedRuns(UsageRow, _order)
    monkeypatch.setattr(fcntl, "lockf", no_lock)
    with pytest.raises(OSError):
        runs.share()
    rows = [UsageRow(started=i % 5, message_id=f"m{i}") for i in range(600)]
    for start in range(0, 600, 100):
        runs.add(sorted(rows[start : start + 100], key=_order))
    assert not any(runs._held)  # written, not held
    assert list(runs.merged()) == sorted(rows, key=_order)
    runs.close()


def test_a_copy_hands_over_its_runs_unmerged_and_the_report_merges_them_as_added(
    monkeypatch,
) -> None:
    """Ranges of many runs each: a worker's copy merges none (its runs are all of the
    first size), so the report merges them as they come exactly as if each had been added
    to it, and the runs left at the end stay few."""
    monkeypatch.setattr(runs_module, "FAN_IN", 4)
    rows = [UsageRow(started=(i * 31) % 97, message_id=f"m{i}") for i in range(2000)]
    runs, one = SortedRuns(UsageRow, _order), SortedRuns(UsageRow, _order)
    runs.share()
    for start in range(0, 2000, 500):  # four ranges of ten runs
        copy = runs.fresh()
        for at in range(start, start + 500, 50):
            copy.add(sorted(rows[at : at + 50], key=_order))
            one.add(sorted(rows[at : at + 50], key=_order))
        handed = copy.handed_over()
        assert [size for _held, _run, size in handed] == [0] * 10
        runs.adopt(handed)
    assert len(runs) == len(one) == 4  # forty runs: four merged into one as they came
    assert list(runs.merged()) == list(one.merged()) == sorted(rows, key=_order)
    runs.close()
    one.close()
