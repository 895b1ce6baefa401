#!/usr/bin/env python3
"""A tiny stdio MCP server (standard library only) for the capture scenarios.

Newline-delimited JSON-RPC 2.0 on stdin/stdout, as the MCP stdio transport
specifies.  Tools:

* ``echo {text}``     -- succeeds, returns ``echo: <text>``
* ``reject {reason}`` -- the server rejects the call with a JSON-RPC error
* ``broken {}``       -- returns a tool result with ``isError: true``

Every message received is appended to the file named by ``MCP_LOG`` (if set).
"""

from __future__ import annotations

import json
import os
import sys

TOOLS = [
    {
        "name": "echo",
        "description": "Echo the given text back.",
        "inputSchema": {
            "type": "object",
            "properties": {"text": {"type": "string", "description": "text to echo"}},
            "required": ["text"],
        },
    },
    {
        "name": "reject",
        "description": "Always rejected by the server (JSON-RPC error).",
        "inputSchema": {
            "type": "object",
            "properties": {"reason": {"type": "string"}},
        },
    },
    {
        "name": "broken",
        "description": "Returns a tool result flagged isError.",
        "inputSchema": {"type": "object", "properties": {}},
    },
]


def reply(msg_id, result=None, error=None):
    out = {"jsonrpc": "2.0", "id": msg_id}
    if error is not None:
        out["error"] = error
    else:
        out["result"] = result
    sys.stdout.write(json.dumps(out) + "\n")
    sys.stdout.flush()


def handle(msg: dict) -> None:
    method = msg.get("method")
    msg_id = msg.get("id")
    params = msg.get("params") or {}
    if msg_id is None:  # a notification
        return
    if method == "initialize":
        reply(
            msg_id,
            {
                "protocolVersion": params.get("protocolVersion", "2025-06-18"),
                "capabilities": {"tools": {"listChanged": False}},
                "serverInfo": {"name": "harness-mcp", "version": "1.0.0"},
            },
        )
    elif method == "ping":
        reply(msg_id, {})
    elif method == "tools/list":
        reply(msg_id, {"tools": TOOLS})
    elif method in ("prompts/list", "resources/list", "resources/templates/list"):
        key = {
            "prompts/list": "prompts",
            "resources/list": "resources",
            "resources/templates/list": "resourceTemplates",
        }[method]
        reply(msg_id, {key: []})
    elif method == "tools/call":
        name = params.get("name")
        args = params.get("arguments") or {}
        if name == "echo":
            reply(msg_id, {"content": [{"type": "text", "text": f"echo: {args.get('text', '')}"}]})
        elif name == "reject":
            reply(
                msg_id,
                error={
                    "code": -32602,
                    "message": f"rejected by harness-mcp: {args.get('reason', 'no')}",
                },
            )
        elif name == "broken":
            reply(
                msg_id,
                {"content": [{"type": "text", "text": "broken tool failed"}], "isError": True},
            )
        else:
            reply(msg_id, error={"code": -32601, "message": f"unknown tool {name}"})
    else:
        reply(msg_id, error={"code": -32601, "message": f"method not found: {method}"})


def main() -> None:
    log_path = os.environ.get("MCP_LOG")
    for line in sys.stdin:
        line = line.strip()
        if not line:
            continue
        if log_path:
            with open(log_path, "a") as f:
                f.write(line + "\n")
        try:
            msg = json.loads(line)
        except ValueError:
            continue
        if isinstance(msg, list):
            for m in msg:
                handle(m)
        else:
            handle(msg)


if __name__ == "__main__":
    main()
