"""A model that says what the test scripted, and the replies it may say."""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any

from flightdeck.domain.asking import ASK_USER
from flightdeck.domain.model import Message, ModelError, ModelReply, ToolSpec

_ids = itertools.count(1)


def answer(text: str) -> ModelReply:
    """A final answer: the turn ends with it."""
    return ModelReply(stop_reason="end_turn", message={"role": "assistant", "content": [{"text": text}]})


def call(name: str, tool_use_id: str | None = None, **tool_input: Any) -> dict[str, Any]:
    """One tool call of a reply (see `calls`)."""
    return {"toolUse": {"toolUseId": tool_use_id or f"tooluse_{next(_ids):04d}", "name": name, "input": tool_input}}


def calls(*uses: dict[str, Any]) -> ModelReply:
    """A reply that calls tools (delegations, local tools): the turn waits for their results."""
    return ModelReply(stop_reason="tool_use", message={"role": "assistant", "content": list(uses)})


def asks(question: str) -> ModelReply:
    """A reply that asks whoever gave the task a question (the built-in ask_user tool, alone)."""
    return calls(call(ASK_USER, question=question))


def model_error(detail: str, *, retryable: bool) -> ModelError:
    exc = ModelError(detail)
    exc.retryable = retryable
    return exc


@dataclass
class Converse:
    system: str
    messages: list[Message]
    tools: list[ToolSpec]


@dataclass
class ScriptedModel:
    """Model: each converse takes the next scripted reply (or raises the next scripted error)."""

    script: list[ModelReply | Exception] = field(default_factory=list)
    heard: list[Converse] = field(default_factory=list)

    def says(self, *replies: ModelReply | Exception) -> ScriptedModel:
        self.script.extend(replies)
        return self

    def converse(self, *, system: str, messages: list[Message], tools: list[ToolSpec]) -> ModelReply:
        self.heard.append(Converse(system, messages, tools))
        if not self.script:
            raise AssertionError("the model was called once more than the test scripted")
        step = self.script.pop(0)
        if isinstance(step, Exception):
            raise step
        return step
