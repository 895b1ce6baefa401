"""Writers: events as JSON Lines (``jsonl``), rows as JSON/CSV/Markdown (``rows``), and
what people look at (``pretty``, ``tables``: the only modules that import rich, lazily)."""
