"""MLflow as a real OTLP/HTTP backend for the otel tests (docs/otel.md, "Tested against").

* :func:`ensure_mlflow` installs the pinned MLflow from PyPI into its own virtual
  environment under ``<repo>/.cache/mlflow-<version>/`` (once, about 45 s and 850 MB;
  guarded by a file lock, as the OpenCode install is) and returns its Python. It raises
  ``RuntimeError`` with the reason when it cannot -- it never skips silently.
* :class:`MlflowServer` runs ``mlflow server`` on 127.0.0.1 with a SQLite store in a
  folder of its own (about 5 s to start); ``ingest`` is its OTLP endpoint, ``trace`` reads
  one trace back (its token totals, its spans) through MLflow's own client.

MLflow 3.17.2 takes ``POST /v1/traces`` with the header ``x-mlflow-experiment-id``, in
JSON (or protobuf), gzip or not; it has no ``/v1/metrics``. (The index's 3.18.0 needs an
``mlflow-skinny`` 3.18 that PyPI here lacks, so the version is pinned.)
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

from tests.harness.opencode import REPO_ROOT, free_port

MLFLOW_VERSION = "3.17.2"
CACHE_DIR = REPO_ROOT / ".cache" / f"mlflow-{MLFLOW_VERSION}"


def _python(venv: Path) -> Path:
    return venv / "bin" / "python"


def _ok(venv: Path) -> bool:
    marker = venv / ".installed"
    return marker.is_file() and marker.read_text().strip() == MLFLOW_VERSION


def ensure_mlflow(cache_dir: Path | None = None) -> Path:
    """Install the pinned MLflow (idempotent) and return the Python of its environment."""
    venv = Path(cache_dir or CACHE_DIR)
    if _ok(venv):
        return _python(venv)
    venv.parent.mkdir(parents=True, exist_ok=True)
    with open(venv.parent / f".mlflow-{MLFLOW_VERSION}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another process may be installing
        try:
            if _ok(venv):
                return _python(venv)
            steps = [
                [sys.executable, "-m", "venv", "--clear", str(venv)],
                [
                    str(_python(venv)),
                    "-m",
                    "pip",
                    "install",
                    "--quiet",
                    f"mlflow=={MLFLOW_VERSION}",
                ],
            ]
            for step in steps:
                done = subprocess.run(step, capture_output=True, text=True, timeout=1200)
                if done.returncode != 0:
                    tail = (done.stderr or done.stdout).strip().splitlines()[-5:]
                    raise RuntimeError(f"{' '.join(step[:4])} failed: " + " | ".join(tail))
            (venv / ".installed").write_text(MLFLOW_VERSION + "\n")
            return _python(venv)
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


_READ_TRACE = """
import json, sys
from mlflow import MlflowClient
client = MlflowClient(tracking_uri=sys.argv[1])
found = client.search_traces(locations=[sys.argv[2]], max_results=500)
out = []
for info in (t.info for t in found):
    trace = client.get_trace(info.trace_id)
    out.append({
        "trace_id": info.trace_id,
        "state": str(info.state),
        "token_usage": info.token_usage,
        "session": info.trace_metadata.get("mlflow.trace.session"),
        "spans": sorted(s.span_id for s in trace.data.spans),
    })
print(json.dumps(out))
"""


class MlflowServer:
    def __init__(self, python: Path, data: Path) -> None:
        self.python, self.data = python, data
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 120) -> MlflowServer:
        self.data.mkdir(parents=True, exist_ok=True)
        env = {
            **os.environ,
            "MLFLOW_DISABLE_TELEMETRY": "true",
            "DO_NOT_TRACK": "true",
            # No job runner: it starts seven worker processes (1.5 GB) the tests never use.
            "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false",
        }
        log = open(self.data / "server.log", "wb")  # noqa: SIM115 - the server's, kept open
        self.process = subprocess.Popen(
            [
                str(self.python.parent / "mlflow"),
                "server",
                "--host",
                "127.0.0.1",
                "--port",
                str(self.port),
                "--workers",
                "1",
                "--backend-store-uri",
                f"sqlite:///{self.data / 'mlflow.db'}",
                "--default-artifact-root",
                str(self.data / "artifacts"),
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,  # its workers in its own group, stopped together
        )
        log.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"mlflow server exited: {self._log_tail()}")
            try:
                with urllib.request.urlopen(f"{self.url}/health", timeout=2) as answer:
                    if answer.status == 200:
                        return self
            except OSError:
                pass
            time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"mlflow server not up after {timeout} s: {self._log_tail()}")

    def _log_tail(self) -> str:
        try:
            return " | ".join((self.data / "server.log").read_text().splitlines()[-5:])
        except OSError:
            return "(no log)"

    def stop(self) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        try:
            os.killpg(self.process.pid, signal.SIGTERM)
            self.process.wait(timeout=20)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=10)

    def experiment(self, name: str) -> str:
        request = urllib.request.Request(
            f"{self.url}/api/2.0/mlflow/experiments/create",
            data=json.dumps({"name": name}).encode(),
            headers={"Content-Type": "application/json"},
            method="POST",
        )
        with urllib.request.urlopen(request, timeout=30) as answer:
            return json.loads(answer.read())["experiment_id"]

    def traces(self, experiment: str) -> list[dict[str, Any]]:
        """Every trace of the experiment: its totals and the ids of its spans."""
        done = subprocess.run(
            [str(self.python), "-c", _READ_TRACE, self.url, experiment],
            capture_output=True,
            text=True,
            timeout=120,
        )
        if done.returncode != 0:
            raise RuntimeError(done.stderr.strip().splitlines()[-1] if done.stderr else "failed")
        return json.loads(done.stdout)
