"""A's delegating tool: hand one task to a peer and return at once ("pending").

The peer's 2xx means it has the task; no result is written until its callback.
A refusal (4xx) or exhausted retries record `dispatch_failed` at once, so the turn
does not wait for its deadline.
"""

from __future__ import annotations

import enum
import random
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, Field

from flightdeck.domain.agent import DelegateTool
from flightdeck.domain.aggregation import record_and_advance
from flightdeck.domain.allowlist import CHAT_ENDPOINT, UnknownServiceError
from flightdeck.domain.ports import Deps, audit_post, bearer
from flightdeck.domain.records import ResultSource, error_result, peer_session_id
from flightdeck.domain.time_budget import OUT_OF_TIME_RETRY_S, TimeBudget
from flightdeck.domain.tokens import CallbackClaims, mint
from flightdeck.observability import count, logger, timeline

# Peer sub-sessions get a stable id, so a re-sent dispatch lands on the same session.
RETRYABLE_STATUSES = frozenset({0, 408, 425, 429}) | frozenset(range(500, 600))


class DispatchMessage(BaseModel):
    session_id: str
    turn: int = Field(ge=1)
    tool_use_id: str
    tool_name: str
    task: str
    total_tools: int = Field(ge=1)
    deadline_ms: int
    traceparent: str = ""
    # When the turn handed the task out. The callback token's `iat` comes from here, not from the
    # attempt's clock, so every attempt sends the same bytes and the peer can tell a retry from a
    # new task (it answers "replayed"). Messages without it: the deadline minus the tool timeout.
    issued_ms: int | None = None
    # Attempts made before this message was queued (the turn worker's inline one: flightdeck.domain.outbox).
    prior_attempts: int = Field(0, ge=0)
    # The delegate's conversation this task continues ("" for a new one; flightdeck.domain.asking): one of
    # our agents' session, or an A2A contextId (with task_id, the A2A task that asked for input).
    context_id: str = ""
    task_id: str = ""
    question: str = ""  # with task_id: the question of that task this continuation answers
    # A structured call (a tool built from the peer's card, flightdeck.domain.skills.peers): the skill
    # and its arguments; the caller's responseSchema for the answer, if its call gave one.
    skill: str = ""
    arguments: dict[str, Any] | None = None
    response_schema: Any = None

    def issued_at_ms(self, async_tool_timeout_ms: int) -> int:
        return self.issued_ms if self.issued_ms is not None else self.deadline_ms - async_tool_timeout_ms


class DispatchStatus(str, enum.Enum):
    SENT = "sent"
    RETRY = "retry"
    FAILED = "failed"
    SKIPPED = "skipped"


@dataclass(frozen=True)
class DispatchOutcome:
    status: DispatchStatus
    retry_after_s: int = 0
    detail: str = ""


def backoff_s(attempt: int, base_s: float = 1.0, cap_s: float = 60.0) -> int:
    """Exponential backoff with full jitter, at least one second."""
    return max(1, int(random.uniform(0, min(cap_s, base_s * 2**attempt))))


def dispatch_delegation(
    deps: Deps, msg: DispatchMessage, attempt: int, budget: TimeBudget | None = None
) -> DispatchOutcome:
    """attempt: 1 for the first receive of the message (SQS ApproximateReceiveCount).

    budget: the invocation's time; with too little left for a call the message is not tried now.
    """
    s = deps.settings
    ids = {"session_id": msg.session_id, "turn": msg.turn, "tool_use_id": msg.tool_use_id}
    if budget is not None and not budget.allows_a_call():
        return _out_of_time(deps, msg, attempt)
    delegate = s.agent.delegate_for_tool(msg.tool_name)
    skipped = _claim(deps, msg, attempt, claim=delegate is not None and delegate.protocol == "a2a")
    if skipped is not None:
        return skipped
    if delegate is None:
        return _fail(deps, msg, f"no delegating tool named {msg.tool_name!r}")
    if delegate.protocol != "flightdeck":
        # Another protocol's peer (A2A v0.3: JSON-RPC message/send, answered by push or polled).
        transport = deps.transports.get(delegate.protocol)
        if transport is None:
            return _fail(deps, msg, f"no transport for protocol {delegate.protocol!r} is wired")
        outcome: DispatchOutcome = transport(deps, msg, delegate, callback_token(deps, msg, delegate), attempt)
        return outcome
    try:
        base_url = s.allowed_host_mapping.resolve(delegate.peer_service, CHAT_ENDPOINT)
    except UnknownServiceError as exc:
        if delegate.peer_service in s.allowed_host_mapping:  # allowed, but its URL is not published (yet)
            return _fail(deps, msg, str(exc))
        return _fail(deps, msg, f"peer service {delegate.peer_service!r} is not in ALLOWED_HOST_MAPPING")
    token = callback_token(deps, msg, delegate)
    body = {
        "session_id": msg.context_id or peer_session_id(s.agent_name, msg.session_id, msg.tool_use_id),
        "content": msg.task,
        "reply": {"callbackService": delegate.callback_service or s.agent_name, "bearerToken": token},
        # A continuation must find the peer's session (it belongs to us), never start one.
        **({"continue_session": True} if msg.context_id else {}),
        **({"skill": msg.skill, "arguments": msg.arguments or {}} if msg.skill else {}),
        **({"response_schema": msg.response_schema} if msg.response_schema is not None else {}),
    }
    headers = {"traceparent": msg.traceparent} if msg.traceparent else {}
    # Our bearer token for this peer (its registry holds the hash): without it, a peer that
    # authenticates its callers answers 401 and the dispatch fails with that detail.
    headers.update(bearer(deps.token_for(delegate.peer_service)))
    answer = deps.peers.post_json(f"{base_url}/api/chat", body, headers)
    audit_post("dispatch", delegate.peer_service, answer, attempt=attempt, **ids)
    if 200 <= answer.status < 300:
        count("DelegationsDispatched")
        timeline(
            "dispatched",
            f"task sent to {delegate.agent} (pending)",
            peer_session_id=body["session_id"],
            traceparent=msg.traceparent or None,
            **ids,
        )
        return DispatchOutcome(DispatchStatus.SENT)
    detail = (
        f"HTTP {answer.status} from {delegate.agent}"
        if answer.status
        else f"{delegate.agent} unreachable: {answer.error}"
    )
    if answer.status in RETRYABLE_STATUSES and attempt < s.dispatch_max_attempts:
        count("DispatchRetries")
        delay = backoff_s(attempt)
        logger.warning(
            "dispatch will be retried", extra={**ids, "detail": detail, "attempt": attempt, "retry_in_s": delay}
        )
        return DispatchOutcome(DispatchStatus.RETRY, retry_after_s=delay, detail=detail)
    if isinstance(answer.body, dict) and isinstance(answer.body.get("error"), dict):
        detail += f": {answer.body['error'].get('message', '')}"[:300]
    return _fail(deps, msg, detail)


def _claim(deps: Deps, msg: DispatchMessage, attempt: int, claim: bool) -> DispatchOutcome | None:
    """None if this delegation is still to be sent, else why it is skipped.

    A first attempt of a delegation to one of our agents reads and writes nothing: a second
    send is harmless, since the peer takes it as a replay (same derived session, same token).
    A retry checks the turn first (a timeout may have completed it meanwhile). An A2A peer
    may not deduplicate, so its delegation is claimed once (claim=True).
    """
    if deps.clock.now_ms() >= msg.deadline_ms:
        return DispatchOutcome(DispatchStatus.SKIPPED, detail="deadline passed; the timeout covers it")
    if attempt > 1 or claim:
        agg = deps.turns.get_turn(msg.session_id, msg.turn)
        if agg is not None and agg.status == "complete":
            # Every id already has a result (timeout, cancel): the peer would work for nothing.
            return DispatchOutcome(DispatchStatus.SKIPPED, detail="the turn is already complete")
    if claim and not deps.dispatches.claim_dispatch(
        msg.session_id, msg.turn, msg.tool_use_id, deps.settings.session_retention_ms
    ):
        return DispatchOutcome(DispatchStatus.SKIPPED, detail="already dispatched")
    return None


def _out_of_time(deps: Deps, msg: DispatchMessage, attempt: int) -> DispatchOutcome:
    """Not tried in this invocation for want of time: again soon, or dispatch_failed if this was its last attempt."""
    ids = {"session_id": msg.session_id, "turn": msg.turn, "tool_use_id": msg.tool_use_id}
    if attempt < deps.settings.dispatch_max_attempts:
        count("DispatchesDeferred")
        logger.warning("dispatch put back: out of time in this invocation", extra={**ids, "attempt": attempt})
        return DispatchOutcome(DispatchStatus.RETRY, retry_after_s=OUT_OF_TIME_RETRY_S, detail="out of time")
    delegate = deps.settings.agent.delegate_for_tool(msg.tool_name)
    skipped = _claim(deps, msg, attempt, claim=delegate is not None and delegate.protocol == "a2a")
    if skipped is not None:
        return skipped
    return _fail(
        deps,
        msg,
        f"not sent: attempt {attempt} of {deps.settings.dispatch_max_attempts}, the last, "
        "ran out of time in the dispatch worker",
    )


def callback_token(deps: Deps, msg: DispatchMessage, delegate: DelegateTool) -> str:
    """The HMAC token the peer's answer must carry (callback bearer token, or A2A notification token).

    A function of the message alone (and the signing key): the same for every attempt.
    """
    s = deps.settings
    claims = CallbackClaims(
        session_id=msg.session_id,
        turn=msg.turn,
        tool_use_id=msg.tool_use_id,
        tool_id=msg.tool_name,
        name=delegate.agent,
        total_tools=msg.total_tools,
        agent=s.agent_name,
        iat=msg.issued_at_ms(s.async_tool_timeout_ms) // 1000,
        # Valid past the deadline, so an answer racing the timeout is told "late", not "unauthorized".
        exp=(msg.deadline_ms + s.tool_agg_tombstone_ttl_ms) // 1000,
    )
    return mint(claims, deps.keys()[0])


def _fail(deps: Deps, msg: DispatchMessage, detail: str) -> DispatchOutcome:
    ids = {"session_id": msg.session_id, "turn": msg.turn, "tool_use_id": msg.tool_use_id}
    result = error_result(msg.tool_use_id, "dispatch_failed", ResultSource.DISPATCH_FAILED, detail)
    record_and_advance(deps, msg.session_id, msg.turn, result, by="dispatch", total=msg.total_tools)
    delegate = deps.settings.agent.delegate_for_tool(msg.tool_name)
    if delegate is not None and delegate.protocol == "a2a":
        deps.dispatches.finish_dispatch(msg.session_id, msg.turn, msg.tool_use_id, "failed")  # its claim, settled
    count("DispatchFailures")
    timeline("dispatch_failed", f"dispatch failed: {detail}", **ids)
    return DispatchOutcome(DispatchStatus.FAILED, detail=detail)
