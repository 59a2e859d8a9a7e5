"""What became of a session's last turn, in a word a person reads (the console's list and timeline).

Derived from the session as read (its status and messages): nothing is stored for it.

  working         busy: a turn is under way
  input_required  its last think asked a question (ask_user): the next message answers it
  canceled        its caller stopped waiting (canceled, or closed with the closing line)
  failed          the turn ended with an error answer (the model could not take it), or a delegation of
                  the turn was refused or answered with an error
  timed_out       a delegation of the turn had no answer before the deadline
  completed       the turn ended with an answer, every call of it answered
"""

from __future__ import annotations

import json
from typing import Any

from flightdeck.domain.asking import pending_question
from flightdeck.domain.records import CANCELED_CLOSING_TEXT as CLOSING_TEXT
from flightdeck.domain.records import SESSION_CANCELED, Session

OUTCOMES = ("working", "input_required", "canceled", "failed", "timed_out", "completed")


def _text(message: dict[str, Any]) -> str:
    return "".join(b["text"] for b in message.get("content", []) if isinstance(b.get("text"), str))


def _error_reason(text: str) -> str | None:
    """The reason of an error answer or result ({"status": "error", "reason": ...}), else None."""
    try:
        body = json.loads(text)
    except ValueError:
        return None
    if not isinstance(body, dict) or body.get("status") != "error":
        return None
    return str(body.get("reason", ""))


def _last_turn(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The messages since the last user message of its own (not tool results)."""
    for index in range(len(messages) - 1, -1, -1):
        message = messages[index]
        if message.get("role") == "user" and not any("toolResult" in b for b in message.get("content", [])):
            return messages[index:]
    return messages


def outcome(session: Session) -> str:
    if session.status == SESSION_CANCELED:
        return "canceled"
    if session.status == "busy":
        return "working"
    messages = session.messages
    if pending_question(messages) is not None:
        return "input_required"
    last = messages[-1] if messages else {}
    if last.get("role") == "assistant":
        if _text(last) == CLOSING_TEXT:
            return "canceled"
        if _error_reason(_text(last)) is not None:
            return "failed"
    failures = [
        _error_reason("".join(c.get("text", "") for c in block["toolResult"].get("content", []) if isinstance(c, dict)))
        for message in _last_turn(messages)
        for block in message.get("content", [])
        if "toolResult" in block and block["toolResult"].get("status") == "error"
    ]
    if "timeout" in failures:
        return "timed_out"
    if failures:
        return "failed"
    return "completed"
