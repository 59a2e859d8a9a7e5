"""Recording tool results and completing a turn exactly once.

Every path that produces a result (a peer's callback, a local tool, a failed
dispatch, a deadline) goes through `record_and_advance` or `expire_due`, so the
same DynamoDB conditions decide every race and only the winner enqueues the next think.
"""

from __future__ import annotations

from dataclasses import dataclass

from flightdeck.domain.ports import Deps
from flightdeck.domain.records import Completion, Expiry, RecordOutcome, ResultSource, ToolResult, error_result
from flightdeck.observability import count, timeline


@dataclass(frozen=True)
class Advance:
    outcome: RecordOutcome
    completed: bool  # this call completed the turn (and enqueued the next think)


def record_and_advance(
    deps: Deps, session_id: str, turn: int, result: ToolResult, *, by: str, total: int | None = None
) -> Advance:
    """total: how many results the turn expects, when the caller knows it (a token's claims, the
    think's call list): the last result then completes the turn in the write that records it."""
    s = deps.settings
    completion = Completion(by, total, s.tool_agg_tombstone_ttl_ms) if total else None
    outcome, completed = deps.turns.record_result(session_id, turn, result, s.session_retention_ms, completion)
    if completed:
        _completed(deps, session_id, turn)
    elif outcome is RecordOutcome.ACCEPTED and completion is None:
        completed = _complete_if_all_in(deps, session_id, turn, by)
    elif outcome is RecordOutcome.DUPLICATE:
        # A retry after a lost answer: the first attempt may have died between recording the
        # result and completing the turn. One that died after completing left the next think
        # owed, and the sweep sends it: a think start is not deduplicated, so a duplicate never
        # sends it again (it could not tell a send that failed from one that is thinking now).
        completed = _complete_if_all_in(deps, session_id, turn, by)
    return Advance(outcome, completed)


def _completed(deps: Deps, session_id: str, turn: int) -> None:
    count("TurnsCompleted")
    timeline("turn_complete", f"turn {turn} complete: every result is in", session_id=session_id, turn=turn)
    deps.thinks.start(session_id, turn + 1)


def _complete_if_all_in(deps: Deps, session_id: str, turn: int, by: str) -> bool:
    if not deps.turns.complete_turn(session_id, turn, by, deps.settings.tool_agg_tombstone_ttl_ms):
        return False
    _completed(deps, session_id, turn)
    return True


def expire_due(deps: Deps, session_id: str, turn: int, *, by: str) -> Expiry:
    """At or after a deadline: a timeout result for every missing id whose own deadline has passed;
    the turn completes when that leaves none open (each delegate may have its own timeout_ms)."""
    s = deps.settings
    expiry = deps.turns.complete_with_errors(
        session_id,
        turn,
        lambda tool_use_id: error_result(tool_use_id, "timeout", ResultSource.TIMEOUT),
        by,
        s.tool_agg_tombstone_ttl_ms,
        s.session_retention_ms,
        due_by_ms=deps.clock.now_ms(),
    )
    if expiry.synthesized:
        count("Timeouts")
        timeline(
            "timeout_synthesized",
            f"turn {turn}: synthesized timeout results for {len(expiry.synthesized)} call(s) past their deadline",
            session_id=session_id,
            turn=turn,
            by=by,
            tool_use_ids=list(expiry.synthesized),
        )
    if expiry.won:
        timeline("turn_complete", f"turn {turn} complete after timeout", session_id=session_id, turn=turn)
        deps.thinks.start(session_id, turn + 1)
    # A loser needs no check: whoever completed marked the next think owed (flightdeck.domain.liveness).
    return expiry


def expire_turn(deps: Deps, session_id: str, turn: int, *, by: str) -> bool:
    """expire_due; True for the call that completed the turn."""
    return expire_due(deps, session_id, turn, by=by).won
