"""opencode-events: OpenCode's run stream, store and server events as one normalized stream.

The public API (docs/python-api.md; ``__all__`` is pinned by tests/test_api.py)::

    import opencode_events

    for event in opencode_events.iter_events("run.jsonl"):          # or a pipe, or lines
        if event.kind == "usage":
            print(event.turn, event.cost)

    with opencode_events.open_store() as store:                      # the command line's lookup
        report = opencode_events.usage_report(store=store, all_sessions=True, by="day")
        print(report.total.cost)

Names are imported when first used, so ``import opencode_events`` costs nothing that the
command line's start-up would feel. The library never prints, never exits and never
imports click; ``output.pretty`` and ``output.tables`` alone import rich (lazily). The
command line (``cli``) owns stdin, stdout, stderr and exit codes. Forked worker processes
end with ``os._exit`` (``store.ranges``, ``pipeline.fanout``, ``reports.beside``): a child
must not run its parent's exit handlers.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from ._version import __version__

# name → the module that defines it (imported on first use)
_WHERE = {
    # events from any input
    "iter_events": "._api",
    "aiter_events": "._api",
    "ServerEvents": "._api",
    # the store and its reports
    "open_store": "._api",
    "stored_events": "._api",
    "sessions_report": "._api",
    "usage_report": "._api",
    "context_report": "._api",
    "SessionStore": ".store.rows",
    "SessionsReport": ".reports.sessions",
    "SessionSummary": ".reports.sessions",
    "UsageReport": ".reports.usage",
    "UsageRow": ".reports.usage",
    "ContextReport": ".reports.context",
    # the event types
    "Event": ".events",
    "ToolEvent": ".events",
    "AnyEvent": ".events",
    "Message": ".events",
    "Reasoning": ".events",
    "Prompt": ".events",
    "Read": ".events",
    "Write": ".events",
    "Search": ".events",
    "Command": ".events",
    "Orchestration": ".events",
    "Skill": ".events",
    "Usage": ".events",
    "Error": ".events",
    "Permission": ".events",
    "Question": ".events",
    "Compaction": ".events",
    "Attachment": ".events",
    "Subtask": ".events",
    "Mention": ".events",
    "Patch": ".events",
    "Retry": ".events",
    "Delta": ".events",
    "Warning": ".events",
    "Unknown": ".events",
    "Metrics": ".events",
    "schema": ".events",
    # errors
    "OpencodeEventsError": ".errors",
    "InputError": ".errors",
    "OutputError": ".errors",
    "GroupingError": ".errors",
}

__all__ = [
    "__version__",
    "iter_events",
    "aiter_events",
    "ServerEvents",
    "open_store",
    "stored_events",
    "sessions_report",
    "usage_report",
    "context_report",
    "SessionStore",
    "SessionsReport",
    "SessionSummary",
    "UsageReport",
    "UsageRow",
    "ContextReport",
    "Event",
    "ToolEvent",
    "AnyEvent",
    "Message",
    "Reasoning",
    "Prompt",
    "Read",
    "Write",
    "Search",
    "Command",
    "Orchestration",
    "Skill",
    "Usage",
    "Error",
    "Permission",
    "Question",
    "Compaction",
    "Attachment",
    "Subtask",
    "Mention",
    "Patch",
    "Retry",
    "Delta",
    "Warning",
    "Unknown",
    "Metrics",
    "schema",
    "OpencodeEventsError",
    "InputError",
    "OutputError",
    "GroupingError",
]


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value  # once: later lookups do not come here
    return value


def __dir__() -> list[str]:
    return sorted(__all__)


if TYPE_CHECKING:  # what type checkers and editors see
    from ._api import (
        ServerEvents,
        aiter_events,
        context_report,
        iter_events,
        open_store,
        sessions_report,
        stored_events,
        usage_report,
    )
    from .errors import GroupingError, InputError, OpencodeEventsError, OutputError
    from .events import (
        AnyEvent,
        Attachment,
        Command,
        Compaction,
        Delta,
        Error,
        Event,
        Mention,
        Message,
        Metrics,
        Orchestration,
        Patch,
        Permission,
        Prompt,
        Question,
        Read,
        Reasoning,
        Retry,
        Search,
        Skill,
        Subtask,
        ToolEvent,
        Unknown,
        Usage,
        Warning,
        Write,
        schema,
    )
    from .reports.context import ContextReport
    from .reports.sessions import SessionsReport, SessionSummary
    from .reports.usage import UsageReport, UsageRow
    from .store.rows import SessionStore
