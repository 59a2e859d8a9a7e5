"""A peer's own sessions, newest first, a page at a time (GET /api/sessions)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from flightdeck.domain.peers import require_caller

DEFAULT_PAGE_SIZE = 20
# How much of a session's first message its META item keeps for the listing.
FIRST_MESSAGE_CHARS = 200
MAX_PAGE_SIZE = 100


class InvalidCursorError(ValueError):
    """A cursor this listing did not hand out to this caller."""


@dataclass(frozen=True)
class SessionSummary:
    session_id: str
    status: str  # "idle" | "busy"
    created_at: int
    updated_at: int
    # What the console's list shows, from the META item the page reads anyway (no request more): the
    # session's first message (its start, FIRST_MESSAGE_CHARS at most), its user messages, and the calls
    # its turns waited on (delegations). Sessions stored before these were kept show "" and 0 delegations.
    first_message: str = ""
    turns: int = 0
    delegations: int = 0


@dataclass(frozen=True)
class SessionPage:
    sessions: list[SessionSummary] = field(default_factory=list)
    # Where the next page starts; None: this was the last one.
    cursor: str | None = None


class SessionListPort(Protocol):
    def list_owned(self, owner: str, limit: int, cursor: str | None) -> SessionPage:
        """The owner's sessions, newest first; raises InvalidCursorError for a cursor not of this owner's listing."""
        ...


def list_sessions(
    sessions: SessionListPort,
    inbound_auth: str,
    caller: str | None,
    limit: int = DEFAULT_PAGE_SIZE,
    cursor: str | None = None,
) -> SessionPage:
    """The caller's own sessions. With authentication off sessions have no owner: nothing is anyone's."""
    require_caller(inbound_auth, caller)
    if not 1 <= limit <= MAX_PAGE_SIZE:
        raise ValueError(f"limit must be between 1 and {MAX_PAGE_SIZE}")
    if caller is None:
        return SessionPage()
    return sessions.list_owned(caller, limit, cursor)


def first_message_of(message: dict[str, object]) -> str:
    """The start of a Converse user message's text, as the listing keeps it."""
    content = message.get("content")
    texts = (
        [str(b["text"]) for b in content if isinstance(b, dict) and "text" in b] if isinstance(content, list) else []
    )
    return " ".join(texts)[:FIRST_MESSAGE_CHARS]
