"""Request and response payloads of the HTTP API (pydantic, so the OpenAPI document is exact)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field

from flightdeck.api.strict_json import is_unicode

SESSION_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$"
MAX_TOKEN_CHARS = 2048
NOT_UNICODE = "text is not valid Unicode (it holds a lone surrogate such as \\ud800)"


def _unicode(value: Any) -> Any:
    # JSON can escape half a surrogate pair ("\ud800"); such text can never be stored or sent as UTF-8.
    if isinstance(value, str) and not is_unicode(value):
        raise ValueError(NOT_UNICODE)
    return value


# Every string a client sends: refused with a 422 naming the field when it is not valid Unicode.
Text = Annotated[str, BeforeValidator(_unicode)]


class ReplyTo(BaseModel):
    model_config = ConfigDict(extra="forbid")

    callbackService: Text = Field(min_length=1, max_length=64, description="A service name from ALLOWED_HOST_MAPPING; never a URL.")
    bearerToken: Text = Field(min_length=16, max_length=MAX_TOKEN_CHARS, description="Returned verbatim with the answer.")


class ChatRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    session_id: str | None = Field(None, pattern=SESSION_ID_PATTERN)  # the pattern admits ASCII only
    content: Text = Field(min_length=1, max_length=100_000)
    reply: ReplyTo | None = None


class ChatAccepted(BaseModel):
    session_id: str
    turn: int
    status: Literal["accepted", "replayed"]


class ToolResponse(BaseModel):
    model_config = ConfigDict(extra="forbid")

    result: Text = Field(description="The peer's answer, as a string.")


class ToolResponseStatus(BaseModel):
    status: Literal["accepted", "duplicate"]
    completed_turn: bool = False


class BatchItem(BaseModel):
    model_config = ConfigDict(extra="forbid")

    token: Text = Field(min_length=1, max_length=MAX_TOKEN_CHARS)
    result: Text
    # W3C trace context of this item's delegation (a header cannot carry one per item).
    traceparent: Text = Field("", max_length=128)


class BatchRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    # Items are checked one by one, so one malformed item does not fail the others.
    items: list[dict[str, Any]] = Field(min_length=1, max_length=100)


class BatchItemResult(BaseModel):
    index: int
    status: Literal["accepted", "duplicate", "late", "unauthorized", "too_large", "invalid"]
    http_status: int
    message: str = ""


class BatchResponse(BaseModel):
    results: list[BatchItemResult]


class SessionView(BaseModel):
    session_id: str
    status: Literal["idle", "busy"]
    turn: int
    messages: list[dict[str, Any]]
    created_at: int
    updated_at: int


class ErrorBody(BaseModel):
    code: str
    message: str
    details: list[dict[str, Any]] | None = None


class ErrorResponse(BaseModel):
    error: ErrorBody
