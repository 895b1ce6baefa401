"""The exit codes of every command, in one place (README "Exit codes" lists them).

>>> from opencode_events.cli.status import ExitStatus
>>> int(ExitStatus.USAGE)
2
"""

from __future__ import annotations

import enum

__all__ = ["ExitStatus"]


class ExitStatus(enum.IntEnum):
    OK = 0
    STRICT = 1  # --strict, and the input held warnings or errors
    USAGE = 2  # bad usage, or an input that cannot be read at all: one `error:` line
    OVER_BUDGET = 3  # a spending limit (--max-cost) was crossed
    INTERRUPTED = 130  # Ctrl-C (128 + SIGINT)
    BROKEN_PIPE = 141  # 128 + SIGPIPE: only when the pipe closed before we could exit quietly
    TERMINATED = 143  # SIGTERM (128 + 15), handled as an interrupt
