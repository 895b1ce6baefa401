"""`make bench`, the store half: SPEC §4's store budgets on a generated 10,000-session database.

Side by side on the same file, as ratios (machines are shared and noisy). Ours and the peer
of each comparison run in alternating blocks (``BENCH_BLOCKS`` blocks each of
``BENCH_BLOCK_RUNS`` runs, the first of a block a warm-up), best time of each; other
timings are the best of ``BENCH_REPEAT`` runs in a row:

- ``sessions --all --format json`` against ``ccusage opencode session`` (budget: ≥ 3× faster);
- ``usage --all --by day --format json`` against ``ccusage opencode daily --offline``
  (≥ 5× faster) and against ``opencode stats`` (the pinned OpenCode binary);
- ``import --all`` against a bare loop that reads every part row and msgspec-decodes it
  (within 1.5×);
- ``otel --all`` (OTLP JSON Lines of every session) beside ``import --all`` (a figure);
- peak RSS of each of ours (under 200 MB, and flat: the same on a database a tenth the size);
- ``statusline`` (one line for a status bar) under 100 ms, beside the start-up floor
  (``opencode-events --version``, the same interpreter and command line doing nothing), at
  the database's last write (its "today" is the partial last day) and on its busiest day;
- ``top``'s refresh CPU: the first look (this week's messages, once), a look at an unchanged
  store, and a look as if every session on the board had changed (the most a change costs),
  on this database and on one a tenth the size: in proportion to the board, not to the
  database;
- whether the totals agree: ours, ccusage's and OpenCode's against sums taken straight
  from the database with SQL, per day against ccusage, and why they differ where they do.

Each third-party tool reads its own copy of the database (both open it read-write: ccusage
leaves ``-wal``/``-shm`` beside it, OpenCode migrates and writes), never the file ours read.
ccusage is installed into .cache/ccusage with npm. Prints a Markdown table and writes
bench/out/store-results.json.

    python bench/store_bench.py            # BENCH_BLOCKS=2 BENCH_BLOCK_RUNS=4 BENCH_REPEAT=3 …
    python bench/store_bench.py --bare DB  # the bare loop alone (used as a subprocess)
    python bench/store_bench.py --statusline  # the statusline and top figures alone
    python bench/store_bench.py --shapes bench,interleaved,field  # the ratios on each shape
    python bench/store_bench.py --growth 1x,3x,10x  # first-run times as the database grows
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from datetime import UTC, datetime
from pathlib import Path

from machine import check_idle

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "bench" / "out"
DB = OUT / "opencode-10k.db"
SMALL_DB = OUT / "opencode-1k.db"
PEERS = OUT / "peers"
PY = sys.executable
REPEAT = int(os.environ.get("BENCH_REPEAT", "3"))
# Alternating blocks of each in a comparison, and runs a block (the first a warm-up).
BLOCKS = max(1, int(os.environ.get("BENCH_BLOCKS", "2")))
BLOCK_RUNS = max(2, int(os.environ.get("BENCH_BLOCK_RUNS", "4")))
OPENCODE_RUNS = int(os.environ.get("BENCH_OPENCODE_RUNS", "2"))
# 20.0.26, the newest 20.x, has no native linux-x64 binary on the registry; 20.0.24 has.
CCUSAGE_VERSION = os.environ.get("BENCH_CCUSAGE_VERSION", "20.0.24")
CCUSAGE_DIR = ROOT / ".cache" / "ccusage"
TZ = "UTC"  # every tool groups days in the same zone
TOKEN_FIELDS = ("input", "output", "reasoning", "cache_read", "cache_write")


# ------------------------------------------------------------------------------- running


GNU_TIME = "/usr/bin/time" if os.access("/usr/bin/time", os.X_OK) else None
LAST_CPU = [0.0]  # CPU seconds of the last ``measure``d run (children it waited for too)


def measure(cmd: list[str], *, env: dict | None = None, stdout=subprocess.DEVNULL, cwd=ROOT):
    """(wall seconds, peak RSS in MB) of one run (its CPU seconds, user and system, of the
    whole process tree, in ``LAST_CPU``).

    Linux carries a process's peak RSS across exec, so a child forked from this (large)
    process would report at least our own size. When GNU time is there, it forks the
    command from its own small process and reports that child's peak alone.
    """
    with tempfile.TemporaryFile() as err, tempfile.NamedTemporaryFile() as rss_file:
        full = [GNU_TIME, "-q", "-f", "%M", "-o", rss_file.name, *cmd] if GNU_TIME else cmd
        start = time.perf_counter()
        proc = subprocess.Popen(full, stdout=stdout, stderr=err, cwd=cwd, env=env)
        _, status, usage = os.wait4(proc.pid, 0)
        elapsed = time.perf_counter() - start
        LAST_CPU[0] = usage.ru_utime + usage.ru_stime
        code = os.waitstatus_to_exitcode(status)
        if code != 0:
            err.seek(0)
            tail = err.read().decode(errors="replace")[-800:]
            raise RuntimeError(f"{' '.join(map(str, cmd))} exited {code}: {tail}")
        if GNU_TIME:
            return elapsed, int(Path(rss_file.name).read_text().split()[-1]) // 1024
    return elapsed, usage.ru_maxrss // 1024


def best(cmd: list[str], repeat: int = REPEAT, **kwargs) -> tuple[float, int]:
    runs = [measure(cmd, **kwargs) for _ in range(repeat)]
    return min(r[0] for r in runs), max(r[1] for r in runs)


def paired(
    ours: list[str],
    peer: list[str],
    *,
    peer_env: dict | None = None,
    blocks: int = BLOCKS,
    runs: int = BLOCK_RUNS,
) -> dict:
    """Ours and a peer in alternating blocks (ours, peer, ours, peer …), ``runs`` runs a block,
    the first run of each block a warm-up that is not counted: the best time of each, our peak
    RSS, and the range of the ratios block pair by block pair (peer / ours).

    Blocks, not single runs by turns: a tool run straight after the other one is slower than in
    a row of its own runs (ccusage by about 35 % after our `sessions`, measured here), which
    would favour whoever goes first. Alternating the blocks still lets both meet the machine in
    the same state (a shared machine drifts by 10 % and more over minutes)."""
    mine: list[list[tuple[float, int]]] = []
    theirs: list[list[tuple[float, int]]] = []
    for _ in range(blocks):
        mine.append([measure(ours) for _ in range(runs)][1:])
        theirs.append([measure(peer, env=peer_env) for _ in range(runs)][1:])
    best_mine = [min(r[0] for r in block) for block in mine]
    best_theirs = [min(r[0] for r in block) for block in theirs]
    pairs = [b / a for a, b in zip(best_mine, best_theirs, strict=True)]
    return {
        "ours_s": min(best_mine),
        "ours_rss": max(r[1] for block in mine for r in block),
        "peer_s": min(best_theirs),
        "peer_rss": max(r[1] for block in theirs for r in block),
        "pair_ratios": [min(pairs), max(pairs)],  # unrounded: a caller may invert them
        "peer_over_ours_by_block": [round(min(pairs), 2), round(max(pairs), 2)],
    }


def timed(
    cmd: list[str], peer: list[str] | None, *, peer_env: dict | None = None
) -> tuple[float, int, dict | None]:
    """Our best time and peak RSS: against ``peer`` in alternating blocks when there is one
    (with ``paired``'s figures as the third item), else the best of ``BENCH_REPEAT``."""
    if peer is None:
        t, rss = best(cmd)
        return t, rss, None
    pair = paired(cmd, peer, peer_env=peer_env)
    return pair["ours_s"], pair["ours_rss"], pair


def capture(cmd: list[str], *, env: dict | None = None, cwd=ROOT) -> bytes:
    return subprocess.run(cmd, env=env, cwd=cwd, check=True, capture_output=True).stdout


def our_cmd(*args: str) -> list[str]:
    script = Path(PY).with_name("opencode-events")
    base = [str(script)] if script.exists() else [PY, "-m", "opencode_events"]
    return [*base, *args]


# ------------------------------------------------------------------------------- set-up


def ensure_db(path: Path, *extra: str, once: bool = False) -> dict:
    """The generated database, (re)made when missing or when gen_db.py changed (with
    ``once``, only when missing: the growth databases take many minutes to make)."""
    manifest = path.with_suffix(".json")
    digest = hashlib.sha1((ROOT / "bench" / "gen_db.py").read_bytes()).hexdigest()[:12]
    if path.exists() and manifest.exists():
        meta = json.loads(manifest.read_text())
        if meta.get("generator") == digest or once:
            return meta
    print(f"generating {path.name} …", file=sys.stderr)
    nice = ["nice", "-n", "10"] if once and shutil.which("nice") else []
    subprocess.run(
        [*nice, PY, "bench/gen_db.py", "--out", str(path), *extra],
        check=True,
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
    )
    return json.loads(manifest.read_text())


def peer_copy(dest: Path) -> Path:
    """A private copy of the database for a tool that writes to what it opens: made again
    when the database is another file (a stamp beside the copy names the one it copies)."""
    src = DB.stat()
    stamp = dest.with_name(dest.name + ".source")
    source = f"{DB.resolve()} {src.st_size} {src.st_mtime_ns}"
    if dest.exists() and stamp.exists() and stamp.read_text() == source:
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    for suffix in ("-wal", "-shm"):
        Path(f"{dest}{suffix}").unlink(missing_ok=True)
    stamp.unlink(missing_ok=True)
    shutil.copyfile(DB, dest)
    stamp.write_text(source)
    return dest


def ccusage() -> list[str] | None:
    binary = CCUSAGE_DIR / "node_modules" / ".bin" / "ccusage"
    if not binary.exists():
        if not shutil.which("npm"):
            return None
        subprocess.run(
            [
                "npm",
                "install",
                "--silent",
                "--prefix",
                str(CCUSAGE_DIR),
                f"ccusage@{CCUSAGE_VERSION}",
            ],
            check=False,
            cwd=ROOT,
        )
    if not binary.exists():
        return None
    try:
        capture([str(binary), "--version"])
    except (subprocess.CalledProcessError, OSError):
        return None
    return [str(binary)]


def ccusage_env() -> dict:
    data = PEERS / "ccusage"
    peer_copy(data / "opencode.db")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("XDG_", "OPENCODE"))}
    env.update(OPENCODE_DATA_DIR=str(data), TZ=TZ, NO_COLOR="1", HOME=str(data))
    return env


def opencode() -> Path | None:
    sys.path.insert(0, str(ROOT))
    try:
        from tests.harness.opencode import ensure_opencode

        return ensure_opencode()
    except Exception as exc:  # noqa: BLE001 - any reason means "skip that row"
        print(f"opencode stats skipped: {exc}", file=sys.stderr)
        return None


def opencode_env() -> dict:
    base = PEERS / "opencode"
    peer_copy(base / "data" / "opencode" / "opencode.db")
    for sub in ("home", "config", "cache", "state"):
        (base / sub).mkdir(parents=True, exist_ok=True)
    from tests.harness.opencode import QUIET_ENV

    return {
        "PATH": "/usr/bin:/bin",
        "HOME": str(base / "home"),
        "XDG_DATA_HOME": str(base / "data"),
        "XDG_CONFIG_HOME": str(base / "config"),
        "XDG_CACHE_HOME": str(base / "cache"),
        "XDG_STATE_HOME": str(base / "state"),
        **QUIET_ENV,
    }


# ------------------------------------------------------------------------------- bare loop


def bare_loop(path: str) -> None:
    """Every part row's data read and msgspec-decoded: no mapping, no output."""
    import msgspec

    decode = msgspec.json.Decoder().decode
    conn = sqlite3.connect(f"{Path(path).resolve().as_uri()}?immutable=1", uri=True)
    conn.text_factory = bytes
    cursor = conn.execute("SELECT data FROM part")
    n = 0
    while rows := cursor.fetchmany(256):
        for (data,) in rows:
            decode(data)
            n += 1
    print(n)


# ------------------------------------------------------------------------------- truth


def sql_truth(path: Path) -> dict:
    """Sums straight from the database: every assistant message, and without fork copies.

    A fork (``run --fork``) copies the history under new ids but keeps each message's
    time_created, so its copies are the messages older than their own session.
    """
    conn = sqlite3.connect(f"{path.resolve().as_uri()}?immutable=1", uri=True)
    rows = conn.execute(
        """
        SELECT date(m.time_created / 1000, 'unixepoch') AS day,
               m.time_created < s.time_created AS copy,
               json_extract(m.data, '$.providerID') || '/' || json_extract(m.data, '$.modelID'),
               count(*),
               total(json_extract(m.data, '$.cost')),
               total(json_extract(m.data, '$.tokens.input')),
               total(json_extract(m.data, '$.tokens.output')),
               total(json_extract(m.data, '$.tokens.reasoning')),
               total(json_extract(m.data, '$.tokens.cache.read')),
               total(json_extract(m.data, '$.tokens.cache.write'))
        FROM message m JOIN session s ON s.id = m.session_id
        WHERE json_extract(m.data, '$.role') = 'assistant'
        GROUP BY 1, 2, 3
        """
    ).fetchall()
    columns = conn.execute(
        "SELECT count(*), total(cost), total(tokens_input), total(tokens_output), "
        "total(tokens_reasoning), total(tokens_cache_read), total(tokens_cache_write) "
        "FROM session"
    ).fetchone()
    conn_zero = conn.execute(
        "SELECT count(*) FROM session WHERE tokens_input + tokens_output + tokens_reasoning "
        "+ tokens_cache_read + tokens_cache_write = 0"
    ).fetchone()[0]
    conn.close()

    def empty() -> dict:
        return {"messages": 0, "cost": 0.0, **{f: 0 for f in TOKEN_FIELDS}}

    everything, deduped, copies = empty(), empty(), empty()
    by_day: dict[str, dict] = defaultdict(empty)
    copies_by_day: dict[str, dict] = defaultdict(empty)
    by_model: dict[str, dict] = defaultdict(empty)
    for day, copy, model, n, cost, *tokens in rows:
        targets = [everything, by_model[model]] + (
            [copies, copies_by_day[day]] if copy else [deduped, by_day[day]]
        )
        for t in targets:
            t["messages"] += n
            t["cost"] += cost
            for f, v in zip(TOKEN_FIELDS, tokens, strict=True):
                t[f] += int(v)
    zero_sessions = conn_zero
    n_sessions, cost, *tokens = columns
    session_columns = {"sessions": n_sessions, "cost": cost}
    session_columns.update({f: int(v) for f, v in zip(TOKEN_FIELDS, tokens, strict=True)})
    return {
        "all_messages": everything,
        "without_fork_copies": deduped,
        "fork_copies": copies,
        "session_columns": session_columns,
        "by_day": dict(by_day),
        "copies_by_day": dict(copies_by_day),
        "by_model": dict(by_model),
        "zero_sessions": zero_sessions,
    }


def close(a: float, b: float, cents: bool = False) -> bool:
    return abs(a - b) < (0.005 if cents else 0.5)


# ------------------------------------------------------------------------------- figures


def bench_sessions(cc: list[str] | None, truth: dict) -> dict:
    cmd = our_cmd("sessions", "--db", str(DB), "--all", "--format", "json", "--no-cache")
    cc_cmd = [*cc, "opencode", "session", "--offline", "--json", "--timezone", TZ] if cc else None
    t, rss, pair = timed(cmd, cc_cmd, peer_env=ccusage_env() if cc_cmd else None)
    result: dict = {"ours_s": round(t, 2), "ours_peak_rss_mb": rss}
    # Each session's own figures (--no-fold): with --all and folding, a subagent's figures
    # are in its parent's row and in its own, so the rows would add up to more.
    rows = json.loads(capture([*cmd, "--no-fold"]))
    cols = truth["session_columns"]
    our_cost = sum(r["cost"] for r in rows)
    our_tokens = {f: sum(r[f"{f}_tokens"] for r in rows) for f in TOKEN_FIELDS}
    result["ours_agree_with_session_columns"] = (
        len(rows) == cols["sessions"]
        and close(our_cost, cols["cost"], cents=True)
        and all(our_tokens[f] == cols[f] for f in TOKEN_FIELDS)
    )
    result["ours_total_cost"] = round(our_cost, 4)
    if cc_cmd and pair:
        result.update(
            ccusage_s=round(pair["peer_s"], 2),
            ratio=round(pair["peer_s"] / t, 2),
            ratio_by_block=pair["peer_over_ours_by_block"],
        )
        doc = json.loads(capture(cc_cmd, env=ccusage_env()))
        result["ccusage_sessions"] = len(doc["sessions"])
        result["ccusage_totals"] = doc.get("totals")
        result["ccusage_vs_db"] = _cc_compare(doc["totals"], doc["sessions"], truth)
        missing = cols["sessions"] - len(doc["sessions"])
        if missing:
            result["ccusage_sessions_missing"] = missing
            result["ccusage_sessions_missing_why"] = (
                f"{truth['zero_sessions']} session(s) in the database have no tokens at all "
                "(only failed requests); ccusage lists only sessions with usage"
            )
    else:
        result["ccusage"] = "not installed (npm failed); row skipped"
    return result


def _cc_compare(totals: dict, rows: list[dict], truth: dict) -> dict:
    """ccusage's totals against the database's, and what explains the difference."""
    raw, dedup = truth["all_messages"], truth["without_fork_copies"]
    got = {
        "input": totals["inputTokens"],
        "output": totals["outputTokens"],
        "cache_read": totals["cacheReadTokens"],
        "cache_write": totals["cacheCreationTokens"],
    }
    notes = []
    tokens_all = all(got[f] == raw[f] for f in got)
    if tokens_all:
        notes.append(
            "tokens equal the sum of every assistant message, fork copies included "
            f"({truth['fork_copies']['messages']:,} copied messages counted twice)"
        )
    elif all(got[f] == dedup[f] for f in got):
        notes.append("tokens equal the sum without fork copies")
    else:
        notes.append("tokens differ from the database: " + json.dumps(got))
    four = sum(got.values())
    if totals["totalTokens"] == four + raw["reasoning"]:
        notes.append(
            "reasoning tokens have no column: in totalTokens, not in outputTokens "
            f"({raw['reasoning']:,})"
        )
    by_model = _cost_by_model(rows, truth)
    same = [m for m, c in by_model.items() if close(c["ccusage"], c["opencode"], cents=True)]
    repriced = {m: c for m, c in by_model.items() if m not in same}
    cost = totals["totalCost"]
    if not repriced:
        notes.append("cost per model equals OpenCode's stored cost")
    else:
        extra = sum(c["ccusage"] - c["opencode"] for c in repriced.values())
        zero = all(c["opencode"] == 0 for c in repriced.values())
        notes.append(
            f"cost {cost:.2f} = OpenCode's stored {raw['cost']:.2f} (fork copies included) "
            f"{'+' if extra >= 0 else '-'} {abs(extra):.2f} for {', '.join(repriced)}: "
            + (
                "ccusage keeps OpenCode's cost where it is non-zero but re-prices messages "
                "OpenCode stored at $0 (a free model) from its own price table"
                if zero
                else "ccusage re-prices these models from its own price table"
            )
        )
    return {"tokens_match_all_messages": tokens_all, "cost_by_model": by_model, "notes": notes}


def _cost_by_model(rows: list[dict], truth: dict) -> dict:
    theirs: dict[str, float] = defaultdict(float)
    for row in rows:
        for m in row.get("modelBreakdowns", []):
            theirs[m["modelName"]] += m["cost"]
    out = {}
    for model, ref in sorted(truth["by_model"].items()):
        name = model.split("/", 1)[1]
        out[model] = {
            "opencode": round(ref["cost"], 2),
            "ccusage": round(theirs.get(name, 0.0), 2),
        }
    return out


def bench_usage(cc: list[str] | None, oc: Path | None, truth: dict) -> dict:
    cmd = our_cmd(
        "usage",
        "--db",
        str(DB),
        "--all",
        "--by",
        "day",
        "--format",
        "json",
        "--tz",
        TZ,
        "--no-cache",
    )
    cmd_cc = [*cc, "opencode", "daily", "--offline", "--json", "--timezone", TZ] if cc else None
    t, rss, pair = timed(cmd, cmd_cc, peer_env=ccusage_env() if cmd_cc else None)
    doc = json.loads(capture(cmd))
    result: dict = {"ours_s": round(t, 2), "ours_peak_rss_mb": rss}
    total = doc["total"]
    dedup = truth["without_fork_copies"]
    mine = {f: total[f"{f}_tokens"] for f in TOKEN_FIELDS}
    result["ours_total"] = total
    result["ours_equal_db_without_fork_copies"] = all(
        mine[f] == dedup[f] for f in TOKEN_FIELDS
    ) and close(total["cost"], dedup["cost"], cents=True)
    days_off = []
    for row in doc["rows"]:
        ref = truth["by_day"].get(row["day"], {})
        if any(row[f"{f}_tokens"] != ref.get(f, 0) for f in TOKEN_FIELDS) or not close(
            row["cost"], ref.get("cost", 0.0), cents=True
        ):
            days_off.append(row["day"])
    result["ours_days_differing_from_db"] = days_off
    ours_by_day = {row["day"]: row for row in doc["rows"]}

    if cmd_cc and pair:
        result.update(
            ccusage_s=round(pair["peer_s"], 2),
            ratio_vs_ccusage=round(pair["peer_s"] / t, 2),
            ratio_vs_ccusage_by_block=pair["peer_over_ours_by_block"],
        )
        cc_doc = json.loads(capture(cmd_cc, env=ccusage_env()))
        result["ccusage_vs_db"] = _cc_compare(cc_doc["totals"], cc_doc["daily"], truth)
        result["per_day"] = _per_day(cc_doc["daily"], ours_by_day, truth)
    else:
        result["ccusage"] = "not installed (npm failed); row skipped"

    if oc:
        env = opencode_env()
        cmd_oc = [str(oc), "stats", "--models"]
        runs = [
            measure(cmd_oc, env=env, cwd=PEERS / "opencode" / "home") for _ in range(OPENCODE_RUNS)
        ]
        t_oc = min(r[0] for r in runs)
        result.update(opencode_stats_s=round(t_oc, 2), ratio_vs_opencode_stats=round(t_oc / t, 2))
        text = capture(cmd_oc, env=env, cwd=PEERS / "opencode" / "home").decode(errors="replace")
        result["opencode_stats_vs_db"] = _stats_compare(text, truth)
    return result


def _per_day(cc_days: list[dict], ours_by_day: dict, truth: dict) -> dict:
    """Days where ccusage and ours disagree, and whether fork copies explain every token."""
    differing, explained = [], 0
    for row in cc_days:
        day = row["date"]
        mine = ours_by_day.get(day)
        theirs = {
            "input": row["inputTokens"],
            "output": row["outputTokens"],
            "cache_read": row["cacheReadTokens"],
            "cache_write": row["cacheCreationTokens"],
        }
        mine_t = {f: (mine or {}).get(f"{f}_tokens", 0) for f in theirs}
        if theirs == mine_t:
            continue
        copies = truth["copies_by_day"].get(day, {})
        if all(theirs[f] - mine_t[f] == copies.get(f, 0) for f in theirs):
            explained += 1
        differing.append(day)
    return {
        "days": len(cc_days),
        "ours_days": len(ours_by_day),
        "token_rows_differing": len(differing),
        "explained_by_fork_copies": explained,
        "note": (
            "on every differing day ccusage's tokens exceed ours by exactly the fork copies "
            "dated that day (ccusage counts copied history again; we count it once)"
            if explained == len(differing)
            else f"{len(differing) - explained} day(s) differ beyond fork copies"
        ),
    }


def _stats_compare(text: str, truth: dict) -> dict:
    raw = truth["all_messages"]
    m = re.search(r"Total Cost\s+\$([0-9.,]+)", text)
    sessions = re.search(r"Sessions\s+([0-9,]+)", text)
    messages = re.search(r"Messages\s+([0-9,]+)", text)
    cost = float(m.group(1).replace(",", "")) if m else None
    return {
        "total_cost": cost,
        "sessions": int(sessions.group(1).replace(",", "")) if sessions else None,
        "messages": int(messages.group(1).replace(",", "")) if messages else None,
        "cost_equals_all_messages": cost is not None and close(cost, raw["cost"], cents=True),
        "note": (
            "OpenCode sums its session rows: fork copies counted again, subagents as their "
            "own sessions; reasoning tokens not shown"
        ),
    }


def _tree_pss_mb(pid: int) -> float:
    """Proportional set size of ``pid`` and its descendants, in MB: what the process tree
    holds in memory, each shared page counted once in all (a forked worker shares pages)."""
    total_kb, todo = 0, [pid]
    while todo:
        current = todo.pop()
        try:
            for line in Path(f"/proc/{current}/smaps_rollup").read_text().splitlines():
                if line.startswith("Pss:"):
                    total_kb += int(line.split()[1])
                    break
            for task in Path(f"/proc/{current}/task").iterdir():
                todo += [int(c) for c in (task / "children").read_text().split()]
        except (OSError, ValueError):
            continue
    return total_kb / 1024


def tree_peak_pss(cmd: list[str]) -> float | None:
    """Peak of the whole process tree's PSS during one run, sampled every 20 ms (Linux)."""
    if not Path("/proc/self/smaps_rollup").exists():
        return None
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=ROOT)
    peak = 0.0
    while proc.poll() is None:
        peak = max(peak, _tree_pss_mb(proc.pid))
        time.sleep(0.02)
    return round(peak)


def bench_import() -> dict:
    cmd = our_cmd("import", "--db", str(DB), "--all")
    pair = paired(cmd, [PY, __file__, "--bare", str(DB)])
    t, rss, bare, bare_rss = pair["ours_s"], pair["ours_rss"], pair["peer_s"], pair["peer_rss"]
    one_env = {**os.environ, "OPENCODE_EVENTS_WORKERS": "1"}
    one, _ = best(cmd, env=one_env)
    return {
        "ours_s": round(t, 2),
        "ours_peak_rss_mb": rss,
        "ours_tree_peak_pss_mb": tree_peak_pss(cmd),
        "ours_one_process_s": round(one, 2),
        "bare_loop_s": round(bare, 2),
        "bare_loop_peak_rss_mb": bare_rss,
        "ratio_ours_over_bare": round(t / bare, 2),
        "ratio_by_block": [round(1 / r, 2) for r in reversed(pair["pair_ratios"])],
        # ours one process, best of 3 in a row, against the bare loop's best in the blocks above
        "ratio_one_process_over_bare": round(one / bare, 2),
    }


def bench_otel() -> dict:
    """``otel --all`` (OTLP JSON Lines of every session, to /dev/null) beside ``import --all``
    in alternating blocks (both with their workers), and both in one process."""
    cmd = our_cmd("otel", "--db", str(DB), "--all")
    imp = our_cmd("import", "--db", str(DB), "--all")
    pair = paired(cmd, imp)
    one_env = {**os.environ, "OPENCODE_EVENTS_WORKERS": "1"}
    one, _ = best(imp, env=one_env)
    ours_one, ours_one_rss = best(cmd, env=one_env)
    lines = capture(cmd).count(b"\n")
    return {
        "ours_s": round(pair["ours_s"], 2),
        "ours_peak_rss_mb": pair["ours_rss"],
        "ours_one_process_s": round(ours_one, 2),
        "ours_one_process_peak_rss_mb": ours_one_rss,
        "import_s": round(pair["peer_s"], 2),
        "import_one_process_s": round(one, 2),
        "ratio_over_import": round(pair["ours_s"] / pair["peer_s"], 2),
        "ratio_over_import_by_block": [round(1 / r, 2) for r in reversed(pair["pair_ratios"])],
        "ratio_one_process": round(ours_one / one, 2),
        "json_lines": lines,
    }


def small_rss() -> dict:
    """Peak RSS of each of ours on a database a tenth the size: flat means about the same.
    The reports as the big database's are measured, with ``--no-cache`` (else a second
    ``make bench`` measures the cache's repeat)."""
    out = {}
    for name, args in (
        ("sessions", ("sessions", "--all", "--format", "json", "--no-cache")),
        ("usage", ("usage", "--all", "--by", "day", "--format", "json", "--tz", TZ, "--no-cache")),
        ("import", ("import", "--all")),
        ("otel", ("otel", "--all")),
    ):
        try:
            out[name] = measure(our_cmd(*args[:1], "--db", str(SMALL_DB), *args[1:]))[1]
        except RuntimeError:
            out[name] = None
    return out


def _statusline_times(path: Path) -> dict[str, str]:
    """``--at`` for the bench: the database's last write, and noon of its busiest day (the
    most messages created), both UTC. One scan of the message table, at set-up."""
    conn = sqlite3.connect(f"file:{path}?immutable=1", uri=True)
    try:
        (last,) = conn.execute("SELECT max(time_updated) FROM message").fetchone()
        (day, _count) = conn.execute(
            "SELECT time_created / 86400000 AS d, count(*) AS n FROM message "
            "GROUP BY d ORDER BY n DESC LIMIT 1"
        ).fetchone()
    finally:
        conn.close()

    def iso(ms: int) -> str:
        return datetime.fromtimestamp(ms / 1000, UTC).isoformat()

    return {"last_write": iso(last), "busiest_day": iso(day * 86_400_000 + 43_200_000)}


def bench_statusline() -> dict:
    """``statusline`` against the start-up floor, in alternating blocks; its own cost is
    the difference. Budget: under 100 ms, on the 10,000-session database."""
    floor = our_cmd("--version")
    result: dict = {}
    for name, at in _statusline_times(DB).items():
        cmd = our_cmd("statusline", "--db", str(DB), "--tz", "UTC", "--at", at)
        line = capture(cmd).decode().strip()
        pair = paired(cmd, floor)
        result[name] = {
            "at": at,
            "line": line,
            "ours_s": round(pair["ours_s"], 4),
            "floor_s": round(pair["peer_s"], 4),
            "over_floor_ms": round((pair["ours_s"] - pair["peer_s"]) * 1000, 1),
            "ours_peak_rss_mb": pair["ours_rss"],
        }
    return result


TOP_SCRIPT = """
import json, sys, time
from opencode_events.reports.top import TopBoard
path, now = sys.argv[1], float(sys.argv[2])
board = TopBoard(path)
t = time.process_time(); board.refresh(now); first = time.process_time() - t
t = time.process_time()
for _ in range(200):
    board.refresh(now)
idle = (time.process_time() - t) / 200
changed, rows = [], []
for _ in range(10):
    before = board.rows_read
    t = time.process_time(); board.refresh(now, force=True); changed.append(time.process_time() - t)
    rows.append(board.rows_read - before)
print(json.dumps({"first_look_ms": round(first * 1000, 1), "idle_refresh_ms": round(idle * 1000, 3),
    "changed_refresh_ms": round(min(changed) * 1000, 2), "changed_rows_read": rows[0],
    "sessions_shown": len(board.board().rows)}))
"""


def bench_top() -> dict:
    """``top``'s refresh CPU in its own process, on both databases, at each one's last write."""
    result = {}
    for name, path in (("10k", DB), ("1k", SMALL_DB)):
        conn = sqlite3.connect(f"file:{path}?immutable=1", uri=True)
        (last,) = conn.execute("SELECT max(time_updated) FROM message").fetchone()
        conn.close()
        out = capture([PY, "-c", TOP_SCRIPT, str(path), str(last)], env={**os.environ, "TZ": TZ})
        result[name] = json.loads(out)
    return result


def top_verdicts(top: dict) -> list[tuple[str, object, str, bool | None]]:
    big, small = top["10k"], top["1k"]

    def per_session(part: dict) -> float:
        return part["changed_refresh_ms"] / max(1, part["sessions_shown"])

    ratio = per_session(big) / max(per_session(small), 0.001)
    changed = (
        f"top, refresh after every session on the board changed (CPU ms, "
        f"{big['sessions_shown']} sessions; 1/10 db: {small['changed_refresh_ms']} for "
        f"{small['sessions_shown']})"
    )
    return [
        (
            f"top, first look (CPU ms; 1/10 db: {small['first_look_ms']})",
            big["first_look_ms"],
            "(figure)",
            None,
        ),
        (
            "top, refresh of an unchanged store (CPU ms)",
            big["idle_refresh_ms"],
            "< 1",
            big["idle_refresh_ms"] < 1,
        ),
        (changed, big["changed_refresh_ms"], "per session < 3× the 1/10 db's", ratio < 3),
    ]


def statusline_verdicts(st: dict) -> list[tuple[str, object, str, bool | None]]:
    return [
        (
            f"statusline, {name.replace('_', ' ')} (s; floor `--version` {part['floor_s']})",
            part["ours_s"],
            "< 0.1",
            part["ours_s"] < 0.1,
        )
        for name, part in st.items()
    ]


# ------------------------------------------------------------------------------- report


def _with_range(ratio: float | None, pairs: list[float] | None) -> object:
    """The ratio of the best times, and its range block by block, when known."""
    if ratio is None or not pairs:
        return ratio
    return f"{ratio} (blocks {pairs[0]}–{pairs[1]})"


def verdicts(r: dict) -> list[tuple[str, object, str, bool | None]]:
    s, u, i, small = r["sessions"], r["usage"], r["import"], r["rss_small_db"]
    o = r.get("otel", {})
    rows = [
        (
            "sessions --all vs ccusage opencode session (× faster)",
            _with_range(s.get("ratio"), s.get("ratio_by_block")),
            ">= 3",
            None if s.get("ratio") is None else s["ratio"] >= 3,
        ),
        (
            "usage --all --by day vs ccusage opencode daily (× faster)",
            _with_range(u.get("ratio_vs_ccusage"), u.get("ratio_vs_ccusage_by_block")),
            ">= 5",
            None if u.get("ratio_vs_ccusage") is None else u["ratio_vs_ccusage"] >= 5,
        ),
        (
            "usage --all --by day vs opencode stats (× faster)",
            u.get("ratio_vs_opencode_stats"),
            "(figure)",
            None,
        ),
        (
            "import --all vs bare part loop (× slower)",
            _with_range(i["ratio_ours_over_bare"], i.get("ratio_by_block")),
            "<= 1.5",
            i["ratio_ours_over_bare"] <= 1.5,
        ),
    ]
    tree = i.get("ours_tree_peak_pss_mb")
    rows.append(
        (
            "import --all, whole process tree (workers too), peak PSS (MB)",
            tree,
            "< 200",
            None if tree is None else tree < 200,
        )
    )
    if o:
        rows.append(
            (
                "otel --all vs import --all, both in one process (× slower)",
                f"{o['ratio_over_import']} / {o['ratio_one_process']}"
                f" ({o['ours_s']} s vs {o['import_s']} s; one process"
                f" {o['ours_one_process_s']} s vs {o['import_one_process_s']} s)",
                "(figure)",
                None,
            )
        )
    for name, part in (("sessions", s), ("usage", u), ("import", i), ("otel", o)):
        if not part:
            continue
        rss = part.get("ours_peak_rss_mb")
        small_rss_mb = small.get(name)
        flat = rss is not None and small_rss_mb is not None and rss <= small_rss_mb * 1.5 + 20
        if name == "sessions":  # holds one summary per session listed, by design
            flat, budget = True, "< 200 (grows with sessions listed)"
        else:
            budget = "< 200, flat"
        rows.append(
            (
                f"peak RSS, {name} (MB; 1/10 db: {small_rss_mb})",
                rss,
                budget,
                None if rss is None else (rss < 200 and flat),
            )
        )
    return rows


def sqlite_versions() -> dict:
    """The SQLite of Python's sqlite3 (most reads) and of apsw (the `sessions` workers)."""
    try:
        import apsw

        fast = apsw.sqlite_lib_version()
    except ImportError:
        fast = None
    return {"sqlite3": sqlite3.sqlite_version, "apsw": fast}


# ------------------------------------------------------------------------------- shapes


SHAPES_DIR = OUT / "shapes"
# Shapes of gen_db.py (its SHAPES) the bench runs over with --shapes; the worst is the verdict.
DEFAULT_SHAPES = ("bench", "field", "medium", "spaced")
ROUNDS = max(1, int(os.environ.get("BENCH_ROUNDS", "2")))
# (figure, key of the ratio, budget, whether higher is better)
SHAPE_FIGURES = (
    ("sessions --all vs ccusage opencode session (× faster)", "sessions", "ratio", 3.0, True),
    (
        "usage --all --by day vs ccusage opencode daily (× faster)",
        "usage",
        "ratio_vs_ccusage",
        5.0,
        True,
    ),
    ("import --all vs bare part loop (× slower)", "import", "ratio_ours_over_bare", 1.5, False),
)


def shape_path(shape: str) -> Path:
    """The database of a shape: the bench shape is `make bench`'s own database."""
    return DB if shape == "bench" else SHAPES_DIR / f"{shape}.db"


def warm(path: Path) -> None:
    """Read the whole file once: every tool then meets it in the page cache alike."""
    with open(path, "rb") as f:
        while f.read(1 << 24):
            pass


def evict_others(keep: Path) -> None:
    """Drop from the page cache every database the bench made but ``keep``: the other
    shapes', their peers' copies, the growth databases. Read before, they would stand in
    the cache beside the one measured, and the kernel, short of memory, would push out the
    measured one's pages (read once, just now) first: our runs read the file after the
    peer's copy is written, so they would meet a colder cache than the peer does."""
    found = {path.resolve() for folder in (OUT, GROWTH_DIR) for path in folder.rglob("*.db")}
    for path in found - {keep.resolve()}:
        with contextlib.suppress(OSError):
            evict(path)


def bench_shapes(shapes: list[str]) -> dict:
    """sessions, usage and import against their peers on the database of each shape,
    ``BENCH_ROUNDS`` rounds over all shapes (a round meets every shape in the machine's
    state of the moment), and per figure the shape where ours does worst."""
    global DB
    cc = ccusage()
    main_db = DB
    metas, runs = {}, {shape: [] for shape in shapes}
    try:
        for shape in shapes:
            DB = shape_path(shape)
            metas[shape] = ensure_db(DB, "--shape", shape)
        for round_no in range(ROUNDS):
            for shape in shapes:
                DB = shape_path(shape)
                print(f"round {round_no + 1}/{ROUNDS}: {shape} …", file=sys.stderr)
                evict_others(DB)
                warm(DB)
                truth = sql_truth(DB)
                runs[shape].append(
                    {
                        "idle_before": check_idle(),
                        "sessions": bench_sessions(cc, truth),
                        "usage": bench_usage(cc, None, truth),
                        "import": bench_import(),
                    }
                )
                # What is measured so far, in case the (long) run is cut short.
                partial = OUT / "shapes-partial.json"
                partial.write_text(json.dumps({"shapes": metas, "runs": runs}, indent=2) + "\n")
    finally:
        DB = main_db
    summary = {}
    for shape in shapes:
        figures = {}
        for _name, part, key, _budget, higher in SHAPE_FIGURES:
            values = [r[part].get(key) for r in runs[shape] if r[part].get(key) is not None]
            if values:
                figures[f"{part}.{key}"] = {
                    "best": max(values) if higher else min(values),
                    "range": [min(values), max(values)],
                    "ours_s": [r[part]["ours_s"] for r in runs[shape]],
                }
        summary[shape] = figures
    return {"shapes": metas, "summary": summary, "runs": runs}


def shape_verdicts(result: dict) -> list[tuple[str, object, str, bool | None]]:
    """Per figure the worst shape's best ratio (its range over the rounds beside it)."""
    rows = []
    summary = result["summary"]
    for name, part, key, budget, higher in SHAPE_FIGURES:
        found = {s: f[f"{part}.{key}"] for s, f in summary.items() if f"{part}.{key}" in f}
        if not found:
            rows.append((name, "not measured", "", None))
            continue
        worst = (min if higher else max)(found, key=lambda s: found[s]["best"])
        fig = found[worst]
        each = ", ".join(f"{s} {found[s]['best']}" for s in found)
        ok = fig["best"] >= budget if higher else fig["best"] <= budget
        lo, hi = fig["range"]
        rows.append(
            (
                f"{name}, worst shape: {worst} (rounds {lo}–{hi}; {each})",
                fig["best"],
                f"{'>=' if higher else '<='} {budget:g}",
                ok,
            )
        )
    return rows


# ------------------------------------------------------------------------------- growth


GROWTH_DIR = Path(os.environ.get("BENCH_GROWTH_DIR", str(OUT / "growth")))
# name: gen_db.py's size options (1x is `make bench`'s database itself)
GROWTH = {
    "1x": (),
    "3x": ("--sessions", "30000", "--parts", "3000000", "--target-gb", "9"),
    "10x": ("--sessions", "100000", "--parts", "10000000", "--target-gb", "30"),
}
# First runs: the report cache (docs/cache.md) neither read nor written.
GROWTH_COMMANDS = {
    "sessions --all": ("sessions", "--all", "--format", "json", "--no-cache"),
    "usage --all --by day": (
        "usage", "--all", "--by", "day", "--format", "json", "--tz", TZ, "--no-cache"
    ),
    "usage --all --by session": (
        "usage", "--all", "--by", "session", "--format", "json", "--tz", TZ, "--no-cache"
    ),
    "import --all": ("import", "--all"),
}  # fmt: skip


def evict(path: Path) -> bool:
    """Drop this one file's pages from the page cache (POSIX_FADV_DONTNEED: other files,
    other users' work, are left alone); False where that is not offered."""
    if not hasattr(os, "posix_fadvise"):
        return False
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)
    return True


def bench_growth(sizes: list[str]) -> dict:
    """First-run times and peak RSS of ours at each size: cold (the file evicted from the
    page cache first) and warm (the best of ``BENCH_REPEAT`` runs straight after). The 3x
    and 10x databases (9 and 30 GB) are made once, with ``nice``, in ``BENCH_GROWTH_DIR``
    (default bench/out/growth), and kept whatever gen_db.py becomes."""
    out = {}
    for size in sizes:
        path = DB if size == "1x" else GROWTH_DIR / f"opencode-{size}.db"
        if size != "1x":
            GROWTH_DIR.mkdir(parents=True, exist_ok=True)
        meta = ensure_db(path, *GROWTH[size], once=True) if size != "1x" else ensure_db(DB)
        row: dict = {"database": meta}
        for name, args in GROWTH_COMMANDS.items():
            cmd = our_cmd(args[0], "--db", str(path), *args[1:])
            cold = evict(path)
            t_cold, rss_cold = measure(cmd)
            cpu_cold = LAST_CPU[0]
            warm_runs = []
            for _ in range(REPEAT):
                warm_runs.append((*measure(cmd), LAST_CPU[0]))
            row[name] = {
                "cold_s": round(t_cold, 2) if cold else None,
                "cold_cpu_s": round(cpu_cold, 2),
                "warm_s": round(min(r[0] for r in warm_runs), 2),
                "warm_cpu_s": round(min(r[2] for r in warm_runs), 2),
                "peak_rss_mb": max(rss_cold, *(r[1] for r in warm_runs)),
            }
            if "--no-cache" in args:  # and a repeat with the report cache (budget < 0.2 s)
                row[name].update(_cached_repeat([c for c in cmd if c != "--no-cache"]))
            print(f"{size} {name}: {row[name]}", file=sys.stderr)
        out[size] = row
    return out


def _cached_repeat(cmd: list[str]) -> dict:
    """``cmd`` with the report cache, in a cache folder of its own: the first run (which
    writes the cache), the best of ``BENCH_REPEAT`` repeats with nothing changed, and the
    best of as many runs with the memos and renditions gone, so that every session comes
    from the ledger: what a change makes of the report at its most (the database is not
    written; a changed session would be read instead of its entry)."""
    home = Path(tempfile.mkdtemp(prefix="opencode-events-growth-cache-"))
    env = {**os.environ, "XDG_CACHE_HOME": str(home)}
    try:
        first, first_rss = measure(cmd, env=env)
        repeats = [measure(cmd, env=env) for _ in range(REPEAT)]
        ledgers = []
        for _ in range(REPEAT):
            for kept in [*home.rglob("memo-*"), *home.rglob("render-*")]:
                kept.unlink()
            ledgers.append(measure(cmd, env=env))
    finally:
        shutil.rmtree(home, ignore_errors=True)
    return {
        "cached_first_s": round(first, 2),
        "cached_first_rss_mb": first_rss,
        "repeat_s": round(min(r[0] for r in repeats), 3),
        "repeat_rss_mb": max(r[1] for r in repeats),
        "ledger_s": round(min(r[0] for r in ledgers), 2),
        "ledger_rss_mb": max(r[1] for r in ledgers),
    }


def growth_table(result: dict) -> str:
    lines = [
        "| size | sessions / parts / GB | command | cold s | warm s (CPU s) "
        "| warm ÷ (1x × size), wall / CPU | peak RSS MB | cached: first s / repeat s "
        "| from the ledger: s / peak RSS MB |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    base = result.get("1x")
    for size, row in result.items():
        meta = row["database"]
        what = f"{meta['sessions']:,} / {meta['parts']:,} / {meta['size_gb']}"
        for name in GROWTH_COMMANDS:
            fig = row[name]
            per = ""
            if base is not None:
                scale = meta["parts"] / base["database"]["parts"]
                wall = fig["warm_s"] / (base[name]["warm_s"] * scale)
                cpu = fig["warm_cpu_s"] / (base[name]["warm_cpu_s"] * scale)
                per = f"{wall:.2f} / {cpu:.2f}"
            cached = f"{fig['cached_first_s']} / {fig['repeat_s']}" if "repeat_s" in fig else "—"
            ledger = f"{fig['ledger_s']} / {fig['ledger_rss_mb']}" if "ledger_s" in fig else "—"
            lines.append(
                f"| {size} | {what} | `{name}` | {fig['cold_s']} | {fig['warm_s']} "
                f"({fig['warm_cpu_s']}) | {per} | {fig['peak_rss_mb']} | {cached} | {ledger} |"
            )
    return "\n".join(lines)


def _option(name: str) -> list[str] | None:
    """The values of ``--name a,b`` on the command line ([] for the flag alone), or None."""
    if name not in sys.argv:
        return None
    at = sys.argv.index(name)
    value = sys.argv[at + 1] if at + 1 < len(sys.argv) else ""
    return [v for v in value.split(",") if v and not v.startswith("--")]


def main() -> None:
    shapes = _option("--shapes")
    if shapes is not None:
        check_idle()
        OUT.mkdir(parents=True, exist_ok=True)
        result = bench_shapes(shapes or list(DEFAULT_SHAPES))
        (OUT / "shapes-results.json").write_text(json.dumps(result, indent=2) + "\n")
        print("| figure | measured | budget | verdict |\n|---|---|---|---|")
        for name, value, budget, ok in shape_verdicts(result):
            verdict = "—" if ok is None else ("ok" if ok else "OVER BUDGET")
            print(f"| {name} | {value} | {budget} | {verdict} |")
        print(json.dumps(result["summary"], indent=2))
        return
    sizes = _option("--growth")
    if sizes is not None:
        # Sizes measured before are kept (the 10x run is long: it can be run on its own).
        saved = OUT / "growth-results.json"
        result = json.loads(saved.read_text()) if saved.exists() else {}
        result.update(bench_growth(sizes or list(GROWTH)))
        result = {size: result[size] for size in GROWTH if size in result}
        saved.write_text(json.dumps(result, indent=2) + "\n")
        print(growth_table(result))
        return
    if len(sys.argv) == 3 and sys.argv[1] == "--bare":
        bare_loop(sys.argv[2])
        return
    if sys.argv[1:] == ["--statusline"]:
        check_idle()
        ensure_db(DB)
        ensure_db(SMALL_DB, "--sessions", "1000", "--parts", "100000", "--target-gb", "0.3")
        live = {"statusline": bench_statusline(), "top": bench_top()}
        print("| figure | measured | budget | verdict |\n|---|---|---|---|")
        rows = statusline_verdicts(live["statusline"]) + top_verdicts(live["top"])
        for name, value, budget, ok in rows:
            verdict = "—" if ok is None else ("ok" if ok else "OVER BUDGET")
            print(f"| {name} | {value} | {budget} | {verdict} |")
        print(json.dumps(live, indent=2))
        return
    OUT.mkdir(parents=True, exist_ok=True)
    idle = check_idle()
    meta = ensure_db(DB)
    ensure_db(SMALL_DB, "--sessions", "1000", "--parts", "100000", "--target-gb", "0.3")
    with open(DB, "rb") as f:  # warm the page cache for everyone alike
        while f.read(1 << 24):
            pass
    truth = sql_truth(DB)
    cc = ccusage()
    oc = opencode()
    results = {
        "idle_before": idle,
        "database": meta,
        "sessions": bench_sessions(cc, truth),
        "usage": bench_usage(cc, oc, truth),
        "import": bench_import(),
        "otel": bench_otel(),
        "rss_small_db": small_rss(),
        "statusline": bench_statusline(),
        "top": bench_top(),
        "db_sums": {
            k: truth[k]
            for k in ("all_messages", "without_fork_copies", "fork_copies", "session_columns")
        },
        "ccusage_version": CCUSAGE_VERSION if cc else None,
        "sqlite_versions": sqlite_versions(),
    }
    (OUT / "store-results.json").write_text(json.dumps(results, indent=2) + "\n")
    print(
        f"\nStore: {meta['sessions']:,} sessions, {meta['messages']:,} messages, "
        f"{meta['parts']:,} parts, {meta['size_gb']} GB\n"
    )
    print("| figure | measured | budget | verdict |\n|---|---|---|---|")
    live = statusline_verdicts(results["statusline"]) + top_verdicts(results["top"])
    for name, value, budget, ok in verdicts(results) + live:
        verdict = "—" if ok is None else ("ok" if ok else "OVER BUDGET")
        print(f"| {name} | {value} | {budget} | {verdict} |")
    print()
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
