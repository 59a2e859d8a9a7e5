"""What the chat client reads of a session: its lenient view of the API's payloads (ChatAccepted, SessionView),
the agent's base URL from what the user typed, and the timeline polling draws from the session's messages
(`timeline_of`, with the ids and kinds the events route sends), each tool result told in one line.

Following a session (the events route, or polling) is flightdeck.chat_client.sessions'.
"""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field

from flightdeck.chat_client.transport import EXIT_USAGE, Problem, preview
from flightdeck.domain.timeline import became, progress_of

DELEGATE_TOOL_PREFIX = "ask_"  # flightdeck.domain.agent.DelegateTool.name, unless a tool_name is configured
ASK_USER = "ask_user"  # flightdeck.domain.asking: the agent asks for input


# The client's own, lenient view of the API's payloads (flightdeck.api.payloads is the server's, strict
# one): a newer server may add fields or statuses ("queued"), and the client keeps working.
class _Lenient(BaseModel):
    model_config = ConfigDict(extra="allow")


class ChatAccepted(_Lenient):
    session_id: str
    turn: int = 0
    iteration: int | None = 0  # null while the message is queued
    status: str = "accepted"
    position: int | None = None  # in the session's inbox, when the answer is 202 "queued"


class SessionView(_Lenient):
    session_id: str
    status: str
    turn: int = 0
    iteration: int = 0
    messages: list[dict[str, Any]] = Field(default_factory=list)


def base_url(url: str) -> str:
    """The agent's base URL from what the user typed (with or without a trailing /api/chat)."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise Problem(
            f"{url!r} is not an agent URL: give one starting with http:// or https://, as "
            "`flightdeck local up` prints it",
            code=EXIT_USAGE,
        )
    url = url.rstrip("/")
    return url.removesuffix("/api/chat").rstrip("/")


def _blocks(message: dict[str, Any]) -> list[dict[str, Any]]:
    content = message.get("content")
    return [b for b in content if isinstance(b, dict)] if isinstance(content, list) else []


def _text(blocks: list[dict[str, Any]]) -> str:
    parts = []
    for block in blocks:
        if isinstance(block.get("text"), str):
            parts.append(block["text"])
        elif "json" in block:
            parts.append(json.dumps(block["json"], ensure_ascii=False))
    return "\n".join(parts)


def delegate_of(tool_name: str) -> str:
    return tool_name.removeprefix(DELEGATE_TOOL_PREFIX) if tool_name.startswith(DELEGATE_TOOL_PREFIX) else tool_name


def describe_result(who: str, result: dict[str, Any]) -> str:
    """One timeline line for a toolResult block: answered, timed out, failed (and why)."""
    text = _text(_blocks(result))
    try:
        body = json.loads(text)
    except ValueError:
        body = None
    if isinstance(body, dict) and body.get("status") == "input_required":  # the delegate asks: a question, not JSON
        return f"{who} asks: {preview(str(body.get('question', '')))}"
    if result.get("status") == "success":
        return f"{who} answered: {preview(text)}"
    if not isinstance(body, dict):
        return f"{who} failed: {preview(text)}"
    reason, detail = body.get("reason"), body.get("detail") or body.get("question") or body.get("message")
    if reason == "timeout":
        return f"{who} timed out: no answer before the delegation's deadline"
    if body.get("status") not in (None, "error"):  # e.g. a delegate asking for input
        return f"{who}: {body['status']}" + (f": {preview(str(detail))}" if detail else "")
    if reason:
        return f"{who} failed: {reason}" + (f" ({preview(str(detail))})" if detail else "")
    return f"{who} failed: {preview(text)}"


def timeline_of(messages: list[dict[str, Any]], busy: bool) -> list[dict[str, Any]]:
    """The session's timeline as the events route sends it (its ids and kinds, the fields drawn), from its
    messages: what polling draws. The ids follow flightdeck.domain.timeline.derive (a unit test holds them
    together); a delegating think also carries its text, which the route does not send."""
    events: list[dict[str, Any]] = []
    calls: dict[str, str] = {}  # toolUseId -> who it went to
    delegated: list[bool] = []  # the latest think that called tools: whether each call delegated
    inputs = thinks = 0
    for message in messages:
        blocks = _blocks(message)
        if message.get("role") == "assistant":
            thinks += 1
            uses = [b["toolUse"] for b in blocks if isinstance(b.get("toolUse"), dict)]
            text = "".join(b["text"] for b in blocks if isinstance(b.get("text"), str))
            if uses and all(use.get("name") == ASK_USER for use in uses):
                # The agent asks for input: its question is this turn's answer; the next message answers it.
                question = "\n".join(
                    str(u["input"].get("question", "")) for u in uses if isinstance(u.get("input"), dict)
                )
                events.append({"id": f"think.{thinks}", "kind": "thinking", "think": thinks, "text": ""})
                events.append({"id": f"question.{thinks}", "kind": "question", "think": thinks, "text": question})
                continue
            events.append({"id": f"think.{thinks}", "kind": "thinking", "think": thinks, "text": text if uses else ""})
            if uses:
                delegated = []
            for use in uses:
                tool_use_id, name, args = str(use.get("toolUseId", "")), str(use.get("name", "")), use.get("input")
                calls[tool_use_id] = who = delegate_of(name)
                # As the server tells a delegation (its agent's tools: ask_<agent>, <agent>__<skill>), from the name.
                delegated.append(name.startswith(DELEGATE_TOOL_PREFIX) or "__" in name)
                if isinstance(args, dict) and set(args) == {"task"}:
                    events.append(
                        {"id": f"tool.{tool_use_id}", "kind": "delegating", "agent": who, "task": str(args["task"])}
                    )
                else:
                    events.append({"id": f"tool.{tool_use_id}", "kind": "tool_call", "tool": name, "input": args})
            if not uses:
                events.append({"id": f"answer.{thinks}", "kind": "answer", "think": thinks, "text": text})
            continue
        results = [b["toolResult"] for b in blocks if isinstance(b.get("toolResult"), dict)]
        for result in results:
            tool_use_id = str(result.get("toolUseId", ""))
            events.append(
                {
                    "id": f"result.{tool_use_id}",
                    "kind": "callback_accepted",
                    "agent": calls.get(tool_use_id, "a tool"),
                    "status": result.get("status"),
                    "text": _text(_blocks(result)),
                }
            )
        if len(results) >= 2 and any(delegated):  # the turn complete: the events route's last progress
            what = "delegations" if all(delegated) else "calls"
            fates = [became(str(r.get("status", "success")), _text(_blocks(r))) for r in results]
            event_id, data = progress_of(thinks, what, len(results), fates.count("answered"), fates)
            events.append({"id": event_id, "kind": "progress", "text": data["text"]})
        if not results:
            inputs += 1
            events.append({"id": f"input.{inputs}", "kind": "message", "text": _text(blocks)})
    last = messages[-1] if messages else {}
    if busy and last.get("role") != "assistant":  # the next think is under way (or owed)
        events.append({"id": f"think.{thinks + 1}", "kind": "thinking", "think": thinks + 1})
    return events
