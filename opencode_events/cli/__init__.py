"""The command line: a thin click layer over the library. ``main`` holds the group and the
commands, ``io`` the shared options and the terminal, ``context`` and ``live`` the commands
they delegate to; ``quick`` runs a plain ``normalize``, ``statusline``, ``usage`` or
``sessions`` without importing click at all (start-up), ``exits`` and ``streams`` are what
both share. Only this package imports click, owns stdin/stdout/stderr and exits."""

from .quick import main

__all__ = ["main"]
