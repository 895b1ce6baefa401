"""`make bench`: the figures SPEC §4 budgets, as ratios against jq and a bare msgspec loop.

Machines are shared and noisy, so every timing is the best of several runs and the
verdicts are ratios measured side by side, never absolute times. Prints a Markdown table
and writes bench/out/results.json. Needs samples/*/stream.jsonl (real captures) and jq.
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


def best(cmd: list[str], **kwargs) -> tuple[float, int]:
    runs = [measure(cmd, **kwargs) for _ in range(REPEAT)]
    return min(r[0] for r in runs), max(r[1] for r in runs)


def make_stream(size_mb: float) -> Path:
    path = OUT / f"stream-{int(size_mb)}mb.jsonl"
    if not path.exists():
        with open(path, "wb") as f:
            subprocess.run(
                [PY, "bench/gen_stream.py", str(size_mb)], stdout=f, check=True, cwd=ROOT
            )
    return path


def throughput() -> dict:
    path = make_stream(STREAM_MB)
    size_mb = path.stat().st_size / (1 << 20)
    with open(path, "rb") as f:
        lines = sum(1 for _ in f)
    ours, ours_rss = best(CLI + ["normalize", str(path)])
    bare, _ = best([PY, "bench/bare_loop.py", str(path)])
    result = {
        "input_mb": round(size_mb, 1),
        "lines": lines,
        "ours_s": round(ours, 2),
        "ours_mb_per_s": round(size_mb / ours, 1),
        "ours_peak_rss_mb": ours_rss,
        "bare_msgspec_s": round(bare, 2),
        "ratio_vs_bare": round(bare / ours, 2),
    }
    if shutil.which("jq"):
        jq, _ = best(["jq", "-c", ".", str(path)])
        result.update(jq_s=round(jq, 2), ratio_vs_jq=round(jq / ours, 2))
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
    path = OUT / "long-line.jsonl"
    if not path.exists():
        text = "z" * (64 << 20)
        record = {
            "type": "text",
            "timestamp": 1,
            "sessionID": "ses_long",
            "part": {"id": "prt_long", "type": "text", "text": text},
        }
        path.write_bytes(json.dumps(record).encode() + b"\n" + b"q" * (64 << 20) + b"\n")
    elapsed, rss = measure(CLI + ["normalize", str(path)])
    return {
        "lines": "a 64 MB record and a 64 MB garbage line",
        "seconds": round(elapsed, 2),
        "peak_rss_mb": rss,
    }


def start_up() -> dict:
    def median_ms(cmd: list[str]) -> float:
        times = []
        for _ in range(15):
            with open(os.devnull, "rb") as empty:
                times.append(measure(cmd, stdin=empty)[0])
        return round(statistics.median(times) * 1000, 1)

    script = Path(PY).with_name("opencode-events")
    ours = median_ms([str(script), "normalize"] if script.exists() else CLI + ["normalize"])
    python_alone = median_ms([PY, "-c", "pass"])
    return {"normalize_empty_ms": ours, "python_alone_ms": python_alone}


BUDGETS = [
    ("throughput vs jq -c .", lambda r: r["throughput"].get("ratio_vs_jq"), ">=", 4.0),
    ("throughput vs bare msgspec loop", lambda r: r["throughput"]["ratio_vs_bare"], ">=", 0.6),
    ("peak RSS, 1 GB piped stream (MB)", lambda r: r["memory"]["peak_rss_mb"], "<", 60),
    (
        "start-up, normalize </dev/null (ms)",
        lambda r: r["start_up"]["normalize_empty_ms"],
        "<",
        120,
    ),
]


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    idle = check_idle()
    results = {
        "idle_before": idle,
        "throughput": throughput(),
        "memory": memory_flat(),
        "long_line": long_line(),
        "start_up": start_up(),
    }
    (OUT / "results.json").write_text(json.dumps(results, indent=2) + "\n")
    print("| figure | measured | budget | verdict |\n|---|---|---|---|")
    for name, get, op, limit in BUDGETS:
        value = get(results)
        ok = value is not None and (value >= limit if op == ">=" else value < limit)
        print(f"| {name} | {value} | {op} {limit} | {'ok' if ok else 'OVER BUDGET'} |")
    print()
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
