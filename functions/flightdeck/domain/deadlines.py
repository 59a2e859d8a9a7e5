"""Deadlines: the per-turn timer and the scheduled backstop sweep."""

from __future__ import annotations

import math

from pydantic import BaseModel

from flightdeck.domain.aggregation import expire_turn
from flightdeck.domain.ports import Deps


class TimerMessage(BaseModel):
    session_id: str
    turn: int
    deadline_ms: int


def fire_timer(deps: Deps, timer: TimerMessage) -> str:
    """Returns rechained | expired | already_complete."""
    now = deps.store.now_ms()
    if now < timer.deadline_ms:
        # SQS delays stop at 900 s: a longer deadline is reached in hops.
        deps.queues.send_timer(timer.model_dump(), math.ceil((timer.deadline_ms - now) / 1000))
        return "rechained"
    return "expired" if expire_turn(deps, timer.session_id, timer.turn, by="timer") else "already_complete"


def sweep(deps: Deps, limit: int = 100) -> int:
    """Expire every overdue turn the deadline index lists; returns how many this call completed."""
    overdue = deps.store.list_overdue(deps.store.now_ms(), limit)
    return sum(expire_turn(deps, sid, turn, by="sweep") for sid, turn in overdue)
