"""An agent that ends its turn asking for input: the built-in `ask_user` tool.

A reply whose tool calls are all `ask_user` runs nothing: the turn ends with the question as its
answer, status `input_required` (an A2A task goes to `input-required`, a delegating caller gets the
question as its tool result, flightdeck.domain.callbacks). The next message of the session is the
answer: the model sees it as the result of its `ask_user` call (`answers_as_results`), so the
conversation stays a valid Converse one (every toolUse followed by its toolResult).

What a delegating caller's model receives for such an answer (its tool result, status success):
    {"status": "input_required", "question": "...", "context_id": "<B's session or A2A contextId>"}
(and "task_id" for an A2A peer's task). Delegating again with that context_id continues the
delegate's conversation (flightdeck.domain.dispatch, flightdeck.domain.a2a.client).
"""

from __future__ import annotations

import json
from typing import Any

from flightdeck.domain.agent import DelegateTool
from flightdeck.domain.model import Message, ModelReply, ToolSpec
from flightdeck.domain.records import Session, peer_session_id

ASK_USER = "ask_user"
INPUT_REQUIRED = "input_required"
MAX_QUESTION_CHARS = 4_000


def ask_user_tool_spec() -> ToolSpec:
    return {
        "toolSpec": {
            "name": ASK_USER,
            "description": "Ask whoever gave you the task a question, when you cannot go on without their answer. "
            "Your turn ends with the question; their next message is the answer. Call it alone, "
            "not together with other tools.",
            "inputSchema": {
                "json": {
                    "type": "object",
                    "properties": {"question": {"type": "string", "description": "The question, in full."}},
                    "required": ["question"],
                }
            },
        }
    }


def question_problem(tool_input: Any) -> str:
    """Why an ask_user call's input is not a question ("" when it is one)."""
    if not isinstance(tool_input, dict) or not isinstance(tool_input.get("question"), str):
        return "'question' is required and must be a string"
    question = tool_input["question"].strip()
    if not question:
        return "'question' is empty"
    if len(question) > MAX_QUESTION_CHARS:
        return f"'question' is too long ({len(question)} characters, at most {MAX_QUESTION_CHARS})"
    return ""


def question_of(reply: ModelReply) -> str | None:
    """The question a reply ends its turn with: its tool calls are all valid ask_user calls (several
    questions are joined, one per line). None for any other reply."""
    if reply.error or reply.stop_reason != "tool_use" or not reply.tool_uses:
        return None
    uses = reply.tool_uses
    if any(u.get("name") != ASK_USER or question_problem(u.get("input")) for u in uses):
        return None
    return "\n".join(u["input"]["question"].strip() for u in uses)


def asks(message: Message) -> list[str]:
    """The toolUse ids of an assistant message that asked (all of its calls are ask_user), else []."""
    if message.get("role") != "assistant":
        return []
    uses = [b["toolUse"] for b in message.get("content", []) if isinstance(b.get("toolUse"), dict)]
    if not uses or any(u.get("name") != ASK_USER for u in uses):
        return []
    return [str(u.get("toolUseId", "")) for u in uses]


def answers_as_results(messages: list[Message]) -> list[Message]:
    """The conversation as the model is given it: the user message that follows a question is its
    answer, given as the result of each ask_user call of that question."""
    out: list[Message] = []
    for index, message in enumerate(messages):
        previous = messages[index - 1] if index else {}
        ids = asks(previous)
        blocks = message.get("content", [])
        if ids and message.get("role") == "user" and not any("toolResult" in b for b in blocks):
            answer = "\n".join(b["text"] for b in blocks if isinstance(b.get("text"), str))
            message = {
                "role": "user",
                "content": [
                    {"toolResult": {"toolUseId": i, "content": [{"text": answer}], "status": "success"}} for i in ids
                ],
            }
        out.append(message)
    return out


def pending_question(messages: list[Message]) -> str | None:
    """The question a conversation ends with (its last message asked), or None."""
    if not messages or not asks(messages[-1]):
        return None
    uses = [b["toolUse"] for b in messages[-1].get("content", []) if isinstance(b.get("toolUse"), dict)]
    return "\n".join(str((u.get("input") or {}).get("question", "")).strip() for u in uses)


def input_required_result(question: str, context_id: str, task_id: str = "") -> str:
    """A delegate's question, as its caller's tool result text."""
    body = {"status": INPUT_REQUIRED, "question": question, "context_id": context_id}
    if task_id:
        body["task_id"] = task_id
    return json.dumps(body, ensure_ascii=False)


def recorded_text(answer: str, status: str, context_id: str = "") -> str:
    """A delegate's answer as its caller records it: a question (status input_required) with the context
    that takes its answer. Both sides measure this against the answer limit (flightdeck.domain.limits)."""
    return input_required_result(answer, context_id) if status == INPUT_REQUIRED else answer


def parse_input_required(text: str) -> dict[str, str] | None:
    """The fields of an input_required tool result text, or None when it is not one."""
    try:
        body = json.loads(text)
    except (ValueError, TypeError):
        return None
    if not isinstance(body, dict) or body.get("status") != INPUT_REQUIRED:
        return None
    if not isinstance(body.get("question"), str) or not isinstance(body.get("context_id"), str):
        return None
    return {k: body[k] for k in ("question", "context_id", "task_id") if isinstance(body.get(k), str)}


def known_contexts(session: Session, delegate: DelegateTool, agent_name: str) -> dict[str, set[str]]:
    """The conversations with this delegate the session has had: context_id -> the A2A task ids its questions
    named. One of our agents: the session each new delegation started (its id is derived from the call);
    any delegate: the context each of its questions named. (Never a context a call merely asked for.)"""
    calls: set[str] = set()
    known: dict[str, set[str]] = {}
    for message in session.messages:
        for block in message.get("content", []):
            use, result = block.get("toolUse"), block.get("toolResult")
            if isinstance(use, dict) and use.get("name") == delegate.name:
                calls.add(str(use.get("toolUseId", "")))
                if delegate.protocol != "a2a" and not (use.get("input") or {}).get("context_id"):
                    known.setdefault(
                        peer_session_id(agent_name, session.session_id, str(use.get("toolUseId", ""))), set()
                    )
            elif isinstance(result, dict) and str(result.get("toolUseId", "")) in calls:
                text = "".join(c.get("text", "") for c in result.get("content", []) if isinstance(c, dict))
                asked = parse_input_required(text)
                if asked is not None:
                    known.setdefault(asked["context_id"], set()).update(
                        [asked["task_id"]] if "task_id" in asked else []
                    )
    return known


def answered_question(session: Session, task_id: str) -> str:
    """The last question the A2A task task_id asked this session ("" if none): what a continuation answers."""
    question = ""
    for message in session.messages:
        for block in message.get("content", []):
            result = block.get("toolResult")
            if isinstance(result, dict):
                text = "".join(c.get("text", "") for c in result.get("content", []) if isinstance(c, dict))
                asked = parse_input_required(text)
                if asked is not None and asked.get("task_id") == task_id:
                    question = asked["question"]
    return question


def continued_context(
    session: Session, delegate: DelegateTool, agent_name: str, tool_input: dict[str, Any]
) -> tuple[str, str]:
    """(context_id, task_id) a delegation continues ("" for a new conversation); ValueError says why a
    continuation is refused. Only a conversation this session had with this same delegate may be continued."""
    context_id, task_id = tool_input.get("context_id"), tool_input.get("task_id")
    if context_id in (None, "") and task_id in (None, ""):
        return "", ""
    if not isinstance(context_id, str) or not context_id:
        return _refuse("context_id must be a non-empty string: the context_id of one of the delegate's answers")
    if task_id not in (None, "") and not isinstance(task_id, str):
        return _refuse("task_id must be a string")
    task_id = task_id or ""
    if task_id and delegate.protocol != "a2a":
        return _refuse(f"task_id is for A2A agents; {delegate.agent} continues by context_id alone")
    known = known_contexts(session, delegate, agent_name)
    if context_id not in known:
        return _refuse(
            f"context_id {context_id[:200]!r} names no conversation of this session with "
            f"{delegate.agent}: give the context_id one of its answers named, or none for a new task"
        )
    if task_id and task_id not in known[context_id]:
        return _refuse(f"task_id {task_id[:200]!r} is not a task of context {context_id[:200]!r} that asked a question")
    return context_id, task_id


def _refuse(why: str) -> tuple[str, str]:
    raise ValueError(why)
