"""Bad input is an answer, not a crash: fuzz the parsers, the calculator, the verifiers and the envs."""

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import turnrl
from turnrl.tools import HermesParser, TagParser, calculator
from turnrl.tools.calculator import CalculatorError, evaluate
from turnrl.types import ToolCall
from turnrl.verifiers.math import verify
from turnrl.verifiers.pag import parse_verdict

MARKUP = st.sampled_from(
    [
        "<tool_call>",
        "</tool_call>",
        "{",
        "}",
        '"name"',
        ":",
        '"arguments"',
        "<calculator>",
        "</calculator>",
        "\\boxed{",
        "####",
        "<answer>",
        "</answer>",
        "The answer is wrong",
        "[",
        "]",
    ]
)
TEXTISH = st.lists(st.one_of(st.text(max_size=12), MARKUP), max_size=20).map("".join)
ARITH = st.lists(
    st.sampled_from([*list("0123456789+-*/^().!, e"), "**", "sqrt(", "factorial(", "pi"]), max_size=60
).map("".join)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(TEXTISH)
def test_parsers_never_raise(text):
    for parser in (HermesParser(), TagParser(["calculator", "search_query"])):
        result = parser.parse(text)
        assert all(isinstance(e, str) for e in result.errors)


@pytest.mark.timeout(60)
@settings(max_examples=400, deadline=1000)
@given(ARITH)
def test_calculator_answers_or_refuses_with_a_message(expr):
    try:
        value = evaluate(expr)
    except CalculatorError as e:
        assert str(e)
    else:
        assert isinstance(value, (int, float))
    out = calculator.invoke(ToolCall(name="calculator", raw=expr))
    assert out.ok or out.content.startswith("Error:")


@settings(max_examples=150, deadline=None)
@given(TEXTISH)
def test_verifiers_never_raise_on_model_text(text):
    v = verify(text, "42")
    assert v.score in (0.0, 1.0)
    assert parse_verdict(text) in ("correct", "wrong", None)


@settings(max_examples=60, deadline=None)
@given(st.lists(TEXTISH, min_size=1, max_size=5))
def test_tool_env_survives_any_sequence_of_turns(actions):
    env = turnrl.make("turnrl/Arithmetic-v0", calculator=True, retry=True, max_turns=4)
    env.reset(seed=0)
    for a in actions:
        _obs, reward, terminated, truncated, _info = env.step(a)
        assert reward in (0.0, 1.0)
        if terminated or truncated:
            break
