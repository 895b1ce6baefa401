"""The one rule for OpenCode's figures (core/figures.py), and every reader following it."""

from __future__ import annotations

import json

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from opencode_events.core.figures import (
    Figures,
    cost_value,
    model_label,
    read_figures,
    token_count,
)
from opencode_events.core.mapping import usage_event
from opencode_events.core.views import MESSAGE_DECODER, Tokens

CASES = [
    # (tokens JSON, cost JSON, expected figures)
    ("null", "null", Figures(0, 0, 0, 0, 0, 0, 0.0)),
    ('{"input":10,"output":2}', "0.25", Figures(10, 2, 0, 0, 0, 12, 0.25)),
    ('{"input":10,"cache":{"read":5,"write":1}}', "1", Figures(10, 0, 0, 5, 1, 16, 1.0)),
    ('{"input":1.9,"output":"3","reasoning":true}', '"0.1"', Figures(1, 0, 0, 0, 0, 1, 0.0)),
    ('{"input":4,"total":100}', "0", Figures(4, 0, 0, 0, 0, 100, 0.0)),
    ('{"input":4,"total":7.5}', "0.5", Figures(4, 0, 0, 0, 0, 7, 0.5)),
    ('{"input":4,"total":"x"}', "0.5", Figures(4, 0, 0, 0, 0, 4, 0.5)),
    ('{"input":-3}', "-0.5", Figures(-3, 0, 0, 0, 0, -3, -0.5)),  # as written
    ('{"input":5}', str(10**400), Figures(5, 0, 0, 0, 0, 5, 0.0)),  # beyond any float
    # beyond a 64-bit integer: damage (OpenCode's counts are below 2^53), no column holds it
    ('{"input":2,"output":9223372036854775808}', "0", Figures(2, 0, 0, 0, 0, 2, 0.0)),
    ('{"input":2,"cache":{"read":1e20}}', "0", Figures(2, 0, 0, 0, 0, 2, 0.0)),
    ('{"input":2,"total":10000000000000000000}', "0", Figures(2, 0, 0, 0, 0, 2, 0.0)),
    ('{"input":9223372036854775807}', "0", Figures(2**63 - 1, 0, 0, 0, 0, 2**63 - 1, 0.0)),
]


@pytest.mark.parametrize("tokens, cost, expected", CASES, ids=[c[0] + " " + c[1] for c in CASES])
def test_the_rule(tokens: str, cost: str, expected: Figures):
    data = f'{{"role":"assistant","tokens":{tokens},"cost":{cost}}}'.encode()
    info = MESSAGE_DECODER.decode(data)
    assert read_figures(info.tokens, info.cost) == expected


def test_a_number_that_is_not_finite_counts_zero():
    # JSON cannot write one, but a view may be built in code (the Python API, tests).
    infinite = float("inf")
    assert read_figures(Tokens(input=infinite, total=infinite), infinite) == Figures(
        0, 0, 0, 0, 0, 0, 0.0
    )


def test_coercions_named_by_the_rule():
    assert [token_count(v) for v in (3, 3.7, "3", None, True, float("nan"))] == [3, 3, 0, 0, 0, 0]
    assert [token_count(v) for v in (2**63, -(2**63), 1e19, 2**63 - 1)] == [0, 0, 0, 2**63 - 1]
    assert [cost_value(v) for v in (0.5, 2, "1", None, False, float("inf"))] == [
        0.5,
        2.0,
        0.0,
        0.0,
        0.0,
        0.0,
    ]


_value = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(10**20), 10**20),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=3),
)
_tokens = st.fixed_dictionaries(
    {},
    optional={
        "input": _value,
        "output": _value,
        "reasoning": _value,
        "total": _value,
        "cache": st.one_of(st.none(), st.fixed_dictionaries({}, optional={"read": _value})),
    },
)


@settings(max_examples=300, deadline=None)
@given(tokens=st.one_of(st.none(), _tokens), cost=_value)
def test_every_reader_follows_the_rule(tokens, cost):
    """The usage events, the usage report and the legacy layout read figures the same way."""
    from opencode_events.reports.usage import _figures, _read_message

    data = json.dumps({"role": "assistant", "tokens": tokens, "cost": cost}).encode()
    try:
        info = MESSAGE_DECODER.decode(data)
    except msgspec.ValidationError:
        return  # a tokens object of another shape: the row is unreadable, not mis-counted
    expected = read_figures(info.tokens, info.cost)
    usage = usage_event(info, 1)
    assert (
        usage.input_tokens,
        usage.output_tokens,
        usage.reasoning_tokens,
        usage.cache_read_tokens,
        usage.cache_write_tokens,
        usage.total_tokens,
        usage.cost,
    ) == tuple(expected)
    row = _figures(_read_message(data))
    assert (row.input_tokens, row.total_tokens, row.cost) == (
        expected.input,
        expected.total,
        expected.cost,
    )


LABELS = [
    # (providerID, modelID, how every report names the model)
    ("openai", "gpt-5", "openai/gpt-5"),
    (None, "gpt-5", "gpt-5"),
    ("", "gpt-5", "gpt-5"),
    (7, "gpt-5", "gpt-5"),  # a provider that is no string is not named
    ("openai", "", "?"),
    ("openai", None, "?"),
    ("openai", 7, "?"),
]


@pytest.mark.parametrize("provider, model, expected", LABELS)
def test_a_model_is_named_one_way(provider, model, expected):
    assert model_label(provider, model) == expected
    assert model_label(provider, model, missing=None) == (None if expected == "?" else expected)
