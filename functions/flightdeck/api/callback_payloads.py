"""The payloads of the tool-response callbacks (flightdeck.api.callback_routes) and of A2A peers' pushes
(flightdeck.api.a2a_push_routes)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from flightdeck.api.payloads import MAX_TOKEN_CHARS, SESSION_ID_PATTERN, Text

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


# defer_build (the batch route's models): built by the first batch, not when the callback function starts: a
# peer sends batches or single answers.
class BatchItem(BaseModel):
    model_config = ConfigDict(extra="forbid", defer_build=True)

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
    model_config = ConfigDict(extra="forbid", defer_build=True)

    # Items are checked one by one, so one malformed item does not fail the others.
    items: list[dict[str, Any]] = Field(min_length=1, max_length=100)


class BatchItemResult(BaseModel):
    model_config = ConfigDict(defer_build=True)

    index: int
    status: Literal["accepted", "duplicate", "late", "unauthorized", "too_large", "invalid"]
    http_status: int
    message: str = ""


class BatchResponse(BaseModel):
    model_config = ConfigDict(defer_build=True)

    results: list[BatchItemResult]
