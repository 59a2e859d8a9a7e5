"""Lambda: one think iteration per event (flightdeck.domain.thinks).

Two event shapes reach it. A think starts as an asynchronous invoke whose event is the think itself
({"session_id", "turn", "traceparent", "attempt"?}): Lambda runs a failed one twice more, then puts its
record on the turns queue (flightdeck.topology.ASYNC_INVOKES), where this function hands it to the sweep.
A think retried after a delay (a throttled model) comes from the turns queue, as an SQS batch of one.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from flightdeck.domain.thinks import ThinkMessage, given_up, hand_to_sweep, think
from flightdeck.domain.time_budget import TimeBudget
from flightdeck.observability import lambda_entry
from flightdeck.settings import get_settings
from flightdeck.wiring import deps_within, preload

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

    # Powertools' batch utility is imported by the first delayed retry, not at init: most thinks are invokes.
    from flightdeck.handlers._sqs import process_batch

    def _record(record: SQSRecord) -> str:
        body = json.loads(record.body)
        if given_up(body):  # Lambda's on-failure record: the sweep owns that think now
            return hand_to_sweep(deps_within(budget), ThinkMessage.of(body))
        return think(deps_within(budget), ThinkMessage.of(body), budget)

    return process_batch(event, context, _record)
