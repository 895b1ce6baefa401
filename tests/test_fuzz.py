"""The fuzz suite, bounded: real captures, mutated (tests/fuzzing.py), for each input kind;
valid UTF-8 JSON out, every line accounted for, no exception. ``make fuzz`` runs a million
cases of each (scripts/fuzz.py)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.fuzzing import KINDS, case, check


@pytest.mark.parametrize("kind", KINDS)
def test_mutated_real_inputs_give_valid_events(kind: str):
    @settings(max_examples=150, deadline=None, derandomize=True, database=None)
    @given(st.integers(0, 2**63))
    def mapped(seed: int) -> None:
        assert check(kind, case(kind, seed)) >= 1  # the closing metrics at least

    mapped()
