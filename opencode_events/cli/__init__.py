"""The command line: a thin click layer over the library. ``main`` holds the group and the
commands, ``io`` the shared options and the terminal, ``context`` and ``live`` the commands
they delegate to. Only this package imports click, owns stdin/stdout/stderr and exits."""

from .main import main

__all__ = ["main"]
