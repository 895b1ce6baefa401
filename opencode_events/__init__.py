"""opencode-events: OpenCode's run stream, store and server events as one normalized stream.

The library never prints, never exits and never imports click; ``render`` and
``render_tables`` alone import rich (lazily). The command modules own the terminal: ``cli``
(with ``cliutil``, ``context_cmd`` and ``live``, the commands it delegates to) opens stdin,
stdout and stderr and turns errors into exit codes; ``render`` writes to the stream it is
handed, and restores the terminal at exit. Forked worker processes end with ``os._exit``
(``parallel``, ``fanout``): a child must not run its parent's exit handlers.
"""

__version__ = "0.1.0"
