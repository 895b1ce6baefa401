"""Characters a terminal acts on that text from the data must not carry to it unseen.

The bidirectional formatting characters: invisible, they reorder the rest of a line on a
terminal that implements bidi (Konsole, VTE, mlterm), so a crafted title or path can show
one command and hold another ("Trojan Source"). Every view that writes data to a terminal
(the tables and pretty view, ``statusline``, stderr's notes and errors) replaces or escapes
them, beside the C0 and C1 controls it already does::

    >>> from opencode_events.core.text import BIDI_FORMATTING
    >>> 0x202E in BIDI_FORMATTING
    True
"""

from __future__ import annotations

__all__ = ["BIDI_FORMATTING", "as_utf8", "is_utf8"]

# ALM, LRM, RLM; LRE, RLE, PDF, LRO, RLO; LRI, RLI, FSI, PDI
BIDI_FORMATTING = (0x061C, 0x200E, 0x200F, *range(0x202A, 0x202F), *range(0x2066, 0x206A))


# Text of a command line or a file name keeps its bytes that are not UTF-8 as lone
# surrogates (``os.fsdecode``), which UTF-8 output, JSON, msgpack and SQLite's binding
# cannot take: one test, and one repair, for every place such text arrives.


def is_utf8(text: str) -> bool:
    """Whether ``text`` encodes as UTF-8 (holds no lone surrogate)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def as_utf8(text: str) -> str:
    """``text`` with the bytes ``os.fsdecode`` held as surrogates made U+FFFD."""
    return text.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
