"""`make bench`: the figures SPEC §4 budgets, as ratios against jq and a bare msgspec loop.

Machines are shared and noisy, so every timing is the best of several runs and the
verdicts are ratios measured side by side, never absolute times. The stream's throughput
is measured on two mixes (``bench/gen_stream.py``): ordinary small records (no record
over 4 KB) and every sample record (an 84 KB tool output among them, cheap per byte for
every reader); and on the ordinary mix as one long run (one session throughout, the
shape of one large ``opencode run`` log, which the workers cut inside the session).
Prints a Markdown table and writes bench/out/results.json. Needs
samples/*/stream.jsonl (real captures) and jq. Some parts only:

    python bench/run.py throughput_ordinary start_up
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

from machine import check_idle

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "bench" / "out"
PY = sys.executable
CLI = [PY, "-m", "opencode_events"]
STREAM_MB = float(os.environ.get("BENCH_STREAM_MB", "200"))
MEMORY_MB = float(os.environ.get("BENCH_MEMORY_MB", "1024"))
REPEAT = int(os.environ.get("BENCH_REPEAT", "3"))


def measure(cmd: list[str], *, stdin=None, stdout=subprocess.DEVNULL) -> tuple[float, int]:
    """(wall seconds, peak RSS in MB) of one run of ``cmd``, from wait4's own rusage."""
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, stdin=stdin, stdout=stdout, stderr=subprocess.PIPE, cwd=ROOT)
    _, status, usage = os.wait4(proc.pid, 0)
    elapsed = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise SystemExit(
            f"error: {' '.join(cmd)} exited {proc.returncode}: {proc.stderr.read().decode()[-500:]}"
        )
    return elapsed, usage.ru_maxrss // 1024


def make_stream(size_mb: float, *, ordinary: bool = False, one_session: bool = False) -> Path:
    mix = "long-run" if one_session else "ordinary" if ordinary else "samples"
    path = OUT / f"stream-{mix}-{int(size_mb)}mb.jsonl"
    if not path.exists():
        extra = ["--ordinary"] if ordinary else []
        extra += ["--one-session"] if one_session else []
        with open(path, "wb") as f:
            subprocess.run(
                [PY, "bench/gen_stream.py", *extra, str(size_mb)], stdout=f, check=True, cwd=ROOT
            )
    return path


def side_by_side(commands: dict[str, list[str]]) -> dict[str, list[tuple[float, int]]]:
    """(seconds, peak RSS) of each command once per round, in turn, for REPEAT rounds: a
    busy spell of the machine slows every command of its round alike."""
    runs: dict[str, list[tuple[float, int]]] = {name: [] for name in commands}
    for _ in range(REPEAT):
        for name, cmd in commands.items():
            runs[name].append(measure(cmd))
    return runs


def throughput(*, ordinary: bool, one_session: bool = False) -> dict:
    """`normalize` against `jq -c .` and the bare msgspec loop on one mix, side by side:
    the best time of each, their ratio, and the range of the rounds' own ratios.
    ``one_session``: the ordinary mix as one long run (one session, new part ids)."""
    path = make_stream(STREAM_MB, ordinary=ordinary, one_session=one_session)
    size_mb = path.stat().st_size / (1 << 20)
    with open(path, "rb") as f:
        lines = sum(1 for _ in f)
    commands = {
        "ours": CLI + ["normalize", str(path)],
        "bare": [PY, "bench/bare_loop.py", str(path)],
    }
    if shutil.which("jq"):
        commands["jq"] = ["jq", "-c", ".", str(path)]
    runs = side_by_side(commands)
    times = {name: [seconds for seconds, _ in each] for name, each in runs.items()}
    ours = min(times["ours"])
    ours_rss = max(rss for _, rss in runs["ours"])
    result: dict = {
        "mix": (
            "ordinary records as one long run (one session)"
            if one_session
            else "ordinary records (none over 4 KB)"
            if ordinary
            else "every sample record"
        ),
        "input_mb": round(size_mb, 1),
        "lines": lines,
        "ours_s": round(ours, 2),
        "ours_mb_per_s": round(size_mb / ours, 1),
        "ours_peak_rss_mb": ours_rss,
    }
    for peer, key in (("bare", "bare_msgspec"), ("jq", "jq")):
        if peer not in times:
            continue
        rounds = [theirs / mine for theirs, mine in zip(times[peer], times["ours"], strict=True)]
        result[f"{key}_s"] = round(min(times[peer]), 2)
        result[f"ratio_vs_{peer}"] = round(min(times[peer]) / ours, 2)
        result[f"ratio_vs_{peer}_rounds"] = [round(min(rounds), 2), round(max(rounds), 2)]
    return result


def memory_flat() -> dict:
    """Peak RSS of `normalize` over a stream piped in from the generator (not stored)."""
    gen = subprocess.Popen(
        [PY, "bench/gen_stream.py", str(MEMORY_MB)], stdout=subprocess.PIPE, cwd=ROOT
    )
    elapsed, rss = measure(CLI + ["normalize", "--buffered"], stdin=gen.stdout)
    gen.stdout.close()
    gen.wait()
    return {"stream_mb": MEMORY_MB, "peak_rss_mb": rss, "seconds": round(elapsed, 1)}


def long_line() -> dict:
    """Lines longer than the limit (16 MiB) are measured, not kept: memory stays flat; a
    record within it costs memory in proportion to its size (figure only)."""
    path = OUT / "long-line.jsonl"
    kept = OUT / "kept-record.jsonl"

    def write_record(f, size: int) -> None:
        # Written in pieces: a child's peak RSS starts from this process's at fork time, so
        # the bench process must never hold a 64 MB string.
        f.write(b'{"type":"text","timestamp":1,"sessionID":"ses_long","part":')
        f.write(b'{"id":"prt_long","type":"text","text":"')
        for _ in range(size >> 20):
            f.write(b"z" * (1 << 20))
        f.write(b'"}}\n')

    if not path.exists():
        with open(path, "wb") as f:
            write_record(f, 64 << 20)
            for _ in range(64):
                f.write(b"q" * (1 << 20))
            f.write(b"\n")
    if not kept.exists():
        with open(kept, "wb") as f:
            write_record(f, 8 << 20)
    elapsed, rss = measure(CLI + ["normalize", str(path)])
    kept_s, kept_rss = measure(CLI + ["normalize", str(kept)])
    return {
        "lines": "a 64 MB record and a 64 MB garbage line (both over the limit)",
        "seconds": round(elapsed, 2),
        "peak_rss_mb": rss,
        "kept_8mb_record_peak_rss_mb": kept_rss,
        "kept_8mb_record_seconds": round(kept_s, 2),
    }


SHORT_MB = float(os.environ.get("BENCH_SHORT_MB", "32"))


def short_lines() -> dict:
    """Peak RSS of `normalize` over a file of short lines (1 MB reads: the worst case),
    non-JSON lines and `{}` lines: each line is an event."""
    result: dict = {"input_mb": SHORT_MB}
    for name, line in (("not_json", b"x\n"), ("empty_objects", b"{}\n")):
        path = OUT / f"short-{name}-{int(SHORT_MB)}mb.txt"
        if not path.exists():
            block = line * ((1 << 20) // len(line))
            with open(path, "wb") as f:
                for _ in range(int(SHORT_MB)):
                    f.write(block)
        elapsed, rss = measure(CLI + ["normalize", str(path)])
        result[f"{name}_peak_rss_mb"] = rss
        result[f"{name}_seconds"] = round(elapsed, 1)
    return result


def usage_memory() -> dict:
    """Peak RSS of `usage` over a 1 GB stream piped in, per grouping (rows written as they
    are read for turn and step; one row per session or day held)."""
    result: dict = {"stream_mb": MEMORY_MB}
    for by in ("turn", "step", "session", "day"):
        gen = subprocess.Popen(
            [PY, "bench/gen_stream.py", str(MEMORY_MB)], stdout=subprocess.PIPE, cwd=ROOT
        )
        elapsed, rss = measure(CLI + ["usage", "--by", by, "--format", "json"], stdin=gen.stdout)
        gen.stdout.close()
        gen.wait()
        result[f"{by}_peak_rss_mb"] = rss
        result[f"{by}_seconds"] = round(elapsed, 1)
    return result


def otel_file() -> dict:
    """Peak RSS and time of `otel -i` over the 200 MB ordinary mix as a file (read twice:
    each session sent once complete, docs/otel.md), and of `normalize` of it in one process
    beside it, for the cost of a span over an event."""
    path = make_stream(STREAM_MB, ordinary=True)
    elapsed, rss = measure(CLI + ["otel", "-i", str(path)])
    one = {**os.environ, "OPENCODE_EVENTS_WORKERS": "1"}
    start = time.perf_counter()
    subprocess.run(CLI + ["normalize", str(path)], stdout=subprocess.DEVNULL, env=one, check=True)
    return {
        "input_mb": STREAM_MB,
        "seconds": round(elapsed, 2),
        "peak_rss_mb": rss,
        "normalize_one_process_s": round(time.perf_counter() - start, 2),
    }


def start_up() -> dict:
    """Median and best of 15 runs each of `normalize </dev/null` and of Python alone,
    taken in turn. The package's bytecode is compiled first, as an install compiles it
    (`make bench` does too; a part run alone needs it): with PYTHONDONTWRITEBYTECODE set,
    every start would compile every module from source again."""
    subprocess.run([PY, "-m", "compileall", "-q", "opencode_events"], cwd=ROOT, check=True)
    script = Path(PY).with_name("opencode-events")
    commands = {
        "normalize_empty": [str(script), "normalize"] if script.exists() else CLI + ["normalize"],
        "python_alone": [PY, "-c", "pass"],
    }
    times: dict[str, list[float]] = {name: [] for name in commands}
    for _ in range(15):
        for name, cmd in commands.items():
            with open(os.devnull, "rb") as empty:
                times[name].append(measure(cmd, stdin=empty)[0])
    result = {}
    for name, runs in times.items():
        result[f"{name}_ms"] = round(statistics.median(runs) * 1000, 1)
        result[f"{name}_best_ms"] = round(min(runs) * 1000, 1)
    return result


# SPEC §4's budgets: the stream's on both mixes, ordinary records first (the harder), and
# on the ordinary mix as one long run (the shape of one large `opencode run` log).
BUDGETS = [
    *(
        entry
        for mix in ("ordinary", "long_run", "samples")
        for entry in (
            (
                f"throughput vs jq -c . ({mix} mix)",
                lambda r, mix=mix: r[f"throughput_{mix}"].get("ratio_vs_jq"),
                ">=",
                6.0,
            ),
            (
                f"throughput vs bare msgspec loop ({mix} mix)",
                lambda r, mix=mix: r[f"throughput_{mix}"]["ratio_vs_bare"],
                ">=",
                0.8,
            ),
        )
    ),
    ("peak RSS, 1 GB piped stream (MB)", lambda r: r["memory"]["peak_rss_mb"], "<", 60),
    (
        "peak RSS, short non-JSON lines (MB)",
        lambda r: r["short_lines"]["not_json_peak_rss_mb"],
        "<",
        60,
    ),
    (
        "peak RSS, short {} lines (MB)",
        lambda r: r["short_lines"]["empty_objects_peak_rss_mb"],
        "<",
        60,
    ),
    ("peak RSS, lines over the limit (MB)", lambda r: r["long_line"]["peak_rss_mb"], "<", 60),
    *(
        (
            f"peak RSS, usage --by {by} of 1 GB (MB)",
            lambda r, by=by: r["usage"][f"{by}_peak_rss_mb"],
            "<",
            60,
        )
        # --by session holds one row per session (about 470 bytes each; a figure, no budget)
        for by in ("turn", "step", "day")
    ),
    # what `otel` of the store is held to (bench/store_bench.py)
    ("peak RSS, otel -i of the 200 MB mix (MB)", lambda r: r["otel_file"]["peak_rss_mb"], "<", 200),
    (
        "start-up, normalize </dev/null (ms, median)",
        lambda r: r["start_up"]["normalize_empty_ms"],
        "<",
        60,
    ),
]

PARTS = {
    "throughput_ordinary": lambda: throughput(ordinary=True),
    "throughput_long_run": lambda: throughput(ordinary=True, one_session=True),
    "throughput_samples": lambda: throughput(ordinary=False),
    "memory": memory_flat,
    "long_line": long_line,
    "short_lines": short_lines,
    "usage": usage_memory,
    "otel_file": otel_file,
    "start_up": start_up,
}


def main() -> None:
    """`bench/run.py [PART]...`: every part (`make bench`), or only those named (their
    results go to results-PART….json, the full run's results.json stays)."""
    wanted = sys.argv[1:] or list(PARTS)
    unknown = [name for name in wanted if name not in PARTS]
    if unknown:
        raise SystemExit(f"error: no part {', '.join(unknown)} (parts: {', '.join(PARTS)})")
    OUT.mkdir(parents=True, exist_ok=True)
    results: dict = {"idle_before": check_idle()}
    for name in wanted:
        results[name] = PARTS[name]()
    name = "results.json" if wanted == list(PARTS) else f"results-{'-'.join(wanted)}.json"
    (OUT / name).write_text(json.dumps(results, indent=2) + "\n")
    print("| figure | measured | budget | verdict |\n|---|---|---|---|")
    for name, get, op, limit in BUDGETS:
        try:
            value = get(results)
        except KeyError:  # a part not run this time
            continue
        ok = value is not None and (value >= limit if op == ">=" else value < limit)
        print(f"| {name} | {value} | {op} {limit} | {'ok' if ok else 'OVER BUDGET'} |")
    print()
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
