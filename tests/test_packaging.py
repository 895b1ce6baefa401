"""What `pip install opencode-events` gets: the sdist and the wheel built from it, as a
release builds them (`python -m build`: the sdist, then the wheel from the sdist), from a
clean copy of the tree (a checkout's `build/` or `*.egg-info` from an earlier build would
leak into the archives). The runtime needs only the modules and `py.typed`: no data files."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _tree_files() -> list[str]:
    """The tree as a clean clone has it: tracked files, and new ones not ignored."""
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("needs a git checkout to copy the tree from")
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        check=True,
    ).stdout.decode()
    return [name for name in listed.split("\0") if name and (ROOT / name).is_file()]


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> tuple[list[str], list[str], str, list[str]]:
    """(the sdist's names, the wheel's names, the wheel's METADATA, the tree's files)."""
    tmp = tmp_path_factory.mktemp("packaging")
    # Asked away from the checkout: where `build` is not installed, the `build/` folder a
    # `pip wheel .` leaves there imports as a namespace package (importorskip would pass).
    asked = subprocess.run(
        [sys.executable, "-m", "build", "--version"], capture_output=True, cwd=tmp
    )
    if asked.returncode:
        pytest.skip("needs the dev extra's `build` (make test installs it)")
    tree = _tree_files()
    copy = tmp / "tree"
    for name in tree:
        (copy / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, copy / name)
    dist = tmp / "dist"
    done = subprocess.run(
        [sys.executable, "-m", "build", "--outdir", str(dist), str(copy)],
        capture_output=True,
        cwd=tmp,
    )
    assert done.returncode == 0, done.stdout.decode()[-2000:] + done.stderr.decode()[-2000:]
    (sdist,) = dist.glob("opencode_events-*.tar.gz")
    (wheel,) = dist.glob("opencode_events-*.whl")
    with tarfile.open(sdist) as archive:
        # without the top folder, opencode_events-X.Y.Z/
        sdist_names = [m.name.partition("/")[2] for m in archive.getmembers() if m.isfile()]
    with zipfile.ZipFile(wheel) as archive:
        wheel_names = archive.namelist()
        (metadata,) = [n for n in wheel_names if n.endswith(".dist-info/METADATA")]
        wheel_metadata = archive.read(metadata).decode()
    return sdist_names, wheel_names, wheel_metadata, tree


def _package(tree: list[str]) -> set[str]:
    return {n for n in tree if n.startswith("opencode_events/") and n.endswith((".py", ".typed"))}


def test_the_sdist_holds_the_package_its_readme_and_docs_and_no_half_test_suite(built):
    """setuptools adds `tests/test*.py` to an sdist by default, but not their conftest,
    helpers, goldens or samples: a test suite that cannot run. The sdist is the package,
    the README and the docs it and the commands' help point to (docs/*.md)."""
    sdist, _, _, tree = built
    assert _package(tree) <= set(sdist)
    assert {"README.md", "pyproject.toml", "LICENSE"} <= set(sdist)
    assert {n for n in tree if n.startswith("docs/")} <= set(sdist)
    unwanted = ("tests/", "bench/", "samples/", "scripts/", ".ci/", "build/")
    assert [n for n in sdist if n.startswith(unwanted) or "__pycache__" in n] == []


def test_the_wheel_holds_exactly_the_package(built):
    """Every module and py.typed (a subpackage missed by the package finder would show
    here), and nothing else but its metadata; the MIT licence's text goes with every copy,
    as the licence asks."""
    _, wheel, _, tree = built
    assert {n for n in wheel if ".dist-info/" not in n} == _package(tree)
    assert "opencode_events/py.typed" in wheel
    assert [n for n in wheel if n.endswith(".dist-info/licenses/LICENSE")] != []


def test_the_metadata_says_what_the_wheel_is(built):
    """py.typed ships, so the `Typing :: Typed` classifier says so (PyPI lists it)."""
    _, _, metadata, _ = built
    lines = metadata.splitlines()
    assert "Classifier: Typing :: Typed" in lines
    assert "Requires-Python: >=3.11" in lines
    assert "License-Expression: MIT" in lines
