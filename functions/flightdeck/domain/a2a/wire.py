"""A2A v0.3 wire objects and JSON-RPC 2.0 envelopes, as pydantic models.

Field names are the wire names (camelCase), so `model_dump(exclude_none=True)`
is the JSON the spec shows. Inbound objects ignore fields they do not know
(extensions, metadata we do not use); outbound ones are built here only.
The shapes follow the a2a-sdk 0.3 types (`a2a.types`), which the tests use to
check them.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictInt, StrictStr

from flightdeck.domain.a2a.constants import INPUT_MODES as INPUT_MODES

# v0.3's error vocabulary is every version's (flightdeck.domain.a2a.protocol); named here too, as v0.3 names it.
from flightdeck.domain.a2a.protocol import CONTENT_TYPE_NOT_SUPPORTED as CONTENT_TYPE_NOT_SUPPORTED
from flightdeck.domain.a2a.protocol import EXTENDED_CARD_NOT_CONFIGURED as EXTENDED_CARD_NOT_CONFIGURED
from flightdeck.domain.a2a.protocol import INTERNAL_ERROR as INTERNAL_ERROR
from flightdeck.domain.a2a.protocol import INVALID_PARAMS as INVALID_PARAMS
from flightdeck.domain.a2a.protocol import INVALID_REQUEST as INVALID_REQUEST
from flightdeck.domain.a2a.protocol import METHOD_NOT_FOUND as METHOD_NOT_FOUND
from flightdeck.domain.a2a.protocol import PARSE_ERROR as PARSE_ERROR
from flightdeck.domain.a2a.protocol import PUSH_NOT_SUPPORTED as PUSH_NOT_SUPPORTED
from flightdeck.domain.a2a.protocol import TASK_NOT_CANCELABLE as TASK_NOT_CANCELABLE
from flightdeck.domain.a2a.protocol import TASK_NOT_FOUND as TASK_NOT_FOUND
from flightdeck.domain.a2a.protocol import UNSUPPORTED_OPERATION as UNSUPPORTED_OPERATION
from flightdeck.domain.a2a.protocol import A2AError as A2AError
from flightdeck.domain.a2a.protocol import TaskState

PROTOCOL_VERSION = "0.3.0"


class _In(BaseModel):
    model_config = ConfigDict(extra="ignore")


class _Deferred(_In):
    # Built by its first use, not when the a2a function starts (cold start): the models only validated inside
    # another (parts, messages, push configs: the outer model's schema holds theirs), the peer's Task the
    # delegating workers read, and the params of the tasks/pushNotificationConfig/* methods. The a2a function
    # builds at init only what most of its requests validate first: JSONRPCRequest and the method params.
    model_config = ConfigDict(defer_build=True)


class TextPart(_Deferred):
    kind: Literal["text"]
    text: str
    metadata: dict[str, Any] | None = None


class FilePart(_Deferred):
    kind: Literal["file"]
    file: dict[str, Any]
    metadata: dict[str, Any] | None = None


class DataPart(_Deferred):
    kind: Literal["data"]
    data: dict[str, Any]
    metadata: dict[str, Any] | None = None


Part = Annotated[TextPart | FilePart | DataPart, Field(discriminator="kind")]


class Message(_Deferred):
    kind: Literal["message"] = "message"
    role: Literal["user", "agent"]
    parts: list[Part]
    messageId: str = Field(min_length=1, max_length=256)
    contextId: str | None = None
    taskId: str | None = None
    referenceTaskIds: list[str] | None = None
    metadata: dict[str, Any] | None = None


class TaskStatus(_Deferred):
    state: TaskState
    timestamp: str | None = None
    message: Message | None = None


class Artifact(_Deferred):
    artifactId: str
    name: str | None = None
    description: str | None = None
    parts: list[Part]
    metadata: dict[str, Any] | None = None


class Task(_Deferred):
    kind: Literal["task"] = "task"
    id: str
    contextId: str
    status: TaskStatus
    history: list[Message] | None = None
    artifacts: list[Artifact] | None = None
    metadata: dict[str, Any] | None = None


class PushNotificationAuthenticationInfo(_Deferred):
    schemes: list[str] = Field(min_length=1)
    credentials: str | None = Field(None, max_length=4096)


class PushNotificationConfig(_Deferred):
    url: str = Field(min_length=1, max_length=2048)
    id: str | None = Field(None, min_length=1, max_length=128, pattern=r"^[A-Za-z0-9_.:~-]+$")
    token: str | None = Field(None, max_length=4096)
    authentication: PushNotificationAuthenticationInfo | None = None
    # Set by the v1.0 edge (flightdeck.domain.a2a.wire_v1): its pushes go out in v1.0's StreamResponse
    # wrapper. Stored with the config, never shown in a v0.3 answer.
    a2aVersion: Literal["1.0"] | None = None


class TaskPushNotificationConfig(_Deferred):
    taskId: str
    pushNotificationConfig: PushNotificationConfig


class MessageSendConfiguration(_Deferred):
    acceptedOutputModes: list[str] | None = None
    blocking: bool | None = None
    historyLength: int | None = Field(None, ge=0)
    pushNotificationConfig: PushNotificationConfig | None = None


class MessageSendParams(_In):
    message: Message
    configuration: MessageSendConfiguration | None = None
    metadata: dict[str, Any] | None = None


class TaskQueryParams(_In):
    id: str = Field(min_length=1)
    historyLength: int | None = Field(None, ge=0)
    metadata: dict[str, Any] | None = None


class TaskIdParams(_In):
    id: str = Field(min_length=1)
    metadata: dict[str, Any] | None = None


class GetTaskPushNotificationConfigParams(_Deferred):
    id: str = Field(min_length=1)
    pushNotificationConfigId: str | None = None
    metadata: dict[str, Any] | None = None


class ListTaskPushNotificationConfigParams(_Deferred):
    id: str = Field(min_length=1)
    metadata: dict[str, Any] | None = None


class DeleteTaskPushNotificationConfigParams(_Deferred):
    id: str = Field(min_length=1)
    pushNotificationConfigId: str = Field(min_length=1)
    metadata: dict[str, Any] | None = None


# --- JSON-RPC 2.0 ----------------------------------------------------------------------
RequestId = StrictStr | StrictInt | None


class JSONRPCRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    jsonrpc: Literal["2.0"]
    method: StrictStr
    id: RequestId = None
    # A structured value (JSON-RPC 2.0 section 4.2); its shape is the method's business (-32602).
    params: dict[str, Any] | list[Any] | None = None


class JSONRPCError(BaseModel):
    # defer_build (here and the two responses): the chat client reads them; the a2a function answers with dicts.
    model_config = ConfigDict(defer_build=True)

    code: int
    message: str
    data: Any | None = None


class JSONRPCErrorResponse(BaseModel):
    model_config = ConfigDict(defer_build=True)

    jsonrpc: Literal["2.0"] = "2.0"
    id: RequestId
    error: JSONRPCError


class JSONRPCSuccessResponse(BaseModel):
    model_config = ConfigDict(defer_build=True)

    jsonrpc: Literal["2.0"] = "2.0"
    id: RequestId
    result: Any


def text_of_parts(parts: list[Any], sep: str = "\n") -> str:
    """The text parts of a message or artifact, joined by newlines (sep; plain dicts or models)."""
    texts = []
    for part in parts or []:
        kind = part.get("kind") if isinstance(part, dict) else getattr(part, "kind", None)
        text = part.get("text") if isinstance(part, dict) else getattr(part, "text", None)
        if kind == "text" and isinstance(text, str):
            texts.append(text)
    return sep.join(texts)


def dump(model: BaseModel) -> dict[str, Any]:
    return model.model_dump(mode="json", exclude_none=True)
