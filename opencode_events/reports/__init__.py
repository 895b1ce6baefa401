"""Reports over events and the store: ``sessions`` (one row per session), ``usage`` (per
turn, step, session, model, agent or day), ``context`` (what fills the context window) and
``mcp`` (which MCP server a tool belongs to). Each builds a typed report with a
``document()``; none prints or renders."""
