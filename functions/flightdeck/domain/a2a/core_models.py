"""The requests the A2A core takes, version-neutral and shaped like v1.0 (specification/a2a.proto).

Each version's edge validates its own wire form, then converts (v0.3: flightdeck.domain.a2a.from_v03, v1.0:
flightdeck.domain.a2a.from_v1); the core (tasks, checks, push, stream) reads only these. Shaped like v1.0: a Part is
one flat object (text | raw | url | data, with mediaType and filename), a push config is flat beside its taskId,
SendMessage's configuration says returnImmediately. Where they differ from v1.0's proto it is to hold what v0.3
says too: roles are the core's "user" / "agent", an authentication names its schemes (v0.3 lists several), a part
may hold nothing a file needs (a v0.3 file part without bytes or uri, refused by the core with -32005), and a
push config says which version its pushes speak (a2aVersion: "1.0", or None for v0.3).

No validation here beyond the types: the edges checked their wire forms; these models only carry them. The task
record keeps a message and a push config in its own stored form (the JSON v0.3 shows: records written before
v1.0 read the same): `message_record` / `record_message` and `push_record` convert.
"""

from __future__ import annotations

import json
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field


class _Core(BaseModel):
    # defer_build: built by the first request that uses them, not at import (the a2a function's cold start).
    model_config = ConfigDict(defer_build=True)


class Part(_Core):
    """A message part: text, or inline bytes (raw, base64), or a file by url, or data (set: `is_data`)."""

    text: str | None = None
    raw: str | None = None
    url: str | None = None
    data: Any = None
    mediaType: str | None = None
    filename: str | None = None
    metadata: dict[str, Any] | None = None

    @property
    def is_data(self) -> bool:
        """A data part (its data may be any JSON value, null included)."""
        return "data" in self.model_fields_set


class Message(_Core):
    messageId: str
    role: Literal["user", "agent"]
    parts: list[Part]
    contextId: str | None = None
    taskId: str | None = None
    referenceTaskIds: list[str] | None = None
    metadata: dict[str, Any] | None = None


class Authentication(_Core):
    schemes: list[str]
    credentials: str | None = None


class PushConfig(_Core):
    url: str
    id: str | None = None
    token: str | None = None
    authentication: Authentication | None = None
    # The version whose shape this config's pushes take: "1.0" (v1.0's StreamResponse wrapper) or None (v0.3).
    a2aVersion: Literal["1.0"] | None = None


class TaskPushConfig(PushConfig):
    """CreateTaskPushNotificationConfig: a push config for a task."""

    taskId: str


class SendConfiguration(_Core):
    acceptedOutputModes: list[str] | None = None
    historyLength: int | None = None
    returnImmediately: bool = False
    taskPushNotificationConfig: PushConfig | None = None


class SendMessageRequest(_Core):
    message: Message
    configuration: SendConfiguration = Field(default_factory=SendConfiguration)
    metadata: dict[str, Any] | None = None


class GetTaskRequest(_Core):
    id: str
    historyLength: int | None = None


class CancelTaskRequest(_Core):
    id: str
    metadata: dict[str, Any] | None = None


class SubscribeToTaskRequest(_Core):
    id: str


class PushConfigRequest(_Core):
    """Get and Delete a task's push config: the task, and the config's id (Get: None for the task's default)."""

    taskId: str
    id: str | None = None


class ListPushConfigsRequest(_Core):
    taskId: str


# --- the task record's stored forms ----------------------------------------------------------------


def file_part(file: dict[str, Any], metadata: dict[str, Any] | None) -> Part:
    """A part from a stored (or v0.3) file object {bytes | uri, mimeType, name}; what is not text is left out."""
    raw = str(file["bytes"]) if "bytes" in file else None
    url = str(file["uri"]) if raw is None and "uri" in file else None
    mime, name = file.get("mimeType"), file.get("name")
    return Part(
        raw=raw,
        url=url,
        mediaType=mime if isinstance(mime, str) else None,
        filename=name if isinstance(name, str) else None,
        metadata=metadata,
    )


def _part_record(part: Part) -> dict[str, Any]:
    extra = {"metadata": part.metadata} if part.metadata is not None else {}
    if part.text is not None:
        return {"kind": "text", "text": part.text, **extra}
    if part.is_data:
        if isinstance(part.data, dict):
            return {"kind": "data", "data": part.data, **extra}
        # The record's data part holds an object; other JSON is kept as its text (the model reads data so).
        return {"kind": "text", "text": json.dumps(part.data, ensure_ascii=False), **extra}
    file: dict[str, Any] = {"bytes": part.raw} if part.raw is not None else {}
    if part.raw is None and part.url is not None:
        file["uri"] = part.url
    if part.mediaType is not None:
        file["mimeType"] = part.mediaType
    if part.filename is not None:
        file["name"] = part.filename
    return {"kind": "file", "file": file, **extra}


def message_record(message: Message) -> dict[str, Any]:
    """The message as the task record keeps it (and its history shows it)."""
    out: dict[str, Any] = {
        "kind": "message",
        "role": message.role,
        "parts": [_part_record(p) for p in message.parts],
        "messageId": message.messageId,
    }
    for name in ("contextId", "taskId", "referenceTaskIds", "metadata"):
        value = getattr(message, name)
        if value is not None:
            out[name] = value
    return out


def record_message(stored: dict[str, Any]) -> Message:
    """A message the task record kept, read back."""
    parts = []
    for part in stored.get("parts") or []:
        metadata = part.get("metadata")
        if part.get("kind") == "text":
            parts.append(Part(text=part["text"], metadata=metadata))
        elif part.get("kind") == "data":
            parts.append(Part(data=part["data"], metadata=metadata))
        else:
            parts.append(file_part(part.get("file") or {}, metadata))
    return Message(
        messageId=stored["messageId"],
        role=stored["role"],
        parts=parts,
        **{k: stored[k] for k in ("contextId", "taskId", "referenceTaskIds", "metadata") if stored.get(k) is not None},
    )


def push_record(config: PushConfig, task_id: str, url: str) -> dict[str, Any]:
    """The config as the task record keeps it: its id (the task's when it names none), the URL as checked."""
    out: dict[str, Any] = {"url": config.url}
    if config.id is not None:
        out["id"] = config.id
    if config.token is not None:
        out["token"] = config.token
    if config.authentication is not None:
        auth: dict[str, Any] = {"schemes": list(config.authentication.schemes)}
        if config.authentication.credentials is not None:
            auth["credentials"] = config.authentication.credentials
        out["authentication"] = auth
    if config.a2aVersion is not None:
        out["a2aVersion"] = config.a2aVersion
    out["id"] = config.id or task_id
    out["url"] = url  # the normalised form: what was checked is what is sent
    return out
