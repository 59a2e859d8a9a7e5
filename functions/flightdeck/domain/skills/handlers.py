"""Deterministic skill handlers: a structured call to a skill bound to one is answered without the model.

Each handler is a built-in tool (flightdeck.domain.builtin_tools) with the JSON Schemas of its input
and its structured output; a skill that binds it and declares no schema of its own takes these.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from flightdeck.domain.builtin_tools import run_builtin_tool
from flightdeck.domain.model import ModelReply


@dataclass(frozen=True)
class Handler:
    name: str
    input_schema: dict[str, Any]
    output_schema: dict[str, Any]
    # The built-in tool's text answer as structured output.
    shape: Callable[[str], Any]


def _number(text: str) -> int | float:
    value = float(text)
    return int(value) if value.is_integer() and abs(value) < 1e15 else value


HANDLERS: dict[str, Handler] = {
    h.name: h
    for h in (
        Handler(
            "word_count",
            {
                "type": "object",
                "properties": {"text": {"type": "string", "maxLength": 100_000}},
                "required": ["text"],
                "additionalProperties": False,
            },
            {"type": "object", "properties": {"words": {"type": "integer"}}, "required": ["words"]},
            lambda text: {"words": int(text)},
        ),
        Handler(
            "calculator",
            {
                "type": "object",
                "properties": {"expression": {"type": "string", "maxLength": 200}},
                "required": ["expression"],
                "additionalProperties": False,
            },
            {"type": "object", "properties": {"value": {"type": "number"}}, "required": ["value"]},
            lambda text: {"value": _number(text)},
        ),
    )
}


def run_handler(name: str, arguments: dict[str, Any]) -> tuple[bool, str]:
    """(ok, answer): the handler's structured output as JSON text, or why it failed. Never raises."""
    handler = HANDLERS.get(name)
    if handler is None:
        return False, json.dumps({"status": "error", "reason": "unknown_handler", "detail": name})
    status, text = run_builtin_tool(name, arguments)
    if status != "success":
        return False, json.dumps({"status": "error", "reason": "handler_error", "detail": text})
    return True, json.dumps(handler.shape(text), ensure_ascii=False)


def handler_reply(name: str, arguments: dict[str, Any]) -> ModelReply:
    """The handler's answer as the turn's final reply (stored like a model's, so the turn ends as any does)."""
    ok, text = run_handler(name, arguments)
    return ModelReply(
        stop_reason="end_turn",
        message={"role": "assistant", "content": [{"text": text}]},
        error="" if ok else "handler_error",
    )
