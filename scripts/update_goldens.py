"""Regenerate tests/golden/: the normalized output of every real capture in samples/.

For each scenario, each input it has:

- ``<scenario>.jsonl``         ``normalize samples/<scenario>/stream.jsonl``
- ``<scenario>.sse.jsonl``     ``normalize samples/<scenario>/events.sse``
- ``<scenario>.export.jsonl``  ``normalize samples/<scenario>/export.json``
- ``<scenario>.import.jsonl``  ``import --all --db samples/<scenario>/opencode.db``

Run after an intended change to the output (`make goldens`), then read the diff: every
changed line in tests/golden/ is a change users will see.
"""

from __future__ import annotations

import io
import sys
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from opencode_events.output.jsonl import JsonlWriter  # noqa: E402
from opencode_events.pipeline.normalize import import_sessions, normalize_streams  # noqa: E402
from opencode_events.store.open import select_sessions  # noqa: E402
from opencode_events.store.sqlite import Store  # noqa: E402

GOLDEN = ROOT / "tests" / "golden"


def normalized(path: Path) -> bytes:
    out = io.BytesIO()
    with open(path, "rb", buffering=0) as f:
        normalize_streams([("-", f)], JsonlWriter(out))
    return out.getvalue()


def imported(db: Path) -> bytes:
    out = io.BytesIO()
    with Store(db) as store:
        import_sessions(store, select_sessions(store, all_sessions=True), JsonlWriter(out))
    return out.getvalue()


# golden suffix → (input file in the scenario folder, how it is read)
SOURCES: dict[str, tuple[str, Callable[[Path], bytes]]] = {
    "": ("stream.jsonl", normalized),
    ".sse": ("events.sse", normalized),
    ".export": ("export.json", normalized),
    ".import": ("opencode.db", imported),
}


def cases() -> list[tuple[Path, Path, Callable[[Path], bytes]]]:
    """(input, golden file, reader) for every input of every captured scenario."""
    found = []
    for folder in sorted(p for p in (ROOT / "samples").iterdir() if p.is_dir()):
        for suffix, (name, reader) in SOURCES.items():
            source = folder / name
            if source.exists() and source.stat().st_size:
                found.append((source, GOLDEN / f"{folder.name}{suffix}.jsonl", reader))
    return found


def main() -> None:
    GOLDEN.mkdir(parents=True, exist_ok=True)
    for source, golden, reader in cases():
        golden.write_bytes(reader(source))
        print(f"wrote {golden.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
