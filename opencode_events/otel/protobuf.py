"""OTLP protobuf: our OTLP/JSON bodies in the protocol's binary encoding, and its replies.

``OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf`` sends each body as the serialized
``ExportTraceServiceRequest`` / ``ExportMetricsServiceRequest`` instead of its JSON. The
bodies are made once, as JSON (``otlp``), and turned into protobuf just before they go (in
the worker that made them, for a large export): one model, two encodings, and everything
between (batching, the follower's queue, cutting a body smaller) works on the JSON. A
protobuf body is never larger than its JSON (no keys, ids as bytes rather than hex, numbers
in binary: about half its size), so the JSON's size limits hold for it.

A body is read back into ``otlp``'s own Structs (msgspec, in C) and written from a table of
each Struct's fields (the field number and type, from opentelemetry-proto's ``.proto``
files), not by generated code: no ``protobuf`` package is needed at run time. The wire
format, as far as these fields need it: a field is its key (``number << 3 | wire type``)
then its value; varints for enums, bools and ``int64`` (a negative one as its 64-bit two's
complement, ten bytes); 8 little-endian bytes for ``fixed64`` (times), ``sfixed64``
(``asInt``) and ``double``; a length then the bytes for strings, ``bytes`` (ids) and
embedded messages. A oneof's default (``"intValue": "0"``, ``"stringValue": ""``) is
written (it is a value); other fields at their default are left out, as proto3 does.

    body = encoded("traces", json_body)
    found = partial_success(reply)  # (rejected, error_message) or None
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any

import msgspec

from .otlp import (
    AnyValue,
    ArrayValue,
    Event,
    Histogram,
    HistogramDataPoint,
    KeyValue,
    Metric,
    MetricsData,
    NumberDataPoint,
    Resource,
    ResourceMetrics,
    ResourceSpans,
    Scope,
    ScopeMetrics,
    ScopeSpans,
    Span,
    Status,
    Sum,
    TracesData,
)

__all__ = ["CONTENT_TYPE", "TABLES", "encoded", "partial_success", "status_message"]

CONTENT_TYPE = "application/x-protobuf"

_VARINT, _I64, _LEN = 0, 1, 2
_U64 = (1 << 64) - 1


def _varint(value: int) -> bytes:
    if 0 <= value < 0x80:
        return _SMALL[value]
    value &= _U64  # int64: a negative value is its two's complement, ten bytes
    out = bytearray()
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


_SMALL = [bytes((n,)) for n in range(0x80)]


def _length(payload: bytes) -> bytes:
    size = len(payload)
    return (_SMALL[size] if size < 0x80 else _varint(size)) + payload


# --------------------------------------------------------------- the values, JSON to wire

_pack_u64 = struct.Struct("<Q").pack
_pack_i64 = struct.Struct("<q").pack
_pack_double = struct.Struct("<d").pack


def _string(value: str) -> bytes:
    return _length(value.encode())


def _hex_bytes(value: str) -> bytes:  # trace and span ids: hex in OTLP/JSON
    return _length(bytes.fromhex(value))


def _fixed64(value: str | int) -> bytes:  # times in ns: a decimal string in JSON
    return _pack_u64(int(value))


def _sfixed64(value: str | int) -> bytes:  # asInt
    return _pack_i64(int(value))


def _int64(value: str | int) -> bytes:  # intValue, as a varint
    return _varint(int(value))


def _enum(value: int | bool) -> bytes:  # enums, bools, uint32: varints
    return _varint(int(value))


def _double(value: float) -> bytes:
    return _pack_double(value)


# A message's table: for each field of its Struct in ``otlp`` (the JSON model), the
# attribute, the field's key on the wire, how to write a value, whether it repeats, and
# whether a default value is written (a oneof's member: ``"stringValue": ""`` is a value)
# or left out (proto3's other fields: ``""``, 0, an empty list). A Struct's field that is
# None is left out (its JSON leaves it out too).
Field = tuple[str, bytes, Callable[[Any], bytes], bool, bool]
Table = tuple[Field, ...]


def _field(name: str, number: int, wire: int, write: Callable[[Any], bytes], *flags: str) -> Field:
    return (name, _varint(number << 3 | wire), write, "repeated" in flags, "oneof" in flags)


def _fields(value: Any, table: Table) -> bytes:
    out: list[bytes] = []
    append = out.append
    for name, key, write, repeated, oneof in table:
        item = getattr(value, name)
        if item is None:
            continue
        if repeated:
            for each in item:
                append(key)
                append(write(each))
        elif oneof or item:
            append(key)
            append(write(item))
    return b"".join(out)


def _message(table: Table) -> Callable[[Any], bytes]:
    def write(value: Any) -> bytes:
        return _length(_fields(value, table))

    return write


def _string_field(name: str, number: int) -> Field:
    return _field(name, number, _LEN, _string)


# common/v1/common.proto; AnyValue and ArrayValue refer to each other.
def _any_value(value: AnyValue) -> bytes:
    return _length(_fields(value, _ANY_VALUE))


_ARRAY_VALUE: Table = (_field("values", 1, _LEN, _any_value, "repeated"),)
_ANY_VALUE: Table = (
    _field("string_value", 1, _LEN, _string, "oneof"),
    _field("bool_value", 2, _VARINT, _enum, "oneof"),
    _field("int_value", 3, _VARINT, _int64, "oneof"),
    _field("double_value", 4, _I64, _double, "oneof"),
    _field("array_value", 5, _LEN, _message(_ARRAY_VALUE), "oneof"),
)
_KEY_VALUE: Table = (_string_field("key", 1), _field("value", 2, _LEN, _any_value))

# KeyValues are most of a span (a dozen each), so the scalar ones are written here rather
# than through the tables (the same bytes: the tests compare them with protobuf's own), and
# a key's bytes and a text attribute (names, models, ids that come back span after span)
# are kept once written.
_keys: dict[str, bytes] = {}
_texts: dict[tuple[str, str], bytes] = {}
_FALSE, _TRUE = b"\x10\x00", b"\x10\x01"  # AnyValue.bool_value (2, varint)


def _key_value(pair: KeyValue) -> bytes:
    value, key = pair.value, pair.key
    text = value.string_value
    if text is not None:
        found = _texts.get((key, text))
        if found is not None:
            return found
    head = _keys.get(key)
    if head is None:
        if len(_keys) > 1024:  # flat memory, whatever the attribute names
            _keys.clear()
        head = _keys[key] = b"\x0a" + _length(key.encode()) + b"\x12"  # key (1), value (2)
    if text is not None:
        if len(_texts) > 4096:  # flat memory: ids change session by session
            _texts.clear()
        found = _texts[key, text] = _length(head + _length(b"\x0a" + _length(text.encode())))
        return found
    if value.int_value is not None:
        inner = b"\x18" + _varint(int(value.int_value))  # int_value (3, varint)
    elif value.double_value is not None:
        inner = b"\x21" + _pack_double(value.double_value)  # double_value (4, fixed64)
    elif value.bool_value is not None:
        inner = _TRUE if value.bool_value else _FALSE
    else:  # an array (or an empty value): through the tables
        inner = _fields(value, _ANY_VALUE)
    return _length(head + _length(inner))


def _attributes(number: int) -> Field:
    return _field("attributes", number, _LEN, _key_value, "repeated")


_RESOURCE: Table = (_attributes(1),)  # resource/v1/resource.proto
_SCOPE: Table = (_string_field("name", 1), _string_field("version", 2))  # InstrumentationScope

# trace/v1/trace.proto
_STATUS: Table = (_string_field("message", 2), _field("code", 3, _VARINT, _enum))
_EVENT: Table = (
    _field("time_unix_nano", 1, _I64, _fixed64),
    _string_field("name", 2),
    _attributes(3),
)
_SPAN: Table = (
    _field("trace_id", 1, _LEN, _hex_bytes),
    _field("span_id", 2, _LEN, _hex_bytes),
    _field("parent_span_id", 4, _LEN, _hex_bytes),
    _string_field("name", 5),
    _field("kind", 6, _VARINT, _enum),
    _field("start_time_unix_nano", 7, _I64, _fixed64),
    _field("end_time_unix_nano", 8, _I64, _fixed64),
    _attributes(9),
    _field("events", 11, _LEN, _message(_EVENT), "repeated"),
    _field("status", 15, _LEN, _message(_STATUS)),
)
_SCOPE_SPANS: Table = (
    _field("scope", 1, _LEN, _message(_SCOPE)),
    _field("spans", 2, _LEN, _message(_SPAN), "repeated"),
)
_RESOURCE_SPANS: Table = (
    _field("resource", 1, _LEN, _message(_RESOURCE)),
    _field("scope_spans", 2, _LEN, _message(_SCOPE_SPANS), "repeated"),
)
# collector/trace/v1/trace_service.proto
_TRACES: Table = (_field("resource_spans", 1, _LEN, _message(_RESOURCE_SPANS), "repeated"),)

# metrics/v1/metrics.proto
_NUMBER_DATA_POINT: Table = (
    _field("start_time_unix_nano", 2, _I64, _fixed64),
    _field("time_unix_nano", 3, _I64, _fixed64),
    _field("as_double", 4, _I64, _double, "oneof"),
    _field("as_int", 6, _I64, _sfixed64, "oneof"),
    _attributes(7),
)
_SUM: Table = (
    _field("data_points", 1, _LEN, _message(_NUMBER_DATA_POINT), "repeated"),
    _field("aggregation_temporality", 2, _VARINT, _enum),
    _field("is_monotonic", 3, _VARINT, _enum),
)


def _packed_fixed64(values: list[str]) -> bytes:  # bucket counts: decimal strings in JSON
    return _length(b"".join(_pack_u64(int(value)) for value in values))


def _packed_double(values: list[float]) -> bytes:
    return _length(b"".join(_pack_double(value) for value in values))


_HISTOGRAM_DATA_POINT: Table = (
    _field("start_time_unix_nano", 2, _I64, _fixed64),
    _field("time_unix_nano", 3, _I64, _fixed64),
    _field("count", 4, _I64, _fixed64),
    _field("sum", 5, _I64, _double, "oneof"),  # optional: written when given, 0 too
    _field("bucket_counts", 6, _LEN, _packed_fixed64),
    _field("explicit_bounds", 7, _LEN, _packed_double),
    _attributes(9),
    _field("min", 11, _I64, _double, "oneof"),
    _field("max", 12, _I64, _double, "oneof"),
)
_HISTOGRAM: Table = (
    _field("data_points", 1, _LEN, _message(_HISTOGRAM_DATA_POINT), "repeated"),
    _field("aggregation_temporality", 2, _VARINT, _enum),
)
_METRIC: Table = (
    _string_field("name", 1),
    _string_field("description", 2),
    _string_field("unit", 3),
    _field("sum", 7, _LEN, _message(_SUM), "oneof"),
    _field("histogram", 9, _LEN, _message(_HISTOGRAM), "oneof"),
)
_SCOPE_METRICS: Table = (
    _field("scope", 1, _LEN, _message(_SCOPE)),
    _field("metrics", 2, _LEN, _message(_METRIC), "repeated"),
)
_RESOURCE_METRICS: Table = (
    _field("resource", 1, _LEN, _message(_RESOURCE)),
    _field("scope_metrics", 2, _LEN, _message(_SCOPE_METRICS), "repeated"),
)
# collector/metrics/v1/metrics_service.proto
_METRICS: Table = (_field("resource_metrics", 1, _LEN, _message(_RESOURCE_METRICS), "repeated"),)

# Each Struct of the model with its table (a test checks every field of each is in it).
TABLES: dict[type, Table] = {
    AnyValue: _ANY_VALUE,
    ArrayValue: _ARRAY_VALUE,
    KeyValue: _KEY_VALUE,
    Resource: _RESOURCE,
    Scope: _SCOPE,
    Status: _STATUS,
    Event: _EVENT,
    Span: _SPAN,
    ScopeSpans: _SCOPE_SPANS,
    ResourceSpans: _RESOURCE_SPANS,
    TracesData: _TRACES,
    NumberDataPoint: _NUMBER_DATA_POINT,
    Sum: _SUM,
    HistogramDataPoint: _HISTOGRAM_DATA_POINT,
    Histogram: _HISTOGRAM,
    Metric: _METRIC,
    ScopeMetrics: _SCOPE_METRICS,
    ResourceMetrics: _RESOURCE_METRICS,
    MetricsData: _METRICS,
}

_DECODERS = {
    "traces": (msgspec.json.Decoder(TracesData).decode, _TRACES),
    "metrics": (msgspec.json.Decoder(MetricsData).decode, _METRICS),
}


def encoded(signal: str, body: bytes) -> bytes:
    """One OTLP/JSON body of ``signal`` (``traces``, ``metrics``), as ``otlp`` makes them,
    as the serialized ``ExportTraceServiceRequest`` / ``ExportMetricsServiceRequest``."""
    decode, table = _DECODERS[signal]
    return _fields(decode(body), table)


# ---------------------------------------------------------------------------- the replies


def _read_fields(data: bytes) -> dict[int, int | bytes]:
    """The top-level fields of a message: varints as ints, length-delimited ones as bytes
    (the last of each number, as protobuf keeps); ValueError when it does not parse."""
    fields: dict[int, int | bytes] = {}
    at, end = 0, len(data)

    def varint() -> int:
        nonlocal at
        value = shift = 0
        while True:
            if at >= end or shift > 63:
                raise ValueError("truncated varint")
            byte = data[at]
            at += 1
            value |= (byte & 0x7F) << shift
            shift += 7
            if byte < 0x80:
                return value

    while at < end:
        key = varint()
        number, wire = key >> 3, key & 7
        if wire == _VARINT:
            fields[number] = varint()
        elif wire == _LEN:
            size = varint()
            if at + size > end:
                raise ValueError("truncated field")
            fields[number] = data[at : at + size]
            at += size
        elif wire in (_I64, 5):
            at += 8 if wire == _I64 else 4
            if at > end:
                raise ValueError("truncated field")
        else:
            raise ValueError(f"wire type {wire}")
    return fields


def partial_success(reply: bytes) -> tuple[int, str] | None:
    """An ``Export…ServiceResponse``'s ``partial_success`` (field 1) as (rejected spans or
    data points — field 1 of either — and ``error_message``, field 2); None when it has
    none, or the reply is no such message."""
    try:
        partial = _read_fields(reply).get(1)
        if not isinstance(partial, bytes):
            return None
        fields = _read_fields(partial)
        rejected = fields.get(1, 0)
        message = fields.get(2, b"")
        if not isinstance(rejected, int) or not isinstance(message, bytes):
            return None
        if rejected >= 1 << 63:  # int64
            rejected -= 1 << 64
        return rejected, message.decode("utf-8", "replace")
    except ValueError:
        return None


def status_message(reply: bytes) -> str | None:
    """A ``google.rpc.Status``'s ``message`` (field 2), what an OTLP/HTTP server answers a
    protobuf request it refuses with; None when the reply is no such message."""
    try:
        message = _read_fields(reply).get(2)
    except ValueError:
        return None
    if not isinstance(message, bytes):
        return None
    try:
        return message.decode("utf-8")
    except UnicodeDecodeError:
        return None
