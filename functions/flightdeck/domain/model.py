"""The one interface every model sits behind, shaped like Bedrock's Converse API.

Messages are Converse messages: {"role": "user"|"assistant", "content": [block]},
a block being {"text": str}, {"toolUse": {"toolUseId", "name", "input"}} or
{"toolResult": {"toolUseId", "content": [{"text": str}], "status": "success"|"error"}}.
Tools are Converse tool specs: {"toolSpec": {"name", "description", "inputSchema": {"json": {...}}}}.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field

Message = dict[str, Any]
ToolSpec = dict[str, Any]


class ModelReply(BaseModel):
    # defer_build: built by the first think (the turn worker), not when every function starts.
    model_config = ConfigDict(defer_build=True)

    stop_reason: Literal[
        "end_turn", "tool_use", "max_tokens", "stop_sequence", "guardrail_intervened", "content_filtered"
    ]
    # The assistant message to append: {"role": "assistant", "content": [...]}.
    message: Message
    usage: dict[str, int] = Field(default_factory=dict)
    # Set when no model reply could be had (flightdeck.domain.turn_loop): the message then holds
    # the error answer as JSON text {"status": "error", "reason", "detail"}, and the turn ends.
    error: str = ""

    @property
    def tool_uses(self) -> list[dict[str, Any]]:
        return [b["toolUse"] for b in self.message.get("content", []) if "toolUse" in b]

    @property
    def text(self) -> str:
        return "".join(b.get("text", "") for b in self.message.get("content", []))


class Model(Protocol):
    # output_schema (given only when the turn has a contract): the final answer must be an instance of it.
    def converse(
        self, *, system: str, messages: list[Message], tools: list[ToolSpec], output_schema: Any = None
    ) -> ModelReply: ...


@dataclass(frozen=True)
class TextDelta:
    """A piece of the reply's text, as the model produced it."""

    text: str


class StreamingModel(Model, Protocol):
    """A model that can hand out its reply as it is produced (Bedrock ConverseStream).

    converse_stream yields TextDelta pieces, then exactly one ModelReply: the same reply
    converse would return (the pieces joined are its text).
    """

    def converse_stream(
        self, *, system: str, messages: list[Message], tools: list[ToolSpec], output_schema: Any = None
    ) -> Iterator[TextDelta | ModelReply]: ...


def collect(stream: Iterator[TextDelta | ModelReply]) -> ModelReply:
    """The reply at the end of a converse_stream (the deltas are dropped)."""
    reply = None
    for item in stream:
        if isinstance(item, ModelReply):
            reply = item
    if reply is None:
        raise ModelError("the model stream ended without a reply")
    return reply


# A word with the whitespace after it: the pieces joined give back the text exactly.
_WORD = re.compile(r"\s*\S+\s*|\s+")


def word_chunks(text: str, max_chunks: int | None = None) -> list[str]:
    """The text word by word (each piece a word and the whitespace after it; leading whitespace stays with
    the first), joined back into at most max_chunks pieces of about equal word counts."""
    words = _WORD.findall(text) or [text]
    if max_chunks is None or len(words) <= max_chunks:
        return words
    size = -(-len(words) // max_chunks)  # ceiling: at most max_chunks pieces
    return ["".join(words[i : i + size]) for i in range(0, len(words), size)]


def delegate_tool_spec(name: str, agent: str, description: str = "", a2a: bool = False) -> ToolSpec:
    """The Converse spec of a delegating tool: the task, and optionally the conversation it continues
    (flightdeck.domain.asking: a delegate that asked a question names its context_id)."""
    properties: dict[str, Any] = {
        "task": {"type": "string", "description": "What the agent should do (or the answer to its question)."},
        "context_id": {
            "type": "string",
            "description": "Only to continue a conversation with this agent, e.g. to "
            "answer its question: the context_id its answer named. "
            "Leave out to start a new one.",
        },
    }
    properties["response_schema"] = {
        "type": "object",
        "description": "Only when the answer must have a structure: its JSON Schema, or the shorthand "
        '{"field": "number", "items": "string[]"}. The answer comes back as JSON held to it.',
    }
    if a2a:
        properties["task_id"] = {
            "type": "string",
            "description": "With context_id, to answer a question: the task_id its answer named.",
        }
    return {
        "toolSpec": {
            "name": name,
            "description": description or f"Delegate a task to the agent '{agent}'. The answer arrives asynchronously.",
            "inputSchema": {"json": {"type": "object", "properties": properties, "required": ["task"]}},
        }
    }


# The tool a model that must answer to an output schema answers through (Bedrock: a forced tool
# call whose input schema is the output schema; flightdeck.adapters.bedrock). Reserved: no delegate
# may take the name (flightdeck.domain.agent).
RESPOND_TOOL = "respond"


class ModelError(RuntimeError):
    """The model could not answer. `retryable`: trying again later may succeed (throttling, 5xx)."""

    retryable: bool = False


def error_reply(reason: str, detail: str) -> ModelReply:
    """The reply that ends a turn the model could not take: the caller gets status "error" and why."""
    text = json.dumps({"status": "error", "reason": reason, "detail": detail})
    return ModelReply(stop_reason="end_turn", message={"role": "assistant", "content": [{"text": text}]}, error=reason)
