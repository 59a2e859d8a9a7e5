"""The A2A rows of `flightdeck bench`: one round trip to an agent's /a2a, in v0.3 and in v1.0 (issue 27).

A round trip is one blocking send, as an A2A client makes it: v0.3 `message/send` with `configuration.blocking`,
v1.0 `SendMessage` with `A2A-Version: 1.0` (it waits by default: no `returnImmediately`). The agent's model
answers it directly (no delegation), so the two rows differ only by the version's edge: the converters of
flightdeck.api.a2a_v1 around the same core.
"""

from __future__ import annotations

from typing import Any, Literal

import requests

Version = Literal["0.3", "1.0"]
VERSIONS: tuple[Version, ...] = ("0.3", "1.0")
COMPLETED = {"0.3": "completed", "1.0": "TASK_STATE_COMPLETED"}


def request(version: Version, text: str, message_id: str, request_id: int) -> tuple[dict[str, Any], dict[str, str]]:
    """The JSON-RPC body of a blocking send in that version, and its extra headers."""
    if version == "0.3":
        message = {
            "kind": "message",
            "role": "user",
            "messageId": message_id,
            "parts": [{"kind": "text", "text": text}],
        }
        params: dict[str, Any] = {"message": message, "configuration": {"blocking": True}}
        return {"jsonrpc": "2.0", "id": request_id, "method": "message/send", "params": params}, {}
    message = {"role": "ROLE_USER", "messageId": message_id, "parts": [{"text": text}]}
    body = {"jsonrpc": "2.0", "id": request_id, "method": "SendMessage", "params": {"message": message}}
    return body, {"A2A-Version": "1.0"}


def send(
    http: requests.Session, url: str, token: str | None, version: Version, text: str, message_id: str, request_id: int
) -> dict[str, Any]:
    """One blocking send to an agent's /a2a; the completed task, or raises RuntimeError."""
    body, headers = request(version, text, message_id, request_id)
    if token:
        headers["Authorization"] = f"Bearer {token}"
    resp = http.post(url, json=body, headers=headers, timeout=60)
    result = resp.json().get("result") if resp.status_code == 200 else None
    task = (result or {}).get("task") if version == "1.0" else result
    state = (task.get("status") or {}).get("state") if isinstance(task, dict) else None
    if not isinstance(task, dict) or state != COMPLETED[version]:
        raise RuntimeError(f"/a2a {body['method']} answered {resp.status_code}, state {state}: {resp.text[:300]}")
    return task
