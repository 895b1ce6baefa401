"""Errors the library raises for input it cannot use at all; the CLI prints them as
one ``error: …`` line and exits 2."""


class InputError(Exception):
    """A file, stream or database that cannot be read at all."""
