#!/usr/bin/env python3
"""Capture real OpenCode 1.18.33 output for every scenario into samples/<scenario>/.

    python scripts/capture.py                 # all scenarios
    python scripts/capture.py text bash_ok    # some
    python scripts/capture.py --fast          # skip the slow ones (retries, sleeps)
    python scripts/capture.py --list

Each scenario runs in a fresh environment at /tmp/oc-capture/<scenario> (a fixed
path, so paths inside the samples are stable across reruns) against the scripted
mock model (tests/harness).  Files written per scenario:

    stream.jsonl       raw `opencode run --format json` stdout, bytes as written
                       (several runs concatenated for multi-run scenarios)
    stderr.txt         raw stderr (several runs: each under a "### run N" header)
    exit_code          exit code (one line per run)
    runs.json          multi-run scenarios: argv and exit code of each run
    opencode.db        consolidated copy (sqlite3 backup API, then VACUUM)
    export.json        `opencode export <main session id>`
    events.sse         server scenarios: raw GET /event text
    global-events.sse  server scenarios: raw GET /global/event text
    requests.jsonl     what the mock model received (summaries)
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
import traceback
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.harness.opencode import ensure_opencode  # noqa: E402
from tests.harness.scenarios import SCENARIOS, Capture, get  # noqa: E402

CAPTURE_ROOT = Path(os.environ.get("OC_CAPTURE_ROOT", "/tmp/oc-capture"))
SAMPLES = REPO / "samples"
# fixed mock-model port so URLs inside the samples are stable across reruns
MOCK_PORT = int(os.environ.get("OC_CAPTURE_MOCK_PORT", "18321"))


def sanitize_argv(argv: list[str], binary: str) -> list[str]:
    return ["opencode" if a == binary else a for a in argv]


def _shell_rc(rc: int) -> int:
    return 128 - rc if rc < 0 else rc


def write_capture(cap: Capture, out: Path, binary: str) -> None:
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    runs = cap.runs
    if runs:
        (out / "stream.jsonl").write_bytes(b"".join(r.stdout for r in runs))
        if len(runs) == 1:
            (out / "stderr.txt").write_bytes(runs[0].stderr)
        else:
            parts = []
            for i, r in enumerate(runs, 1):
                parts.append(f"### run {i}: {' '.join(sanitize_argv(r.args, binary))}\n".encode())
                parts.append(r.stderr)
            (out / "stderr.txt").write_bytes(b"".join(parts))
        # shell convention: killed by signal N -> 128+N (Python reports -N)
        (out / "exit_code").write_text("".join(f"{_shell_rc(r.returncode)}\n" for r in runs))
        if len(runs) > 1:
            meta = []
            offset = 0
            for r in runs:
                n = r.stdout.count(b"\n")
                meta.append(
                    {
                        "argv": sanitize_argv(r.args, binary),
                        "exit_code": _shell_rc(r.returncode),
                        "session_id": r.session_id,
                        "lines": [offset + 1, offset + n],
                    }
                )
                offset += n
            (out / "runs.json").write_text(json.dumps(meta, indent=2) + "\n")
    for name, raw in cap.sse.items():
        (out / name).write_bytes(raw)
    for name, raw in cap.extra_files.items():
        (out / name).parent.mkdir(parents=True, exist_ok=True)
        (out / name).write_bytes(raw)
    if cap.env.db_path.exists():
        cap.env.copy_db(out / "opencode.db")
    config = cap.env.config_dir / "opencode.json"
    if config.exists():
        # The config OpenCode ran with (model prices, MCP servers): the store tests read it.
        (out / "opencode.json").write_bytes(config.read_bytes())
    if cap.main_session:
        ex = cap.env.export(cap.main_session)
        if ex.returncode == 0 and ex.stdout.strip():
            # re-indent? no: keep exactly what OpenCode printed
            (out / "export.json").write_bytes(ex.stdout)
        else:
            cap.notes.append(f"export failed rc={ex.returncode}: {ex.stderr[-500:]!r}")
    (out / "requests.jsonl").write_text(cap.mock.requests_jsonl())
    if cap.notes:
        (out / "notes.txt").write_text("".join(n + "\n" for n in cap.notes))


README_HEAD = """# samples/ -- real OpenCode 1.18.33 captures

Captured from the real `opencode-ai@1.18.33` binary, driven offline against the
scripted mock model in `tests/harness/` (see `docs/harness.md`). Regenerate with

    make samples                         # = python scripts/capture.py
    python scripts/capture.py NAME...    # only some scenarios
    python scripts/capture.py --fast     # skip the slow ones

Each scenario ran in a fresh isolated environment rooted at
`/tmp/oc-capture/<scenario>/` (HOME=`home/`, XDG dirs `data/ config/ state/
cache/ runtime/`, project = `work/`, a git repo with one fixed commit, so
`projectID` is stable). The mock model listened on 127.0.0.1:18321. Ids and
timestamps differ on every capture; token figures are scripted and fixed, except in
`compaction`, `auto_compact`, `prune` and `task_compact`, whose figures are measured from
each request at 4 bytes a token (they change only when what OpenCode sends does; see
`docs/harness.md`).

Files per scenario (only those that apply):

| file | content |
|---|---|
| `stream.jsonl` | raw `opencode run --format json` stdout, bytes as written (multi-run scenarios: the runs concatenated, see `runs.json`) |
| `stderr.txt` | raw stderr (multi-run: each run under a `### run N: argv` header) |
| `exit_code` | exit code, one line per run (killed by signal N is written as 128+N) |
| `runs.json` | multi-run scenarios: argv, exit code, session id and stream line range of each run |
| `opencode.db` | the SQLite store: a consolidated copy (sqlite3 backup API, WAL folded in), then VACUUMed |
| `export.json` | `opencode export <main session id>`, as printed |
| `events.sse` | server scenarios: raw text of `GET /event` |
| `global-events.sse` | server scenarios: raw text of `GET /global/event` |
| `requests.jsonl` | what the mock model received (one summary per request: conversation, tools offered, roles, heads of system/user text) |
| `notes.txt` | anything unusual about the capture |

## Scenarios

| scenario | what it is |
|---|---|
"""  # noqa: E501


def write_readme(out: Path) -> None:
    rows = []
    for s in SCENARIOS:
        flag = " *(slow)*" if s.slow else ""
        model = f" Model `{s.model}`." if s.model != "mock-model" else ""
        rows.append(f"| `{s.name}` | {s.description}{model}{flag} |\n")
    (out / "README.md").write_text(README_HEAD + "".join(rows))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("scenarios", nargs="*", help="scenario names (default: all)")
    ap.add_argument("--fast", action="store_true", help="skip slow scenarios")
    ap.add_argument("--list", action="store_true", help="list scenarios and exit")
    ap.add_argument("--out", type=Path, default=SAMPLES, help="samples directory")
    ap.add_argument(
        "--keep", action="store_true", help="keep /tmp/oc-capture/<scenario> after capturing"
    )
    ns = ap.parse_args(argv)
    if ns.list:
        for s in SCENARIOS:
            print(f"{s.name:20} {'(slow) ' if s.slow else ''}{s.description}")
        return 0
    chosen = [get(n) for n in ns.scenarios] if ns.scenarios else list(SCENARIOS)
    if ns.fast:
        chosen = [s for s in chosen if not s.slow]
    binary = str(ensure_opencode())
    failures = 0
    for sc in chosen:
        t0 = time.monotonic()
        root = CAPTURE_ROOT / sc.name
        try:
            from tests.harness.scenarios import execute

            cap = execute(sc, binary, root, port=MOCK_PORT)
            write_capture(cap, ns.out / sc.name, binary)
            codes = ",".join(str(r.returncode) for r in cap.runs) or "-"
            extra = f" unscripted={cap.mock.unscripted}" if cap.mock.unscripted else ""
            print(
                f"{sc.name:20} ok   {time.monotonic() - t0:5.1f}s exit={codes}"
                f" session={cap.main_session}{extra}",
                flush=True,
            )
        except Exception:
            failures += 1
            print(f"{sc.name:20} FAILED after {time.monotonic() - t0:.1f}s", flush=True)
            traceback.print_exc()
        finally:
            if not ns.keep:
                shutil.rmtree(root, ignore_errors=True)
    write_readme(ns.out)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
