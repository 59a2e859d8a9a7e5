"""Built-in local tools: run inline by the turn, answered synchronously.

Each tool has a name, a Converse tool spec and a pure ``run(input) -> str``.
They are deterministic on purpose (no clock, no network) so that tests and
local runs are reproducible. ``run_builtin_tool`` never raises: unknown tools
and invalid input come back as ``("error", message)``.
"""

from __future__ import annotations

import ast
import math
import operator
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Literal

from flightdeck.domain.model import ToolSpec

ToolStatus = Literal["success", "error"]

MAX_TEXT_CHARS = 100_000
MAX_EXPRESSION_CHARS = 200


class ToolInputError(ValueError):
    """The input given to a local tool is not acceptable; the message says why."""


@dataclass(frozen=True)
class BuiltinTool:
    name: str
    description: str
    # The tool's single string argument: the one the local model fills from `!name args`.
    text_arg: str
    text_arg_description: str
    run: Callable[[dict[str, Any]], str]

    @property
    def spec(self) -> ToolSpec:
        return {
            "toolSpec": {
                "name": self.name,
                "description": self.description,
                "inputSchema": {
                    "json": {
                        "type": "object",
                        "properties": {self.text_arg: {"type": "string", "description": self.text_arg_description}},
                        "required": [self.text_arg],
                    }
                },
            }
        }


def _string_arg(input: dict[str, Any], key: str, max_chars: int) -> str:
    if not isinstance(input, dict):
        raise ToolInputError(f"input must be an object with a string '{key}'")
    value = input.get(key)
    if not isinstance(value, str):
        raise ToolInputError(f"'{key}' is required and must be a string")
    if len(value) > max_chars:
        raise ToolInputError(f"'{key}' is too long ({len(value)} characters, at most {max_chars})")
    return value


# --- word_count --------------------------------------------------------------


def _word_count(input: dict[str, Any]) -> str:
    text = _string_arg(input, "text", MAX_TEXT_CHARS)
    return str(len(text.split()))


# --- calculator --------------------------------------------------------------

_BINARY_OPS: dict[type, Callable[[Any, Any], int | float]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
}
_UNARY_OPS: dict[type, Callable[[Any], int | float]] = {ast.UAdd: operator.pos, ast.USub: operator.neg}


def _evaluate(node: ast.AST) -> int | float:
    if isinstance(node, ast.Expression):
        return _evaluate(node.body)
    if isinstance(node, ast.Constant):
        # bool is an int subclass: refuse it like any other non-number.
        if isinstance(node.value, (int, float)) and not isinstance(node.value, bool):
            return node.value
        raise ToolInputError(f"only numbers are allowed, not {node.value!r}")
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY_OPS:
        left, right = _evaluate(node.left), _evaluate(node.right)
        if isinstance(node.op, ast.Div) and right == 0:
            raise ToolInputError("division by zero")
        return _BINARY_OPS[type(node.op)](left, right)
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY_OPS:
        return _UNARY_OPS[type(node.op)](_evaluate(node.operand))
    raise ToolInputError("only numbers, parentheses and + - * / are allowed")


def _format_number(value: int | float) -> str:
    if isinstance(value, int):
        return str(value)
    if not math.isfinite(value):
        raise ToolInputError("the result is too large")
    if value.is_integer() and abs(value) < 1e15:
        return str(int(value))
    return f"{value:.12g}"


def _calculator(input: dict[str, Any]) -> str:
    expression = _string_arg(input, "expression", MAX_EXPRESSION_CHARS).strip()
    if not expression:
        raise ToolInputError("'expression' is empty")
    try:
        tree = ast.parse(expression, mode="eval")
    except (SyntaxError, ValueError, MemoryError, RecursionError) as exc:
        raise ToolInputError(f"not an arithmetic expression: {expression!r}") from exc
    try:
        return _format_number(_evaluate(tree))
    except RecursionError as exc:
        raise ToolInputError("the expression is nested too deeply") from exc
    except OverflowError as exc:
        raise ToolInputError("the result is too large") from exc


LOCAL_TOOLS: dict[str, BuiltinTool] = {
    tool.name: tool
    for tool in (
        BuiltinTool(
            name="word_count",
            description="Count the words (whitespace-separated) of a text. Returns the count.",
            text_arg="text",
            text_arg_description="The text whose words to count.",
            run=_word_count,
        ),
        BuiltinTool(
            name="calculator",
            description="Evaluate an arithmetic expression with numbers, parentheses and + - * /. Returns the result.",
            text_arg="expression",
            text_arg_description="The expression, e.g. '(2 + 3) * 4 / 5'.",
            run=_calculator,
        ),
    )
}


def get_tool(name: str) -> BuiltinTool | None:
    return LOCAL_TOOLS.get(name)


def unknown_tools(names: Iterable[str]) -> list[str]:
    """The names that are not built-in local tools (to validate configuration)."""
    return [n for n in names if n not in LOCAL_TOOLS]


def specs_for(names: Iterable[str]) -> list[ToolSpec]:
    """Converse specs of the named local tools, in order; an unknown name is a configuration error."""
    names = list(names)
    unknown = unknown_tools(names)
    if unknown:
        raise ValueError(f"unknown local tool(s): {', '.join(unknown)}; known: {', '.join(sorted(LOCAL_TOOLS))}")
    return [LOCAL_TOOLS[n].spec for n in dict.fromkeys(names)]


def run_builtin_tool(name: str, input: dict[str, Any]) -> tuple[ToolStatus, str]:
    """Run a local tool: ("success", text) or ("error", why). Never raises."""
    tool = LOCAL_TOOLS.get(name)
    if tool is None:
        return "error", f"unknown local tool {name!r}"
    try:
        return "success", tool.run(input)
    except ToolInputError as exc:
        return "error", f"{name}: {exc}"
    except Exception as exc:  # noqa: BLE001 - a tool must never break the turn
        return "error", f"{name} failed: {type(exc).__name__}: {exc}"
