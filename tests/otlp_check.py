"""Our OTLP JSON checked against the protocol's own protobuf types (opentelemetry-proto).

protobuf's ``json_format`` follows the proto3 JSON mapping, which OTLP/JSON changes in ways
``Parse`` would not notice: it base64-decodes a hex id into garbage bytes, and it accepts
enum names and snake_case keys, which OTLP forbids. So those rules are checked here first,
the hex ids turned into the base64 protobuf expects, and the document then parsed strictly
(an unknown or misspelt key is an error).
"""

from __future__ import annotations

import base64
import json
import re
from typing import Any

from google.protobuf import json_format
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

_ID_HEX = {"traceId": 32, "spanId": 16, "parentSpanId": 16}
_ENUMS = {"kind", "code", "aggregationTemporality"}
_SIGNED = {"intValue", "asInt"}  # int64 (sfixed64 for asInt); the times are fixed64
_STRING_INTS = {
    "startTimeUnixNano",
    "endTimeUnixNano",
    "timeUnixNano",
    "intValue",
    "asInt",
}
_SNAKE = re.compile(r"^[a-z]+(_[a-z0-9]+)+$")
_HEX = re.compile(r"^[0-9a-f]*$")


class OtlpError(AssertionError):
    pass


def _fixed(node: Any, path: str = "$") -> Any:
    if isinstance(node, list):
        return [_fixed(item, f"{path}[{i}]") for i, item in enumerate(node)]
    if not isinstance(node, dict):
        return node
    out = {}
    for key, value in node.items():
        where = f"{path}.{key}"
        if key == "key" and isinstance(value, str):  # an attribute's key is data
            out[key] = value
            continue
        if _SNAKE.match(key):
            raise OtlpError(f"{where}: snake_case key (OTLP/JSON is lowerCamelCase)")
        if key in _ID_HEX:
            if not isinstance(value, str) or not _HEX.match(value):
                raise OtlpError(f"{where}: not lowercase hex: {value!r}")
            if len(value) != _ID_HEX[key] or int(value, 16) == 0:
                raise OtlpError(f"{where}: not a valid {_ID_HEX[key]}-digit id: {value!r}")
            out[key] = base64.b64encode(bytes.fromhex(value)).decode()
            continue
        if key in _ENUMS and type(value) is not int:
            raise OtlpError(f"{where}: an enum must be an integer, not {value!r}")
        if key in _STRING_INTS and not (
            isinstance(value, str)
            and (value[1:] if key in _SIGNED and value[:1] == "-" else value).isdigit()
        ):
            raise OtlpError(f"{where}: a 64-bit integer is a decimal string, not {value!r}")
        out[key] = _fixed(value, where)
    return out


def check(body: bytes | str | dict) -> Any:
    """The protobuf message of one OTLP JSON body (traces or metrics), or OtlpError."""
    doc = json.loads(body) if isinstance(body, bytes | str) else body
    if "resourceSpans" in doc:
        message: Any = ExportTraceServiceRequest()
    elif "resourceMetrics" in doc:
        message = ExportMetricsServiceRequest()
    else:
        raise OtlpError("neither resourceSpans nor resourceMetrics")
    try:
        json_format.Parse(json.dumps(_fixed(doc)), message)
    except json_format.ParseError as exc:
        raise OtlpError(str(exc)) from None
    return message


def spans_of(doc: dict) -> list[dict]:
    return [
        span
        for resource in doc.get("resourceSpans", [])
        for scope in resource["scopeSpans"]
        for span in scope["spans"]
    ]


def attrs(item: dict) -> dict[str, Any]:
    """An item's attributes as plain values (ints as ints)."""
    return {kv["key"]: _plain(kv["value"]) for kv in item.get("attributes", [])}


def _plain(value: dict) -> Any:
    if "intValue" in value:
        return int(value["intValue"])
    if "arrayValue" in value:
        return [_plain(v) for v in value["arrayValue"].get("values", [])]
    ((_, plain),) = value.items()
    return plain
