"""`otel` over OTLP/HTTP protobuf (``OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf``).

One model, two encodings: every body of every capture in samples/, encoded as protobuf by
our own encoder (otel.protobuf, no protobuf package at run time), parses with the protocol's
own generated types (opentelemetry-proto) into the very message its JSON parses into. The
transport sends it as ``application/x-protobuf`` and reads the backend's protobuf replies
(a partial success, a ``google.rpc.Status``); the variables choose it as the spec ranks them.
"""

from __future__ import annotations

import gzip
import json
import math
from pathlib import Path

import msgspec
import pytest
from google.protobuf import json_format
from hypothesis import given, settings
from hypothesis import strategies as st
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTracePartialSuccess,
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

from opencode_events.otel import protobuf
from opencode_events.otel.export import (
    HttpDestination,
    export,
    store_builder,
    store_sessions,
    stream_sessions,
)
from opencode_events.otel.otlp import SpanBatches
from opencode_events.otel.spans import SpanData, SpanEvent, TraceBuilder
from opencode_events.otel.transport import ExportError, OtlpHttp, endpoints_from
from opencode_events.paths import otlp_environment
from opencode_events.store.open import every_session
from opencode_events.store.sqlite import Store
from tests.otlp_check import check, spans_of
from tests.test_otel import SAMPLES, STORES, backend, generated_store, run  # noqa: F401

PROTOBUF = {"OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf"}
TYPES = {"traces": ExportTraceServiceRequest, "metrics": ExportMetricsServiceRequest}


def bodies_of_store(name: str) -> list[tuple[str, bytes]]:
    bodies: list[tuple[str, bytes]] = []
    with Store(SAMPLES / name / "opencode.db") as store:
        builder = store_builder(store)
        export(
            store_sessions(store, every_session(store), builder),
            builder,
            lambda signal, body: bodies.append((signal, body)),
        )
    return bodies


def bodies_of_stream(path: Path) -> list[tuple[str, bytes]]:
    bodies: list[tuple[str, bytes]] = []
    with open(path, "rb") as stream:
        builder = TraceBuilder()
        export(
            stream_sessions([(str(path), stream)], builder),
            builder,
            lambda signal, body: bodies.append((signal, body)),
        )
    return bodies


def same_message(signal: str, body: bytes) -> None:
    """``body``'s protobuf encoding parses, strictly, as its JSON does (``check``)."""
    wire = protobuf.encoded(signal, body)
    message, expected = TYPES[signal].FromString(wire), check(body)
    assert message == expected
    # Unknown fields (a wrong number) are kept and serialized again: the bytes show them.
    assert message.SerializeToString(deterministic=True) == expected.SerializeToString(
        deterministic=True
    )
    assert len(wire) <= len(body)  # the JSON's size limits hold for the protobuf


# ------------------------------------------------------------------ one model, two encodings


@pytest.mark.parametrize("name", STORES)
def test_every_stored_bodys_protobuf_is_its_jsons_message(name):
    bodies = bodies_of_store(name)
    assert {signal for signal, _ in bodies} == {"traces", "metrics"}
    for signal, body in bodies:
        same_message(signal, body)


STREAMS = sorted(
    p.relative_to(SAMPLES).as_posix()
    for pattern in ("*/stream.jsonl", "*/events.jsonl")
    for p in SAMPLES.glob(pattern)
)


@pytest.mark.parametrize("path", STREAMS)
def test_every_streams_protobuf_is_its_jsons_message(path):
    for signal, body in bodies_of_stream(SAMPLES / path):
        same_message(signal, body)


def test_the_encoders_tables_name_every_field_of_the_model():
    """A field added to the JSON model (otel.otlp) without its protobuf number would be
    left out of the protobuf bodies unseen: each table names every field of its Struct."""
    for struct, table in protobuf.TABLES.items():
        assert {field[0] for field in table} == set(struct.__struct_fields__), struct.__name__


values = st.recursive(
    st.none()
    | st.booleans()
    | st.text()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=True, allow_infinity=True),
    lambda inner: st.lists(inner, max_size=4),
    max_leaves=12,
)


@settings(max_examples=150, deadline=None)
@given(
    attributes=st.dictionaries(st.text(max_size=12), values, max_size=6),
    event_attributes=st.dictionaries(st.text(max_size=12), values, max_size=3),
    name=st.text(),
    status=st.sampled_from([0, 1, 2]),
    message=st.text(),
    start=st.integers(min_value=0, max_value=2**64 - 1),
)
def test_any_attributes_go_as_protobuf_as_they_go_as_json(
    attributes, event_attributes, name, status, message, start
):
    """Unicode, empty strings, integers past int64 (held at its edge), negative and
    non-finite doubles (left out, as the JSON leaves them), nested lists, None."""
    span = SpanData(
        trace_id="0af7651916cd43dd8448eb211c80319c",
        span_id="b7ad6b7169203331",
        parent_span_id="00f067aa0ba902b7",
        name=name,
        kind=3,
        start_ns=start,
        end_ns=start,
        attributes=attributes,
        status=status,
        status_message=message,
        events=[SpanEvent(name="exception", time_ns=start, attributes=event_attributes)],
    )
    batches = SpanBatches()
    (body,) = [*batches.add({"service.name": "s", "n": 1}, [span]), *batches.flush()]
    same_message("traces", body)


@pytest.mark.parametrize(
    "value, expected",
    [
        (-1, -1),
        (2**63 - 1, 2**63 - 1),
        (-(2**63), -(2**63)),
        (2**80, 2**63 - 1),
        (0, 0),
        ("", ""),
        (False, False),
        (-0.0, -0.0),
        (-2.5, -2.5),
        (1e308, 1e308),
    ],
)
def test_an_attributes_edge_values_keep_their_type_and_value(value, expected):
    """A oneof's default (0, "", false) is a value, not an absence: it must be written."""
    span = SpanData(span_id="b7ad6b7169203331", name="x", kind=1, start_ns=1, end_ns=2,
                    attributes={"a": value})  # fmt: skip
    span.trace_id = "0af7651916cd43dd8448eb211c80319c"
    batches = SpanBatches()
    (body,) = [*batches.add({}, [span]), *batches.flush()]
    message = ExportTraceServiceRequest.FromString(protobuf.encoded("traces", body))
    (kv,) = message.resource_spans[0].scope_spans[0].spans[0].attributes
    got = getattr(kv.value, kv.value.WhichOneof("value"))
    assert got == expected and type(got) is type(expected)
    if isinstance(expected, float):
        assert math.copysign(1, got) == math.copysign(1, expected)


def test_an_unknown_field_is_an_error_not_a_silent_loss():
    with pytest.raises(msgspec.ValidationError):
        protobuf.encoded("traces", b'{"resourceSpans":[{"resource":{},"scopeSpans":[], "x":1}]}')


# -------------------------------------------------------------------------------- replies


def test_a_protobuf_partial_success_is_read():
    reply = ExportTraceServiceResponse(
        partial_success=ExportTracePartialSuccess(rejected_spans=3, error_message="too old")
    ).SerializeToString()
    assert protobuf.partial_success(reply) == (3, "too old")
    assert protobuf.partial_success(b"") is None
    assert protobuf.partial_success(b"{}") is None  # JSON, not protobuf
    assert protobuf.partial_success(b"\x0a\x05\x08") is None  # truncated


def status(code: int, message: str) -> bytes:
    """A ``google.rpc.Status`` (``code`` = 1, varint; ``message`` = 2, string), written by
    hand: its generated type is in googleapis-common-protos, not a dependency here."""
    text = message.encode()
    return bytes((0x08, code, 0x12, len(text))) + text


def test_a_google_rpc_status_message_is_read():
    reply = status(3, "invalid span id")
    assert protobuf.status_message(reply) == "invalid span id"
    assert protobuf.status_message(b"Bad Request") is None


def sender(url: str, protocol: str = "http/protobuf") -> OtlpHttp:
    return OtlpHttp(endpoints_from(url), protocol=protocol, sleep=lambda s: None)


def a_body() -> bytes:
    return next(body for signal, body in bodies_of_store("text") if signal == "traces")


def test_a_protobuf_request_is_the_serialized_message():
    body = a_body()
    with backend([200], body=b"", content_type="application/x-protobuf") as (state, url):
        assert sender(url).send("traces", body) is None
    ((path, headers, sent),) = state.requests
    assert path == "/v1/traces"
    assert headers["Content-Type"] == "application/x-protobuf"
    assert headers["Content-Encoding"] == "gzip"
    assert ExportTraceServiceRequest.FromString(sent) == check(body)


def test_a_partial_success_in_protobuf_is_returned():
    reply = ExportTraceServiceResponse(
        partial_success=ExportTracePartialSuccess(rejected_spans=2, error_message="too old")
    ).SerializeToString()
    with backend([200], body=reply, content_type="application/x-protobuf") as (_, url):
        note = sender(url).send("traces", a_body())
    assert str(note) == "the backend rejected 2 spans: too old"


def test_a_gzipped_protobuf_reply_is_read_too():
    reply = ExportTraceServiceResponse(
        partial_success=ExportTracePartialSuccess(error_message="deprecated")
    ).SerializeToString()
    with backend([200], body=gzip.compress(reply), content_type="application/x-protobuf") as (
        _,
        url,
    ):
        note = sender(url).send("traces", a_body())
    assert str(note) == "the backend kept all the spans, and warned: deprecated"


def test_a_json_reply_to_a_protobuf_request_is_read_as_json():
    """The reply's ``Content-Type`` says how to read it, whatever the request was."""
    reply = b'{"partialSuccess":{"rejectedSpans":"1","errorMessage":"x"}}'
    with backend([200], body=reply) as (_, url):
        note = sender(url).send("traces", a_body())
    assert str(note) == "the backend rejected 1 spans: x"


def test_a_protobuf_refusal_says_the_statuss_message():
    error = status(3, "invalid\ntrace id")
    with (
        backend([400], error=error, content_type="application/x-protobuf") as (_, url),
        pytest.raises(ExportError) as caught,
    ):
        sender(url).send("traces", a_body())
    assert str(caught.value) == (
        f"{url}/v1/traces refused the traces: HTTP 400 Bad Request: invalid trace id"
    )


@pytest.mark.parametrize(
    "protocol, other", [("http/json", "http/protobuf"), ("http/protobuf", "http/json")]
)
def test_a_415_says_to_try_the_other_encoding(protocol, other):
    with (
        backend([415], error=b"", content_type="text/plain") as (_, url),
        pytest.raises(ExportError) as caught,
    ):
        sender(url, protocol).send("traces", a_body())
    assert str(caught.value).endswith(
        f"HTTP 415 Unsupported Media Type: it may take {other}: "
        f"set OTEL_EXPORTER_OTLP_PROTOCOL={other}"
    )


# ----------------------------------------------------------------------- which protocol


@pytest.mark.parametrize(
    "env, given, expected",
    [
        ({}, None, ("http/json", "http/json")),
        (PROTOBUF, None, ("http/protobuf", "http/protobuf")),
        ({"OTEL_EXPORTER_OTLP_PROTOCOL": " HTTP/Protobuf "}, None, ("http/protobuf",) * 2),
        ({"OTEL_EXPORTER_OTLP_PROTOCOL": "http/jsonx"}, None, ("http/json", "http/json")),
        (
            {**PROTOBUF, "OTEL_EXPORTER_OTLP_METRICS_PROTOCOL": "http/json"},
            None,
            ("http/protobuf", "http/json"),
        ),
        (
            {"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/protobuf"},
            None,
            ("http/protobuf", "http/json"),
        ),
        (PROTOBUF, "http/json", ("http/json", "http/json")),
        ({"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, None, ("http/json", "http/json")),
        ({"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, "http/protobuf", ("http/protobuf",) * 2),
    ],
)
def test_the_protocol_as_the_spec_ranks_the_variables(env, given, expected):
    """A signal's own variable over the general one, ``--protocol`` over both; grpc with
    ``--endpoint`` given is ignored (the URL is an OTLP/HTTP one), as before."""
    destination = HttpDestination("http://c:4318", env=otlp_environment(env), protocol=given)
    assert (
        destination.senders["traces"].protocol,
        destination.senders["metrics"].protocol,
    ) == expected


@pytest.mark.parametrize(
    "env",
    [
        {"OTEL_EXPORTER_OTLP_PROTOCOL": "http/jsonx"},
        {"OTEL_EXPORTER_OTLP_PROTOCOL": "protobuf"},
        {"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/proto"},
    ],
)
def test_an_unknown_protocol_is_said_and_ignored(env):
    """The spec: a value of an enum the exporter does not know MUST be warned of and
    ignored. It was ignored without a word: a typo for http/protobuf went as JSON."""
    destination = HttpDestination("http://c:4318", env=otlp_environment(env))
    ((variable, value),) = env.items()
    assert destination.notes == [
        f"{variable}={value!r} is no OTLP protocol (http/protobuf, http/json or grpc): "
        "ignored, the requests go as http/json"
    ]
    assert {s.protocol for s in destination.senders.values()} == {"http/json"}


@pytest.mark.parametrize("value", ["http/json", " HTTP/Protobuf ", "grpc", ""])
def test_a_known_protocol_is_no_note(value):
    env = otlp_environment({"OTEL_EXPORTER_OTLP_PROTOCOL": value})
    assert HttpDestination("http://c:4318", env=env).notes == []


# ------------------------------------------------------------------------------------ CLI


def test_cli_an_unknown_protocol_is_a_warning_line_and_json_goes():
    db = str(SAMPLES / "text" / "opencode.db")
    with backend([200]) as (state, url):
        result = run(
            ["otel", "--db", db, "--all"],
            env={
                "OTEL_EXPORTER_OTLP_ENDPOINT": url,
                "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuff",
            },
        )
    assert result.returncode == 0, result.stderr
    said = result.stderr.decode().splitlines()
    assert said[0] == (
        "warning: OTEL_EXPORTER_OTLP_PROTOCOL='http/protobuff' is no OTLP protocol "
        "(http/protobuf, http/json or grpc): ignored, the requests go as http/json"
    )
    assert said[-1].startswith("otel: ")
    assert {h["Content-Type"] for _, h, _ in state.requests} == {"application/json"}


def test_cli_sends_protobuf_when_the_variable_says_so_and_tells_its_partial_success():
    reply = ExportTraceServiceResponse(
        partial_success=ExportTracePartialSuccess(rejected_spans=2, error_message="too old")
    ).SerializeToString()
    db = str(SAMPLES / "task" / "opencode.db")
    with backend([200], body=reply, content_type="application/x-protobuf") as (state, url):
        result = run(
            ["otel", "--db", db, "--all"], env={"OTEL_EXPORTER_OTLP_ENDPOINT": url, **PROTOBUF}
        )
        json_lines = run(["otel", "--db", db, "--all"]).stdout.splitlines()
    assert result.returncode == 0, result.stderr
    (traces_path, traces_headers, traces), (metrics_path, metrics_headers, metrics) = state.requests
    assert (traces_path, metrics_path) == ("/v1/traces", "/v1/metrics")
    assert (
        traces_headers["Content-Type"]
        == metrics_headers["Content-Type"]
        == ("application/x-protobuf")
    )
    # The same messages as the JSON Lines of the same export.
    assert ExportTraceServiceRequest.FromString(traces) == check(json_lines[0])
    assert ExportMetricsServiceRequest.FromString(metrics) == check(json_lines[1])
    said = result.stderr.decode().splitlines()
    assert "warning: the backend rejected 2 spans: too old" in said
    assert said[-1].startswith("otel: 2 sessions, 10 spans in 2 requests to ")


def test_cli_a_signals_own_protocol_and_the_flag():
    """Protobuf for all but the metrics, which their own variable keeps as JSON; then
    ``--protocol`` without any variable."""
    db = str(SAMPLES / "text" / "opencode.db")
    with backend([200]) as (state, url):
        result = run(
            ["otel", "--db", db, "--all"],
            env={
                "OTEL_EXPORTER_OTLP_ENDPOINT": url,
                "OTEL_EXPORTER_OTLP_METRICS_PROTOCOL": "http/json",
                **PROTOBUF,
            },
        )
        flag = run(["otel", "--db", db, "--all", "--endpoint", url, "--protocol", "http/protobuf"])
    assert result.returncode == flag.returncode == 0, result.stderr + flag.stderr
    kinds = [headers["Content-Type"] for _, headers, _ in state.requests]
    assert kinds == ["application/x-protobuf", "application/json"] + ["application/x-protobuf"] * 2


def test_cli_a_file_stays_json_lines_whatever_the_protocol(tmp_path):
    out = tmp_path / "o.jsonl"
    result = run(
        ["otel", "--db", str(SAMPLES / "text" / "opencode.db"), "-o", str(out)], env=PROTOBUF
    )
    assert result.returncode == 0, result.stderr
    for line in out.read_bytes().splitlines():
        check(line)


def test_workers_send_the_same_spans_as_protobuf(generated_store):  # noqa: F811 - the fixture
    """A large export encodes its protobuf in the workers; the spans are the JSON's."""
    with backend([200], body=b"", content_type="application/x-protobuf") as (state, url):
        sent = run(
            ["otel", "--db", str(generated_store), "--all", "--only", "traces"],
            env={"OPENCODE_EVENTS_WORKERS": "2", "OTEL_EXPORTER_OTLP_ENDPOINT": url, **PROTOBUF},
        )
    lines = run(["otel", "--db", str(generated_store), "--all", "--only", "traces"])
    assert sent.returncode == lines.returncode == 0, sent.stderr

    def spans(messages) -> list[bytes]:
        return sorted(
            span.SerializeToString(deterministic=True)
            for message in messages
            for resource in message.resource_spans
            for scope in resource.scope_spans
            for span in scope.spans
        )

    posted = [ExportTraceServiceRequest.FromString(body) for _, _, body in state.requests]
    written = [check(line) for line in lines.stdout.splitlines()]
    assert len(spans(written)) > 1000
    assert spans(posted) == spans(written)
    assert sum(len(spans_of(json.loads(x))) for x in lines.stdout.splitlines()) == len(
        spans(posted)
    )


def test_the_jsons_parse_is_strict_enough_to_compare():
    """``check`` (json_format) and ``FromString`` are compared above; a different value on
    one side must show (the comparison is not vacuous)."""
    signal, body = bodies_of_store("text")[0]
    message = TYPES[signal].FromString(protobuf.encoded(signal, body))
    message.resource_spans[0].scope_spans[0].spans[0].name += "x"
    assert message != check(body)
    assert json_format.MessageToDict(message) != json_format.MessageToDict(check(body))
