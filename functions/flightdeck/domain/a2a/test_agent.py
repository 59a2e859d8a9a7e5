"""The TCK's test agent (A2A_TEST_AGENT=tck; off by default, and nowhere but a conformance rig).

The official A2A TCK 1.0's data-model tests (DM-ART-001: a task's artifact holds a text, a file by bytes, a
file by URL, a data part; DM-MSG-001: SendMessage answers a Message, not a Task) check exact contents that
no model answers: they key on the messageId's prefix (`tck-artifact-text-<run>`...), and the TCK's own
reference agents (a2aproject/a2a-tck's sut/) answer each prefix with a fixed reply. This is that agent, on
our real paths: a message with an artifact prefix starts its task as any message does (stored, its turn run
by the agent's model), and the completed task's artifact is the prefix's parts, rendered by the same code as
every task in both versions (v0.3 `file`/`data` parts, v1.0's `raw`/`url`/`data`, `filename`, `mediaType`);
a message with the message prefix is answered by an agent Message at once, and starts no task (A2A allows a
Message reply for an interaction that needs no task). Every other message is the agent's as usual.
"""

from __future__ import annotations

import base64
import uuid
from typing import Any

TCK = "tck"
MESSAGE_PREFIX = "tck-message-response"
# Longest first: "tck-artifact-file-url-..." also starts with "tck-artifact-file".
ARTIFACT_PARTS: tuple[tuple[str, list[dict[str, Any]]], ...] = (
    (
        "tck-artifact-file-url",
        [
            {
                "kind": "file",
                "file": {"uri": "https://example.com/output.txt", "mimeType": "text/plain", "name": "output.txt"},
            }
        ],
    ),
    (
        "tck-artifact-file",
        [
            {
                "kind": "file",
                "file": {"bytes": base64.b64encode(b"tck").decode(), "mimeType": "text/plain", "name": "output.txt"},
            }
        ],
    ),
    ("tck-artifact-text", [{"kind": "text", "text": "Generated text content"}]),
    ("tck-artifact-data", [{"kind": "data", "data": {"key": "value", "count": 42}}]),
)


def direct_reply(mode: str, message: Any) -> dict[str, Any] | None:
    """The agent Message that answers `message` at once (no task), or None: the message starts a task."""
    if mode != TCK or not str(message.messageId).startswith(MESSAGE_PREFIX):
        return None
    reply: dict[str, Any] = {
        "kind": "message",
        "role": "agent",
        "messageId": str(uuid.uuid5(uuid.NAMESPACE_URL, f"reply:{message.messageId}")),
        "parts": [{"kind": "text", "text": "Direct message response"}],
    }
    if message.contextId:
        reply["contextId"] = message.contextId
    return reply


def artifact_parts(mode: str, user_message: dict[str, Any]) -> list[dict[str, Any]] | None:
    """The parts of a completed task's artifact when its message has an artifact prefix; None otherwise."""
    if mode != TCK:
        return None
    message_id = str(user_message.get("messageId") or "")
    return next(([dict(p) for p in parts] for prefix, parts in ARTIFACT_PARTS if message_id.startswith(prefix)), None)
