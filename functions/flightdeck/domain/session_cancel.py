"""A session's caller stops waiting: the session stops at its next think boundary and delivers nothing.

POST /api/sessions/{id}/cancel, by the session's owner: a delegating agent whose deadline passed,
or whose own task was canceled, calls it on the session its delegation created here
(flightdeck.domain.delegation_cancel). One conditional write makes the session `canceled`:

- a think under way cannot store its reply any more (save_iteration's condition `#status = :busy`
  refuses it), so it delivers nothing, and no read is added to any think;
- a turn waiting on delegations is completed with `canceled` results, and those delegations are
  canceled at their peers in turn;
- the session is closed: results for any call left open, a closing line, and idle again (a new
  message starts a new turn).

The same write marks a think owed: if the canceller dies before closing, the sweep sends that
think and the turn worker closes the session instead of thinking (run_turn). The close ends the
turn as any turn ends: a message waiting in the inbox starts the next turn in the same write (never
idle with a message left waiting), and the reply route the canceled task had is retired.

A session waiting for the answer to its question is idle: nothing to stop. close_question closes the
question instead (MCP's tasks/cancel), with the same closing messages, in one write conditioned on the
session still waiting.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from flightdeck.domain.asking import pending_question
from flightdeck.domain.delegation_cancel import stop_delegations
from flightdeck.domain.peers import require_caller
from flightdeck.domain.ports import Deps
from flightdeck.domain.records import (
    CANCELED_CLOSING_TEXT,
    SESSION_CANCELED,
    MessageSlot,
    ResultSource,
    Session,
    ToolResult,
    error_result,
)
from flightdeck.observability import count, logger, timeline

CLOSING_TEXT = CANCELED_CLOSING_TEXT


@dataclass(frozen=True)
class CancelOutcome:
    session_id: str
    turn: int  # the think iteration it was at
    canceled: bool  # False: the session was idle, nothing to cancel


def _canceled(tool_use_id: str) -> ToolResult:
    return error_result(tool_use_id, "canceled", ResultSource.TIMEOUT, "the caller stopped waiting")


def cancel_session(deps: Deps, session_id: str, caller: str | None) -> CancelOutcome:
    """Raises SessionNotFoundError: no such session, or another peer's (for the caller it does not exist)."""
    require_caller(deps.settings.inbound_auth, caller)
    outcome, turn = deps.sessions.cancel_session(session_id, caller)
    if outcome != SESSION_CANCELED:
        return CancelOutcome(session_id, turn, canceled=False)
    count("SessionsCanceled")
    timeline("session_canceled", f"canceled by its caller at turn {turn}", session_id=session_id, turn=turn)
    session = deps.sessions.get_session(session_id)
    if session is not None and session.status == SESSION_CANCELED:
        close_canceled(deps, session)
    return CancelOutcome(session_id, turn, canceled=True)


def close_question(deps: Deps, session: Session, caller: str | None) -> bool:
    """The caller stops waiting on a session that waits for its answer (idle, its last reply asked): the
    question is closed as a canceled session's turn is (a canceled result for each ask_user call, the
    closing line), so that the session's next message is a message of its own, not the answer. One
    conditional write; False when nothing is asked, or the answer was taken first (the session works on it)."""
    require_caller(deps.settings.inbound_auth, caller)
    if session.status != "idle" or pending_question(session.messages) is None:
        return False
    closing = _closing_messages(deps, session)
    if not deps.sessions.close_question(session, closing, deps.settings.session_retention_ms, caller):
        return False
    count("QuestionsCanceled")
    timeline(
        "question_canceled",
        f"its caller stopped waiting for the answer at turn {session.turn}",
        session_id=session.session_id,
        turn=session.turn,
    )
    return True


def close_canceled(deps: Deps, session: Session) -> bool:
    """Close a canceled session at its current turn: by the canceller, else by the turn worker of the
    owed think. True for the call that closed it."""
    sessions, turns, s = deps.sessions, deps.turns, deps.settings
    session_id, turn = session.session_id, session.turn
    agg = session.aggregation
    if agg is not None and agg.status == "waiting":
        # Its delegations stop counting, through the same conditional completion as a timeout; the
        # session moves to the next turn, which is where it closes.
        expiry = turns.complete_with_errors(
            session_id, turn, _canceled, "session_cancel", s.tool_agg_tombstone_ttl_ms, s.session_retention_ms
        )
        stop_delegations(deps, session_id, turn, expiry.synthesized, "its caller canceled")
        reread = sessions.get_session(session_id)
        if reread is None or reread.status != SESSION_CANCELED:
            return False
        session, turn = reread, reread.turn
    end = sessions.close_canceled_session(
        session_id, turn, _closing_messages(deps, session), s.session_retention_ms, session
    )
    if not end.ended:
        return False  # closed by another (the canceller and the owed think raced)
    if session.has_a2a_task:
        deps.turn_hooks.on_session_canceled(deps, session_id, turn, CLOSING_TEXT)
    timeline("session_closed", f"canceled session closed at turn {turn}", session_id=session_id, turn=turn)
    if end.next_input is not None:
        # A message waited in the inbox: the close started its turn (owed in the same write).
        _start_think(deps, session_id, turn + 1)
    return True


def _start_think(deps: Deps, session_id: str, turn: int) -> None:
    """Send the think of the turn the close started; a failed send is the sweep's (the mark is owed)."""
    timeline("queued_turn_started", f"the next queued message starts turn {turn}", session_id=session_id, turn=turn)
    try:
        deps.thinks.start(session_id, turn)
    except Exception:  # noqa: BLE001 - owed: the sweep re-sends it after its grace
        logger.exception("the next think was not sent; the sweep will", extra={"session_id": session_id, "turn": turn})
        count("ThinkSendsDeferred")


def _closing_messages(deps: Deps, session: Session) -> list[tuple[int, dict[str, Any]]]:
    """What the conversation needs to stay well-formed: a result for every call of a reply left
    without one (Converse requires it), then the closing line."""
    last = session.messages[-1] if session.messages else {}
    uses = [b["toolUse"] for b in last.get("content", []) if "toolUse" in b] if last.get("role") == "assistant" else []
    messages: list[tuple[int, dict[str, Any]]] = []
    if uses:
        results = {r.tool_use_id: r for r in deps.turns.get_results(session.session_id, session.turn)}
        blocks = [results.get(u["toolUseId"], _canceled(u["toolUseId"])).as_block() for u in uses]
        messages.append((int(MessageSlot.CLOSING_RESULTS), {"role": "user", "content": blocks}))
    messages.append((int(MessageSlot.CLOSING_TEXT), {"role": "assistant", "content": [{"text": CLOSING_TEXT}]}))
    return messages
