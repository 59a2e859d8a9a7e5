"""The fence before a think asks its model (ARCHITECTURE §6): of two runs of one think (a re-send beside a
start Lambda or SQS held past the grace, two re-sends, the stream starter's replays), one asks; the other stops.

A run alone needs no fence, and the happy path's run is alone: the start the write that owed the think made
(first_start), which ends before the sweep may re-send it (its invocation cannot outlive its remaining time;
the sweep re-sends no sooner than a grace after the mark, Session.resend_after_ms). Any other run claims the think
in one conditional write (IterationsPort.claim_think) for as long as its invocation has left; a run that ends by
raising gives the claim back. One that dies keeps it until then, which is before the sweep's re-send comes (the
grace, a bound on every lease): the owed mark keeps its owner. Not fenced: two deliveries of one first start
inside its window (Lambda's and SQS's rare duplicate of one event); the reply is still stored once.
"""

from __future__ import annotations

import uuid

from flightdeck.domain.ports import Deps
from flightdeck.domain.records import Session
from flightdeck.domain.time_budget import TimeBudget
from flightdeck.observability import count, logger

# How far apart three hosts' clocks may be: the owing writer's (the mark's time), the run's and the sweep's
# (Lambda's hosts keep Amazon Time Sync, well inside this).
CLOCK_MARGIN_MS = 1_000


def new_run() -> str:
    return uuid.uuid4().hex


def alone(deps: Deps, session: Session, budget: TimeBudget | None, first_start: bool) -> bool:
    """True if this run must end before any re-send of its think can start (no request): the first start, its
    invocation's end (and a margin for the hosts' clocks) before the sweep may re-send it."""
    if not first_start or budget is None or not session.resend_after_ms:
        return False
    return deps.clock.now_ms() + budget.remaining_ms() + CLOCK_MARGIN_MS < session.resend_after_ms


def claimed(deps: Deps, session: Session, run: str, budget: TimeBudget | None, first_start: bool = False) -> bool:
    """True if this run may ask the model for this think; False: another run holds it (this one stops)."""
    if alone(deps, session, budget, first_start):
        return True
    lease_ms = budget.remaining_ms() if budget is not None else None  # None: the store's grace
    if deps.iterations.claim_think(session.session_id, session.turn, run, lease_ms):
        return True
    count("ThinksFenced")
    logger.info("another run of this think holds its claim; this one stops", extra={"turn": session.turn})
    return False


def give_back(deps: Deps, session_id: str, turn: int, run: str) -> None:
    """A run that ends without storing its reply (it raised): the next run takes the claim at once."""
    try:
        deps.iterations.release_think(session_id, turn, run)
    except Exception:  # noqa: BLE001 - the claim then lapses at its lease's end, before a re-send comes
        logger.warning("the think's claim was not given back", exc_info=True)
