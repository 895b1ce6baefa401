"""Errors the library raises for input it cannot use at all, or output it cannot write;
the CLI prints them as one ``error: …`` line and exits 2."""


class InputError(Exception):
    """A file, stream or database that cannot be read at all."""


class OutputError(OSError):
    """A write to the output file the user named (``-o``) failed; ``filename`` is that file."""
