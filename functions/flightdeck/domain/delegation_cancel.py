"""A stops waiting for a delegation: the peer is told to stop too (best-effort).

When a call's deadline passes (flightdeck.domain.deadlines), or A's own A2A task or session is
canceled (flightdeck.domain.a2a.tasks, flightdeck.domain.session_cancel), each delegation left without
an answer is canceled at its peer: one of our agents through POST /api/sessions/{id}/cancel on
the session the delegation created there (our peer token for it; that session is ours), an A2A
peer through `tasks/cancel` on the task it gave us. Nothing waits for it: A's own writes and its
next think come first. One attempt is made inline with a short timeout (cut to what is left of
the invocation); a retryable failure goes to the dispatch queue, whose worker tries again with
backoff up to DISPATCH_MAX_ATTEMPTS attempts in all, then gives up (the peer's late answer is
refused with 410, as before).
"""

from __future__ import annotations

from typing import Any, Final, Literal

from pydantic import BaseModel, Field

from flightdeck.domain import asking
from flightdeck.domain.agent import DelegateTool
from flightdeck.domain.allowlist import CHAT_ENDPOINT, UnknownServiceError
from flightdeck.domain.dispatch import (
    RETRYABLE_STATUSES,
    DispatchOutcome,
    DispatchStatus,
    backoff_s,
)
from flightdeck.domain.model import ModelReply
from flightdeck.domain.ports import Deps, audit_post, bearer
from flightdeck.domain.records import peer_session_id
from flightdeck.observability import count, logger, timeline

CANCEL_KIND: Final = "cancel"
# A cancel's own HTTP timeout (PEER_TIMEOUT_MS bounds it too): short, since nothing waits on it.
CANCEL_TIMEOUT_S = 2.0
# JSON-RPC errors that settle an A2A cancel: the task is not found, or cannot be canceled (terminal).


class CancelMessage(BaseModel):
    """One delegation to cancel at its peer (inline first, then on the dispatch queue)."""

    kind: Literal["cancel"] = CANCEL_KIND
    session_id: str
    turn: int = Field(ge=1)
    tool_use_id: str
    tool_name: str
    reason: str = ""
    # The delegate's session the delegation continued (it answered that session's question), where it
    # runs; "" for a new delegation, which runs in the session derived from its call (peer_session_id).
    context_id: str = ""
    # Attempts made before this message was queued (the inline one).
    prior_attempts: int = Field(0, ge=0)


def stop_delegations(
    deps: Deps, session_id: str, turn: int, tool_use_ids: tuple[str, ...] | list[str], reason: str
) -> int:
    """Cancel, at their peers, the delegations among these calls of `turn`; how many were canceled.

    Never raises: a failure is logged (and retried from the queue when it may succeed later).
    """
    if not tool_use_ids:
        return 0
    try:
        iteration = deps.iterations.get_iteration(session_id, turn)  # which tool each call was: the one read
    except Exception:  # noqa: BLE001 - best-effort: A's turn has moved on already
        logger.exception(
            "cannot read the turn's calls; its delegations are not canceled",
            extra={"session_id": session_id, "turn": turn},
        )
        return 0
    if iteration is None:
        return 0
    uses = {u["toolUseId"]: u for u in ModelReply.model_validate(iteration.reply).tool_uses}
    canceled = 0
    for tool_use_id in tool_use_ids:
        use = uses.get(tool_use_id, {})
        name = use.get("name", "")
        delegate = deps.settings.agent.delegate_for_tool(name)
        if delegate is None:
            continue  # a local tool, or an unknown one: nothing runs elsewhere
        try:
            context_id = _continued(deps, session_id, delegate, use.get("input") or {})
        except ValueError:
            continue  # a continuation refused before it went out (its result says so): nothing runs
        message = CancelMessage(
            session_id=session_id,
            turn=turn,
            tool_use_id=tool_use_id,
            tool_name=name,
            reason=reason,
            context_id=context_id,
        )
        canceled += _cancel_now(deps, message)
    return canceled


def _continued(deps: Deps, session_id: str, delegate: DelegateTool, tool_input: dict[str, Any]) -> str:
    """The delegate's session a call continued, checked as its dispatch checked it (only a conversation
    this session had with that delegate), or "" for a new delegation. Reads the session only for a
    continuation, so a cancel never goes to a session the model merely named."""
    if delegate.protocol != "flightdeck" or not tool_input.get("context_id"):
        return ""  # A2A delegations are canceled by the task id their claim keeps
    session = deps.sessions.get_session(session_id)
    if session is None:
        raise ValueError("the session is gone")
    return asking.continued_context(session, delegate, deps.settings.agent_name, tool_input)[0]


def _cancel_now(deps: Deps, message: CancelMessage) -> bool:
    ids = {"session_id": message.session_id, "turn": message.turn, "tool_use_id": message.tool_use_id}
    try:
        outcome = cancel_delegation(deps, message, 1)
    except Exception:  # noqa: BLE001 - the queue's worker owns it from here
        logger.exception("inline cancel failed; handing it to the dispatch queue", extra=ids)
        outcome = DispatchOutcome(DispatchStatus.RETRY)
    if outcome.status is DispatchStatus.RETRY:
        try:
            deps.queues.send_dispatch({**message.model_dump(), "prior_attempts": 1})
        except Exception:  # noqa: BLE001 - best-effort: dropped, the peer's late answer gets a 410
            logger.exception("cancel not queued; given up", extra=ids)
    return outcome.status is DispatchStatus.SENT


def cancel_delegation(deps: Deps, message: CancelMessage, attempt: int) -> DispatchOutcome:
    """One attempt to cancel one delegation at its peer: sent (it stopped), skipped (nothing to stop
    there), retry (later, within DISPATCH_MAX_ATTEMPTS), or failed (given up)."""
    s = deps.settings
    ids = {"session_id": message.session_id, "turn": message.turn, "tool_use_id": message.tool_use_id}
    delegate = s.agent.delegate_for_tool(message.tool_name)
    if delegate is None:
        return DispatchOutcome(DispatchStatus.SKIPPED, detail=f"no delegating tool named {message.tool_name!r}")
    if delegate.protocol != "flightdeck":
        # Another protocol's delegation is canceled by its add-on (A2A: tasks/cancel), registered in wiring.
        canceller = deps.cancellers.get(delegate.protocol)
        if canceller is None:
            return _given_up(message, f"no way to cancel a {delegate.protocol!r} delegation is registered")
        status, settled, detail = canceller(deps, message, delegate.peer_service)
    else:
        try:
            base_url = s.allowed_host_mapping.resolve(delegate.peer_service, CHAT_ENDPOINT)
        except UnknownServiceError as exc:
            return _given_up(message, str(exc))
        # Where the delegation runs: the session it continued, else the one its call derived.
        peer_session = message.context_id or peer_session_id(s.agent_name, message.session_id, message.tool_use_id)
        answer = deps.peers.post_json(
            f"{base_url}/api/sessions/{peer_session}/cancel",
            {},
            bearer(deps.token_for(delegate.peer_service)),
            timeout_s=CANCEL_TIMEOUT_S,
        )
        audit_post("cancel", delegate.peer_service, answer, attempt=attempt, **ids)
        status = answer.status
        # 404: the task never arrived (or went); 409: the session was idle, its answer already given.
        settled = status in (404, 409)
        detail = f"HTTP {status}" if status else f"unreachable: {answer.error}"
    if 200 <= status < 300 and not settled:
        count("DelegationsCanceled")
        timeline("delegation_canceled", f"{delegate.agent} told to stop ({message.reason})", **ids)
        return DispatchOutcome(DispatchStatus.SENT)
    if settled:
        return DispatchOutcome(DispatchStatus.SKIPPED, detail=detail)
    if status in RETRYABLE_STATUSES and attempt < s.dispatch_max_attempts:
        delay = backoff_s(attempt)
        logger.warning(
            "cancel will be retried", extra={**ids, "detail": detail, "attempt": attempt, "retry_in_s": delay}
        )
        return DispatchOutcome(DispatchStatus.RETRY, retry_after_s=delay, detail=detail)
    return _given_up(message, detail)


def _given_up(message: CancelMessage, detail: str) -> DispatchOutcome:
    count("DelegationCancelsFailed")
    logger.warning(
        "cancel given up: the peer may keep working (its answer will be refused as late)",
        extra={"session_id": message.session_id, "tool_use_id": message.tool_use_id, "detail": detail},
    )
    return DispatchOutcome(DispatchStatus.FAILED, detail=detail)


def is_cancel(body: Any) -> bool:
    return isinstance(body, dict) and body.get("kind") == CANCEL_KIND
