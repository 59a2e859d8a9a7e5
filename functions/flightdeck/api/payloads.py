"""Request and response payloads of the HTTP API (pydantic, so the OpenAPI document is exact)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import (
    AliasChoices,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StrictBool,
    StrictInt,
    field_validator,
    model_validator,
)

from flightdeck.api.strict_json import is_unicode

SESSION_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$"
MAX_TOKEN_CHARS = 2048
# A message is stored in one DynamoDB item (400 KB): its content is bounded by its UTF-8 size.
MAX_CONTENT_BYTES = 200_000
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

    callbackService: Text = Field(
        min_length=1, max_length=64, description="A service name from ALLOWED_HOST_MAPPING; never a URL."
    )
    bearerToken: Text = Field(
        min_length=16, max_length=MAX_TOKEN_CHARS, description="Returned verbatim with the answer."
    )


# A client's message id (the body's message_id, the Idempotency-Key header): 1-128 visible ASCII characters.
MESSAGE_ID_PATTERN = r"^[!-~]{1,128}$"


class ChatRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    session_id: str | None = Field(None, pattern=SESSION_ID_PATTERN)  # the pattern admits ASCII only
    message_id: str | None = Field(
        None,
        pattern=MESSAGE_ID_PATTERN,
        description="The client's id for this message (1-128 visible ASCII characters), as the Idempotency-Key "
        "header can give it too: a repeat changes nothing and gets the first answer again (the turn "
        "it started, or its place in the inbox). Without session_id it also names the new session, "
        "so that a repeat finds it.",
    )
    content: Text = Field(
        "",
        max_length=100_000,
        description=f"At most 100,000 characters and {MAX_CONTENT_BYTES:,} bytes as UTF-8. Required unless skill "
        "is given. The text `skill:<id> {json}` is a structured call too.",
    )
    skill: str | None = Field(
        None,
        pattern=r"^[A-Za-z0-9_-]{1,64}$",
        description="A structured call: the id of the skill to run (docs/SKILLS.md); arguments are checked "
        "against its input_schema before anything is stored (400 invalid_arguments lists what is wrong)",
    )
    arguments: dict[str, Any] | None = Field(None, description="The structured call's arguments (a JSON object)")
    response_schema: Any = Field(
        None,
        validation_alias=AliasChoices("response_schema", "responseSchema"),
        description="The structure the answer must have: a JSON Schema, or the shorthand "
        '({"pages": "number", "issues": "string[]"}). At most 16 KB, 12 levels, local $refs only. The '
        "answer is checked against it; one that does not match is returned marked schema_mismatch",
    )
    timeout_seconds: StrictInt | None = Field(
        None,
        gt=0,
        le=7 * 86_400,
        description="Bound this request: its delegations are waited for at most this long (capped by the "
        "agent's own limit, ASYNC_TOOL_TIMEOUT_MS)",
    )
    reply: ReplyTo | None = None
    continue_session: StrictBool = Field(
        False,
        description="true: session_id names an existing session of the caller to "
        "continue (e.g. a delegation answering the agent's question); "
        "404 if there is none, instead of starting it",
    )

    @field_validator("content")
    @classmethod
    def _stored_size(cls, value: str) -> str:
        # The limit is on what is stored (UTF-8), so it holds whatever the characters are.
        size = len(value.encode("utf-8", "surrogatepass"))
        if size > MAX_CONTENT_BYTES:
            raise ValueError(f"content is {size:,} bytes as UTF-8; at most {MAX_CONTENT_BYTES:,} are accepted")
        return value

    @model_validator(mode="after")
    def _has_something_to_do(self) -> ChatRequest:
        if not self.content and not self.skill:
            raise ValueError("give content (the task) or skill (a structured call)")
        if self.arguments is not None and not self.skill:
            raise ValueError("arguments go with skill")
        return self

    @model_validator(mode="after")
    def _continues_a_named_session(self) -> ChatRequest:
        if self.continue_session and not self.session_id:
            raise ValueError("continue_session needs the session_id of the session to continue")
        return self


class ChatAccepted(BaseModel):
    session_id: str
    turn: int = Field(
        description="The number of user messages in the session, this one included: 1 for a new "
        "session, 2 for the next message... (for a queued message: the number it "
        "gets when its turn starts)"
    )
    iteration: int | None = Field(
        description="The model think iteration this message started (a delegating turn "
        "takes several: one that calls tools, one per round of results); "
        "null while it is queued"
    )
    status: Literal["accepted", "replayed", "queued"] = Field(
        description="accepted: its turn started; queued: the session is busy and the message waits in its inbox "
        "(its own turn starts when the turns before it end); replayed: a repeat of a message whose "
        "turn started already (a repeat of a queued one answers queued again)"
    )
    position: int | None = Field(None, description="While queued: its place among the messages waiting, 1 for the next")


AnswerStatus = Literal["success", "error", "input_required"]
_STATUS_DESCRIPTION = (
    "`error`: the peer could not do the task, and `result` says why. `input_required`: the peer "
    "asks a question (`result`) before it can go on; `context_id` names its session, which the "
    "answer continues."
)
_CONTEXT_ID_DESCRIPTION = "With status `input_required` (and only then): the session of the peer that takes the answer."


def _context_with_question(status: str, context_id: str | None) -> None:
    if status == "input_required" and not context_id:
        raise ValueError("status input_required needs the context_id of the session that takes the answer")
    if status != "input_required" and context_id is not None:
        raise ValueError("context_id goes with status input_required only")


class ToolResponse(BaseModel):
    model_config = ConfigDict(extra="forbid")

    result: Text = Field(description="The peer's answer, as a string.")
    status: AnswerStatus = Field("success", description=_STATUS_DESCRIPTION)
    context_id: str | None = Field(None, pattern=SESSION_ID_PATTERN, description=_CONTEXT_ID_DESCRIPTION)

    @model_validator(mode="after")
    def _question_names_its_context(self) -> ToolResponse:
        _context_with_question(self.status, self.context_id)
        return self


class ToolResponseStatus(BaseModel):
    status: Literal["accepted", "duplicate"]
    completed_turn: bool = False


class BatchItem(BaseModel):
    model_config = ConfigDict(extra="forbid")

    token: Text = Field(min_length=1, max_length=MAX_TOKEN_CHARS)
    result: Text
    status: AnswerStatus = "success"
    context_id: str | None = Field(None, pattern=SESSION_ID_PATTERN, description=_CONTEXT_ID_DESCRIPTION)
    # W3C trace context of this item's delegation (a header cannot carry one per item).
    traceparent: Text = Field("", max_length=128)

    @model_validator(mode="after")
    def _question_names_its_context(self) -> BatchItem:
        _context_with_question(self.status, self.context_id)
        return self


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
    status: Literal["idle", "busy", "canceled"] = Field(
        description="canceled: its caller stopped waiting; it writes nothing more and is idle again once closed"
    )
    turn: int = Field(description="The number of user messages in the session")
    queued: int = Field(0, description="Messages waiting in the session's inbox (not yet in messages)")
    iteration: int = Field(description="The latest model think iteration of the session")
    messages: list[dict[str, Any]]
    created_at: int
    updated_at: int
    question: str | None = Field(
        None,
        description="While the session is idle after asking for input (its last "
        "think called ask_user): the question. The next message answers it",
    )
    result: dict[str, Any] | None = Field(
        None,
        description="When the last turn had a contract (a structured call, or a responseSchema) and ended: its "
        'answer checked against it: {"data", "schema_version"}, or {"schema_mismatch": true, "errors", "raw", '
        '"schema_version"} when it does not match',
    )


class SessionSummary(BaseModel):
    session_id: str
    status: Literal["idle", "busy", "canceled"]
    created_at: int = Field(description="Epoch milliseconds")
    updated_at: int = Field(description="Epoch milliseconds")
    agent: str = Field(description="The agent that holds the session (this one)")
    first_message: str = Field(description='The start of its first message (200 characters at most; "" if older)')
    turns: int = Field(description="The user messages it has taken")
    delegations: int = Field(description="The calls its turns waited on (delegations)")


class SessionCanceled(BaseModel):
    session_id: str
    status: Literal["canceled"]
    iteration: int = Field(description="The think iteration the session was at when canceled")


class SessionList(BaseModel):
    sessions: list[SessionSummary] = Field(description="The caller's own sessions, newest first")
    next_cursor: str | None = Field(
        None, description="Pass as ?cursor= for the next page; null on the last page (which may be empty)"
    )


class Health(BaseModel):
    status: Literal["ok"]
    agent: str
    version: str


class ErrorBody(BaseModel):
    code: str
    message: str
    details: list[dict[str, Any]] | None = None


class ErrorResponse(BaseModel):
    error: ErrorBody
