"""Server-Sent Events: the response a streaming route hands back instead of a proxy response.

A Lambda entry (flightdeck.api.resolver.http_handler with a `stream` hook) returns a
StreamReply whose `chunks` yield the SSE bytes as the stream's generator produces them. Two
servers consume it the same way: the function's web server on AWS (flightdeck.handlers.web,
behind the Lambda Web Adapter and API Gateway's STREAM integration) and the local gateway
(flightdeck.local.gateway). Framing is the WHATWG EventSource format: `id:`, `event:` and one
`data:` line of JSON per event, a blank line after each; comments (`: ...`) keep idle
connections open and are ignored by clients.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

EVENT_STREAM = "text/event-stream"
SSE_HEADERS = {
    "Content-Type": f"{EVENT_STREAM}; charset=utf-8",
    "Cache-Control": "no-cache",
    # Proxies that buffer by default (nginx) pass the events on as they come.
    "X-Accel-Buffering": "no",
}


def event_schema(description: str, kinds: list[str] | None = None) -> dict[str, Any]:
    """The OpenAPI schema of one event of a text/event-stream response: its fields as a client parses them."""
    event: dict[str, Any] = {"type": "string"}
    if kinds:
        event["enum"] = kinds
    return {
        "type": "object",
        "required": ["data"],
        "description": description,
        "properties": {
            "id": {"type": "string"},
            "event": event,
            "data": {"type": "string", "contentMediaType": "application/json", "description": "one line of JSON"},
        },
    }


@dataclass
class StreamReply:
    """An HTTP response whose body is written as it is produced."""

    chunks: Iterator[bytes]
    status: int = 200
    headers: dict[str, str] = field(default_factory=lambda: dict(SSE_HEADERS))
    # What the request's audit line says of it, as a proxy response would (flightdeck.api.auth).
    outcome: dict[str, Any] = field(default_factory=lambda: {"statusCode": 200, "body": '{"status": "streaming"}'})


def frame(data: Any, event: str | None = None, event_id: str | None = None) -> bytes:
    """One event: its JSON on a single data line (JSON text has no raw line breaks)."""
    lines = []
    if event_id:
        lines.append(f"id: {event_id}")
    if event:
        lines.append(f"event: {event}")
    lines.append("data: " + json.dumps(data, ensure_ascii=False, separators=(",", ":")))
    return ("\n".join(lines) + "\n\n").encode("utf-8")


def comment(text: str) -> bytes:
    return f": {' '.join(text.splitlines())}\n\n".encode()


def last_event_id(headers: Any) -> str | None:
    """The request's Last-Event-ID (what a reconnecting EventSource sends; names are case-insensitive)."""
    for name, value in (headers or {}).items():
        if name.lower() == "last-event-id" and isinstance(value, str):
            return value
    return None
