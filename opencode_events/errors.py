"""The errors the library raises; the command line prints each as one ``error: …`` line
and exits 2 (``cli.status.ExitStatus.USAGE``). Bad *lines* never raise: they become
``warning`` events. These are for what cannot be used at all::

    OpencodeEventsError
     ├── InputError      a file, stream or database that cannot be read at all
     ├── OutputError     a write to the output file the user named failed (also an OSError)
     └── GroupingError   a report asked to group by what its source cannot tell (also a ValueError)

    >>> import opencode_events
    >>> try:
    ...     opencode_events.open_store("/nonexistent/opencode.db")
    ... except opencode_events.InputError as exc:
    ...     print("cannot use it:", type(exc).__name__)
    cannot use it: InputError
"""

__all__ = ["OpencodeEventsError", "InputError", "OutputError", "GroupingError"]


class OpencodeEventsError(Exception):
    """Base of every error opencode-events raises on purpose."""


class InputError(OpencodeEventsError):
    """A file, stream or database that cannot be read at all."""


class OutputError(OpencodeEventsError, OSError):
    """A write to the output file the user named (``-o``) failed; ``filename`` is that file."""


class GroupingError(OpencodeEventsError, ValueError):
    """A ``--by`` this report cannot group by (``day`` of a source with no times, ``model``
    of a stream)."""
