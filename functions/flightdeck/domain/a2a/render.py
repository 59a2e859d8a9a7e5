"""A task as its client sees it: the Task object (status, answer artifact, history) rendered from its record.

Rendered in the store's message shapes (A2A v0.3's JSON: the task record keeps its message so); each version's
edge converts (flightdeck.domain.a2a.wire_v1 for v1.0). Message ids are derived (uuid5 under MESSAGE_NS), so a
task renders the same on every read.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any

from flightdeck.domain.a2a.contracts import answer_parts
from flightdeck.domain.a2a.ports import TaskRecord, ports
from flightdeck.domain.a2a.protocol import TERMINAL_STATES
from flightdeck.domain.a2a.test_agent import artifact_parts
from flightdeck.domain.asking import pending_question
from flightdeck.domain.ports import Deps

MESSAGE_NS = uuid.UUID("0b9f3f55-7a52-4d7e-9a43-1a2f4b2c7e10")


def _iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _agent_message(task_id: str, context_id: str, text: str, salt: str) -> dict[str, Any]:
    return {
        "kind": "message",
        "role": "agent",
        "messageId": str(uuid.uuid5(MESSAGE_NS, f"{task_id}/{salt}")),
        "parts": [{"kind": "text", "text": text}],
        "contextId": context_id,
        "taskId": task_id,
    }


def _user_message(task_id: str, context_id: str, text: str, salt: str) -> dict[str, Any]:
    return {**_agent_message(task_id, context_id, text, salt), "role": "user"}


def _history(deps: Deps, rec: TaskRecord) -> list[dict[str, Any]]:
    """The messages of every turn of the task, in order: the message that started it, what the agent
    said (tool traffic left out), each message that continued it (by taskId), and those of its
    messages still waiting in the session's inbox. Its questions are in
    it, and the messages that answered them."""
    history = [rec.user_message]
    stored = ports(deps).store.task_messages(
        rec.session_id, rec.start_turn, rec.end_turn, task_key=rec.key if rec.state not in TERMINAL_STATES else ""
    )
    skipped_own = False
    for index, item in enumerate(stored):
        role = item.message.get("role")
        content = item.message.get("content", [])
        texts = [b["text"] for b in content if isinstance(b.get("text"), str)]
        if role == "user":
            if any("toolResult" in b for b in content):
                continue
            own = item.turn == rec.start_turn and item.message_id in ("", rec.user_message.get("messageId"))
            if not skipped_own and own and not item.queued and texts:
                skipped_own = True  # the session's copy of the task's own message
            elif item.message_id or item.queued:  # a message that continued the task
                history.append(_continuing_message(rec, "".join(texts), item.message_id or f"q{index}"))
            elif any(t.strip() for t in texts):  # a later message of the task: an answer to its question
                history.append(_user_message(rec.task_id, rec.session_id, "".join(texts), f"u{item.turn}-{index}"))
            continue
        said = "".join(texts)
        question = pending_question([item.message])
        if question:
            said = f"{said.strip()}\n{question}" if said.strip() else question
        if role == "assistant" and said.strip():
            history.append(_agent_message(rec.task_id, rec.session_id, said, f"h{item.turn}-{index}"))
    return history


def _continuing_message(rec: TaskRecord, text: str, message_id: str) -> dict[str, Any]:
    """A user message that continued the task, as its history shows it (its parts as the model read them)."""
    return {
        "kind": "message",
        "role": "user",
        "messageId": message_id,
        "parts": [{"kind": "text", "text": text}],
        "contextId": rec.session_id,
        "taskId": rec.task_id,
    }


def answer_artifact_id(rec: TaskRecord) -> str:
    return f"{rec.key}-answer"


def status_of(rec: TaskRecord) -> dict[str, Any]:
    """The A2A TaskStatus of a task: its state, when it got there, and the answer or the reason."""
    status: dict[str, Any] = {"state": rec.state, "timestamp": _iso(rec.updated_ms)}
    if rec.state == "completed":
        status["message"] = _agent_message(rec.task_id, rec.session_id, rec.answer, "answer")
    elif rec.status_text:
        status["message"] = _agent_message(rec.task_id, rec.session_id, rec.status_text, f"status-{rec.state}")
    return status


def agent_message(rec: TaskRecord, text: str, salt: str) -> dict[str, Any]:
    """An agent Message of this task (its messageId derived from the task and salt)."""
    return _agent_message(rec.task_id, rec.session_id, text, salt)


def render_task(deps: Deps, rec: TaskRecord, history_length: int | None = None) -> dict[str, Any]:
    """The A2A Task object. history_length: None for all of it, n for the last n messages."""
    task: dict[str, Any] = {"kind": "task", "id": rec.task_id, "contextId": rec.session_id, "status": status_of(rec)}
    if rec.state == "completed":
        task["artifacts"] = [
            {
                "artifactId": answer_artifact_id(rec),
                "name": "answer",
                "parts": artifact_parts(deps.settings.a2a_test_agent, rec.user_message)
                or answer_parts(rec.answer, rec.contract),
            }
        ]
    if history_length != 0:
        history = _history(deps, rec)
        task["history"] = history[-history_length:] if history_length else history
    else:
        task["history"] = []
    return task
