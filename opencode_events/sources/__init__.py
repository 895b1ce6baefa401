"""Readers: each turns one kind of OpenCode output into events through the normalizer.

``stream`` (``opencode run --format json``), ``sse`` (the server's event stream),
``export`` (``opencode export`` documents), ``transcript`` (a stored session's rows),
``replay`` (our own JSONL read again). A reader never raises on a bad line: it becomes a
``warning`` event.
"""
