"""The one rule for OpenCode's figures: the six token counts and the cost of a step or an
inference, read from its ``tokens`` object and ``cost`` as OpenCode wrote them.

- A count is an int as written; a float is cut to its integer part; anything else (a
  string, a bool, null, a missing field, a float that is no finite number) counts 0, and so
  does a count beyond a 64-bit integer: OpenCode's are JavaScript numbers (below 2^53), so
  such a count is damage, and no column holds it (DuckDB's BIGINT, SQLite's INTEGER).
- ``total`` is OpenCode's ``tokens.total`` when it gives one, else the sum of the five
  classes (SPEC §2: input excludes cache reads).
- The cost is OpenCode's ``cost`` as a float, never re-priced; anything else counts 0.

Every reader of figures — the usage events, ``usage``, ``context``, the legacy layout —
calls ``read_figures``; a report's own hot loop may inline the rule for plain ints only
(and says so), falling back to it for anything else.

    >>> from opencode_events.core.figures import read_figures
    >>> from opencode_events.core.views import Tokens, CacheTokens
    >>> read_figures(Tokens(input=10, output=2, cache=CacheTokens(read=5)), 0.25)
    Figures(input=10, output=2, reasoning=0, cache_read=5, cache_write=0, total=17, cost=0.25)
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

from .views import Tokens

__all__ = [
    "Figures",
    "ZERO",
    "INT64",
    "SUM_DIGITS",
    "read_figures",
    "token_count",
    "cost_value",
    "summed_cost",
    "model_label",
]


class Figures(NamedTuple):
    input: int
    output: int
    reasoning: int
    cache_read: int
    cache_write: int
    total: int
    cost: float


ZERO = Figures(0, 0, 0, 0, 0, 0, 0.0)
_new = tuple.__new__  # builds a Figures in C: NamedTuple's own __new__ is Python code
_finite = math.isfinite


INT64 = (1 << 63) - 1  # the largest count the rule keeps (and -INT64 the least)


def token_count(value: Any) -> int:
    """A token count as the rule reads it (above)."""
    kind = type(value)
    if kind is float and math.isfinite(value):
        value, kind = int(value), int
    return value if kind is int and -INT64 <= value <= INT64 else 0


def cost_value(value: Any) -> float:
    """A cost as the rule reads it (above)."""
    kind = type(value)
    if kind is float:
        return value if math.isfinite(value) else 0.0
    if kind is int:
        try:
            return float(value)
        except OverflowError:  # an integer beyond any float
            return 0.0
    return 0.0


# A cost that adds up several of OpenCode's figures is written to 12 significant digits: a
# float sum's last digits depend on the order of the additions (one process or several) and
# on binary fractions (0.1 + 0.2), and no bill has them. One figure is written as stored.
SUM_DIGITS = 12


def summed_cost(value: float, figures: int) -> float:
    """How ``value``, the sum of ``figures`` of OpenCode's costs, is written."""
    return value if figures <= 1 else float(f"{value:.{SUM_DIGITS}g}")


def read_figures(tokens: Tokens | None, cost: Any) -> Figures:
    """The figures of one step or inference: its ``tokens`` view and its ``cost``."""
    if tokens is None:
        return Figures(0, 0, 0, 0, 0, 0, cost_value(cost))
    # Plain ints pass untouched: this runs once per model step on the hot path.
    input_, output, reasoning = tokens.input, tokens.output, tokens.reasoning
    if type(input_) is not int or not -INT64 <= input_ <= INT64:
        input_ = token_count(input_)
    if type(output) is not int or not -INT64 <= output <= INT64:
        output = token_count(output)
    if type(reasoning) is not int or not -INT64 <= reasoning <= INT64:
        reasoning = token_count(reasoning)
    cache = tokens.cache
    if cache is None:
        cache_read = cache_write = 0
    else:
        cache_read, cache_write = cache.read, cache.write
        if type(cache_read) is not int or not -INT64 <= cache_read <= INT64:
            cache_read = token_count(cache_read)
        if type(cache_write) is not int or not -INT64 <= cache_write <= INT64:
            cache_write = token_count(cache_write)
    given = tokens.total
    if type(given) is int and -INT64 <= given <= INT64:
        total = given
    elif type(given) is float and math.isfinite(given) and -INT64 <= given <= INT64:
        total = int(given)
    else:
        total = input_ + output + reasoning + cache_read + cache_write
    if type(cost) is not float or not _finite(cost):
        cost = cost_value(cost)
    return _new(Figures, (input_, output, reasoning, cache_read, cache_write, total, cost))


def model_label(provider: Any, model: Any, missing: str | None = "?") -> str | None:
    """A reply's model as every report names it: ``provider/model`` (OpenCode's own ids),
    the model alone where no provider is named, ``missing`` where no model is (not a string,
    or empty).

    >>> model_label("openai", "gpt-5"), model_label(None, "gpt-5"), model_label("openai", "")
    ('openai/gpt-5', 'gpt-5', '?')
    """
    if not isinstance(model, str) or not model:
        return missing
    if not isinstance(provider, str) or not provider:
        return model
    label = _LABELS.get((provider, model))
    if label is None:  # one string a model, not one a row (a report of every step holds many)
        if len(_LABELS) >= 4096:
            _LABELS.clear()
        label = _LABELS[provider, model] = f"{provider}/{model}"
    return label


_LABELS: dict[tuple[str, str], str] = {}
