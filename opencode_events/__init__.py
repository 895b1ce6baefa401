"""opencode-events: OpenCode's run stream, store and server events as one normalized stream.

The library never prints, never exits and never imports click or rich; ``cli`` is the
only module that talks to the terminal.
"""

__version__ = "0.1.0"
