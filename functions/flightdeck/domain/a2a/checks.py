"""What the server checks of a request before anything is stored: the caller may see the task, the message
reads as text for the model (which parts are accepted), and a push config is one it may POST to.

Each refusal is an A2AError with the protocol's code (-32001, -32005, -32602), the field it names in its message.
"""

from __future__ import annotations

import base64
import json
from typing import Any
from urllib.parse import urlsplit

from flightdeck.domain.a2a.constants import INPUT_MODES
from flightdeck.domain.a2a.contracts import call_of
from flightdeck.domain.a2a.core_models import Part, PushConfig, SendMessageRequest, push_record
from flightdeck.domain.a2a.ports import TaskRecord, parse_task_id, ports
from flightdeck.domain.a2a.protocol import (
    ACCEPTED_PARTS,
    CONTENT_TYPE_NOT_SUPPORTED,
    INVALID_PARAMS,
    TASK_NOT_FOUND,
    A2AError,
)
from flightdeck.domain.peers import require_caller, visible_to
from flightdeck.domain.ports import Deps

MAX_CONTENT_CHARS = 100_000
SUPPORTED_PUSH_SCHEMES = ("bearer", "basic")


def visible_task(deps: Deps, task_id: str, caller: str | None) -> TaskRecord:
    """The task, if it exists for the caller; A2AError -32001 otherwise: another peer's task is "not found", like
    one that never was."""
    require_caller(deps.settings.inbound_auth, caller)
    parsed = parse_task_id(task_id)
    rec = ports(deps).store.get_task(*parsed) if parsed else None
    if rec is None or not visible_to(rec.owner, caller):
        raise A2AError(TASK_NOT_FOUND, "Task not found", {"taskId": task_id})
    return rec


def _unsupported_part(index: int, what: str) -> A2AError:
    return A2AError(
        CONTENT_TYPE_NOT_SUPPORTED,
        f"message.parts.{index}: {what} is not accepted; accepted are {ACCEPTED_PARTS}",
        {"supportedInputModes": list(INPUT_MODES)},
    )


def _file_text(index: int, part: Part) -> str:
    """An inline text file's content, decoded; raises A2AError for anything else."""
    essence, _, parameters = (part.mediaType or "").partition(";")
    essence = essence.strip().lower()
    if part.raw is None:
        raise _unsupported_part(index, "a file by uri" if part.url is not None else "a file without bytes")
    if not (essence.startswith("text/") or essence == "application/json"):
        raise _unsupported_part(index, f"a file of type {essence or 'unknown (no mimeType)'}")
    charset = next(
        (
            v.strip().strip('"')
            for k, _, v in (p.partition("=") for p in parameters.split(";"))
            if k.strip().lower() == "charset"
        ),
        "utf-8",
    )
    try:
        data = base64.b64decode(part.raw, validate=True)
    except ValueError:
        raise A2AError(INVALID_PARAMS, f"message.parts.{index}.file.bytes is not base64") from None
    try:
        text = data.decode(charset)
    except (LookupError, UnicodeDecodeError):
        raise A2AError(INVALID_PARAMS, f"message.parts.{index}.file.bytes is not {charset} text") from None
    name = part.filename or ""
    return f"[file {name + ', ' if name else ''}{essence}]\n{text}"


def _part_text(index: int, part: Part) -> str:
    if part.text is not None:
        return part.text
    if part.is_data:
        return json.dumps(part.data, ensure_ascii=False)
    return _file_text(index, part)


def message_text(params: SendMessageRequest) -> str:
    """The message as the model's text: its parts in order, one per line."""
    message = params.message
    if message.role != "user":
        raise A2AError(INVALID_PARAMS, "message.role must be 'user'")
    if not message.parts:
        raise A2AError(INVALID_PARAMS, "message.parts must not be empty")
    call = call_of(message.parts)
    # A data part that makes a structured call reads as its text form (skill:<id> {json}), as on /api/chat.
    text = "\n".join(
        call.call.as_text() if call is not None and call.index == index and part.is_data else _part_text(index, part)
        for index, part in enumerate(message.parts)
    )
    if not text.strip():
        raise A2AError(INVALID_PARAMS, "message.parts hold no text")
    if len(text) > MAX_CONTENT_CHARS:
        raise A2AError(INVALID_PARAMS, f"message text exceeds {MAX_CONTENT_CHARS} characters")
    return text


def validate_push_config(deps: Deps, config: PushConfig, task_id: str) -> dict[str, Any]:
    """A config we will POST to: its URL under an ALLOWED_HOST_MAPPING base URL, a scheme we can send."""
    parts = urlsplit(config.url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise A2AError(INVALID_PARAMS, "pushNotificationConfig.url must be an http(s) URL")
    url = deps.settings.allowed_host_mapping.check_url(config.url)
    if url is None:
        raise A2AError(
            INVALID_PARAMS,
            "pushNotificationConfig.url is not under any base URL this agent is "
            "allowed to call (ALLOWED_HOST_MAPPING), or is ambiguous (dot segments "
            "above the base, escaped slashes, backslashes)",
            {"url": config.url},
        )
    if config.authentication is not None:
        schemes = [s for s in config.authentication.schemes if s.lower() in SUPPORTED_PUSH_SCHEMES]
        if not schemes:
            raise A2AError(
                INVALID_PARAMS, "pushNotificationConfig.authentication.schemes: supported are Bearer and Basic"
            )
        if not config.authentication.credentials:
            raise A2AError(INVALID_PARAMS, "pushNotificationConfig.authentication.credentials is required")
    return push_record(config, task_id, url)
