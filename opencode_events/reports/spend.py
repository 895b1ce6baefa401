"""One rule for what a session cost with its subagents, for every view that shows it
(``sessions``, ``statusline``, ``top``): the sessions' stored costs (each OpenCode's running
sum of its inferences' costs) added up, written as stored for one inference and to 12
significant digits for several (``core.figures.summed_cost``), so that the figure reads the
same in every view and in ``usage`` of the same session.

    >>> from opencode_events.reports.spend import written_spend
    >>> written_spend([0.0065249999999999996], [3])
    0.006525
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

from ..core.figures import summed_cost

__all__ = ["Spend", "written_spend", "family_spend"]


def written_spend(costs: Sequence[float], inferences: Sequence[int]) -> float:
    """The stored ``costs`` of some sessions, added and written by the rule above."""
    return summed_cost(sum(costs), max(sum(inferences), len(costs)))


class Spend(NamedTuple):
    total: float  # the session with every session below it
    own: float
    below: float
    subagents: int


def family_spend(store: Any, family: Sequence[tuple[str, float, int]]) -> Spend:
    """The spend of ``family`` (``store.family_rows(root)``: the root first), its inference
    counts read from the store's index (``inference_counts``)."""
    counts = store.inference_counts([sid for sid, _, _ in family])
    costs = [cost for _, cost, _ in family]
    ns = [counts.get(sid, 0) for sid, _, _ in family]
    return Spend(
        total=written_spend(costs, ns),
        own=written_spend(costs[:1], ns[:1]),
        below=written_spend(costs[1:], ns[1:]) if len(costs) > 1 else 0.0,
        subagents=len(costs) - 1,
    )
