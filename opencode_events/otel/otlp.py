"""OTLP JSON: the span and metric model (``spans``) as the protocol's JSON encoding.

The rules of OTLP/JSON (the protobuf JSON mapping, with OTLP's own changes): keys in
lowerCamelCase; trace and span ids as hex strings, not base64; enums as integers; 64-bit
integers (times in ns, ``intValue``, ``asInt``) as decimal strings; fields left at their
default omitted. One body is an ``ExportTraceServiceRequest`` / ``ExportMetricsServiceRequest``,
which has the same JSON as ``TracesData`` / ``MetricsData``: what the OTLP/HTTP endpoint
takes, and one line of the file exporter's JSON Lines.

Spans are encoded one at a time and joined into bodies of at most ``max_bytes``
(``SpanBatches``); a session's spans stay in one body unless they alone are larger. No
OpenTelemetry SDK is imported: msgspec encodes these Structs in C, and start-up stays small.

    batches = SpanBatches(max_bytes=4 << 20)
    for body in batches.add(resource_attributes(info), spans):
        send(body)
    for body in batches.flush():
        send(body)
"""

from __future__ import annotations

import math
import socket
import urllib.parse
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import msgspec
from msgspec import Struct

from .._version import __version__
from ..paths import OtlpEnvironment, login_name, otlp_environment
from .spans import (
    DURATION_BOUNDS,
    TOKEN_BOUNDS,
    Counters,
    SessionInfo,
    SpanData,
    epoch_ns,
    provider_attributes,
)

__all__ = [
    "MAX_BODY_BYTES",
    "MAX_LINE_BYTES",
    "SpanBatches",
    "metrics_body",
    "resource_attributes",
    "Resources",
    "parse_key_values",
    "attributes",
    "SCOPE_NAME",
]

# A body's size before compression. The OTLP specification recommends servers accept 64 MiB
# and the Collector's HTTP receiver takes 20 MiB by default; some hosted backends take only
# about 5 MB. 4 MiB fits them all and is still thousands of spans.
MAX_BODY_BYTES = 4 << 20
# A line of the file exporter's JSON Lines: the Collector's otlpjsonfile receiver reads lines
# of at most 1 MiB by default (its file consumer's max_log_size).
MAX_LINE_BYTES = 1000 << 10

SCOPE_NAME = "opencode-events"


class AnyValue(Struct, rename="camel", omit_defaults=True, gc=False):
    string_value: str | None = None
    bool_value: bool | None = None
    int_value: str | None = None
    double_value: float | None = None
    array_value: ArrayValue | None = None


class ArrayValue(Struct, omit_defaults=True, gc=False):
    values: list[AnyValue] = []


class KeyValue(Struct, gc=False):
    key: str
    value: AnyValue


class Status(Struct, omit_defaults=True, gc=False):
    message: str = ""
    code: int = 0


class Event(Struct, rename="camel", omit_defaults=True, gc=False):
    time_unix_nano: str
    name: str
    attributes: list[KeyValue] = []


class Span(Struct, rename="camel", omit_defaults=True, gc=False):
    trace_id: str
    span_id: str
    name: str
    kind: int
    start_time_unix_nano: str
    end_time_unix_nano: str
    parent_span_id: str = ""
    attributes: list[KeyValue] = []
    events: list[Event] = []
    status: Status | None = None


class Resource(Struct, omit_defaults=True, gc=False):
    attributes: list[KeyValue] = []


class Scope(Struct, omit_defaults=True, gc=False):
    name: str = ""
    version: str = ""


# A traces body as ``SpanBatches`` writes it (from the parts it encoded), read back by the
# protobuf encoder (``protobuf``): a key it does not know is an error, not one dropped.
class ScopeSpans(Struct, forbid_unknown_fields=True, gc=False):
    scope: Scope
    spans: list[Span]


class ResourceSpans(Struct, rename="camel", forbid_unknown_fields=True, gc=False):
    resource: Resource
    scope_spans: list[ScopeSpans]


class TracesData(Struct, rename="camel", forbid_unknown_fields=True, gc=False):
    resource_spans: list[ResourceSpans]


class NumberDataPoint(Struct, rename="camel", omit_defaults=True, gc=False):
    start_time_unix_nano: str
    time_unix_nano: str
    attributes: list[KeyValue] = []
    as_int: str | None = None
    as_double: float | None = None


class Sum(Struct, rename="camel", gc=False):
    data_points: list[NumberDataPoint]
    aggregation_temporality: int = 2  # CUMULATIVE
    is_monotonic: bool = True


class HistogramDataPoint(Struct, rename="camel", omit_defaults=True, gc=False):
    start_time_unix_nano: str
    time_unix_nano: str
    attributes: list[KeyValue] = []
    count: str = "0"  # fixed64: a decimal string in OTLP/JSON, as times are
    sum: float | None = None
    bucket_counts: list[str] = []
    explicit_bounds: list[float] = []
    min: float | None = None
    max: float | None = None


class Histogram(Struct, rename="camel", gc=False):
    data_points: list[HistogramDataPoint]
    aggregation_temporality: int = 2  # CUMULATIVE


class Metric(Struct, omit_defaults=True, gc=False):
    name: str
    unit: str = ""
    description: str = ""
    sum: Sum | None = None
    histogram: Histogram | None = None


class ScopeMetrics(Struct, gc=False):
    scope: Scope
    metrics: list[Metric]


class ResourceMetrics(Struct, rename="camel", gc=False):
    resource: Resource
    scope_metrics: list[ScopeMetrics]


class MetricsData(Struct, rename="camel", gc=False):
    resource_metrics: list[ResourceMetrics]


_ENCODER = msgspec.json.Encoder()
_SCOPE = _ENCODER.encode(Scope(name=SCOPE_NAME, version=__version__))
# The bytes a body and each resource's entry add around the spans (and a comma each).
_BODY_OVERHEAD = len(b'{"resourceSpans":[]}')
_GROUP_OVERHEAD = len(b'{"resource":,"scopeSpans":[{"scope":,"spans":[]}]},') + len(_SCOPE)


# ---------------------------------------------------------------------------- attributes

_INT64 = 1 << 63


def int64(value: int) -> str:
    """An integer as OTLP's ``intValue`` and ``asInt`` (int64, as a decimal string): one
    a damaged record made larger (a token count of 2^63) is held at its edge, so a
    collector does not refuse the whole body."""
    if -_INT64 <= value < _INT64:
        return str(value)
    return str(_INT64 - 1) if value > 0 else str(-_INT64)


def any_value(value: Any) -> AnyValue | None:
    """A Python value as an ``AnyValue``; None (and a float that is not finite) as nothing."""
    if isinstance(value, str):
        return AnyValue(string_value=clipped(value))
    if isinstance(value, bool):
        return AnyValue(bool_value=value)
    if isinstance(value, int):
        return AnyValue(int_value=int64(value))
    if isinstance(value, float):
        return AnyValue(double_value=value) if math.isfinite(value) else None
    if isinstance(value, list | tuple):
        items = [v for v in map(any_value, value) if v is not None]
        return AnyValue(array_value=ArrayValue(values=items))
    return None


_TEXT_ATTRIBUTES: dict[tuple[str, str], KeyValue] = {}  # the same names, models, sessions…

MAX_TEXT = 4096  # characters of one text value (an error's message): bodies and lines stay small


def clipped(text: str) -> str:
    """``text`` cut to ``MAX_TEXT`` characters, its end marked (``…``): one failed tool's
    10 MB message would otherwise make a span larger than a body may be."""
    return text if len(text) <= MAX_TEXT else text[: MAX_TEXT - 1] + "…"


def attributes(values: Mapping[str, Any]) -> list[KeyValue]:
    """Attributes as ``KeyValue``s; None is left out. (Once per span: the common types
    first, by exact type; a text attribute seen before is the same object again.)"""
    out: list[KeyValue] = []
    append = out.append
    texts = _TEXT_ATTRIBUTES
    for key, value in values.items():
        kind = type(value)
        if kind is str:
            pair = texts.get((key, value))
            if pair is None:
                if len(texts) > 4096:  # flat memory: ids change session by session
                    texts.clear()
                pair = KeyValue(key, AnyValue(string_value=clipped(value)))
                texts[key, value] = pair
            append(pair)
        elif kind is int:
            append(KeyValue(key, AnyValue(int_value=int64(value))))
        elif value is not None:
            encoded = any_value(value)
            if encoded is not None:
                append(KeyValue(key, encoded))
    return out


def parse_key_values(text: str | None) -> dict[str, str]:
    """``key1=value1,key2=value2`` (``OTEL_RESOURCE_ATTRIBUTES``, ``OTEL_EXPORTER_OTLP_HEADERS``),
    values percent-decoded; an entry without ``=`` is skipped, as the SDKs do."""
    out: dict[str, str] = {}
    for item in (text or "").split(","):
        key, sep, value = item.partition("=")
        key = key.strip()
        if sep and key:
            out[urllib.parse.unquote(key)] = urllib.parse.unquote(value.strip())
    return out


class Resources:
    """The resource of a session's spans: ``service.name`` ``opencode``, the OpenCode version
    that wrote the session and its project directory, this host and user; then
    ``OTEL_RESOURCE_ATTRIBUTES`` and ``OTEL_SERVICE_NAME``, which override any of them.
    The environment is read once, when made."""

    def __init__(self, env: OtlpEnvironment | None = None) -> None:
        env = otlp_environment() if env is None else env
        self.defaults: dict[str, Any] = {"service.name": "opencode", "host.name": _host()}
        user = login_name()
        if user:
            self.defaults["user.name"] = user
        self.overrides: dict[str, Any] = parse_key_values(env.resource_attributes)
        if env.service_name:
            self.overrides["service.name"] = env.service_name

    def __call__(self, info: SessionInfo | None = None) -> dict[str, Any]:
        values = dict(self.defaults)
        if info is not None and info.version:
            values["service.version"] = info.version
        if info is not None and info.directory:
            values["opencode.project.directory"] = info.directory
        values.update(self.overrides)
        return values


def resource_attributes(
    info: SessionInfo | None = None, env: OtlpEnvironment | None = None
) -> dict[str, Any]:
    """``Resources(env)(info)``: one session's resource."""
    return Resources(env)(info)


def _host() -> str:
    return socket.gethostname()


# --------------------------------------------------------------------------------- traces


def _ns(value: int) -> str:
    return str(value)


def span(data: SpanData) -> Span:
    status = None
    if data.status:
        message = data.status_message
        status = Status(message=clipped(message) if message else message, code=data.status)
    return Span(
        trace_id=data.trace_id,
        span_id=data.span_id,
        parent_span_id=data.parent_span_id,
        name=clipped(data.name),
        kind=data.kind,
        start_time_unix_nano=_ns(data.start_ns),
        end_time_unix_nano=_ns(data.end_ns),
        attributes=attributes(data.attributes),
        events=[Event(_ns(e.time_ns), e.name, attributes(e.attributes)) for e in data.events],
        status=status,
    )


class SpanBatches:
    """Encoded spans gathered into ``ExportTraceServiceRequest`` bodies of at most
    ``max_bytes``; spans with the same resource in a row share one ``resourceSpans`` entry."""

    def __init__(self, max_bytes: int = MAX_BODY_BYTES) -> None:
        self.max_bytes = max_bytes
        self._groups: list[tuple[bytes, list[bytes]]] = []
        self._size = 0
        self._resources: dict[tuple[tuple[str, Any], ...], bytes] = {}
        self.spans = 0  # spans in the bodies given out
        self._keys: list[list[Any]] = []  # [key, spans] of the body being filled, in order
        self.flushed_keys: tuple[tuple[Any, int], ...] = ()  # those of the body given out last

    def _resource(self, values: Mapping[str, Any]) -> bytes:
        key = tuple(values.items())
        encoded = self._resources.get(key)
        if encoded is None:
            if len(self._resources) > 256:  # flat memory over many projects
                self._resources.clear()
            encoded = self._resources[key] = _ENCODER.encode(
                Resource(attributes=attributes(values))
            )
        return encoded

    def add(
        self, resource: Mapping[str, Any], spans: Sequence[SpanData], key: Any = None
    ) -> Iterator[bytes]:
        """Add one session's spans; yields the bodies that are full. After each body,
        ``flushed_keys`` says whose spans it holds, in order: (``key``, how many), a key (a
        session's id) given to ``add`` with its spans."""
        if not spans:
            return
        encoded_resource = self._resource(resource)
        encoded = [_ENCODER.encode(span(s)) for s in spans]
        group = len(encoded_resource) + _GROUP_OVERHEAD
        whole = sum(len(e) + 1 for e in encoded) + group
        if self._size and self._size + whole > self.max_bytes:
            yield from self.flush()  # the session in a body of its own, if it fits one
        for item in encoded:
            new_group = not self._groups or self._groups[-1][0] is not encoded_resource
            grows = len(item) + 1 + (group if new_group else 0)
            if self._size and self._size + grows > self.max_bytes:
                yield from self.flush()  # a session larger than a body on its own
                new_group, grows = True, len(item) + 1 + group
            if not self._size:
                self._size = _BODY_OVERHEAD
            if new_group:
                self._groups.append((encoded_resource, []))
            self._groups[-1][1].append(item)
            self._size += grows
            if self._keys and self._keys[-1][0] == key:
                self._keys[-1][1] += 1
            else:
                self._keys.append([key, 1])

    def flush(self) -> Iterator[bytes]:
        if not self._groups:
            return
        groups, self._groups, self._size = self._groups, [], 0
        self.flushed_keys, self._keys = tuple((key, n) for key, n in self._keys), []
        parts = []
        for resource, spans in groups:
            self.spans += len(spans)
            parts.append(
                b'{"resource":'
                + resource
                + b',"scopeSpans":[{"scope":'
                + _SCOPE
                + b',"spans":['
                + b",".join(spans)
                + b"]}]}"
            )
        yield b'{"resourceSpans":[' + b",".join(parts) + b"]}"


# -------------------------------------------------------------------------------- metrics


def metrics_body(counters: Counters, resource: Mapping[str, Any]) -> bytes | None:
    """The counters as one ``ExportMetricsServiceRequest``: cumulative monotonic sums, and
    the GenAI conventions' cumulative histograms of each inference, from the first session's
    start to the last one's end. None when no session was counted."""
    if not counters:
        return None
    start = str(epoch_ns(counters.start_ms or 0))
    end = str(epoch_ns(counters.end_ms if counters.end_ms is not None else counters.start_ms or 0))

    def labels(model: Any, agent: Any, provider: Any, **more: Any) -> list[KeyValue]:
        values = {**more, "model": model, "agent": agent, "provider": provider}
        return attributes({k: v for k, v in values.items() if v is not None})

    tokens = [
        NumberDataPoint(start, end, labels(*key[1:], type=key[0]), as_int=int64(value))
        for key, value in sorted(counters.tokens.items(), key=_sort_key)
    ]
    cost = [
        NumberDataPoint(start, end, labels(*key), as_double=_finite(counters.cost_of(key)))
        for key, _ in sorted(counters.cost.items(), key=_sort_key)
    ]
    sessions = [
        NumberDataPoint(start, end, labels(*key), as_int=int64(value))
        for key, value in sorted(counters.sessions.items(), key=_sort_key)
    ]
    metrics = [
        Metric(
            "opencode.token.usage",
            unit="tokens",
            description="Tokens used, by type, as OpenCode counted them",
            sum=Sum(tokens),
        ),
        Metric(
            "opencode.cost.usage",
            unit="USD",
            description="Cost of the inferences, OpenCode's own figure",
            sum=Sum(cost),
        ),
        Metric(
            "opencode.session.count",
            unit="count",
            description="Sessions, subagent sessions included",
            sum=Sum(sessions),
        ),
    ]
    # The GenAI conventions' own: what their dashboards read.
    token_usage = [
        _histogram_point(
            start, end, key[1], key[2], {"gen_ai.token.type": key[0]}, figures, TOKEN_BOUNDS, 1
        )
        for key, figures in sorted(counters.token_usage.items(), key=_sort_key)
    ]
    durations = [
        _histogram_point(
            start, end, key[0], key[1], {} if key[2] is None else {"error.type": key[2]},
            figures, DURATION_BOUNDS, 1e9,
        )
        for key, figures in sorted(counters.durations.items(), key=_sort_key)
    ]  # fmt: skip
    metrics += [
        Metric(
            "gen_ai.client.token.usage",
            unit="{token}",
            description="Number of input and output tokens used",
            histogram=Histogram(token_usage),
        ),
        Metric(
            "gen_ai.client.operation.duration",
            unit="s",
            description="GenAI operation duration",
            histogram=Histogram(durations),
        ),
    ]
    metrics = [
        m
        for m in metrics
        if (m.sum is not None and m.sum.data_points)
        or (m.histogram is not None and m.histogram.data_points)
    ]
    scope = Scope(name=SCOPE_NAME, version=__version__)
    data = MetricsData(
        [ResourceMetrics(Resource(attributes(resource)), [ScopeMetrics(scope, metrics)])]
    )
    return _ENCODER.encode(data)


def _histogram_point(
    start: str,
    end: str,
    model: Any,
    provider: Any,
    more: dict[str, Any],
    figures: list[int],
    bounds: Sequence[float],
    unit: float,
) -> HistogramDataPoint:
    """One of ``Counters``' histograms (``[count, sum, min, max, *buckets]``, in ``unit``s
    of the metric's: ns for seconds) as a data point, labelled as the conventions say."""
    labels: dict[str, Any] = {"gen_ai.operation.name": "chat"}
    if provider is not None:
        labels.update(provider_attributes(provider))
    if model is not None:
        labels["gen_ai.request.model"] = model
    labels.update(more)
    count, total, low, high, *buckets = figures
    return HistogramDataPoint(
        start,
        end,
        attributes(labels),
        count=str(count),
        sum=total / unit,
        bucket_counts=[str(b) for b in buckets],
        explicit_bounds=[float(b) for b in bounds],
        min=low / unit,
        max=high / unit,
    )


def _finite(value: float) -> float:
    return value if math.isfinite(value) else 0.0


def _sort_key(item: tuple[tuple[Any, ...], Any]) -> tuple[str, ...]:
    return tuple("" if part is None else str(part) for part in item[0])
