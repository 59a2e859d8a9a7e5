"""The fence before a think asks its model (ARCHITECTURE §6): of two runs of one think (a re-send beside a
start Lambda or SQS held past the grace, two re-sends, a starter's retry), one asks; the other stops.

A run claims the think in one conditional write (IterationsPort.claim_think) for as long as its invocation
has left, which it cannot outlive; a run that ends by raising gives the claim back. One that dies keeps it
until then, which is before the sweep's re-send comes (the grace, a bound on every lease): the owed mark
keeps its owner.
"""

from __future__ import annotations

import uuid

from flightdeck.domain.ports import Deps
from flightdeck.domain.time_budget import TimeBudget
from flightdeck.observability import count, logger


def new_run() -> str:
    return uuid.uuid4().hex


def claimed(deps: Deps, session_id: str, turn: int, run: str, budget: TimeBudget | None) -> bool:
    """True if this run may ask the model for this think; False: another run holds it (this one stops)."""
    lease_ms = budget.remaining_ms() if budget is not None else None  # None: the store's grace
    if deps.iterations.claim_think(session_id, turn, run, lease_ms):
        return True
    count("ThinksFenced")
    logger.info("another run of this think holds its claim; this one stops", extra={"turn": turn})
    return False


def give_back(deps: Deps, session_id: str, turn: int, run: str) -> None:
    """A run that ends without storing its reply (it raised): the next run takes the claim at once."""
    try:
        deps.iterations.release_think(session_id, turn, run)
    except Exception:  # noqa: BLE001 - the claim then lapses at its lease's end, before a re-send comes
        logger.warning("the think's claim was not given back", exc_info=True)
