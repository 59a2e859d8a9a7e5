"""Deadlines: the per-turn timer (at each deadline still open) and the scheduled backstop sweep."""

from __future__ import annotations

import math

from pydantic import BaseModel

from flightdeck.domain.aggregation import expire_due
from flightdeck.domain.ports import Deps
from flightdeck.observability import count, logger


class TimerMessage(BaseModel):
    session_id: str
    turn: int
    deadline_ms: int


def fire_timer(deps: Deps, timer: TimerMessage) -> str:
    """Returns rechained | expired | rearmed | already_complete.

    expired: this firing completed the turn. rearmed: the turn still waits for a later deadline (the
    calls past theirs, if any, got their timeout results), and the timer is armed again for it.
    The delegations it stopped waiting for are then told to stop (best-effort, after A's own steps).
    """
    now = deps.clock.now_ms()
    if now < timer.deadline_ms:
        # SQS delays stop at 900 s: a longer deadline is reached in hops.
        deps.queues.send_timer(timer.model_dump(), math.ceil((timer.deadline_ms - now) / 1000))
        return "rechained"
    expiry = expire_due(deps, timer.session_id, timer.turn, by="timer")
    if expiry.next_deadline_ms is not None:
        deps.queues.send_timer(
            {**timer.model_dump(), "deadline_ms": expiry.next_deadline_ms},
            math.ceil((expiry.next_deadline_ms - now) / 1000),
        )
    _stop_delegations(deps, timer.session_id, timer.turn, expiry.synthesized, "deadline passed")
    if expiry.won:
        return "expired"
    return "rearmed" if expiry.next_deadline_ms is not None else "already_complete"


# Past its due time by more than this, an entry means a session outlived the liveness bound
# (one sweep interval and the retry budgets are inside it): counted as SessionsOverdue, alarmed on.
OVERDUE_SLACK_MS = 120_000
# How often the sweep recounts the agent's load (max_concurrent_tasks set): a slot leaks only when a busy
# session is deleted by TTL (its turn outlived its retention), so a Scan an hour bounds that at little cost.
LOAD_RECOUNT_INTERVAL_MS = 3_600_000


def sweep(deps: Deps, limit: int = 100) -> int:
    """Expire every overdue turn and re-send every owed think the deadline index lists.

    Returns how many turns this call completed plus how many thinks it re-sent.
    """
    now = deps.clock.now_ms()
    overdue = deps.liveness.list_overdue(now, limit)
    late = [o for o in overdue if now - o.due_ms > deps.settings.tool_agg_punctuate_interval_ms + OVERDUE_SLACK_MS]
    if late:
        count("SessionsOverdue", len(late))
        logger.error("sessions past the liveness bound", extra={"sessions": [o.session_id for o in late][:20]})
    done = 0
    stopped: list[tuple[str, int, tuple[str, ...]]] = []
    for item in overdue:
        try:
            if item.kind == "deadline":
                expiry = expire_due(deps, item.session_id, item.turn, by="sweep")
                done += expiry.won
                if expiry.synthesized:
                    stopped.append((item.session_id, item.turn, expiry.synthesized))
            elif item.kind == "handoff":
                # A protocol add-on's task whose message never reached its session (flightdeck.domain.a2a).
                recover = deps.recoverers.get(item.kind)
                if recover is not None:
                    done += recover(deps, item)
            elif item.due_ms > now:
                # Listed before its grace ran out (a write kept the session's listed time): no re-send while
                # the think it stands in for may still run; the index lists it again at its grace.
                deps.liveness.defer_owed_think(item.session_id, item.turn, due_by_ms=now)
            else:
                done += resend_owed_think(deps, item.session_id, item.turn)
        except Exception:  # noqa: BLE001 - one failing session must not starve the others
            # Whatever committed left its mark in the index (an owed think, a waiting turn): the
            # next sweep picks it up again.
            logger.exception("sweep step failed; the next sweep retries it", extra={"session_id": item.session_id})
    # Telling peers to stop comes after every expiry: best-effort, it never delays one.
    for session_id, turn, ids in stopped:
        _stop_delegations(deps, session_id, turn, ids, "deadline passed")
    if deps.settings.agent.max_concurrent_tasks is not None:
        try:
            recounted = deps.liveness.recount_load(LOAD_RECOUNT_INTERVAL_MS)
            if recounted is not None:
                logger.info("the agent's load recounted", extra={"busy": recounted})
        except Exception:  # noqa: BLE001 - the next interval recounts; the sweep's own work is done
            logger.exception("recounting the agent's load failed")
    return done


def _stop_delegations(deps: Deps, session_id: str, turn: int, tool_use_ids: tuple[str, ...], reason: str) -> None:
    """flightdeck.domain.delegation_cancel.stop_delegations, imported by the first expiry that leaves a
    delegation unanswered: most timers find their turn complete, and most sweeps nothing overdue."""
    if tool_use_ids:
        from flightdeck.domain.delegation_cancel import stop_delegations

        stop_delegations(deps, session_id, turn, tool_use_ids, reason)


def resend_owed_think(deps: Deps, session_id: str, turn: int) -> bool:
    """Re-send a think that a commit made due and that has not started: True if sent."""
    owed = deps.liveness.owed_think(session_id)
    if owed != turn:
        deps.liveness.clear_owed_think(session_id, turn)  # stale: the session moved on
        return False
    # The mark moves a grace on before the send: no later sweep re-sends this think while the re-send may
    # still run (ARCHITECTURE §6), and of two sweeps that listed it, only one sends.
    if not deps.liveness.defer_owed_think(session_id, turn, due_by_ms=deps.clock.now_ms()):
        return False
    count("OwedThinksResent")
    logger.warning("re-sending an owed think", extra={"session_id": session_id, "turn": turn})
    deps.thinks.resend(session_id, turn)
    return True
