"""`otel` against a real OTLP/HTTP backend: MLflow from PyPI, started on 127.0.0.1.

The first run installs MLflow 3.17.2 into .cache/ (about 45 s, once); each test starts a
server (about 5 s). Every real capture of samples/ is exported from its store, as OTLP/JSON
and, to a server of its own, as OTLP protobuf (``--protocol http/protobuf``: MLflow takes
both); MLflow's own token totals for each trace must equal ours, and exporting again must
leave one copy of every trace and span.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.harness.mlflow import MlflowServer, ensure_mlflow
from tests.otlp_check import attrs, spans_of

pytestmark = pytest.mark.e2e

SAMPLES = Path(__file__).resolve().parents[2] / "samples"
CMD = [sys.executable, "-m", "opencode_events"]
STORES = sorted(p.parent.name for p in SAMPLES.glob("*/opencode.db"))


@pytest.fixture(scope="module")
def mlflow_python():
    try:
        return ensure_mlflow()
    except RuntimeError as exc:
        pytest.fail(f"cannot install MLflow: {exc}", pytrace=False)


@pytest.fixture
def mlflow(mlflow_python, tmp_path_factory):
    """A server of its own for each test: MLflow keys a trace by its id alone, so the same
    history sent again into another experiment stays in the first one."""
    server = MlflowServer(mlflow_python, tmp_path_factory.mktemp("mlflow")).start()
    try:
        yield server
    finally:
        server.stop()


def otel(*args: str) -> subprocess.CompletedProcess[bytes]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    return subprocess.run([*CMD, "otel", *args], capture_output=True, timeout=300, env=env)


def our_traces(db: Path) -> dict[str, dict]:
    """Our own totals per trace, from the JSON Lines of the same export."""
    result = otel("--db", str(db), "--all", "--only", "traces")
    assert result.returncode == 0, result.stderr
    traces: dict[str, dict] = {}
    for line in result.stdout.splitlines():
        for span in spans_of(json.loads(line)):
            trace = traces.setdefault(
                span["traceId"], {"input_tokens": 0, "output_tokens": 0, "spans": set()}
            )
            trace["spans"].add(span["spanId"])
            values = attrs(span)
            if "gen_ai.usage.input_tokens" in values:
                trace["input_tokens"] += values["gen_ai.usage.input_tokens"]
                trace["output_tokens"] += values["gen_ai.usage.output_tokens"]
                trace.setdefault("cache_read_input_tokens", 0)
                trace["cache_read_input_tokens"] += values["gen_ai.usage.cache_read.input_tokens"]
    return traces


@pytest.mark.parametrize("protocol", ["http/json", "http/protobuf"])
def test_mlflows_totals_equal_ours_and_a_second_export_leaves_one_copy(mlflow, protocol):
    experiment = mlflow.experiment(f"opencode-events samples {protocol}")
    expected: dict[str, dict] = {}
    for name in STORES:
        db = SAMPLES / name / "opencode.db"
        expected.update(our_traces(db))
        for _ in range(2):  # the same history twice: the same spans, not twice as many
            result = otel(
                "--db",
                str(db),
                "--all",
                "--only",
                "traces",
                "--endpoint",
                mlflow.url,
                "--protocol",
                protocol,
                "-H",
                f"x-mlflow-experiment-id={experiment}",
            )
            assert result.returncode == 0, result.stderr
            assert result.stdout == b""
            assert b" spans in " in result.stderr
    stored = {t["trace_id"].removeprefix("tr-"): t for t in mlflow.traces(experiment)}
    assert sorted(stored) == sorted(expected)
    for trace_id, ours in expected.items():
        theirs = stored[trace_id]
        assert sorted(theirs["spans"]) == sorted(ours["spans"]), trace_id
        usage = theirs["token_usage"] or {}
        if ours["input_tokens"] or ours["output_tokens"]:
            assert usage["input_tokens"] == ours["input_tokens"], trace_id
            assert usage["output_tokens"] == ours["output_tokens"], trace_id
            assert usage["total_tokens"] == ours["input_tokens"] + ours["output_tokens"]
            assert usage.get("cache_read_input_tokens", 0) == ours["cache_read_input_tokens"]
        assert "OK" in theirs["state"] or "ERROR" in theirs["state"], theirs["state"]


def test_a_backend_without_metrics_is_one_error_line(mlflow):
    """MLflow takes traces only: its 404 for /v1/metrics is a refusal, named, exit 2."""
    experiment = mlflow.experiment("opencode-events metrics")
    result = otel(
        "--db",
        str(SAMPLES / "text" / "opencode.db"),
        "--endpoint",
        mlflow.url,
        "-H",
        f"x-mlflow-experiment-id={experiment}",
    )
    assert result.returncode == 2
    lines = result.stderr.decode().splitlines()
    assert len(lines) == 1
    assert lines[0].startswith(f"error: {mlflow.url}/v1/metrics refused the metrics: HTTP 404")
