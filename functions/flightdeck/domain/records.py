"""Values the domain passes to and from its ports (state store, queues, peers).

Every dataclass here has a docstring: without one, @dataclass computes its signature for __doc__ at import,
which every function's cold start would pay for (issue 42).
"""

from __future__ import annotations

import enum
import json
import uuid
from dataclasses import dataclass, field
from typing import Any

# A session whose caller stopped waiting (flightdeck.domain.session_cancel): it stores no further reply,
# and is closed (idle again) at once, or by its next think.
SESSION_CANCELED = "canceled"


_PEER_SESSION_NS = uuid.UUID("6f1c7c1e-3f0e-4c52-9d0a-2a7f4bb0f001")


def peer_session_id(agent: str, session_id: str, tool_use_id: str) -> str:
    """The session one of our agents runs a delegated call in (derived: the delegator can name it to read it)."""
    return str(uuid.uuid5(_PEER_SESSION_NS, f"{agent}/{session_id}/{tool_use_id}"))


class SessionBusyError(Exception):
    """A new message arrived while the session is thinking or waiting on delegations."""


class SessionNotFoundError(LookupError):
    pass


class AgentBusyError(Exception):
    """The agent already has max_concurrent_tasks sessions busy: a message that would start a turn is refused
    (nothing stored); one for a busy session still queues."""

    # When it is worth asking again (a turn takes seconds to minutes), on every door: Retry-After, retryAfterSeconds.
    retry_after_s = 5

    def __init__(self, limit: int):
        super().__init__(f"the agent is at its max_concurrent_tasks ({limit})")
        self.limit = limit


class InboxFullError(Exception):
    """The busy session's inbox already holds as many waiting messages as it may take."""

    def __init__(self, session_id: str, waiting: int):
        super().__init__(session_id)
        self.session_id, self.waiting = session_id, waiting


class TaskNotOpenError(Exception):
    """A message meant to continue an A2A task found the task no longer working (it ended meanwhile)."""


class ReplayedError(Exception):
    """The same delegation (same reply token) arrived again: the task is already under way or answered."""

    def __init__(self, session_id: str, turn: int, user_messages: int):
        super().__init__(session_id)
        self.session_id, self.turn, self.user_messages = session_id, turn, user_messages


class ItemTooLargeError(ValueError):
    """What was to be stored does not fit in one item: refuse the request (4xx), never retry it."""


class MessageSlot(int, enum.Enum):
    """A message's place within its think iteration (the store keys messages by turn, then slot)."""

    INPUT = 0  # the user message that started the turn
    REPLY = 1  # the model's reply
    CLOSING_RESULTS = 2  # results for tool calls a cancellation left open
    CLOSING_TEXT = 3  # the closing line of a canceled task


# A canceled task's closing line (MessageSlot.CLOSING_TEXT): what the session says it ended with.
CANCELED_CLOSING_TEXT = "The task was canceled by its caller; no further work was done."


class RecordOutcome(str, enum.Enum):
    ACCEPTED = "accepted"
    DUPLICATE = "duplicate"  # this tool_use_id already has this kind of result: success, do not retry
    LATE = "late"  # turn complete or unknown, or the id was not expected: do not retry


class ResultSource(str, enum.Enum):
    CALLBACK = "callback"
    LOCAL = "local"
    TIMEOUT = "timeout"
    DISPATCH_FAILED = "dispatch_failed"


@dataclass(frozen=True)
class ToolResult:
    """One tool call's result, as the turn's results message carries it to the model."""

    tool_use_id: str
    status: str  # "success" | "error"
    text: str
    source: ResultSource
    recorded_ms: int = field(default=0, compare=False)  # when it was stored (read back: the timeline's time)

    def as_block(self) -> dict[str, Any]:
        return {"toolResult": {"toolUseId": self.tool_use_id, "content": [{"text": self.text}], "status": self.status}}


def error_text(reason: str, detail: str = "") -> str:
    """A structured error, as a tool result's text (and a delegate's error answer)."""
    body: dict[str, Any] = {"status": "error", "reason": reason}
    if detail:
        body["detail"] = detail
    return json.dumps(body)


def error_result(tool_use_id: str, reason: str, source: ResultSource, detail: str = "") -> ToolResult:
    return ToolResult(tool_use_id, "error", error_text(reason, detail), source)


@dataclass(frozen=True)
class QueuedMessage:
    """A user message kept as an inbox item (ARCHITECTURE §2): one queued while its session was busy
    (each becomes its own turn, in order of arrival, when the turn before it ends), or one the client
    named (an id to deduplicate it by), which started its turn at once (seq 0)."""

    key: str
    seq: int  # its place in the session's inbox, counted from 1 since the session began; 0: never queued
    message: dict[str, Any]  # Converse-shaped, stored once: it is also the input message of its turn
    turn: int = 0  # the think iteration it started; 0 while it waits
    # Where its answer goes (B side): (callback_service, bearer_token, expires_at epoch seconds).
    route: tuple[str, str, int] | None = None
    task_key: str = ""  # the A2A task it continues
    message_id: str = ""  # the A2A messageId it came with


@dataclass(frozen=True)
class Intake:
    """What became of a user message: it started a turn, or waits in the session's inbox. replayed: it
    was a repeat of one already taken (same client id, or same reply token) and changed nothing; the
    answer is the first one's as it stands now."""

    status: str  # "started" | "queued"
    turn: int  # the think iteration it started (0 while it waits)
    user_messages: int  # its number among the session's user messages (for a queued one: once it starts)
    position: int = 0  # 1-based place among the messages waiting, while it waits
    replayed: bool = False
    # A new session as this write left it, opaque to the domain: its first think hands it back to
    # StatePort.get_session instead of reading the session ("": the store has none to vouch for).
    snapshot: str = ""
    # The write that took it also checked the caller's PeerProof (take_message's `proof`).
    caller_verified: bool = False


@dataclass(frozen=True)
class TurnEnd:
    """The end of a turn: whether this call ended it, and the queued message it started as the next turn."""

    ended: bool
    next_input: QueuedMessage | None = None


@dataclass(frozen=True)
class Session:
    """One session as a think reads it: its messages, its turn, and what the same query found beside them."""

    session_id: str
    status: str  # "idle" | "busy" | "canceled" (SESSION_CANCELED: until it is closed)
    turn: int
    messages: list[dict[str, Any]]
    created_at: int = 0
    updated_at: int = 0
    parent: dict[str, Any] = field(default_factory=dict)
    # The peer that created the session (flightdeck.domain.peers); "" when made while authentication was off.
    owner: str = ""
    # How many user messages the session has taken (`turn` counts think iterations).
    user_messages: int = 0
    # Read in the same query as the rest (one read per think): the current turn's stored model
    # reply, the reply route (B side), and whether an A2A task ever ran in the session.
    iteration: Iteration | None = None
    route: ReplyRoute | None = None
    has_a2a_task: bool = False
    # The current turn's aggregation record, when it delegated (same query).
    aggregation: TurnAggregation | None = None
    # Live relay (flightdeck.domain.live), read in the same query: until when a stream reader
    # watches the session (epoch ms; 0: nobody), and the text of the think under way so far.
    watched_until_ms: int = 0
    live: LiveText | None = None
    # The inbox: messages waiting (in order of arrival), how many were ever queued and how many of
    # those have started their turn; and the inbox item that started the current turn, if one did.
    queued: tuple[QueuedMessage, ...] = ()
    inbox_accepted: int = 0
    inbox_consumed: int = 0
    input: QueuedMessage | None = None
    # It holds a slot of the agent's load (max_concurrent_tasks): given back when it goes idle.
    holds_load: bool = False
    # When the backstop sweep is to look at the session (0: it is not listed; ARCHITECTURE §3). Not compared:
    # the tests' fake store keeps no index times.
    listed_at_ms: int = field(default=0, compare=False)
    # When each of `messages` happened, aligned with them (the timeline's timestamps): read from the
    # times its items carry anyway. Not compared: a store may not keep them (the tests' fake).
    stamps: tuple[Stamp, ...] = field(default=(), compare=False)


@dataclass(frozen=True)
class Stamp:
    """When one stored message happened, epoch ms (0: not stored, an item older than these fields)."""

    at: int = 0  # a message: its arrival; a reply: its think's end; a results message: its latest result
    started: int = 0  # a reply: its think's start
    tokens_in: int = 0  # a reply: the model's token use (flightdeck.domain.token_use)
    tokens_out: int = 0
    cache_read: int = 0
    cache_write: int = 0
    dispatched: int = 0  # a reply that called tools: when they were handed out (its TURN item's created_at)
    results: dict[str, int] = field(default_factory=dict)  # a results message: each result's recorded time


@dataclass(frozen=True)
class LiveText:
    """The text a think has produced so far, as its turn worker last wrote it (flightdeck.domain.live)."""

    turn: int
    attempt: int
    text: str


@dataclass(frozen=True)
class TurnAggregation:
    """A turn that delegated: which calls it waits for, how many results are in, and until when it waits."""

    session_id: str
    turn: int
    expected: frozenset[str]
    total: int
    received: int
    status: str  # "waiting" | "complete"
    deadline_ms: int  # the latest of its calls' deadlines: the turn waits no longer
    completed_by: str = ""
    # Per call, when its delegations' deadlines differ (ids not listed: deadline_ms).
    deadlines: dict[str, int] = field(default_factory=dict)
    # Where the deadline index has it while it waits: its earliest deadline still open (0: not listed).
    due_ms: int = 0

    def deadline_of(self, tool_use_id: str) -> int:
        return self.deadlines.get(tool_use_id, self.deadline_ms)


@dataclass(frozen=True)
class TurnSeed:
    """What a think that calls tools opens, in the same write as its reply: the turn's aggregation."""

    tool_use_ids: tuple[str, ...]
    deadline_ms: int  # the latest of the calls' deadlines
    # Each call's deadline (a delegate's own timeout_ms); empty: every call has deadline_ms.
    deadlines: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class Expiry:
    """What one expiry of a waiting turn did (a deadline passed, or its waiting was canceled)."""

    won: bool  # this call completed the turn (and claimed its next think)
    synthesized: tuple[str, ...] = ()  # the ids it wrote a timeout (or canceled) result for
    # The turn still waits: the earliest deadline still open, where the deadline index now has it.
    next_deadline_ms: int | None = None


@dataclass(frozen=True)
class Completion:
    """How a recorded result may complete its turn in the same write: who completes it, and the
    turn's size (known to every caller: the token's claims, the think's own call list)."""

    by: str
    total: int
    tombstone_ms: int


@dataclass(frozen=True)
class ReplyRoute:
    """Where a delegated session's answers go (B side): the caller's callback service and its token."""

    session_id: str
    callback_service: str
    bearer_token: str
    status: str  # "active" | "retired"
    expires_at: int
    # The think iteration whose answer retired the route (0: not retired by an answer).
    retired_turn: int = 0
    # The first think iteration this route answers for (0: every one; a queued delegation's route
    # answers from the turn its message started).
    from_turn: int = 0
    # The route this one replaced in the write that answered it (retired at answered.retired_turn), kept
    # so that a redelivery of that think re-sends its answer to the right caller.
    answered: ReplyRoute | None = None


@dataclass(frozen=True)
class Iteration:
    """One think iteration's model output, stored so a redelivered turn message reuses it."""

    session_id: str
    turn: int
    reply: dict[str, Any]
    # True for the think that stored it; False when a redelivery found it stored.
    fresh: bool = False
    # The queued message that the write storing this (final) reply started as the next turn.
    next_input: QueuedMessage | None = None
