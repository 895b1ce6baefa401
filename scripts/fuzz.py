"""`make fuzz`: the long fuzz run, FUZZ_CASES (a million) cases per input kind.

The cases and checks are tests/fuzzing.py's (``make test`` runs a bounded, seeded set of
them); here they run on every core, seeds 0 … FUZZ_CASES-1 per kind, and the figures are
printed as a Markdown table: cases, events written, seconds, failures (each failing seed is
printed with its exception, to replay with ``check(kind, case(kind, seed))``).
"""

from __future__ import annotations

import os
import sys
import time
import traceback
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.fuzzing import KINDS, case, check  # noqa: E402

CASES = int(os.environ.get("FUZZ_CASES", "1000000"))
SLICE = 5000


def run_slice(kind: str, start: int, stop: int) -> tuple[int, int, list[tuple[int, str]]]:
    events, failures = 0, []
    for seed in range(start, stop):
        try:
            events += check(kind, case(kind, seed))
        except Exception:  # noqa: BLE001 - every failure is reported with its seed
            failures.append((seed, traceback.format_exc(limit=4)))
    return stop - start, events, failures


def main() -> int:
    workers = os.cpu_count() or 1
    print(f"fuzz: {CASES:,} cases per input kind on {workers} processes\n")
    print("| input kind | cases | events written | seconds | cases/s | failures |")
    print("|---|---:|---:|---:|---:|---:|")
    failed = 0
    with ProcessPoolExecutor(workers) as pool:
        for kind in KINDS:
            began = time.perf_counter()
            slices = [(kind, s, min(s + SLICE, CASES)) for s in range(0, CASES, SLICE)]
            cases = events = 0
            failures: list[tuple[int, str]] = []
            for n, e, f in pool.map(run_slice, *zip(*slices, strict=True)):
                cases, events, failures = cases + n, events + e, failures + f
            seconds = time.perf_counter() - began
            print(
                f"| {kind} | {cases:,} | {events:,} | {seconds:.0f} | {cases / seconds:,.0f} "
                f"| {len(failures)} |",
                flush=True,
            )
            for seed, text in failures[:5]:
                print(f"\n{kind} seed {seed}:\n{text}", file=sys.stderr)
            failed += len(failures)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
