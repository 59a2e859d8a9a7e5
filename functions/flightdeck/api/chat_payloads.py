"""The payloads of POST /api/chat (flightdeck.api.chat_routes)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, StrictBool, StrictInt, field_validator, model_validator

from flightdeck.api.payloads import MAX_TOKEN_CHARS, SESSION_ID_PATTERN, Text
from flightdeck.domain.limits import MAX_CONTENT_BYTES


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
