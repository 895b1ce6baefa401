"""Which MCP server a tool call belongs to, from the servers OpenCode is configured with.

OpenCode names an MCP tool ``sanitize(server) + "_" + sanitize(tool)``, where ``sanitize``
turns every character outside ``[a-zA-Z0-9_-]`` into ``_``; nothing else in a part marks a
call as MCP. So the server names come from OpenCode's config files (only the keys of their
``mcp`` sections are read): the global ``config.json``, ``opencode.json`` and
``opencode.jsonc`` in ``$XDG_CONFIG_HOME/opencode`` (``~/.config/opencode``); ``opencode.json``
/ ``opencode.jsonc`` and ``.opencode/opencode.json[c]`` in the session's directory and each
parent up to the worktree root (the nearest folder holding ``.git``; without one, every
parent up to ``/``, as OpenCode does outside git); and ``~/.opencode/opencode.json[c]``;
also the file ``$OPENCODE_CONFIG`` names when it is set in this tool's environment. A
server configured only through ``OPENCODE_CONFIG`` in the agent's own environment cannot be
seen from outside and is not counted. A tool name matches a server when it starts with the
sanitised name and ``_`` and has a tool name after it; of several matches the longest wins.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from functools import lru_cache
from pathlib import Path
from typing import Any

from .. import paths
from ..core.mcpnames import mcp_server_of, sanitize
from ..store.files import read_regular_file

__all__ = [
    "sanitize",
    "mcp_server_names",
    "mcp_server_of",
    "strip_jsonc",
    "config_files",
    "read_json_file",
    "event_mcp_servers",
]


def strip_jsonc(text: str) -> str:
    """JSON from JSONC: comments and trailing commas removed, strings left alone."""
    out: list[str] = []
    i, n = 0, len(text)
    while i < n:
        ch = text[i]
        if ch == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            out.append(text[i : j + 1])
            i = j + 1
        elif text.startswith("//", i):
            end = text.find("\n", i)
            i = n if end < 0 else end
        elif text.startswith("/*", i):
            end = text.find("*/", i + 2)
            i = n if end < 0 else end + 2
        else:
            out.append(ch)
            i += 1
    return re.sub(r",(\s*[}\]])", r"\1", "".join(out))


def _worktree_chain(directory: Path) -> list[Path]:
    """The directory and its parents up to the worktree root: the nearest one holding
    ``.git``, or, outside any repository, ``/`` (OpenCode's worktree for such a folder, so
    it reads the config of every folder above)."""
    chain = [directory]
    for parent in [directory, *directory.parents]:
        if parent != directory:
            chain.append(parent)
        try:
            if (parent / ".git").exists():
                return chain
        except (OSError, ValueError):  # a name too long, a NUL: a damaged session row
            return [directory]
    return chain


def config_files(directory: str | None, env: Mapping[str, str] | None = None) -> list[Path]:
    """Every config file seed 002 lists for a session in ``directory``, existing or not:
    global, ``$OPENCODE_CONFIG`` (when set), the project's, then ``~/.opencode``."""
    home = paths.home(env)
    global_dir = paths.config_home(env)
    files = [global_dir / name for name in ("config.json", "opencode.json", "opencode.jsonc")]
    named = paths.named_config(env)
    if named is not None:
        files.append(named)
    if isinstance(directory, str) and directory and "\0" not in directory:
        for folder in _worktree_chain(Path(directory)):
            files += [
                folder / "opencode.jsonc",
                folder / "opencode.json",
                folder / ".opencode" / "opencode.json",
                folder / ".opencode" / "opencode.jsonc",
            ]
    files += [home / ".opencode" / "opencode.json", home / ".opencode" / "opencode.jsonc"]
    return files


_LARGEST_CONFIG = 64 << 20  # bytes; OpenCode's models cache is about 1 MB


def read_json_file(path: str | os.PathLike[str]) -> Any:
    """The JSON (or JSONC) document in the regular file ``path``, or None: a missing,
    unreadable or huge file, a FIFO or a device (``read_regular_file``), text that is not
    JSON or is nested too deep are all no document."""
    data = read_regular_file(path, _LARGEST_CONFIG)
    if data is None:
        return None
    try:
        return json.loads(strip_jsonc(data.decode("utf-8")))
    except (ValueError, RecursionError):
        return None


@lru_cache(maxsize=1024)
def _servers_in(path: str, mtime_ns: int) -> tuple[str, ...]:
    document = read_json_file(path)
    mcp = document.get("mcp") if isinstance(document, dict) else None
    return tuple(mcp) if isinstance(mcp, dict) else ()


def mcp_server_names(directory: str | None, env: Mapping[str, str] | None = None) -> list[str]:
    """The MCP server names configured for a session in ``directory``, sorted, unique."""
    names: set[str] = set()
    for path in config_files(directory, env):
        try:
            info = path.stat()
        except (OSError, ValueError):
            continue
        names.update(_servers_in(str(path), info.st_mtime_ns))
    return sorted(names)


def event_mcp_servers(directory: str | None) -> list[str]:
    """The MCP servers of a session in ``directory``, for the events' ``mcp_server``: a
    source that names no directory (a run stream) is taken to come from the current one,
    as ``opencode run … | opencode-events normalize`` runs there."""
    return mcp_server_names(directory or os.getcwd())
