"""Shared fixtures for the real-OpenCode harness (tests/harness, docs/harness.md).

* ``opencode_bin`` (session): installs the pinned OpenCode 1.18.33 into
  ``.cache/`` and returns the binary path; FAILS (never skips) with the reason
  if that is impossible.
* ``mock_model``: factory ``mock_model(steps, **kw) -> MockModel`` (started;
  stopped at teardown).
* ``opencode_env``: factory ``opencode_env(mock, **kw) -> OpenCodeEnv`` -- an
  isolated HOME/XDG world under ``tmp_path`` whose config points at ``mock``.
"""

from __future__ import annotations

import atexit
import os
import shutil
import sys
import tempfile
from pathlib import Path

import pytest

# The report cache (reports.cache) of every test run lives in a folder of its own, never in
# the user's ~/.cache; the reports read and fill it as they would for a user. Removed when
# the run ends (hundreds were left in /tmp).
os.environ["XDG_CACHE_HOME"] = tempfile.mkdtemp(prefix="oce-test-cache-")
atexit.register(shutil.rmtree, os.environ["XDG_CACHE_HOME"], True)
# So does what `otel --follow` keeps of what it sent ($XDG_STATE_HOME/opencode-events). Not
# named opencode-events-*: the tests that look for the store's private copies in /tmp by that
# name would see another run's folders come and go.
os.environ["XDG_STATE_HOME"] = tempfile.mkdtemp(prefix="oce-test-state-")
atexit.register(shutil.rmtree, os.environ["XDG_STATE_HOME"], True)

# GNU readline, once loaded (pytest's debugging support loads it), exports COLUMNS and LINES
# to child processes behind os.environ's back; the CLI draws a table in a pipe as wide as
# COLUMNS says, so a command run by a test would see a width nobody chose.
for _name in ("COLUMNS", "LINES"):
    if _name not in os.environ:
        os.unsetenv(_name)

_REPO = Path(__file__).resolve().parents[1]
if str(_REPO) not in sys.path:
    sys.path.insert(0, str(_REPO))

from tests.harness.mock_model import MockModel  # noqa: E402
from tests.harness.opencode import OpenCodeEnv, ensure_opencode  # noqa: E402


@pytest.fixture(scope="session")
def opencode_bin() -> Path:
    try:
        return ensure_opencode()
    except RuntimeError as e:
        pytest.fail(f"cannot install the pinned OpenCode: {e}", pytrace=False)


@pytest.fixture
def mock_model():
    started: list[MockModel] = []

    def make(steps=None, **kw) -> MockModel:
        m = MockModel(steps, **kw).start()
        started.append(m)
        return m

    yield make
    for m in started:
        m.stop()


@pytest.fixture
def opencode_env(opencode_bin, tmp_path):
    made: list[OpenCodeEnv] = []

    def make(mock: MockModel, **kw) -> OpenCodeEnv:
        root = kw.pop("root", tmp_path / f"oc{len(made)}")
        env = OpenCodeEnv(opencode_bin, root, base_url=mock.base_url, **kw)
        made.append(env)
        return env

    yield make
    # every process is stopped by OpenCodeEnv.run / serve(); the dirs live in tmp_path


# Property tests explore new examples on every local run; in CI (CI=true) they replay a fixed
# derandomized set, so a landing never depends on the luck of the draw.
def _hypothesis_profiles() -> None:
    import os

    from hypothesis import settings

    settings.register_profile("ci", derandomize=True)
    if os.environ.get("CI"):
        settings.load_profile("ci")


_hypothesis_profiles()
