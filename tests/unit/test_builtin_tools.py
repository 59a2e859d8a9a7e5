"""Built-in local tools: pure, deterministic, never raising."""

from __future__ import annotations

import pytest

from flightdeck.domain.builtin_tools import LOCAL_TOOLS, get_tool, run_builtin_tool, specs_for, unknown_tools


def test_word_count_counts_whitespace_separated_words():
    assert run_builtin_tool("word_count", {"text": "the quick  brown\nfox"}) == ("success", "4")
    assert run_builtin_tool("word_count", {"text": ""}) == ("success", "0")


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ("1 + 2", "3"),
        ("(2 + 3) * 4 / 5", "4"),
        ("-3 * -2", "6"),
        ("1 / 4", "0.25"),
        ("0.1 + 0.2", "0.3"),
        ("10 - 2.5", "7.5"),
        ("2 * (3 + (4 - 1))", "12"),
    ],
)
def test_calculator_evaluates_arithmetic(expression, expected):
    assert run_builtin_tool("calculator", {"expression": expression}) == ("success", expected)


@pytest.mark.parametrize(
    "expression",
    [
        "__import__('os').system('true')",
        "2 ** 10",
        "1 // 2",
        "abs(-1)",
        "x + 1",
        "True + 1",
        "'a' * 3",
        "1 +",
        "",
        "[1, 2]",
        "1 / 0",
        "1e308 * 10",
        "(" * 300 + "1" + ")" * 300,
    ],
)
def test_calculator_refuses_anything_else_without_raising(expression):
    status, message = run_builtin_tool("calculator", {"expression": expression})
    assert status == "error"
    assert message


def test_division_by_zero_says_so():
    assert run_builtin_tool("calculator", {"expression": "1 / (2 - 2)"}) == ("error", "calculator: division by zero")


@pytest.mark.parametrize("bad_input", [{}, {"text": 3}, {"text": None}, "text", None, [1]])
def test_invalid_input_is_an_error_not_an_exception(bad_input):
    status, message = run_builtin_tool("word_count", bad_input)
    assert status == "error"
    assert "text" in message


def test_unknown_tool_is_an_error():
    status, message = run_builtin_tool("rm_rf", {"text": "x"})
    assert status == "error"
    assert "rm_rf" in message


def test_specs_are_converse_tool_specs_in_the_order_asked():
    specs = specs_for(["calculator", "word_count"])
    assert [s["toolSpec"]["name"] for s in specs] == ["calculator", "word_count"]
    for spec in specs:
        schema = spec["toolSpec"]["inputSchema"]["json"]
        tool = get_tool(spec["toolSpec"]["name"])
        assert spec["toolSpec"]["description"]
        assert schema["required"] == [tool.text_arg]
        assert schema["properties"][tool.text_arg]["type"] == "string"


def test_specs_for_refuses_unknown_names():
    assert specs_for([]) == []
    assert unknown_tools(["word_count", "nope"]) == ["nope"]
    with pytest.raises(ValueError, match="nope"):
        specs_for(["word_count", "nope"])


def test_registry_has_the_documented_tools():
    assert {"word_count", "calculator"} <= set(LOCAL_TOOLS)
