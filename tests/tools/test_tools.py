import asyncio

import pytest

from turnrl.tools import HermesParser, TagParser, Toolbox, ToolError, calculator, extract_tag, get_parser, tool
from turnrl.tools.calculator import CalculatorError, evaluate, format_number
from turnrl.types import ToolCall


@tool
def add(a: int, b: int = 2) -> int:
    """Add two integers.

    Args:
        a: the first number.
        b: the second number.
    """
    return a + b


@tool(name="boom")
def explode(x: str) -> str:
    """Always fails."""
    raise RuntimeError("kaboom")


@tool
def refuse(x: str) -> str:
    """Reports a problem to the model."""
    raise ToolError("x must be shorter")


@tool
async def slow_echo(text: str) -> str:
    """Echo after a short wait."""
    await asyncio.sleep(0.01)
    return text


# ---- @tool and schemas ----


def test_schema_from_signature_and_docstring():
    s = add.schema()
    assert s["type"] == "function"
    fn = s["function"]
    assert fn["name"] == "add" and fn["description"] == "Add two integers."
    params = fn["parameters"]
    assert params["required"] == ["a"]
    assert params["properties"]["a"] == {"type": "integer", "description": "the first number."}
    assert params["properties"]["b"]["default"] == 2
    assert params["additionalProperties"] is False


def test_untyped_parameter_is_refused():
    with pytest.raises(TypeError, match="needs a type annotation"):

        @tool
        def bad(x):
            """No annotation."""


def test_invoke_validates_and_coerces():
    assert add.invoke(ToolCall(name="add", arguments={"a": "3", "b": 4})).content == "7"
    out = add.invoke(ToolCall(name="add", arguments={"a": "three"}))
    assert not out.ok and "invalid arguments for add" in out.content and "a:" in out.content
    out = add.invoke(ToolCall(name="add", arguments={"a": 1, "c": 2}))
    assert not out.ok and "c: Extra inputs are not permitted" in out.content


def test_failures_become_observations():
    out = explode.invoke(ToolCall(name="boom", arguments={"x": "1"}))
    assert not out.ok and out.content == "Error: boom failed: RuntimeError: kaboom"
    out = refuse.invoke(ToolCall(name="refuse", raw="long"))
    assert not out.ok and out.content == "Error: x must be shorter"


def test_raw_text_maps_to_single_parameter_only():
    assert calculator.invoke(ToolCall(name="calculator", raw="6*7")).content == "42"
    out = add.invoke(ToolCall(name="add", raw="1 2"))  # one required parameter: a
    assert not out.ok  # "1 2" is not an int


def test_output_is_capped():
    @tool(max_output_chars=10)
    def long(n: int) -> str:
        """Long output."""
        return "x" * n

    out = long.invoke(ToolCall(name="long", arguments={"n": 25}))
    assert out.content.startswith("x" * 10) and "15 more characters" in out.content


def test_toolbox_unknown_tool_suggests():
    box = Toolbox([add, calculator])
    out = box.invoke(ToolCall(name="calculater", arguments={}))
    assert not out.ok and "Did you mean 'calculator'?" in out.content and "add, calculator" in out.content
    with pytest.raises(ValueError, match="two tools"):
        Toolbox([add, add])
    with pytest.raises(TypeError, match="expected a Tool"):
        Toolbox([lambda: 1])


def test_async_tools():
    box = Toolbox([slow_echo, add])

    async def run():
        return await asyncio.gather(
            box.ainvoke(ToolCall(name="slow_echo", arguments={"text": "hi"})),
            box.ainvoke(ToolCall(name="add", arguments={"a": 1})),
            box.ainvoke(ToolCall(name="nope")),
        )

    outs = asyncio.run(run())
    assert [o.content for o in outs[:2]] == ["hi", "3"] and not outs[2].ok
    assert slow_echo.invoke(ToolCall(name="slow_echo", arguments={"text": "sync"})).content == "sync"


# ---- parsers ----


def test_hermes_parses_calls_in_order():
    text = (
        'Let me check. <tool_call>{"name": "add", "arguments": {"a": 1, "b": 2}}</tool_call> and '
        '<tool_call>\n{"name": "calculator", "arguments": "{\\"expression\\": \\"2*3\\"}"}\n</tool_call>'
    )
    r = HermesParser().parse(text)
    assert r.errors == []
    assert [(c.name, c.arguments) for c in r.calls] == [
        ("add", {"a": 1, "b": 2}),
        ("calculator", {"expression": "2*3"}),
    ]


def test_hermes_list_payload():
    r = HermesParser().parse('<tool_call>[{"name": "a"}, {"name": "b", "arguments": {}}]</tool_call>')
    assert [c.name for c in r.calls] == ["a", "b"] and r.errors == []


@pytest.mark.parametrize(
    "text, fragment",
    [
        ("<tool_call>{'name': 'add'}</tool_call>", "not valid JSON"),
        ('<tool_call>{"arguments": {}}</tool_call>', '"name" string'),
        ('<tool_call>{"name": "add", "arguments": [1]}</tool_call>', "must be a JSON object"),
        ('<tool_call>{"name": "add", "arguments": "{bad"}</tool_call>', "not a JSON object"),
        ('<tool_call>{"name": "add", "arguments": {}}', "never closed"),
    ],
)
def test_hermes_malformed_calls_are_reported(text, fragment):
    r = HermesParser().parse(text)
    assert r.found and r.calls == [] and any(fragment in e for e in r.errors)


def test_no_call_is_not_found():
    assert not HermesParser().parse("The answer is \\boxed{4}.").found
    assert not TagParser(["calculator"]).parse("just text <answer>4</answer>").found


def test_tag_parser_with_mapping_and_errors():
    p = TagParser({"search_query": "search", "math_exp": "calculator"})
    r = p.parse("<search_query>Paris population</search_query> then <math_exp>2+2</math_exp>")
    assert [(c.name, c.raw) for c in r.calls] == [("search", "Paris population"), ("calculator", "2+2")]
    r = p.parse("<math_exp>2+2")
    assert r.found and not r.calls and "never closed" in r.errors[0]
    with pytest.raises(ValueError, match="invalid tag"):
        TagParser(["bad tag"])


def test_extract_tag_and_get_parser():
    assert extract_tag("<answer> 4 </answer> x <answer>5</answer>", "answer") == ["4", "5"]
    assert isinstance(get_parser("tags", ["calculator"]), TagParser)
    with pytest.raises(ValueError, match="unknown tool-call style 'json'.* Registered: hermes, tags; or pass a parser"):
        get_parser("json")
    with pytest.raises(ValueError, match="Did you mean 'hermes'"):
        get_parser("hermez")


def test_instructions_mention_format():
    assert "<tool_call>" in HermesParser().instructions([add]) and '"a"' in HermesParser().instructions([add])
    assert "<calculator>INPUT</calculator>" in TagParser(["calculator"]).instructions([calculator])


# ---- calculator ----


@pytest.mark.parametrize(
    "expr, value",
    [
        ("2+3*4", 14),
        ("(2+3)*4", 20),
        ("7/2", 3.5),
        ("12/4", 3),
        ("7//2", 3),
        ("7 % 4", 3),
        ("2^10", 1024),
        ("2**-1", 0.5),
        ("-3 + +2", -1),
        ("1,000 * 3", 3000),
        ("3 × 4 ÷ 2", 6),
        ("= 5 + 5", 10),
        ("5!", 120),
        ("sqrt(16)", 4.0),
        ("round(2.567, 2)", 2.57),
        ("max(1, 9, 3)", 9),
        ("abs(-4)", 4),
        ("gcd(12, 18)", 6),
    ],
)
def test_calculator_values(expr, value):
    assert evaluate(expr) == value


@pytest.mark.timeout(5)
@pytest.mark.parametrize(
    "expr, fragment",
    [
        ("9**9**9", "power too large"),
        ("10**100000", "power too large"),
        ("2**4000 * 2**4000", "result too large"),
        ("factorial(100000)", "factorial too large"),
        ("100000!", "factorial too large"),
        ("(" * 200 + "1" + ")" * 200, "nested too deeply"),
        ("-" * 400 + "1", "nested too deeply"),
        ("1+" * 300 + "1", "expression too long"),
        ("__import__('os').system('ls')", "unsupported syntax"),
        ("__import__('os')", "unknown function"),
        ("().__class__", "unsupported syntax"),
        ("x + 1", "unknown name"),
        ("1/0", "division by zero"),
        ("sqrt(-1)", "math domain error"),
        ("1e308 * 10", "not a finite number"),
        ("2 +", "cannot parse"),
        ("", "empty expression"),
        ("'a' * 3", "unsupported syntax"),
        ("[1] * 10**9", "unsupported syntax"),
    ],
)
def test_calculator_refuses_quickly_with_a_message(expr, fragment):
    with pytest.raises(CalculatorError, match=fragment):
        evaluate(expr)
    out = calculator.invoke(ToolCall(name="calculator", raw=expr))
    assert not out.ok and out.content.startswith("Error:")


def test_format_number():
    assert format_number(3.0) == "3" and format_number(0.1 + 0.2) == "0.3" and format_number(2**70) == str(2**70)
