"""Lambda: one think iteration per event (flightdeck.domain.thinks).

Two event shapes reach it. A think starts as an asynchronous invoke whose event is the think itself
({"session_id", "turn", "traceparent", "attempt"?}): Lambda runs a failed one twice more, then puts its
record on the turns queue (flightdeck.topology.ASYNC_INVOKES), where this function hands it to the sweep.
A think retried after a delay (a throttled model) comes from the turns queue, as an SQS batch of one.
With THINK_GATHERING = "shared", thinks also come from the thinks queue, up to ten a batch, run
concurrently (flightdeck.handlers.think_batch).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from flightdeck import topology
from flightdeck.domain.thinks import ThinkMessage, given_up, hand_to_sweep, think
from flightdeck.domain.time_budget import TimeBudget
from flightdeck.observability import lambda_entry
from flightdeck.settings import get_settings
from flightdeck.wiring import deps, deps_within, preload, warm_for_threads

if TYPE_CHECKING:
    from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord

get_settings()
# Most thinks send something to a peer inline: a delegation (with its callback token), or the answer to the agent that asked.
preload(http=True, secrets=True)


@lambda_entry
def handler(event: dict[str, Any], context: Any) -> Mapping[str, object]:
    # Dispatch and delivery run inline (flightdeck.domain.outbox), within what is left of the invocation.
    budget = TimeBudget.of(context)
    if "Records" not in event:  # an asynchronous invoke: an exception fails it, and Lambda retries it
        return {"outcome": think(deps_within(budget), ThinkMessage.of(event), budget)}

    # Powertools' batch utility is imported by the first SQS batch, not at init: most thinks are invokes.
    from flightdeck.handlers.think_batch import process_concurrently

    settings = get_settings()
    thinks_queue = settings.thinks_queue_url.rsplit("/", 1)[-1]

    def _failed(records: list[SQSRecord], delay_s: int | None) -> None:
        # A failed think of the thinks queue comes back as soon as Lambda would retry an invoked one; those the
        # batch had no time for, as soon as their claims have lapsed (flightdeck.handlers.think_batch).
        handles = [
            r.receipt_handle for r in records if thinks_queue and r.event_source_arn.rsplit(":", 1)[-1] == thinks_queue
        ]
        if not handles:
            return
        if delay_s is None:
            for handle in handles:
                deps().queues.delay_retry(settings.thinks_queue_url, handle, topology.THINK_RETRY_S)
        else:
            deps().queues.delay_retries(settings.thinks_queue_url, handles, delay_s)

    warm_for_threads()
    return process_concurrently(event, context, think_record, threads=settings.think_batch_threads, failed=_failed)


def think_record(record: SQSRecord, budget: TimeBudget | None) -> str:
    """One think of an SQS batch (its own budget, its own Deps), or Lambda's record of one it gave up on."""
    body = json.loads(record.body)
    if given_up(body):  # Lambda's on-failure record: the sweep owns that think now
        return hand_to_sweep(deps_within(budget), ThinkMessage.of(body))
    return think(deps_within(budget), ThinkMessage.of(body), budget)
