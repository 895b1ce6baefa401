"""Our own normalized JSONL as input: events passed through, as they are.

``opencode-events normalize events.jsonl`` (a saved output, or a ``jq -c 'select(…)'`` of
one) gives the same events again: each line is decoded as the event it is (the union of
every kind, tagged by ``kind``) and written with ``seq`` numbered afresh for this output,
every other field kept. Its ``metrics`` lines are dropped, and the closing one is counted
over the events passed on, so that a filtered input gets the metrics of what is left. A
line that is not one of our events becomes a ``warning``, as in any input. This is what lets
the pretty view show saved or filtered events (``--format pretty``).
"""

from __future__ import annotations

from typing import Any, Union

import msgspec

from ..core.normalizer import Normalizer, Provenance
from ..events import ANY_EVENT, Event, Metrics
from .stream import BOM

__all__ = ["EventReader", "KINDS", "is_event"]

_CLASSES: tuple[type[Event], ...] = getattr(ANY_EVENT, "__args__", ())
KINDS = frozenset(cls.__struct_config__.tag for cls in _CLASSES)


def _without_raw(cls: type[Event]) -> Any:
    """A Struct decoding ``cls``'s JSON but for ``raw``, which msgspec cannot decode as
    ``Raw | None`` (the events' type): it is read on its own, as ``Raw``."""
    fields = []
    for field in msgspec.structs.fields(cls):
        if field.name == "raw":
            continue
        if field.default is not msgspec.NODEFAULT:
            fields.append((field.name, field.type, field.default))
        elif field.default_factory is not msgspec.NODEFAULT:
            fields.append(
                (field.name, field.type, msgspec.field(default_factory=field.default_factory))
            )
        else:
            fields.append((field.name, field.type))
    config = cls.__struct_config__
    return msgspec.defstruct(
        f"_{cls.__name__}In", fields, tag=config.tag, tag_field=config.tag_field, kw_only=True
    )


_READ_AS = {_without_raw(cls): cls for cls in _CLASSES}
_EVENT = msgspec.json.Decoder(Union[tuple(_READ_AS)])  # noqa: UP007 - built at run time
_NAMES = {read: [f.name for f in msgspec.structs.fields(read)] for read in _READ_AS}


class _RawView(msgspec.Struct):
    raw: msgspec.Raw = msgspec.Raw()


_RAW = msgspec.json.Decoder(_RawView)


def _decode(line: bytes) -> Event:
    read = _EVENT.decode(line)
    cls = _READ_AS[type(read)]
    event = cls(**{name: getattr(read, name) for name in _NAMES[type(read)]})
    if "raw" in cls.__struct_fields__:
        raw = _RAW.decode(line).raw
        if raw and raw != b"null":
            event.raw = raw  # type: ignore[attr-defined]
    return event


class _KindView(msgspec.Struct):
    kind: Any = None


_KIND = msgspec.json.Decoder(_KindView)


def is_event(line: bytes) -> bool:
    """Whether ``line`` is one of our events: a JSON object whose ``kind`` is one of ours
    (OpenCode's records have a ``type`` and never a ``kind``)."""
    try:
        return _KIND.decode(line.removeprefix(BOM).rstrip()).kind in KINDS
    except (msgspec.DecodeError, RecursionError):
        return False


class EventReader:
    """Passes the lines of a normalized JSONL input through a shared ``Normalizer``."""

    def __init__(self, normalizer: Normalizer, *, source: str | None = None) -> None:
        self.normalizer = normalizer
        self.source = source

    def feed(self, line_no: int, line: bytes) -> list[Event]:
        if line.startswith(BOM):
            line = line[3:]
        if line.endswith(b"\r"):
            line = line[:-1]
        if not line or line.isspace():
            return []
        norm = self.normalizer
        norm.records += 1
        try:
            event = _decode(line)
        except msgspec.ValidationError as exc:
            prov = Provenance(line=line_no, source=self.source)
            text = line.decode("utf-8", "replace")
            return norm.warning(f"not an opencode-events event: {exc}", text, prov)
        except (msgspec.DecodeError, RecursionError) as exc:
            return norm.not_json(line, exc, Provenance(line=line_no, source=self.source))
        if type(event) is Metrics:
            return []  # the closing metrics are counted afresh over what is passed on
        return norm.replay(event, line=line_no)

    def finish(self) -> list[Event]:
        return []
