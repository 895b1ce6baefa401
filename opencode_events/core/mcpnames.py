"""OpenCode's rule for an MCP tool's name, and the server a called tool belongs to.

OpenCode names an MCP tool ``sanitize(server) + "_" + sanitize(tool)``; nothing else in a
part marks a call as MCP, so the server comes from the names configured (reports/mcp.py
reads them from OpenCode's config files). A module of its own so that the store reports
have the rule without the mapping (and the event types it imports).

    >>> from opencode_events.core.mcpnames import mcp_server_of
    >>> mcp_server_of("my-tools_search", ["my-tools", "other"])
    'my-tools'
"""

from __future__ import annotations

import re
from collections.abc import Iterable

__all__ = ["sanitize", "mcp_server_of"]

_UNSAFE = re.compile(r"[^a-zA-Z0-9_-]")


def sanitize(name: str) -> str:
    """OpenCode's ``name.replace(/[^a-zA-Z0-9_-]/g, "_")``: JavaScript strings are UTF-16,
    so a character beyond U+FFFF (an emoji) is two code units and becomes two ``_``."""
    return _UNSAFE.sub(lambda m: "__" if ord(m[0]) > 0xFFFF else "_", name)


def mcp_server_of(tool: str, servers: Iterable[str]) -> str | None:
    """The configured server a tool name belongs to (the longest match), or None."""
    best: str | None = None
    best_len = -1
    for server in servers:
        prefix = sanitize(server) + "_"
        if tool.startswith(prefix) and len(tool) > len(prefix) and len(prefix) > best_len:
            best, best_len = server, len(prefix)
    return best
