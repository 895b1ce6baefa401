"""The click-free `normalize` path (cli.quick): it reads a command line as click would, or
leaves it to click; what it runs is what click runs; and it never imports click."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from opencode_events.cli.events import normalize as click_normalize
from opencode_events.cli.quick import (
    NormalizeRequest,
    SessionsRequest,
    StatuslineRequest,
    UsageRequest,
    limit_of,
    normalize_request,
    sessions_request,
    statusline_request,
    usage_request,
)

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ROOT / "samples"
SAMPLE = ROOT / "samples" / "bash_ok" / "stream.jsonl"


def clicks_request(argv: list[str]) -> NormalizeRequest | None:
    """What click's `normalize` reads from ``argv`` (after the command name), as a request;
    None when click refuses it (a usage error, --help)."""
    try:
        ctx = click_normalize.make_context("normalize", list(argv), resilient_parsing=False)
    except BaseException:  # click.UsageError, click.exceptions.Exit (--help)
        return None
    params = ctx.params
    try:
        limit = limit_of(params["max_line"]) if params["max_line"] is not None else None
    except ValueError:
        return None
    return NormalizeRequest(
        inputs=params["inputs"],
        output=params["output"],
        buffered=params["buffered"],
        keep_raw=params["keep_raw"],
        no_metrics=params["no_metrics"],
        strict=params["strict"],
        fmt=params["fmt"],
        deltas=params["deltas"],
        max_line=limit,
        tags=params["tags"],
        full=params["full"],
    )


CASES = [
    # (argv after `normalize`, read here: True, or left to click: False)
    ([], True),
    (["-"], True),
    (["a.jsonl", "b.jsonl"], True),
    (["--raw", "a.jsonl", "--strict"], True),  # options after inputs, as click allows
    (["-o", "out.jsonl", "a.jsonl"], True),
    (["--output=out.jsonl"], True),
    (["-o", "-"], True),
    (["--format", "pretty", "--full"], True),
    (["--format=jsonl", "--buffered", "--no-metrics", "--deltas"], True),
    (["--max-line", "4K"], True),
    (["--max-line=1048576"], True),
    (["--tag", "host=ci", "--tag=job=a=b", "--tag", " k =v"], True),
    (["--", "--raw"], True),  # after --, an input named --raw
    (["--help"], False),
    (["-h"], False),
    (["--version"], False),
    (["--format", "yaml"], False),  # click.Choice refuses it
    (["--format", "JSONL"], False),
    (["--max-line", "lots"], False),
    (["--max-line", ""], False),
    (["--tag", "novalue"], False),
    (["--tag", "=v"], False),
    (["--raw", "--raw"], False),  # twice: click's to read
    (["-o", "a", "-o", "b"], False),
    (["-o"], False),
    (["-o", "--raw"], False),  # click would take --raw as the file name
    (["-oout.jsonl"], False),
    (["--raw=1"], False),
    (["--unknown"], False),
    (["-x"], False),
    ([""], False),
]


@pytest.mark.parametrize(("argv", "read_here"), CASES, ids=lambda v: repr(v))
def test_a_command_line_is_read_as_click_reads_it_or_left_to_click(argv, read_here):
    request = normalize_request(["normalize", *argv])
    assert (request is not None) == read_here
    if request is not None:
        assert request == clicks_request(argv)


def test_other_commands_are_clicks():
    for argv in ([], ["import", "--all"], ["--version"], ["normalize2"], ["sessions"]):
        assert normalize_request(argv) is None


_TOKENS = st.sampled_from(
    [
        "a.jsonl",
        "-",
        "--",
        "-o",
        "--output",
        "--output=x",
        "--raw",
        "--strict",
        "--buffered",
        "--no-metrics",
        "--deltas",
        "--full",
        "--format",
        "--format=pretty",
        "jsonl",
        "pretty",
        "--max-line",
        "--max-line=2M",
        "4K",
        "--tag",
        "--tag=a=b",
        "k=v",
        "-h",
        "--nope",
        "",
    ]
)


@settings(max_examples=500, deadline=None)
@given(st.lists(_TOKENS, max_size=7))
def test_whatever_is_read_here_click_reads_the_same(argv):
    request = normalize_request(["normalize", *argv])
    if request is not None:
        assert request == clicks_request(argv)


def _run(code: str, *args: str, stdin: bytes = b"") -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", code, *args], input=stdin, capture_output=True, timeout=60
    )


# The console script, and on stderr whether click was imported by the end.
SAYS_IF_CLICK_WAS_IMPORTED = (
    "import atexit, sys\n"
    "atexit.register(lambda: sys.stderr.write(repr('click' in sys.modules)))\n"
    "from opencode_events.cli import main\n"
    "main()\n"
)


def test_normalize_to_a_pipe_never_imports_click():
    """Start-up: the console script's `normalize` reads its options without click."""
    code = SAYS_IF_CLICK_WAS_IMPORTED
    result = _run(code, "normalize", "--raw", str(SAMPLE))
    assert result.returncode == 0 and result.stderr == b"False", result.stderr
    assert result.stdout.count(b"\n") > 1
    left_to_click = _run(code, "normalize", "--help")
    assert left_to_click.returncode == 0 and left_to_click.stderr == b"True"


@pytest.mark.parametrize(
    "argv",
    [
        ["normalize", str(SAMPLE)],
        ["normalize", "--raw", "--tag", "ci=1", str(SAMPLE), "-"],
        ["normalize", "--strict", "-"],
        ["normalize", "missing.jsonl"],  # exit 2, one error line
        ["normalize", "--max-line", "64", "-"],
        ["normalize", "--max-line", "lots"],  # click's own message, exit 2
    ],
    ids=lambda a: " ".join(a[1:]),
)
def test_both_paths_write_the_same_and_exit_the_same(argv):
    quick = "from opencode_events.cli import main\nmain()\n"
    with_click = "from opencode_events.cli.main import main\nmain()\n"
    stdin = b'{"type":"x","pad":"' + b"p" * 100 + b'"}\nnot json\n'
    one, other = _run(quick, *argv, stdin=stdin), _run(with_click, *argv, stdin=stdin)
    assert (one.returncode, one.stdout, one.stderr) == (
        other.returncode,
        other.stdout,
        other.stderr,
    )


def test_a_bad_limit_in_the_environment_is_one_error_line_on_both_paths():
    env = {**os.environ, "OPENCODE_EVENTS_MAX_LINE": "lots"}
    for code in (
        "from opencode_events.cli import main\nmain()\n",
        "from opencode_events.cli.main import main\nmain()\n",
    ):
        result = subprocess.run(
            [sys.executable, "-c", code, "normalize"],
            input=b"{}\n",
            capture_output=True,
            timeout=60,
            env=env,
        )
        assert result.returncode == 2
        assert result.stderr.startswith(b"error: OPENCODE_EVENTS_MAX_LINE")
        assert result.stderr.count(b"\n") == 1


def test_an_empty_stream_starts_without_the_shell_lexer_or_the_store():
    code = (
        "import atexit, sys\n"
        "heavy = ('opencode_events.core.bashcmd', 'opencode_events.core.patch',\n"
        "         'opencode_events.sources.transcript', 'opencode_events.store.rows')\n"
        "atexit.register(lambda: sys.stderr.write(repr([m for m in heavy if m in sys.modules])))\n"
        "from opencode_events.cli import main\n"
        "main()\n"
    )
    result = _run(code, "normalize")
    assert result.returncode == 0 and result.stderr == b"[]", result.stderr


@pytest.mark.parametrize(
    "report",
    [["sessions", "--all"], ["usage", "--all", "--by", "day"], ["usage", "--all", "--by", "model"]],
)
def test_a_store_report_loads_neither_the_mapping_nor_openssl(tmp_path, report):
    """A grouped ``usage``, first and from the cache, and ``sessions`` from the cache
    import neither the mapping (with the event types: 3 ms) nor ``hashlib``'s OpenSSL
    (3 ms): the rules they need (tokens and cost, MCP names, the forks' fingerprint) live
    in small modules of their own. (``sessions`` reading parts takes the mapping's status
    words.) A report brought up to date pays for every module it loads."""
    db = tmp_path / "opencode.db"
    shutil.copyfile(SAMPLES / "task" / "opencode.db", db)
    code = (
        "import atexit, sys\n"
        "heavy = ('opencode_events.core.mapping', 'opencode_events.events', '_hashlib')\n"
        "atexit.register(lambda: sys.stderr.write(repr([m for m in heavy if m in sys.modules])))\n"
        "from opencode_events.cli import main\n"
        "main()\n"
    )
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache")}
    for first in (True, False):  # then from the cache
        result = subprocess.run(
            [sys.executable, "-c", code, *report, "--db", str(db), "--format", "json"],
            capture_output=True,
            timeout=60,
            env=env,
        )
        assert result.returncode == 0, result.stderr
        if not first or report[0] == "usage":
            assert result.stderr == b"[]"


def test_the_lexers_stand_in_gives_way_to_it_on_first_use():
    from opencode_events.core import bashcmd, mapping

    first = mapping.classify_bash("cat a.txt")
    assert first == bashcmd.classify_bash("cat a.txt") and first is not None
    assert mapping.classify_bash is bashcmd.classify_bash


@pytest.mark.parametrize("sig", ["SIGINT", "SIGTERM"])
def test_stopped_the_two_paths_end_alike(sig):
    """Ctrl-C: exit 130 and click's blank line closing the terminal's ^C echo, on both
    paths; SIGTERM: 143, nothing said."""
    import signal
    import time

    results = []
    for code in (
        "from opencode_events.cli import main\nmain()\n",
        "from opencode_events.cli.main import main\nmain()\n",
    ):
        proc = subprocess.Popen(
            [sys.executable, "-c", code, "normalize"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        proc.stdin.write(SAMPLE.read_bytes())
        proc.stdin.flush()
        time.sleep(1.0)  # started, read, written
        proc.send_signal(getattr(signal, sig))
        out, err = proc.communicate(timeout=30)
        results.append((proc.returncode, out, err))
    assert results[0] == results[1]
    assert results[0][0] == (130 if sig == "SIGINT" else 143)
    assert results[0][2] == (b"\n" if sig == "SIGINT" else b"")


def test_shell_completion_is_clicks():
    env = {**os.environ, "_OPENCODE_EVENTS_COMPLETE": "bash_complete", "COMP_WORDS": "x no"}
    env["COMP_CWORD"] = "1"
    code = "from opencode_events.cli import main\nmain()\n"
    result = subprocess.run(
        [sys.executable, "-c", code, "normalize"], capture_output=True, timeout=60, env=env
    )
    assert b"normalize" in result.stdout, result.stderr


# `statusline`: a status bar starts it every few seconds, so it is read without click too.
TASK_DB = str(ROOT / "samples" / "task" / "opencode.db")


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["statusline"], StatuslineRequest()),
        (
            ["statusline", "--db", "x.db", "--session", "ses_1", "--tz", "UTC"],
            StatuslineRequest(db_path="x.db", session_id="ses_1", tz="UTC"),
        ),
        (
            ["statusline", "--format={cost}", "--at=2h"],
            StatuslineRequest(template="{cost}", at="2h"),
        ),
        (
            ["statusline", "--for", "tmux", "--format={title}"],
            StatuslineRequest(template="{title}", escape="tmux"),
        ),
        (["statusline", "--for=zsh"], StatuslineRequest(escape="zsh")),
        (["statusline", "--for", "bash"], None),
        (["statusline", "--help"], None),
        (["statusline", "extra"], None),
        (["statusline", "--db"], None),
        (["statusline", "--db", "--tz"], None),
        (["statusline", "--db=", "x"], None),
        (["statusline", "--db", "a", "--db", "b"], None),
        (["statusline", "-h"], None),
        (["sessions", "--db", "x"], None),
    ],
    ids=lambda value: " ".join(value) if isinstance(value, list) else "",
)
def test_statusline_reads_a_command_line_as_click_would_or_leaves_it(argv, expected):
    assert statusline_request(argv) == expected
    if expected is not None:  # what click reads from it is the same request
        from opencode_events.cli.statusline import statusline as click_statusline

        ctx = click_statusline.make_context("statusline", list(argv[1:]))
        assert StatuslineRequest(**ctx.params) == expected


def test_statusline_never_imports_click():
    code = SAYS_IF_CLICK_WAS_IMPORTED
    result = _run(code, "statusline", "--db", TASK_DB)
    assert result.returncode == 0 and result.stderr == b"False", result.stderr
    assert result.stdout.count(b"\n") == 1


@pytest.mark.parametrize(
    "argv",
    [
        ["statusline", "--db", TASK_DB],
        ["statusline", "--db", TASK_DB, "--format", "{state} {short_id} {today}", "--tz", "UTC"],
        ["statusline", "--db", TASK_DB, "--at", "2026-11-30", "--tz", "Europe/Paris"],
        ["statusline", "--db", TASK_DB, "--session", "ses_nope"],  # one error line, exit 2
        ["statusline", "--db", "missing.db"],  # exit 2
        ["statusline", "--db", TASK_DB, "--format", "{nope}"],  # click's words, exit 2
        ["statusline", "--db", TASK_DB, "--tz", "Mars/Olympus"],
        ["statusline", "--db", TASK_DB, "--at", "whenever"],
        ["statusline", "--db", TASK_DB, "--help"],
    ],
    ids=lambda a: " ".join(a[3:]) or "plain",
)
def test_statusline_both_paths_write_the_same_and_exit_the_same(argv):
    quick = "from opencode_events.cli import main\nmain()\n"
    with_click = "from opencode_events.cli.main import main\nmain()\n"
    one, other = _run(quick, *argv), _run(with_click, *argv)
    assert (one.returncode, one.stdout, one.stderr) == (
        other.returncode,
        other.stdout,
        other.stderr,
    )
    assert one.returncode in (0, 2)


# `usage` of the store: a status bar or a script asks it often, and a repeat is answered
# from the cache in a few milliseconds, so it is read without click too.
FORK_DB = str(ROOT / "samples" / "fork" / "opencode.db")


def _clicks_params(command: str, argv: list[str]) -> dict | None:
    """The parameters click's report ``command`` reads from ``argv`` (after the command
    name); None when it refuses them (a usage error, ``--help``)."""
    from opencode_events.cli import reports

    try:
        ctx = getattr(reports, command).make_context(command, list(argv), resilient_parsing=False)
    except BaseException:  # click.UsageError, click.exceptions.Exit (--help)
        return None
    return ctx.params


def clicks_usage_request(argv: list[str]) -> UsageRequest | None:
    """What click's `usage` reads from ``argv`` (after the command name), as a request; None
    when click refuses it or it is no store report in a format other than the table."""
    params = _clicks_params("usage", argv)
    if params is None or params.pop("inputs") or params.pop("github"):
        return None
    return UsageRequest(**params)


USAGE_CASES = [
    (["--db", "x.db", "--all", "--by", "day", "--format", "json"], True),
    (["--all", "--by=week", "-j", "--no-cache"], True),
    (["--session", "ses_a", "--session", "ses_b", "--no-fold", "--format", "csv"], True),
    (["--last", "--by", "step", "--tz", "UTC", "--format", "jsonl", "--csv-raw"], True),
    (["--since", "7d", "--until", "2026-11-30", "-z", "Europe/Paris", "--format=markdown"], True),
    (["--db", "x.db", "--timezone", "UTC", "--fold"], True),
    ([], False),  # a stream on stdin
    (["run.jsonl"], False),  # an INPUT
    (["--db", "x.db", "--format", "table"], False),
    (["--db", "x.db", "--by", "hour"], False),  # not a choice: click's words
    (["--db", "x.db", "--github"], False),
    (["--db", "x.db", "--help"], False),
    (["--db", "x.db", "-h"], False),
    (["--db", "x.db", "--db", "y.db"], False),
    (["--db"], False),
    (["--db="], False),
    (["--db", "--all"], False),
    (["--all", "--last"], False),  # click refuses both
    (["--all", "--session", "ses_a"], False),
    (["--db", "x.db", "-j", "--format", "csv"], False),
    (["--db", "x.db", "--fold", "--no-fold"], False),
    (["--db", "x.db", "-jz", "UTC"], False),  # clustered: click's
]


@pytest.mark.parametrize(
    ("argv", "read_here"), USAGE_CASES, ids=[" ".join(a) or "-" for a, _ in USAGE_CASES]
)
def test_usage_reads_a_command_line_as_click_would_or_leaves_it(argv, read_here):
    request = usage_request(["usage", *argv])
    assert (request is not None) == read_here
    if request is not None:
        assert request == clicks_usage_request(argv)


_USAGE_TOKENS = st.sampled_from(
    [
        *("--db", "x.db", "--all", "--last", "--session", "ses_a", "--since", "7d"),
        *("--until", "2026-11-30", "--by", "day", "step", "hour", "--tz", "-z", "UTC"),
        *("--format", "json", "csv", "table", "-j", "--json", "--no-fold", "--fold"),
        *("--csv-raw", "--no-cache", "--github", "--by=session", "--db=", "in.jsonl", "-h"),
        "",
    ]
)


@settings(max_examples=500, deadline=None)
@given(st.lists(_USAGE_TOKENS, max_size=8))
def test_whatever_usage_reads_here_click_reads_the_same(argv):
    request = usage_request(["usage", *argv])
    if request is not None:
        assert request == clicks_usage_request(argv)


def test_usage_of_the_store_never_imports_click(tmp_path):
    code = SAYS_IF_CLICK_WAS_IMPORTED
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path)}
    argv = ["usage", "--db", FORK_DB, "--all", "--by", "day", "--format", "json"]
    for _cold_then_cached in range(2):
        result = subprocess.run(
            [sys.executable, "-c", code, *argv], capture_output=True, timeout=60, env=env
        )
        assert result.returncode == 0 and result.stderr == b"False", result.stderr
        assert b'"rows"' in result.stdout
    table = subprocess.run(
        [sys.executable, "-c", code, "usage", "--db", FORK_DB, "--format", "table"],
        capture_output=True,
        timeout=60,
        env=env,
    )
    assert table.returncode == 0 and table.stderr == b"True"


def _both_paths_alike(argv: list[str], tmp_path: Path) -> subprocess.CompletedProcess:
    """The console script's run of ``argv``: the same bytes and exit code as click's, and
    again when repeated with the report cache the first run kept."""
    quick = "from opencode_events.cli import main\nmain()\n"
    with_click = "from opencode_events.cli.main import main\nmain()\n"
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path)}

    def ran(code: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-c", code, *argv], capture_output=True, timeout=60, env=env
        )

    one, other, cached = ran(quick), ran(with_click), ran(quick)
    assert (one.returncode, one.stdout, one.stderr) == (
        other.returncode,
        other.stdout,
        other.stderr,
    )
    assert (cached.returncode, cached.stdout, cached.stderr) == (
        one.returncode,
        one.stdout,
        one.stderr,
    )
    assert one.returncode in (0, 2)
    return one


@pytest.mark.parametrize(
    "argv",
    [
        ["usage", "--db", FORK_DB, "--all", "--by", "day", "--format", "json"],
        ["usage", "--db", FORK_DB, "--by", "step", "--format", "jsonl"],
        ["usage", "--db", FORK_DB, "--all", "--by", "session", "--format", "csv", "--csv-raw"],
        ["usage", "--db", FORK_DB, "--all", "--by", "model", "--format", "markdown"],
        ["usage", "--db", FORK_DB, "--since", "2026-01-01", "--tz", "Asia/Tokyo", "-j"],
        ["usage", "--db", FORK_DB, "--session", "ses_nope", "-j"],  # one error line, exit 2
        ["usage", "--db", "missing.db", "-j"],  # exit 2
        ["usage", "--db", FORK_DB, "--tz", "Mars/Olympus", "-j"],  # click's words, exit 2
        ["usage", "--db", FORK_DB, "--since", "whenever", "-j"],
        ["usage", "--db", FORK_DB, "--until", "whenever", "--all", "-j"],
        ["usage", "--db", FORK_DB, "--all", "--no-cache"],  # JSON, stdout not a terminal
        # every session, its notes on stderr: a repeat copies the rows and says them again
        ["usage", "--db", FORK_DB, "--all", "--by", "step", "--format", "jsonl"],
        ["usage", "--db", FORK_DB, "--all", "--format", "csv"],
        ["usage", "--db", FORK_DB, "--all", "--by", "week", "--format", "csv", "--csv-raw"],
    ],
    ids=lambda a: " ".join(a[3:]) or "plain",
)
def test_usage_both_paths_write_the_same_and_exit_the_same(argv, tmp_path):
    _both_paths_alike(argv, tmp_path)


def test_a_usage_repeat_says_its_notes_after_its_rows_from_the_cache(tmp_path):
    """A repeat of every session's usage is copied from the report cache: the same rows,
    then the same notes on stderr, with no report made (no memo decoded: none is read)."""
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path)}
    argv = [sys.executable, "-m", "opencode_events", "usage", "--db", FORK_DB, "--all"]
    argv += ["--by", "step", "--format", "jsonl"]
    first = subprocess.run(argv, capture_output=True, timeout=60, env=env, check=True)
    assert first.stderr.startswith(b"note: ") and b"forked cop" in first.stderr
    (memo,) = tmp_path.rglob("memo-*")  # one memo of the report, and its rendition
    assert len(list(tmp_path.rglob("render-*"))) == 1
    memo.write_bytes(b"not a memo")  # a repeat that read it would make the report again
    repeat = subprocess.run(argv, capture_output=True, timeout=60, env=env, check=True)
    assert (repeat.stdout, repeat.stderr) == (first.stdout, first.stderr)
    assert memo.read_bytes() == b"not a memo"


# `sessions`: a repeat is copied from the report cache in milliseconds, so click (and the
# report's own modules) would be most of its time; it is read without click too.


def clicks_sessions_request(argv: list[str]) -> SessionsRequest | None:
    """What click's `sessions` reads from ``argv`` (after the command name), as a request;
    None when click refuses it."""
    params = _clicks_params("sessions", argv)
    return None if params is None else SessionsRequest(**params)


SESSIONS_CASES = [
    (["--db", "x.db", "--all", "--format", "json"], True),
    (["--all", "-j", "--no-cache"], True),
    (["--since", "7d", "--until", "2026-11-30", "--limit", "5", "--format=csv"], True),
    (["--limit=1_000", "--no-fold", "--format", "jsonl", "--csv-raw"], True),
    (["--db", "x.db", "--fold", "--format", "markdown"], True),
    ([], True),  # the default store, JSON to a pipe
    (["--db", "x.db", "--format", "table"], False),
    (["--limit", "0"], False),  # click's words: not in the range
    (["--limit", "many"], False),
    (["--limit", "-1"], False),
    (["--db", "x.db", "--help"], False),
    (["--db", "x.db", "--db", "y.db"], False),
    (["--db"], False),
    (["--db="], False),
    (["--db", "--all"], False),
    (["--session", "ses_a"], False),  # not an option of sessions
    (["--last"], False),
    (["x.db"], False),  # no argument
    (["--db", "x.db", "-j", "--format", "csv"], False),
    (["--fold", "--no-fold"], False),
    (["--tz", "UTC"], False),
]


@pytest.mark.parametrize(
    ("argv", "read_here"), SESSIONS_CASES, ids=[" ".join(a) or "-" for a, _ in SESSIONS_CASES]
)
def test_sessions_reads_a_command_line_as_click_would_or_leaves_it(argv, read_here):
    request = sessions_request(["sessions", *argv])
    assert (request is not None) == read_here
    if request is not None:
        assert request == clicks_sessions_request(argv)


_SESSIONS_TOKENS = st.sampled_from(
    [
        *("--db", "x.db", "--all", "--since", "7d", "--until", "2026-11-30", "--limit"),
        *("3", "0", "-2", "x", "--format", "json", "csv", "table", "-j", "--json"),
        *("--no-fold", "--fold", "--csv-raw", "--no-cache", "--limit=4", "--db=", "-h"),
        "",
    ]
)


@settings(max_examples=500, deadline=None)
@given(st.lists(_SESSIONS_TOKENS, max_size=8))
def test_whatever_sessions_reads_here_click_reads_the_same(argv):
    request = sessions_request(["sessions", *argv])
    if request is not None:
        assert request == clicks_sessions_request(argv)


def test_sessions_never_imports_click(tmp_path):
    code = SAYS_IF_CLICK_WAS_IMPORTED
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path)}
    argv = ["sessions", "--db", FORK_DB, "--all", "--format", "json"]
    for _cold_then_cached in range(2):
        result = subprocess.run(
            [sys.executable, "-c", code, *argv], capture_output=True, timeout=60, env=env
        )
        assert result.returncode == 0 and result.stderr == b"False", result.stderr
        assert b'"time_created"' in result.stdout


@pytest.mark.parametrize(
    "argv",
    [
        ["sessions", "--db", FORK_DB, "--all", "--format", "json"],
        ["sessions", "--db", FORK_DB, "--format", "jsonl", "--no-fold"],
        ["sessions", "--db", FORK_DB, "--all", "--format", "csv", "--csv-raw"],
        ["sessions", "--db", FORK_DB, "--format", "csv"],
        ["sessions", "--db", FORK_DB, "--limit", "1", "--format", "markdown"],
        ["sessions", "--db", FORK_DB, "--since", "2026-01-01", "--until", "2030-01-01", "-j"],
        ["sessions", "--db", "missing.db", "-j"],  # exit 2
        ["sessions", "--db", FORK_DB, "--since", "whenever", "-j"],  # click's words, exit 2
        ["sessions", "--db", FORK_DB, "--until", "whenever", "-j"],
        ["sessions", "--db", FORK_DB, "--all", "--no-cache"],  # JSON, stdout not a terminal
    ],
    ids=lambda a: " ".join(a[3:]) or "plain",
)
def test_sessions_both_paths_write_the_same_and_exit_the_same(argv, tmp_path):
    one = _both_paths_alike(argv, tmp_path)
    assert one.returncode == 2 or one.stdout


def test_a_closed_pipe_ends_sessions_quietly_with_141(tmp_path):
    """The repeat is sent by sendfile: a reader gone is exit 141 and no word, as click's."""
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path)}
    argv = [sys.executable, "-m", "opencode_events", "sessions", "--db", FORK_DB, "-j"]
    subprocess.run(argv, capture_output=True, timeout=60, env=env, check=True)  # kept
    read_end, write_end = os.pipe()
    os.close(read_end)
    with os.fdopen(write_end, "wb") as closed:
        result = subprocess.run(argv, stdout=closed, stderr=subprocess.PIPE, timeout=60, env=env)
    assert (result.returncode, result.stderr) == (141, b"")
