"""The docs' examples work as written (sqlite-utils' ``test_docs``).

Every ``opencode-events …`` line of a shell block in README.md and docs/*.md is an example a
reader will paste. Each is parsed by the command line's own click commands (an option that
does not exist, a value it refuses), and run against the bundled ``task`` capture as the
reader's database (``OPENCODE_DB``; ``ses_dd8083e0`` is its session): it exits 0, with no
usage error and no traceback. What a pipe feeds it is a real capture too (``opencode run``:
the run stream; ``jq … events.jsonl``: the normalized events). The few examples that need
what a test machine has not (OpenCode itself, a server to attach to, a follow that ends at
Ctrl-C) are parsed only, each for the reason ``_NOT_RUN`` gives. The Python blocks of the
README and the guides run too (docs/python-api.md's: tests/test_api.py).
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from typing import NamedTuple

import click
import pytest

from opencode_events.cli.main import cli
from tests.test_otel import backend

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ROOT / "samples"
CLI = [sys.executable, "-m", "opencode_events"]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
_SHELL = {"sh", "bash", "shell", "console"}
_ENDS = {"|", "||", "&&", ";", ">", ">>", "<", "&"}
_ENDPOINT = re.compile(r"https?://(localhost|collector|127\.0\.0\.1|otlp\.example\.com)[^\s'\"]*")


class Example(NamedTuple):
    where: str  # file:line
    line: str  # as written
    args: list[str]  # after ``opencode-events``
    env: dict[str, str]  # VAR=value before it
    fed_by: str | None  # the command a pipe feeds it from


def _invocation(where: str, line: str) -> Example | None:
    line = re.sub(r"\$\((hostname|date [^)]*)\)", "x", line)  # the reader's shell fills these
    inner = re.search(r"\$\((opencode-events [^)]*)\)", line)
    if inner:  # a command substitution (a DuckDB query's columns)
        line = inner.group(1)
    lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    words = list(lexer)
    if "opencode-events" not in words:
        return None
    at = words.index("opencode-events")
    before, after = words[:at], words[at + 1 :]
    env = {}
    while before and re.fullmatch(r"[A-Z_][A-Z0-9_]*=.*", before[-1]):
        name, _, value = before.pop().partition("=")
        env[name] = value
    fed_by = None
    if before and before[-1] == "|":
        start = max((i for i, w in enumerate(before[:-1]) if w in _ENDS), default=-1) + 1
        fed_by = " ".join(before[start:-1])
    args = []
    for word in after:
        if word in _ENDS:
            break
        args.append(word)
    return Example(where, line, args, env, fed_by)


def _examples() -> list[Example]:
    found = []
    for path in DOCS:
        text = path.read_text()
        for block in re.finditer(r"^```([a-z]*)\n(.*?)^```", text, re.S | re.M):
            if block.group(1) not in _SHELL:
                continue
            first = text.count("\n", 0, block.start(2)) + 1
            body = block.group(2).replace("\\\n", " \n")  # a continued line, kept counted
            for offset, line in enumerate(body.splitlines()):
                line = line.strip().removeprefix("$ ")
                if "opencode-events" not in line:
                    continue
                example = _invocation(f"{path.name}:{first + offset}", line)
                if example is not None:
                    found.append(example)
    return found


EXAMPLES = _examples()

# Examples a test machine cannot run (parsed only): each reason is what the reader has.
_NOT_RUN = {
    "run": "runs OpenCode itself (tests/e2e runs the real one)",
    "attach": "attaches to a running `opencode serve` (tests/test_surfaces.py stands one in)",
    "--follow": "follows the store until the session is idle or Ctrl-C (tests/test_follow.py)",
}


def _not_run(example: Example) -> str | None:
    for word, reason in _NOT_RUN.items():
        if word in example.args[:1] or (word.startswith("--") and word in example.args):
            return reason
    return None


def test_the_docs_have_examples_of_every_command():
    commands = {e.args[0] for e in EXAMPLES if e.args}
    assert set(cli.commands) - commands == set()


@pytest.mark.parametrize("example", EXAMPLES, ids=[e.where for e in EXAMPLES])
def test_every_example_parses(example: Example):
    """Every option exists and every value is one the command takes."""
    name, *rest = example.args
    command = cli.commands.get(name)
    assert command is not None, f"{example.where}: no command {name!r}: {example.line}"
    with click.Context(cli, info_name="opencode-events") as parent:
        try:
            command.make_context(name, rest, parent=parent)
        except click.UsageError as exc:
            pytest.fail(f"{example.where}: {exc.format_message()}: {example.line}")


@pytest.fixture(scope="module")
def reader(tmp_path_factory) -> tuple[Path, dict[str, str]]:
    """A reader's folder and environment: the task capture as their database (a copy: the
    reports' cache and OpenCode's own runs are theirs), the files the examples name."""
    home = tmp_path_factory.mktemp("reader")
    work = home / "work"
    (work / "samples").mkdir(parents=True)
    db = home / ".local" / "share" / "opencode" / "opencode.db"
    db.parent.mkdir(parents=True)
    shutil.copyfile(SAMPLES / "task" / "opencode.db", db)
    (home / "backup").mkdir()
    shutil.copyfile(SAMPLES / "task" / "opencode.db", home / "backup" / "opencode.db")
    shutil.copytree(SAMPLES / "task", work / "samples" / "task")
    stream = SAMPLES / "task" / "stream.jsonl"
    for name in ("run.jsonl", "a.jsonl", "raw.jsonl"):
        shutil.copyfile(stream, work / name)
    shutil.copyfile(SAMPLES / "text" / "stream.jsonl", work / "b.jsonl")
    events = subprocess.run([*CLI, "normalize", str(stream)], capture_output=True, check=True)
    (work / "events.jsonl").write_bytes(events.stdout)
    (home / "spool").mkdir()
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(home),
        "XDG_DATA_HOME": str(home / ".local" / "share"),
        "XDG_CONFIG_HOME": str(home / ".config"),
        "XDG_CACHE_HOME": str(home / ".cache"),
        "XDG_STATE_HOME": str(home / ".local" / "state"),
        "PYTHONPATH": str(ROOT),
        "COLUMNS": "100",
    }
    return work, env


def _fed(example: Example, work: Path) -> bytes:
    """What the pipe before the example gives it, from a real capture."""
    if example.fed_by is None:
        return b""
    if example.fed_by.startswith("opencode run"):
        return (work / "run.jsonl").read_bytes()
    if example.fed_by.startswith("jq"):
        return (work / "events.jsonl").read_bytes()
    raise AssertionError(f"{example.where}: no stand-in for {example.fed_by!r}")


@pytest.mark.parametrize("example", EXAMPLES, ids=[e.where for e in EXAMPLES])
def test_every_example_runs(example: Example, reader):
    """Exit 0, nothing but notes on stderr: no usage error, no traceback, no error line."""
    reason = _not_run(example)
    if reason is not None:
        pytest.skip(reason)
    work, env = reader
    home = env["HOME"]
    args = [
        re.sub(r"^~/", f"{home}/", arg).replace("/var/spool/opencode/", f"{home}/spool/")
        for arg in example.args
    ]
    with backend([200]) as (collector, url):
        args = [_ENDPOINT.sub(url, arg) for arg in args]
        extra = {k: _ENDPOINT.sub(url, v) for k, v in example.env.items()}
        done = subprocess.run(
            [*CLI, *args],
            input=_fed(example, work),
            capture_output=True,
            cwd=work,
            env={**env, **extra},
            timeout=60,
        )
    stderr = done.stderr.decode(errors="replace")
    assert "Traceback" not in stderr, f"{example.where}: {example.line}\n{stderr}"
    assert done.returncode == 0, f"{example.where}: {example.line}\n{stderr}"
    assert not re.search(r"^error:", stderr, re.M), f"{example.where}: {example.line}\n{stderr}"
    done.stdout.decode()  # UTF-8
    sends = "--endpoint" in example.args or "OTEL_EXPORTER_OTLP_ENDPOINT" in example.env
    if sends and "--since" not in example.args:  # the capture is older than "1d"
        assert collector.requests, f"{example.where}: nothing sent"


def _python_blocks() -> list[tuple[str, str]]:
    blocks = []
    for path in DOCS:
        if path.name in ("python-api.md", "bash.md", "harness.md"):  # tested / signatures only
            continue
        text = path.read_text()
        for block in re.finditer(r"^```python\n(.*?)^```", text, re.S | re.M):
            line = text.count("\n", 0, block.start(1)) + 1
            blocks.append((f"{path.name}:{line}", block.group(1)))
    return blocks


@pytest.mark.parametrize("where, code", _python_blocks(), ids=[w for w, _ in _python_blocks()])
def test_every_python_block_runs(where, code, reader, monkeypatch, capsys):
    work, env = reader
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.chdir(work)
    namespace: dict = {"events": [], "stream": __import__("io").StringIO()}
    exec(compile(code, where, "exec"), namespace)


def _anchor(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces as hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _prose(text: str) -> str:
    """``text`` with its fenced code blocks blanked (a link there is code, not a link)."""
    return re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)


def _anchors(path: Path) -> set[str]:
    found: set[str] = set()
    for heading in re.findall(r"^#{1,6} (.+)$", _prose(path.read_text()), re.M):
        anchor = base = _anchor(heading)
        count = 0
        while anchor in found:  # a heading repeated gets -1, -2, … as on GitHub
            count += 1
            anchor = f"{base}-{count}"
        found.add(anchor)
    return found


def _links() -> list[tuple[str, Path, str]]:
    links = []
    for path in DOCS:
        for target in re.findall(r"\]\(([^)\s]+)\)", _prose(path.read_text())):
            if not re.match(r"[a-z]+:", target):  # not a URL: a file here, maybe a heading
                links.append((f"{path.name} -> {target}", path, target))
    return links


@pytest.mark.parametrize("where, path, target", _links(), ids=[w for w, _, _ in _links()])
def test_every_link_leads_somewhere(where, path, target):
    """A relative link names a file of the project and, after ``#``, one of its headings."""
    file, _, anchor = target.partition("#")
    dest = (path.parent / file).resolve() if file else path
    assert dest.exists(), f"{where}: no such file"
    if anchor and dest.suffix == ".md":
        assert anchor in _anchors(dest), f"{where}: no such heading"


# ------------------------------------------------------------------- names the docs give

_MODULE = re.compile(r"`(opencode_events(?:\.[a-z_]+)+)`")


def _named_modules() -> list[tuple[str, str]]:
    found = []
    for doc in DOCS:
        if doc.name == "performance-log.md":  # a record of what was, names and all
            continue
        for number, line in enumerate(doc.read_text().splitlines(), 1):
            for name in _MODULE.findall(line):
                found.append((f"{doc.name}:{number}", name))
    return found


@pytest.mark.parametrize(("where", "name"), _named_modules())
def test_every_module_or_name_the_docs_give_exists(where, name):
    """A dotted name in backticks (``opencode_events.reports.context``, ``opencode_events.
    usage_report``) is a module or something in one: docs/context.md named a module gone
    for sessions."""
    import importlib

    parts = name.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            found = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for attribute in parts[cut:]:
            assert hasattr(found, attribute), f"{where}: {name}"
            found = getattr(found, attribute)
        return
    raise AssertionError(f"{where}: {name} names no module")


def _help_options(command: click.Command) -> list[str]:
    return [
        opt
        for param in command.params
        if isinstance(param, click.Option) and not param.hidden
        for opt in param.opts
        if opt.startswith("--") and opt != "--help"
    ]


@pytest.mark.parametrize("name", sorted(cli.commands))
def test_every_option_of_every_command_is_in_the_docs(name):
    """Every option ``--help`` lists is written in some doc (a weak check: where is the
    reader's to find; tables and summaries that leave one out are caught by review)."""
    text = "\n".join(doc.read_text() for doc in DOCS if doc.name != "performance-log.md")
    missing = [opt for opt in _help_options(cli.commands[name]) if opt not in text]
    assert not missing, f"{name}: {missing} in --help, in no doc"
