"""The payloads of the session routes: a session's view, the caller's list, a cancel."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field


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
    tokens: dict[str, int] = Field(
        default_factory=dict,
        description="The model's tokens in all the session's thinks: input (billed at the input price), output, "
        "cache_read, cache_write, thinks",
    )
    tokens_by_turn: list[dict[str, int]] = Field(
        default_factory=list, description="The same per turn (one task each), in order, each with its `turn`"
    )
    outcome: Literal["working", "input_required", "canceled", "failed", "timed_out", "completed"] = Field(
        "completed",
        description="What became of its last turn: working (busy), input_required (it asked), canceled, failed "
        "(an error answer, or a delegation refused or answered with an error), timed_out (a delegation had no "
        "answer in time), completed",
    )
    result: dict[str, Any] | None = Field(
        None,
        description="When the last turn had a contract (a structured call, or a responseSchema) and ended: its "
        'answer checked against it: {"data", "schema_version"}, or {"schema_mismatch": true, "errors", "raw", '
        '"schema_version"} when it does not match',
    )


# defer_build (SessionSummary, SessionCanceled, SessionList): built by the first list or cancel, not when the
# function starts: most of its requests are chats and session reads.
class SessionSummary(BaseModel):
    model_config = ConfigDict(defer_build=True)

    session_id: str
    status: Literal["idle", "busy", "canceled"]
    created_at: int = Field(description="Epoch milliseconds")
    updated_at: int = Field(description="Epoch milliseconds")
    agent: str = Field(description="The agent that holds the session (this one)")
    first_message: str = Field(description='The start of its first message (200 characters at most; "" if older)')
    turns: int = Field(description="The user messages it has taken")
    delegations: int = Field(description="The calls its turns waited on (delegations)")


class SessionCanceled(BaseModel):
    model_config = ConfigDict(defer_build=True)

    session_id: str
    status: Literal["canceled"]
    iteration: int = Field(description="The think iteration the session was at when canceled")


class SessionList(BaseModel):
    model_config = ConfigDict(defer_build=True)

    sessions: list[SessionSummary] = Field(description="The caller's own sessions, newest first")
    next_cursor: str | None = Field(
        None, description="Pass as ?cursor= for the next page; null on the last page (which may be empty)"
    )
    delegates: list[str] = Field(
        default_factory=list, description="The agents this agent delegates to (a message's @-mentions)"
    )
