"""What the domain needs from the outside world. Adapters implement these; tests may fake them."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from flightdeck.domain.config import DomainSettings
from flightdeck.domain.http_ports import PeerAnswer, PeerPort
from flightdeck.domain.live_ports import LivePort
from flightdeck.domain.liveness import Overdue
from flightdeck.domain.mcp_ports import McpPort
from flightdeck.domain.model import Model
from flightdeck.domain.peers import PeerProof, PeerRegistryPort
from flightdeck.domain.records import (
    Completion,
    Expiry,
    Intake,
    Iteration,
    MessageSlot,
    RecordOutcome,
    Session,
    ToolResult,
    TurnAggregation,
    TurnEnd,
    TurnSeed,
)
from flightdeck.domain.skills.peers import CardPort
from flightdeck.domain.tokens import SigningKey
from flightdeck.observability import audit

if TYPE_CHECKING:
    from flightdeck.domain.a2a.ports import A2APorts


class Clock(Protocol):
    """The state's clock (epoch milliseconds): deadlines, expiries and token times are read against it."""

    def now_ms(self) -> int: ...


# The agent's state, by aggregate. One DynamoDB table holds them all (flightdeck.adapters.dynamo
# implements each, a store per port); a use case uses the ones it touches (Deps), and a test may fake each.
# The conditions every implementation honours are the store's (its docstrings): invariants are
# conditions of one write, never a read and then a write.


class SessionsPort(Protocol):
    """Sessions: their messages, their inbox, their reply route (B side), and cancellation."""

    def get_session(self, session_id: str, snapshot: str = "") -> Session | None: ...
    def take_message(
        self,
        session_id: str,
        message: dict[str, Any],
        retention_ms: int,
        *,
        route: tuple[str, str, int] | None = None,
        parent: dict[str, Any] | None = None,
        owner: str | None = None,
        likely_new: bool = False,
        key: str | None = None,
        queue_limit: int = 0,
        continues_task: str = "",
        message_id: str = "",
        must_exist: bool = False,
        proof: PeerProof | None = None,
        # The agent's max_concurrent_tasks: a message that would start a turn is refused (AgentBusyError) when
        # that many sessions are busy; the check is a condition of the write that starts it.
        max_busy: int | None = None,
    ) -> Intake: ...
    def append_message(
        self, session_id: str, message: dict[str, Any], turn: int, retention_ms: int, slot: int = MessageSlot.REPLY
    ) -> bool: ...
    def finish_session_turn(
        self,
        session_id: str,
        turn: int,
        retention_ms: int = 0,
        messages: Sequence[tuple[int, dict[str, Any]]] = (),
    ) -> TurnEnd: ...
    def retire_route(self, session_id: str, bearer_token: str | None = None) -> bool: ...
    def cancel_session(self, session_id: str, owner: str | None) -> tuple[str, int]: ...
    def close_canceled_session(
        self,
        session_id: str,
        turn: int,
        messages: list[tuple[int, dict[str, Any]]],
        retention_ms: int,
        session: Session | None = None,
    ) -> TurnEnd: ...
    def close_question(
        self, session: Session, closing: list[tuple[int, dict[str, Any]]], retention_ms: int, owner: str | None
    ) -> bool: ...


class IterationsPort(Protocol):
    """Think iterations: a model reply, stored once with the state change it makes."""

    def get_iteration(self, session_id: str, turn: int) -> Iteration | None: ...
    # The fence before the model is asked: True if this run (`run`, its own id) holds the think's claim now:
    # no other run holds one it took less than its lease ago (lease_ms: what is left of that run's invocation,
    # capped at the owed-think grace, so a re-send after the grace finds a dead run's claim lapsed).
    def claim_think(self, session_id: str, turn: int, run: str, lease_ms: int | None = None) -> bool: ...
    # A run that ends without storing its reply (an error, a throttled model's retry) gives its claim back.
    def release_think(self, session_id: str, turn: int, run: str) -> None: ...
    def save_iteration(
        self,
        session_id: str,
        turn: int,
        reply: dict[str, Any],
        retention_ms: int,
        *,
        seed: TurnSeed | None = None,
        ends_turn: bool = False,
        retires_route: bool = False,
        session: Session | None = None,
    ) -> Iteration: ...


class TurnsPort(Protocol):
    """Turn aggregation (A side): the results a turn waits for, each recorded once, and its one completion."""

    def seed_turn(
        self,
        session_id: str,
        turn: int,
        tool_use_ids: list[str],
        deadline_ms: int,
        retention_ms: int,
        deadlines: dict[str, int] | None = None,
    ) -> bool: ...
    def get_turn(self, session_id: str, turn: int) -> TurnAggregation | None: ...
    def get_results(self, session_id: str, turn: int) -> list[ToolResult]: ...
    def record_result(
        self, session_id: str, turn: int, result: ToolResult, retention_ms: int, completion: Completion | None = None
    ) -> tuple[RecordOutcome, bool]: ...
    def complete_turn(self, session_id: str, turn: int, completed_by: str, tombstone_ms: int) -> bool: ...
    def complete_with_errors(
        self,
        session_id: str,
        turn: int,
        reason_results: Callable[[str], ToolResult],
        completed_by: str,
        tombstone_ms: int,
        retention_ms: int,
        due_by_ms: int | None = None,
    ) -> Expiry: ...


class LivenessPort(Protocol):
    """The deadline index (flightdeck.domain.liveness): turns past their deadline, thinks owed past their grace."""

    def list_overdue(self, now_ms: int, limit: int = 100) -> list[Overdue]: ...
    def owed_think(self, session_id: str) -> int | None: ...
    def clear_owed_think(self, session_id: str, turn: int) -> None: ...
    # The owed mark of `turn` is due again delay_ms plus the grace from now, so the sweep does not start that
    # think while a run of it (a re-send, a delayed retry) may still come or run. Conditional: only a mark
    # still for `turn` and, given due_by_ms, due by then (of two sweeps that list it, one moves it). True if moved.
    def defer_owed_think(self, session_id: str, turn: int, delay_ms: int = 0, due_by_ms: int | None = None) -> bool: ...
    # The agent's load (max_concurrent_tasks): how many sessions hold a slot, and its repair from the sessions
    # themselves, at most once per every_ms (the count written, or None: not now).
    def busy_count(self) -> int: ...
    def recount_load(self, every_ms: int) -> int | None: ...


class DispatchPort(Protocol):
    """Dispatch claims (A side): a delegation to a peer that may not deduplicate is sent once; a deferred MCP call
    is made once. A claim under "sending" may be taken again until it is settled (finish_dispatch); one under any
    other status is final at once (nothing claims it again)."""

    def claim_dispatch(
        self, session_id: str, turn: int, tool_use_id: str, retention_ms: int, status: str = "sending"
    ) -> bool: ...
    def finish_dispatch(self, session_id: str, turn: int, tool_use_id: str, status: str) -> None: ...


class ThinkPort(Protocol):
    """Starts think iterations. A think may start twice (a re-send, an at-least-once delivery): the turn
    worker skips a stale or finished one, and a second concurrent run stores nothing new."""

    # A write just marked this think owed: start it. snapshot: the new session as its ingest wrote it
    # (Intake.snapshot), for the think to start from. (When the table's stream starts owed thinks, the
    # adapter leaves this one to it: ARCHITECTURE §3.)
    def start(self, session_id: str, turn: int, traceparent: str = "", snapshot: str = "") -> None: ...
    # Start a think owed since an earlier write (a re-send: the sweep, the stream's consumer): always sent.
    def resend(self, session_id: str, turn: int, traceparent: str = "") -> None: ...
    # A retryable model failure: think again (its `attempt`-th try) after delay_s, not sooner.
    def retry_later(self, session_id: str, turn: int, traceparent: str, attempt: int, delay_s: int) -> None: ...


class QueuePort(Protocol):
    def send_dispatch(self, body: dict[str, Any]) -> None: ...
    def send_delivery(self, body: dict[str, Any]) -> None: ...
    def send_delivery_dead_letter(self, body: dict[str, Any]) -> None: ...
    def send_timer(self, body: dict[str, Any], delay_s: int) -> None: ...
    # A failed record's backoff: hidden for delay_s, then received again (no sleeping in the function).
    def delay_retry(self, queue_url: str, receipt_handle: str, delay_s: int) -> None: ...
    # The same for many records of one queue at once (a request per ten).
    def delay_retries(self, queue_url: str, receipt_handles: list[str], delay_s: int) -> None: ...


class TurnHooks(Protocol):
    """Called by the turn loop (flightdeck.domain.turn_loop) for a session that has a protocol task."""

    def stop_if_canceled(self, deps: Deps, session_id: str, turn: int, input_task: str = "") -> bool:
        """True (and the session closed) when the turn's task was canceled: think no more."""
        ...

    def on_session_canceled(self, deps: Deps, session_id: str, turn: int, text: str) -> None:
        """The session was canceled through the REST API and closed at `turn`."""
        ...

    def on_end_turn(
        self, deps: Deps, session_id: str, turn: int, answer: str, failed: bool = False, question: str | None = None
    ) -> None:
        """The turn ended with an answer (or an error, or a question)."""
        ...


class _NoTurnHooks:
    def stop_if_canceled(self, deps: Deps, session_id: str, turn: int, input_task: str = "") -> bool:
        return False

    def on_session_canceled(self, deps: Deps, session_id: str, turn: int, text: str) -> None:
        return None

    def on_end_turn(
        self, deps: Deps, session_id: str, turn: int, answer: str, failed: bool = False, question: str | None = None
    ) -> None:
        return None


NO_TURN_HOOKS: TurnHooks = _NoTurnHooks()


@dataclass
class Deps:
    """Everything a use case may touch, handed in by the composition root (flightdeck.wiring)."""

    # The values the domain reads of the agent's settings (flightdeck.settings builds them).
    settings: DomainSettings
    # The state, by aggregate (flightdeck.wiring hands the one DynamoDB store in as each of them).
    sessions: SessionsPort
    iterations: IterationsPort
    turns: TurnsPort
    liveness: LivenessPort
    dispatches: DispatchPort
    clock: Clock
    queues: QueuePort
    thinks: ThinkPort
    peers: PeerPort
    keys: Callable[[], list[SigningKey]]
    model: Callable[[], Model]
    # A2A v0.3 task records and card fetching (flightdeck.domain.a2a.tasks); None: A2A hooks do nothing.
    a2a: A2APorts | None = None
    # Inbound: the peers that may call us (hashes of their tokens; flightdeck.domain.peers).
    registry: PeerRegistryPort | None = None
    # Outbound: service name -> the bearer token we present to that peer (PEER_TOKENS / its secret).
    peer_tokens: Callable[[], dict[str, str]] = dict
    # The live relay of a think's text to the streams that watch it (flightdeck.domain.live); None: no relay.
    live: LivePort | None = None
    # Delegates' agent cards, for the tools their skills become (flightdeck.domain.skills.peers); None: none.
    cards: CardPort | None = None
    # How a delegation reaches a peer that speaks another protocol than ours, by the delegate's
    # `protocol` ("a2a": flightdeck.domain.a2a.client.dispatch_a2a), registered in flightdeck.wiring:
    # (deps, dispatch message, delegate, callback token, attempt) -> dispatch outcome.
    transports: dict[str, Callable[..., Any]] = field(default_factory=dict)
    # How a delegation of another protocol is told to stop, by the delegate's `protocol` ("a2a":
    # flightdeck.domain.a2a.client.cancel_a2a), registered in flightdeck.wiring:
    # (deps, cancel message, peer service) -> (HTTP status, settled without canceling, detail).
    cancellers: dict[str, Callable[..., tuple[int, bool, str]]] = field(default_factory=dict)
    # What the sweep does with an overdue entry a protocol add-on put in the deadline index, by its kind
    # ("handoff": flightdeck.domain.a2a.tasks.recover_task), registered in flightdeck.wiring:
    # (deps, the overdue entry) -> whether it moved something on.
    recoverers: dict[str, Callable[..., bool]] = field(default_factory=dict)
    # What a protocol add-on does at the turn loop's boundaries (A2A: flightdeck.domain.a2a.tasks's hooks,
    # registered in flightdeck.wiring); the default does nothing, so the core loop knows no protocol.
    turn_hooks: TurnHooks = field(default_factory=lambda: NO_TURN_HOOKS)
    # The MCP servers' client (flightdeck.domain.mcp_tools; flightdeck.adapters.mcp_http); None: no MCP tools.
    mcp: McpPort | None = None
    # A server's bearer token from its credential reference ("env:NAME" / "secret:NAME"); None: not found.
    mcp_credential: Callable[[str], str | None] = field(default=lambda reference: None)

    def token_for(self, service: str) -> str | None:
        return self.peer_tokens().get(service)


class StatePorts(SessionsPort, IterationsPort, TurnsPort, LivenessPort, DispatchPort, Clock, Protocol):
    """One store that serves every state port (flightdeck.adapters.dynamo.store.StateStore, the fakes)."""


def state_ports(store: StatePorts, clock: Clock | None = None) -> dict[str, Any]:
    """Deps' state fields, every one served by `store` (and its clock, unless another is given)."""
    return {
        "sessions": store,
        "iterations": store,
        "turns": store,
        "liveness": store,
        "dispatches": store,
        "clock": clock or store,
    }


def bearer(token: str | None) -> dict[str, str]:
    """The Authorization header that presents our peer token, or nothing when we have none for that peer."""
    return {"Authorization": f"Bearer {token}"} if token else {}


def audit_post(operation: str, peer: str | None, answer: PeerAnswer, **fields: object) -> None:
    """The audit line of one outbound POST, from its answer (the payload hash is what was sent)."""
    outcome = f"http_{answer.status}" if answer.status else "unreachable"
    audit(
        "outbound",
        operation,
        peer,
        getattr(answer, "request_sha256", ""),
        outcome,
        http_status=answer.status or None,
        **fields,
    )
