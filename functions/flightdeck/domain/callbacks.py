"""A's side of the callback: verify the token, record the result once, maybe complete the turn."""

from __future__ import annotations

import enum
from dataclasses import dataclass

from flightdeck.domain.aggregation import record_and_advance
from flightdeck.domain.asking import recorded_text
from flightdeck.domain.ports import Deps
from flightdeck.domain.records import RecordOutcome, ResultSource, ToolResult, error_result
from flightdeck.domain.tokens import CallbackClaims, TokenError, verify
from flightdeck.observability import bind, count, logger, timeline


class CallbackStatus(str, enum.Enum):
    ACCEPTED = "accepted"
    DUPLICATE = "duplicate"
    LATE = "late"
    UNAUTHORIZED = "unauthorized"
    TOO_LARGE = "too_large"


@dataclass(frozen=True)
class CallbackOutcome:
    status: CallbackStatus
    claims: CallbackClaims | None = None
    completed: bool = False


_FROM_RECORD = {
    RecordOutcome.ACCEPTED: CallbackStatus.ACCEPTED,
    RecordOutcome.DUPLICATE: CallbackStatus.DUPLICATE,
    RecordOutcome.LATE: CallbackStatus.LATE,
}


def verified_claims(deps: Deps, token: str, what: str = "callback") -> CallbackClaims | None:
    """The claims of a callback token this agent minted, or None (the caller answers one 401)."""
    try:
        return verify(token, deps.keys(), agent=deps.settings.agent_name, now=deps.clock.now_ms() / 1000)
    except TokenError as exc:
        # The caller learns only "unauthorized"; the log says which check failed.
        logger.warning(f"{what} refused: bad token", extra={"token_check": exc.reason})
        count("CallbacksRefused")
        return None


def too_large_result(deps: Deps, tool_use_id: str) -> ToolResult:
    """The error result of a call whose answer is over MAX_RESULT_BYTES: never cut short, never stored."""
    detail = f"the answer exceeds {deps.settings.max_result_bytes} bytes"
    return error_result(tool_use_id, "result_too_large", ResultSource.CALLBACK, detail)


def record_too_large(deps: Deps, claims: CallbackClaims, result: ToolResult) -> CallbackOutcome:
    """A verified token's call ends at once with its result_too_large error result: the turn goes on rather
    than waiting out its deadline. Safe to take from a body we refuse: the token (checked, ours) names the
    one call it answers, and its holder could as well have answered it with an error."""
    ids = {"session_id": claims.session_id, "tool_use_id": claims.tool_use_id, "turn": claims.turn}
    logger.warning("answer too large: recorded as a result_too_large error", extra=ids)
    count("CallbacksRefused")
    advance = record_and_advance(deps, claims.session_id, claims.turn, result, by="callback", total=claims.total_tools)
    timeline("callback_too_large", f"answer from {claims.name} too large: {advance.outcome.value}", **ids)
    return CallbackOutcome(CallbackStatus.TOO_LARGE, claims, advance.completed)


def accept_callback(
    deps: Deps, token: str, result_text: str, status: str = "success", context_id: str = ""
) -> CallbackOutcome:
    """status "input_required": result_text is the delegate's question, and context_id the conversation
    that takes the answer; the model gets both as its tool result (flightdeck.domain.asking)."""
    claims = verified_claims(deps, token)
    if claims is None:
        return CallbackOutcome(CallbackStatus.UNAUTHORIZED)
    ids = {"session_id": claims.session_id, "tool_use_id": claims.tool_use_id, "turn": claims.turn}
    bind(**ids)
    result_text = recorded_text(result_text, status, context_id)
    if len(result_text.encode("utf-8", "surrogatepass")) > deps.settings.max_result_bytes:
        return record_too_large(deps, claims, too_large_result(deps, claims.tool_use_id))
    # A question is a successful call: the delegate answered, with a question.
    result = ToolResult(
        claims.tool_use_id, "error" if status == "error" else "success", result_text, ResultSource.CALLBACK
    )
    advance = record_and_advance(deps, claims.session_id, claims.turn, result, by="callback", total=claims.total_tools)
    status = _FROM_RECORD[advance.outcome]
    count({"accepted": "CallbacksAccepted", "duplicate": "CallbacksDuplicate", "late": "CallbacksLate"}[status.value])
    timeline(f"callback_{status.value}", f"callback from {claims.name}: {status.value}", **ids)
    return CallbackOutcome(status, claims, advance.completed)
