"""Dispatch and delivery run inline, right after the state they follow is committed; SQS is only the retry path.

A think that delegates sends each task to its peer from the turn worker itself, and a turn that
ends sends its answer to the caller from there too: the common case costs no queue hop (a send,
a receive and a delete each) and no extra invocation. Whatever is not done inline (a retryable
refusal, an unreachable peer, no time left in the invocation, an unexpected error) is handed to
the dispatch or delivery queue, whose worker retries it with backoff exactly as before. A crash
before the hand-over is covered by the think's own retry (Lambda runs a failed asynchronous
invocation again, SQS redelivers a retry message): its effects re-run (a re-sent task is a replay at the peer; a re-sent answer is a duplicate at the caller).
"""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from flightdeck.domain.delivery import DeliveryMessage, DeliveryStatus, Pending, dead_letter, deliver_answers
from flightdeck.domain.dispatch import DispatchMessage, DispatchStatus, dispatch_delegation
from flightdeck.domain.ports import Deps
from flightdeck.domain.time_budget import TimeBudget
from flightdeck.observability import logger

# How many of a think's delegations are sent at once: all of them (MAX_TOOLS_PER_TURN is at most 50; issue 37).
# One after another, k delegations cost k round trips to peers.
MAX_CONCURRENT_DISPATCHES = 50


def dispatch_now(deps: Deps, bodies: list[dict[str, Any]], budget: TimeBudget | None) -> None:
    """Send each delegation now, together, each within the invocation's time (what no longer fits goes to
    the queue); queue what must be retried. Never raises for one delegation.

    Each is its own dispatch, as one alone is (its claim, its idempotent send), in a thread of its own:
    the log keys bound for the invocation are the process's (every thread's lines carry them), and the
    time budget is the invocation's deadline, read by each.
    """
    if len(bodies) < 2 or MAX_CONCURRENT_DISPATCHES < 2:
        for body in bodies:
            _dispatch_one(deps, body, budget)
        return
    with ThreadPoolExecutor(max_workers=min(len(bodies), MAX_CONCURRENT_DISPATCHES)) as pool:
        list(pool.map(lambda body: _dispatch_one(deps, body, budget), bodies))


def _dispatch_one(deps: Deps, body: dict[str, Any], budget: TimeBudget | None) -> None:
    try:
        outcome = dispatch_delegation(deps, DispatchMessage.model_validate(body), 1, budget)
    except Exception:  # noqa: BLE001 - the queue's worker owns it from here, with its retries
        logger.exception(
            "inline dispatch failed; handing it to the dispatch queue",
            extra={"session_id": body.get("session_id"), "tool_use_id": body.get("tool_use_id")},
        )
        deps.queues.send_dispatch({**body, "prior_attempts": 0})
        return
    if outcome.status is DispatchStatus.RETRY:
        # The first queued attempt comes at once: the inline one already waited for its answer.
        deps.queues.send_dispatch({**body, "prior_attempts": 1})


def deliver_now(deps: Deps, body: dict[str, Any], budget: TimeBudget | None) -> None:
    """Send a finished answer now; queue it for retries, or dead-letter it when the target refused it."""
    message = DeliveryMessage.model_validate(body)
    try:
        outcome = deliver_answers(deps, [Pending("inline", message, 1, message.created_ms)], budget)["inline"]
    except Exception:  # noqa: BLE001 - the queue's worker owns it from here
        logger.exception(
            "inline delivery failed; handing it to the delivery queue", extra={"session_id": message.session_id}
        )
        deps.queues.send_delivery(body)
        return
    if outcome.status is DeliveryStatus.RETRY:
        deps.queues.send_delivery(body)
    elif outcome.status in (DeliveryStatus.DEAD, DeliveryStatus.REFUSED):
        dead_letter(deps, json.dumps(body), outcome)
