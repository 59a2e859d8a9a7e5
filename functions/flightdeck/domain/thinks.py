"""One think, however it was started: an asynchronous invoke, or a delayed retry from the turns queue.

A retryable model failure within the model's attempt budget becomes a retry message delayed by
its backoff (flightdeck.domain.ports.ThinkPort.retry_later), so no function waits out a backoff
and the event that carried this attempt ends as a success.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from flightdeck.domain import think_claim
from flightdeck.domain.ports import Deps
from flightdeck.domain.time_budget import TimeBudget
from flightdeck.domain.turn_loop import ThinkRetry, run_turn
from flightdeck.observability import bind, count, logger

RETRY_SCHEDULED = "retry_scheduled"
HANDED_TO_SWEEP = "handed_to_sweep"


class ThinkMessage(BaseModel):
    session_id: str = Field(min_length=1)
    turn: int = Field(ge=1)
    traceparent: str = ""
    # The model attempt this think is (a retry after a throttled model carries 2, 3...).
    attempt: int = Field(1, ge=1)
    # A new session's first think: the session as its ingest wrote it (opaque; StatePort.get_session).
    snapshot: str = ""
    # Started by the write that owed it (ThinkPort.start), not re-sent or retried: flightdeck.domain.think_claim.
    first_start: bool = False

    @classmethod
    def of(cls, body: dict[str, Any]) -> ThinkMessage:
        """The think of an event or message body. A record Lambda wrote for an invocation it gave up on
        carries the think as its requestPayload."""
        payload = body.get("requestPayload")
        return cls.model_validate(payload if isinstance(payload, dict) else body)


def given_up(body: dict[str, Any]) -> bool:
    """Lambda's record of a think it gave up on (retries exhausted, or too old), not a think to run now."""
    return isinstance(body.get("requestContext"), dict) and isinstance(body.get("requestPayload"), dict)


def hand_to_sweep(deps: Deps, message: ThinkMessage) -> str:
    """A think Lambda gave up on (its on-failure record, on the turns queue): its owed mark goes into the
    deadline index, due after the grace, and the sweep re-sends it (ARCHITECTURE §3), whoever started it.
    A mark that moved on needs nothing: its session's next think is someone else's."""
    bind(session_id=message.session_id, turn=message.turn)
    count("ThinksGivenUp")
    logger.error("Lambda gave up on a think; the sweep re-sends it", extra={"turn": message.turn})
    return HANDED_TO_SWEEP if deps.liveness.defer_owed_think(message.session_id, message.turn) else "stale"


def think(deps: Deps, message: ThinkMessage, budget: TimeBudget | None = None) -> str:
    """Run think iteration message.turn; returns run_turn's outcome, or RETRY_SCHEDULED.

    A run that ends by raising (a throttled model's retry included) gives its think's claim back, so the
    next run takes it at once (flightdeck.domain.think_claim)."""
    bind(session_id=message.session_id, turn=message.turn)
    run = think_claim.new_run()
    try:
        return run_turn(
            deps,
            message.session_id,
            message.turn,
            message.traceparent,
            message.attempt,
            budget,
            message.snapshot,
            run,
            message.first_start,
        )
    except ThinkRetry as retry:
        think_claim.give_back(deps, message.session_id, message.turn, run)
        # The think stays owed, but due only once its retry could have run: the sweep must not start it
        # (at attempt 1) while the retry waits or runs. Only this throttled path pays these writes.
        deps.liveness.defer_owed_think(message.session_id, message.turn, retry.delay_s * 1000)
        deps.thinks.retry_later(
            message.session_id, message.turn, message.traceparent, message.attempt + 1, retry.delay_s
        )
        return RETRY_SCHEDULED
    except Exception:
        think_claim.give_back(deps, message.session_id, message.turn, run)
        raise
