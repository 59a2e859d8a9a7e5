"""A2A v1.0 wire objects (specification/a2a.proto, its JSON form) and their converters to and from the core.

The core takes requests shaped like v1.0's (flightdeck.domain.a2a.core_models; flightdeck.domain.a2a.from_v1
converts these models to them) and answers in the task record's shapes (flightdeck.domain.a2a.render: v0.3's
JSON); `*_to_wire` turns what the core answers into v1.0's JSON. What changes between the two (the proto is the
reference; the migration guides have errors):

- no `kind` discriminator: a Part is one flat object, exactly one of text | raw (base64) | url | data, with
  mediaType, filename, metadata; a stream event is {task | message | statusUpdate | artifactUpdate};
- enums are proto names: ROLE_USER, TASK_STATE_INPUT_REQUIRED...;
- SendMessage answers {"task": ...} (or {"message": ...}); returnImmediately (default false) replaces
  blocking (default false in v0.3): a v1.0 send waits for the task's end by default;
- a push config is flat {taskId, id, url, token, authentication: {scheme, credentials}};
- errors carry `data` as an array of typed objects, a google.rpc.ErrorInfo first (reason, domain).

Inbound models read each field by its proto name or its lowerCamelCase JSON name (`task_id` or `taskId`), as
protobuf's JSON mapping says a parser does, and refuse a field they do not know (as its parsers do by default:
a field ignored would be a request half done) or one field sent under both names; outbound JSON is built here
only and holds no field the proto lacks (a strict client parses it with protobuf's ParseDict).
"""

from __future__ import annotations

import json
from typing import Any, Literal

from pydantic import AliasChoices, AliasGenerator, BaseModel, ConfigDict, Field, model_validator
from pydantic.alias_generators import to_snake

PROTOCOL_VERSION = "1.0"
ERROR_INFO_TYPE = "type.googleapis.com/google.rpc.ErrorInfo"
BAD_REQUEST_TYPE = "type.googleapis.com/google.rpc.BadRequest"
ERROR_DOMAIN = "a2a-protocol.org"
EXTENSION_SUPPORT_REQUIRED = -32008
VERSION_NOT_SUPPORTED = -32009

STATE_TO_WIRE = {
    "submitted": "TASK_STATE_SUBMITTED",
    "working": "TASK_STATE_WORKING",
    "completed": "TASK_STATE_COMPLETED",
    "failed": "TASK_STATE_FAILED",
    "canceled": "TASK_STATE_CANCELED",
    "input-required": "TASK_STATE_INPUT_REQUIRED",
    "rejected": "TASK_STATE_REJECTED",
    "auth-required": "TASK_STATE_AUTH_REQUIRED",
}
STATE_TO_CORE = {v: k for k, v in STATE_TO_WIRE.items()}
ROLE_TO_WIRE = {"user": "ROLE_USER", "agent": "ROLE_AGENT"}
ROLE_TO_CORE = {v: k for k, v in ROLE_TO_WIRE.items()}

# JSON-RPC / A2A code -> google.rpc.ErrorInfo reason (a2a.proto's error table; -32000 is ours).
REASONS = {
    -32700: "PARSE_ERROR",
    -32600: "INVALID_REQUEST",
    -32601: "METHOD_NOT_FOUND",
    -32602: "INVALID_PARAMS",
    -32603: "INTERNAL_ERROR",
    -32001: "TASK_NOT_FOUND",
    -32002: "TASK_NOT_CANCELABLE",
    -32003: "PUSH_NOTIFICATION_NOT_SUPPORTED",
    -32004: "UNSUPPORTED_OPERATION",
    -32005: "CONTENT_TYPE_NOT_SUPPORTED",
    -32006: "INVALID_AGENT_RESPONSE",
    -32007: "EXTENDED_AGENT_CARD_NOT_CONFIGURED",
    -32008: "EXTENSION_SUPPORT_REQUIRED",
    -32009: "VERSION_NOT_SUPPORTED",
    -32000: "AGENT_BUSY",
}


def _json_names(name: str) -> AliasChoices:
    """A field's two ProtoJSON names: lowerCamelCase (the attribute's) and the proto's own snake_case."""
    return AliasChoices(name, to_snake(name))


class _In(BaseModel):
    # defer_build: each model is built by its first use, not at import: only A2A v1.0 requests use them,
    # and every call of the a2a function imports this module (cold start).
    model_config = ConfigDict(
        extra="forbid", defer_build=True, alias_generator=AliasGenerator(validation_alias=_json_names)
    )

    @model_validator(mode="before")
    @classmethod
    def _one_name_each(cls, data: Any) -> Any:
        if isinstance(data, dict):
            for name in cls.model_fields:
                proto = to_snake(name)
                if proto != name and name in data and proto in data:
                    raise ValueError(f"{name} and {proto} name one field: send it once")
        return data


# --- inbound (requests) ------------------------------------------------------------------------


class Part(_In):
    text: str | None = None
    raw: str | None = None  # base64, as proto3 JSON writes bytes
    url: str | None = None
    data: Any = None
    metadata: dict[str, Any] | None = None
    filename: str | None = None
    mediaType: str | None = None

    @model_validator(mode="after")
    def _one_content(self) -> Part:
        set_ = [n for n in ("text", "raw", "url") if getattr(self, n) is not None]
        if "data" in self.model_fields_set:
            set_.append("data")
        if len(set_) != 1:
            raise ValueError("a part holds exactly one of text, raw, url, data")
        return self


class Message(_In):
    messageId: str = Field(min_length=1, max_length=256)
    contextId: str | None = None
    taskId: str | None = None
    role: Literal["ROLE_USER", "ROLE_AGENT"]
    parts: list[Part]
    metadata: dict[str, Any] | None = None
    extensions: list[str] | None = None
    referenceTaskIds: list[str] | None = None


class AuthenticationInfo(_In):
    scheme: str = Field(min_length=1)
    credentials: str | None = Field(None, max_length=4096)


class TaskPushNotificationConfig(_In):
    tenant: str | None = None
    id: str | None = Field(None, min_length=1, max_length=128, pattern=r"^[A-Za-z0-9_.:~-]+$")
    taskId: str | None = None
    url: str = Field(min_length=1, max_length=2048)
    token: str | None = Field(None, max_length=4096)
    authentication: AuthenticationInfo | None = None


class CreatePushConfigRequest(TaskPushNotificationConfig):
    taskId: str = Field(min_length=1)  # required where a config is created


class SendMessageConfiguration(_In):
    acceptedOutputModes: list[str] | None = None
    taskPushNotificationConfig: TaskPushNotificationConfig | None = None
    historyLength: int | None = Field(None, ge=0)
    returnImmediately: bool = False


class SendMessageRequest(_In):
    tenant: str | None = None
    message: Message
    configuration: SendMessageConfiguration | None = None
    metadata: dict[str, Any] | None = None


class GetTaskRequest(_In):
    tenant: str | None = None
    id: str = Field(min_length=1)
    historyLength: int | None = Field(None, ge=0)


class ListTasksRequest(_In):
    tenant: str | None = None
    contextId: str | None = None
    status: (
        Literal[
            "TASK_STATE_UNSPECIFIED",
            "TASK_STATE_SUBMITTED",
            "TASK_STATE_WORKING",
            "TASK_STATE_COMPLETED",
            "TASK_STATE_FAILED",
            "TASK_STATE_CANCELED",
            "TASK_STATE_INPUT_REQUIRED",
            "TASK_STATE_REJECTED",
            "TASK_STATE_AUTH_REQUIRED",
        ]
        | None
    ) = None
    pageSize: int | None = Field(None, ge=1, le=100)
    pageToken: str | None = Field(None, max_length=2048)
    historyLength: int | None = Field(None, ge=0)
    statusTimestampAfter: str | None = None
    includeArtifacts: bool | None = None


class CancelTaskRequest(_In):
    tenant: str | None = None
    id: str = Field(min_length=1)
    metadata: dict[str, Any] | None = None


class SubscribeToTaskRequest(_In):
    tenant: str | None = None
    id: str = Field(min_length=1)


class PushConfigRequest(_In):
    """Get and Delete: the task and the config's id."""

    tenant: str | None = None
    taskId: str = Field(min_length=1)
    id: str = Field(min_length=1)


class ListPushConfigsRequest(_In):
    tenant: str | None = None
    taskId: str = Field(min_length=1)
    pageSize: int | None = Field(None, ge=0, le=100)
    pageToken: str | None = Field(None, max_length=64)


class GetExtendedAgentCardRequest(_In):
    tenant: str | None = None


# --- to the wire (v1.0 JSON) ----------------------------------------------------------------------


def part_to_wire(part: dict[str, Any]) -> dict[str, Any]:
    kind = part.get("kind")
    out: dict[str, Any]
    if kind == "text":
        out = {"text": part.get("text", "")}
    elif kind == "data":
        out = {"data": part.get("data")}
    else:
        file = part.get("file") or {}
        out = {"raw": file["bytes"]} if "bytes" in file else {"url": file.get("uri", "")}
        if file.get("mimeType"):
            out["mediaType"] = file["mimeType"]
        if file.get("name"):
            out["filename"] = file["name"]
    if part.get("metadata"):
        out["metadata"] = part["metadata"]
    return out


def message_to_wire(message: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {
        "messageId": message.get("messageId", ""),
        "role": ROLE_TO_WIRE.get(str(message.get("role")), "ROLE_UNSPECIFIED"),
        "parts": [part_to_wire(p) for p in message.get("parts") or []],
    }
    for name in ("contextId", "taskId", "referenceTaskIds", "metadata", "extensions"):
        if message.get(name) is not None:
            out[name] = message[name]
    return out


def status_to_wire(status: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {"state": STATE_TO_WIRE.get(str(status.get("state")), "TASK_STATE_UNSPECIFIED")}
    if status.get("message"):
        out["message"] = message_to_wire(status["message"])
    if status.get("timestamp"):
        out["timestamp"] = status["timestamp"]
    return out


def artifact_to_wire(artifact: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {
        "artifactId": artifact.get("artifactId", ""),
        "parts": [part_to_wire(p) for p in artifact.get("parts") or []],
    }
    for name in ("name", "description", "metadata", "extensions"):
        if artifact.get(name) is not None:
            out[name] = artifact[name]
    return out


def task_to_wire(task: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {
        "id": task["id"],
        "contextId": task.get("contextId", ""),
        "status": status_to_wire(task.get("status") or {}),
    }
    if task.get("artifacts"):
        out["artifacts"] = [artifact_to_wire(a) for a in task["artifacts"]]
    if task.get("history"):
        out["history"] = [message_to_wire(m) for m in task["history"]]
    if task.get("metadata"):
        out["metadata"] = task["metadata"]
    return out


def event_to_wire(event: dict[str, Any]) -> dict[str, Any]:
    """A stream event (the core's v0.3 shapes) as a v1.0 StreamResponse: one member names what it is; no
    `final` flag (the stream closes at the task's end)."""
    kind = event.get("kind")
    if kind == "task":
        return {"task": task_to_wire(event)}
    if kind == "message":
        return {"message": message_to_wire(event)}
    common = {"taskId": event.get("taskId", ""), "contextId": event.get("contextId", "")}
    if event.get("metadata"):
        common["metadata"] = event["metadata"]
    if kind == "status-update":
        return {"statusUpdate": {**common, "status": status_to_wire(event.get("status") or {})}}
    update = {**common, "artifact": artifact_to_wire(event.get("artifact") or {})}
    if event.get("append"):
        update["append"] = True
    if event.get("lastChunk"):
        update["lastChunk"] = True
    return {"artifactUpdate": update}


def send_result_to_wire(result: dict[str, Any]) -> dict[str, Any]:
    return {"message": message_to_wire(result)} if result.get("kind") == "message" else {"task": task_to_wire(result)}


def push_config_to_wire(view: dict[str, Any]) -> dict[str, Any]:
    """The core's {taskId, pushNotificationConfig} as v1.0's flat TaskPushNotificationConfig."""
    config = view.get("pushNotificationConfig") or {}
    out: dict[str, Any] = {"taskId": view.get("taskId", ""), "url": config.get("url", "")}
    if config.get("id"):
        out["id"] = config["id"]
    if config.get("token"):
        out["token"] = config["token"]
    auth = config.get("authentication") or {}
    schemes = auth.get("schemes") or []
    if schemes:
        out["authentication"] = {"scheme": schemes[0]}
        if auth.get("credentials"):
            out["authentication"]["credentials"] = auth["credentials"]
    return out


def error_details(code: int, data: Any) -> list[dict[str, Any]]:
    """v1.0's error data: a google.rpc.ErrorInfo (reason, domain, metadata: the v0.3 data's members, as
    strings: ErrorInfo.metadata is map<string, string>), and a BadRequest for a list of field problems."""
    metadata: dict[str, str] = {}
    violations: list[dict[str, str]] = []
    if isinstance(data, dict):
        for key, value in data.items():
            metadata[str(key)] = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    elif isinstance(data, list):
        for item in data:
            if isinstance(item, dict) and "loc" in item:
                field = ".".join(str(x) for x in item.get("loc") or [])
                violations.append({"field": field, "description": str(item.get("msg", ""))})
    details: list[dict[str, Any]] = [
        {
            "@type": ERROR_INFO_TYPE,
            "reason": REASONS.get(code, "UNKNOWN_ERROR"),
            "domain": ERROR_DOMAIN,
            "metadata": metadata,
        }
    ]
    if violations:
        details.append({"@type": BAD_REQUEST_TYPE, "fieldViolations": violations})
    return details


# --- from the wire (a v1.0 peer's answers, read by our client side) --------------------------------
# Lenient: each converter gives the core's v0.3 shape, which the caller validates with the core's models
# (a Task, a Message): what a peer sends is checked once, there.

METHOD_NAMES = {
    "message/send": "SendMessage",
    "message/stream": "SendStreamingMessage",
    "tasks/get": "GetTask",
    "tasks/cancel": "CancelTask",
    "tasks/resubscribe": "SubscribeToTask",
}


def offers_v1(card: dict[str, Any]) -> str | None:
    """The URL of the card's JSON-RPC interface for v1.0 (protocolVersion 1.x), if it lists one."""
    for interface in card.get("supportedInterfaces") or []:
        if not isinstance(interface, dict) or str(interface.get("protocolBinding", "")).upper() != "JSONRPC":
            continue
        version = str(interface.get("protocolVersion", ""))
        if version.split(".")[0] == "1" and isinstance(interface.get("url"), str) and interface["url"]:
            return str(interface["url"])
    return None


def part_from_wire(part: Any) -> dict[str, Any]:
    if not isinstance(part, dict):
        return {"kind": "text", "text": ""}
    extra = {"metadata": part["metadata"]} if isinstance(part.get("metadata"), dict) else {}
    if "text" in part:
        return {"kind": "text", "text": part["text"], **extra}
    if "data" in part:
        data = part["data"]
        if isinstance(data, dict):
            return {"kind": "data", "data": data, **extra}
        return {"kind": "text", "text": json.dumps(data, ensure_ascii=False), **extra}
    file: dict[str, Any] = {"bytes": part["raw"]} if "raw" in part else {"uri": part.get("url", "")}
    if part.get("mediaType"):
        file["mimeType"] = part["mediaType"]
    if part.get("filename"):
        file["name"] = part["filename"]
    return {"kind": "file", "file": file, **extra}


def message_from_wire(message: Any) -> Any:
    if not isinstance(message, dict):
        return message
    out = {k: v for k, v in message.items() if k not in ("role", "parts")}
    out.update(
        kind="message",
        role=ROLE_TO_CORE.get(str(message.get("role")), message.get("role")),
        parts=[part_from_wire(p) for p in message.get("parts") or []],
    )
    return out


def status_from_wire(status: Any) -> Any:
    if not isinstance(status, dict):
        return status
    out = {**status, "state": STATE_TO_CORE.get(str(status.get("state")), status.get("state"))}
    if "message" in status:
        out["message"] = message_from_wire(status["message"])
    return out


def artifact_from_wire(artifact: Any) -> Any:
    if not isinstance(artifact, dict):
        return artifact
    return {**artifact, "parts": [part_from_wire(p) for p in artifact.get("parts") or []]}


def task_from_wire(task: Any) -> Any:
    if not isinstance(task, dict):
        return task
    out = {**task, "kind": "task", "status": status_from_wire(task.get("status"))}
    if task.get("artifacts") is not None:
        out["artifacts"] = [artifact_from_wire(a) for a in task["artifacts"] or []]
    if task.get("history") is not None:
        out["history"] = [message_from_wire(m) for m in task["history"] or []]
    return out


def event_from_wire(event: Any) -> Any:
    """A v1.0 StreamResponse or SendMessage answer ({task} | {message} | {statusUpdate} | {artifactUpdate}) in the
    core's v0.3 shape; a status update is `final` when its state ends a stream (v1.0 has no flag)."""
    if not isinstance(event, dict):
        return event
    if "task" in event:
        return task_from_wire(event["task"])
    if "message" in event:
        return message_from_wire(event["message"])
    if isinstance(event.get("statusUpdate"), dict):
        update = event["statusUpdate"]
        status = status_from_wire(update.get("status"))
        state = status.get("state") if isinstance(status, dict) else None
        ends = state in STATE_TO_WIRE and state not in ("submitted", "working")
        return {**update, "kind": "status-update", "status": status, "final": ends}
    if isinstance(event.get("artifactUpdate"), dict):
        update = event["artifactUpdate"]
        return {**update, "kind": "artifact-update", "artifact": artifact_from_wire(update.get("artifact"))}
    return event
