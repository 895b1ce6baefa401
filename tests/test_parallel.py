"""store.ranges.share_ranges: small ranges taken from one queue by forked children and this
process alike; results in range order, a child's exception raised here, a child that died
redone here, children no longer wanted stopped and reaped."""

from __future__ import annotations

import os
import signal
import threading
import time
from typing import Any

import pytest

from opencode_events.errors import InputError
from opencode_events.store.ranges import SHARES, in_forked_child, share_ranges, share_slices
from tests.processes import children_of_this_process

pytestmark = pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="one core: no workers")


class _Table:
    uri = "file:unused"

    def __init__(self, rows: int) -> None:
        self.rows = rows

    def rowid_ranges(self, table: str, parts: int) -> list[tuple[int, int]]:
        step = self.rows // parts + 1
        return [(start, min(start + step, self.rows)) for start in range(0, self.rows, step)]


# ---------------------------------------------------------------- share_ranges


def _taken_by(uri: str, low: int, high: int, pause: float) -> tuple[int, int, int]:
    time.sleep(pause)  # long enough that every process gets some ranges
    return os.getpid(), low, high


def _shared_ranges(table: _Table) -> list[tuple[int, int]]:
    workers = min(os.cpu_count() or 1, 4)
    return table.rowid_ranges("message", min(workers * SHARES, 255))


def test_shared_ranges_come_back_in_range_order_from_every_process():
    table = _Table(1000)
    pending = share_ranges(table, "message", 10, _taken_by, 0.02)
    assert pending is not None
    results = pending()
    assert [(low, high) for _, low, high in results] == _shared_ranges(table)
    pids = {pid for pid, _, _ in results}
    assert os.getpid() in pids and len(pids) >= 2  # this process and a child took ranges


def test_a_table_too_small_to_share_is_left_to_the_caller():
    assert share_ranges(_Table(5), "message", 10, _taken_by, 0) is None


def test_a_sharing_childs_error_is_raised_here_and_the_children_reaped():
    before = children_of_this_process()
    with pytest.raises(InputError, match="cannot read rows"):
        share_ranges(_Table(1000), "message", 0, _slow_fails_in_a_child, os.getpid())()
    assert children_of_this_process() == before


def _slow_fails_in_a_child(uri: str, low: int, high: int, parent: int) -> int:
    time.sleep(0.02)
    if os.getpid() != parent:
        raise InputError(f"cannot read rows {low}–{high}")
    return low


def _slow_dies_in_a_child(uri: str, low: int, high: int, parent: int) -> tuple[int, int]:
    time.sleep(0.02)
    if os.getpid() != parent:
        os._exit(3)  # this range's result never written
    return low, high


def test_a_range_whose_child_died_is_redone_here():
    table = _Table(1000)
    results = share_ranges(table, "message", 0, _slow_dies_in_a_child, os.getpid())()
    assert results == _shared_ranges(table)


def _fails_here(uri: str, low: int, high: int, parent: int) -> int:
    time.sleep(0.01)
    if os.getpid() == parent:
        raise KeyboardInterrupt
    return low


def test_an_interrupt_here_stops_and_reaps_the_sharing_children():
    before = children_of_this_process()
    with pytest.raises(KeyboardInterrupt):
        share_ranges(_Table(1000), "message", 0, _fails_here, os.getpid())()
    assert children_of_this_process() == before


def test_children_take_ranges_before_the_results_are_asked_for():
    """The children start at once: while the caller does something else they take ranges,
    and this process takes the rest when it asks (in range order all the same)."""
    table = _Table(1000)
    pending = share_ranges(table, "message", 0, _taken_by, 0.01)
    assert pending is not None
    time.sleep(0.3)  # the caller's own work
    results = pending()
    assert [(low, high) for _, low, high in results] == _shared_ranges(table)
    mine = [low for pid, low, _ in results if pid == os.getpid()]
    assert len(mine) < len(results) // 2  # the children had a head start


def test_without_here_every_range_is_taken_by_a_child():
    table = _Table(1000)
    pending = share_ranges(table, "message", 0, _taken_by, 0.005, here=False)
    assert pending is not None
    results = pending()
    assert [(low, high) for _, low, high in results] == _shared_ranges(table)
    assert all(pid != os.getpid() for pid, _, _ in results)


def test_sharing_no_longer_wanted_is_cancelled_and_its_children_reaped():
    before = children_of_this_process()
    pending = share_ranges(_Table(1000), "message", 0, _taken_by, 0.05)
    assert pending is not None
    pending.cancel()
    assert children_of_this_process() == before
    with pytest.raises(RuntimeError, match="cancelled"):
        pending()


_LOADED: list[int] = []  # the ranges whose result this process has unpickled, in order


class _Counted:
    """A result that says when it is unpickled (in the process that reads it)."""

    def __init__(self, low: int) -> None:
        self.low = low

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        _LOADED.append(self.low)


def _counted(uri: str, low: int, high: int) -> _Counted:
    return _Counted(low)


def test_each_reads_one_childs_result_at_a_time_and_stops_the_children():
    """``each`` unpickles a result only when it is next, so a caller folding them as they
    come holds one range's, not all; once it ends, no child is left."""
    before = children_of_this_process()
    table = _Table(1000)
    pending = share_ranges(table, "message", 0, _counted, here=False)
    assert pending is not None
    _LOADED.clear()
    lows = []
    for result in pending.each():
        assert [*lows, result.low] == _LOADED  # this one read, none after it
        lows.append(result.low)
    assert lows == [low for low, _ in _shared_ranges(table)]
    assert children_of_this_process() == before
    with pytest.raises(RuntimeError, match="collected"):
        pending.each()


def test_each_left_half_way_stops_the_children():
    before = children_of_this_process()
    pending = share_ranges(_Table(1000), "message", 0, _counted, here=False)
    assert pending is not None
    results = pending.each()
    next(results)
    results.close()
    assert children_of_this_process() == before


def _last_waits_for(uri: str, low: int, high: int, flag: str, last: int) -> int:
    """A range's low bound; the last range, read by a child, is held until ``flag`` exists
    (at most 20 s; this process, which hands results out, never waits)."""
    if low == last and in_forked_child():
        deadline = time.monotonic() + 20
        while not os.path.exists(flag) and time.monotonic() < deadline:
            time.sleep(0.005)
    return low


@pytest.mark.parametrize("here", [True, False])
def test_each_hands_out_a_result_while_later_ranges_are_still_read(tmp_path, here: bool):
    """A range's result comes out of ``each`` as soon as it and those before it are in,
    not once every range is: the caller folds them while the children still read (the
    last range here waits for a file the caller makes on its first result)."""
    table = _Table(1000)
    last = _shared_ranges(table)[-1][0]
    flag = tmp_path / "first-result-seen"
    pending = share_ranges(table, "message", 0, _last_waits_for, str(flag), last, here=here)
    assert pending is not None
    started = time.monotonic()
    lows = []
    for low in pending.each():
        if not lows:
            flag.touch()
        lows.append(low)
    assert lows == [low for low, _ in _shared_ranges(table)]
    assert time.monotonic() - started < 10  # the last range did not wait out its 20 s


# ---------------------------------------------------------------- share_slices


def _slice_taken_by(uri: str, low: int, high: int, items: list[int]) -> tuple[int, list[int]]:
    time.sleep(0.01)  # long enough that every process gets some slices
    return os.getpid(), items[low:high]


@pytest.mark.parametrize("count", [2, 7, 255, 1000])
def test_slices_of_a_list_are_read_once_each_in_order(monkeypatch, count) -> None:
    """``share_slices``: the caller's list cut into at most 255 slices, taken by forked
    children and this process alike, each item in exactly one slice, the results in
    order."""
    monkeypatch.setenv("OPENCODE_EVENTS_WORKERS", "2")
    before = children_of_this_process()
    items = list(range(count))
    pending = share_slices(_Table(0), count, _slice_taken_by, items)
    assert pending is not None
    results = pending()
    assert [item for _pid, part in results for item in part] == items
    assert len(results) == min(count, 255) and all(part for _pid, part in results)
    if count >= 255:
        assert len({pid for pid, _part in results}) == 2  # a child took some
    assert children_of_this_process() == before  # every child reaped


def test_no_slices_for_one_worker_or_one_item(monkeypatch) -> None:
    monkeypatch.setenv("OPENCODE_EVENTS_WORKERS", "1")
    assert share_slices(_Table(0), 100, _slice_taken_by, list(range(100))) is None
    monkeypatch.setenv("OPENCODE_EVENTS_WORKERS", "2")
    assert share_slices(_Table(0), 1, _slice_taken_by, [0]) is None


def test_a_worker_s_input_error_of_any_kind_is_an_input_error_in_the_parent() -> None:
    """The store's damaged-text error is an InputError of its own: a worker's once came back
    as RuntimeError("a worker failed: …"), a traceback and exit 1 instead of one line."""
    from opencode_events.workers import failure_report, raise_failure

    class DamagedText(InputError):
        pass

    with pytest.raises(InputError, match="^cannot read x$") as raised:
        raise_failure(failure_report(DamagedText("cannot read x")))
    assert type(raised.value) is InputError


# ------------------------------------------------------------------ a host's process


def _signals_seen(uri: str, low: int, high: int, pause: float) -> tuple[int, Any, Any]:
    time.sleep(pause)
    return os.getpid(), signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGUSR1)


def test_a_child_runs_none_of_the_hosts_signal_handlers():
    """A harness's SIGTERM hook (a container stop signals the whole group) ran in every
    forked worker too: a child takes the default action for such signals."""
    mine = lambda *_: None  # noqa: E731 - a host's handler
    before = signal.signal(signal.SIGTERM, mine), signal.signal(signal.SIGUSR1, mine)
    try:
        results = share_ranges(_Table(1000), "message", 0, _signals_seen, 0.02)()
    finally:
        signal.signal(signal.SIGTERM, before[0])
        signal.signal(signal.SIGUSR1, before[1])
    children = [(term, usr1) for pid, term, usr1 in results if pid != os.getpid()]
    assert children and set(children) == {(signal.SIG_DFL, signal.SIG_DFL)}
    assert {(t, u) for pid, t, u in results if pid == os.getpid()} == {(mine, mine)}


def test_a_host_that_ignores_sigchld_still_gets_its_results():
    """SIGCHLD ignored: the kernel reaps the children itself, and waitpid raised
    ChildProcessError out of the report."""
    before = signal.signal(signal.SIGCHLD, signal.SIG_IGN)
    try:
        table = _Table(1000)
        results = share_ranges(table, "message", 0, _taken_by, 0.02)()
    finally:
        signal.signal(signal.SIGCHLD, before)
    assert [(low, high) for _, low, high in results] == _shared_ranges(table)


def test_beside_another_thread_the_work_stays_in_this_process(monkeypatch):
    """A fork copies only the calling thread: a lock another thread held (SQLite's, the
    allocator's) stays held in the child, which waits forever, and so does the host. With
    threads running, no workers unless OPENCODE_EVENTS_WORKERS asks for them."""
    from opencode_events.workers import worker_count

    monkeypatch.delenv("OPENCODE_EVENTS_WORKERS", raising=False)
    done = threading.Event()
    other = threading.Thread(target=done.wait)
    other.start()
    try:
        assert worker_count() == 1
        assert share_ranges(_Table(1000), "message", 0, _taken_by, 0) is None
        monkeypatch.setenv("OPENCODE_EVENTS_WORKERS", "2")
        assert worker_count() == 2  # asked for: the host's to judge
    finally:
        done.set()
        other.join()
    monkeypatch.delenv("OPENCODE_EVENTS_WORKERS")
    _alone_again()
    assert worker_count() == min(os.cpu_count() or 1, 4)


def _alone_again() -> None:
    """Until this process has one thread again: a thread joined, or done with its last
    line, still ends in the kernel a moment later (``/proc/self/task``, as workers count)."""
    deadline = time.monotonic() + 10
    while len(os.listdir("/proc/self/task")) > 1 and time.monotonic() < deadline:
        time.sleep(0.01)


def test_beside_a_thread_python_does_not_know_the_work_stays_in_this_process(monkeypatch):
    """A C library's threads (DuckDB's pool, a driver's) are not in ``threading``'s count,
    and a fork beside them is as unsafe: stands in here a thread started below ``threading``
    (Python 3.12+ warns of such forks too)."""
    import _thread

    from opencode_events.workers import worker_count

    monkeypatch.delenv("OPENCODE_EVENTS_WORKERS", raising=False)
    started, release, ended = threading.Event(), threading.Event(), threading.Event()

    def hidden() -> None:
        started.set()
        release.wait()
        ended.set()

    count = threading.active_count()
    _thread.start_new_thread(hidden, ())
    started.wait()
    try:
        assert threading.active_count() == count  # unknown to threading
        assert worker_count() == 1
        assert share_ranges(_Table(1000), "message", 0, _taken_by, 0) is None
    finally:
        release.set()
        ended.wait()
    _alone_again()
    assert worker_count() == min(os.cpu_count() or 1, 4)


def _seen_by_child(uri: str, low: int, high: int, pause: float, number: int) -> tuple[int, Any]:
    time.sleep(pause)
    return os.getpid(), signal.getsignal(number)


@pytest.mark.parametrize("name", ["SIGHUP", "SIGINT"])
def test_a_signal_the_host_ignores_stays_ignored_in_its_workers(name):
    """``nohup``: a closed terminal's SIGHUP reached the workers, reset to the default
    action, and ended them (the command failed, ``a normalize worker stopped``); ``cmd &`` in
    a script runs with SIGINT ignored, and a Ctrl-C to the group ended its workers."""
    number = getattr(signal, name)
    before = signal.signal(number, signal.SIG_IGN)
    try:
        results = share_ranges(_Table(1000), "message", 0, _seen_by_child, 0.02, number)()
    finally:
        signal.signal(number, before)
    children = {seen for pid, seen in results if pid != os.getpid()}
    assert children == {signal.SIG_IGN}
