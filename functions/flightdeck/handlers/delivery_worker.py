"""Lambda: the delivery queue: send finished answers back to the agents that asked."""

import functools
import json
from typing import TYPE_CHECKING, Any

from aws_lambda_powertools.utilities.batch.types import PartialItemFailureResponse
from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord

from flightdeck.domain.a2a.constants import PUSH_KIND
from flightdeck.domain.delivery import (
    DeliveryMessage,
    DeliveryOutcome,
    DeliveryStatus,
    Pending,
    dead_letter,
    deliver_answers,
    if_time_allows,
)
from flightdeck.domain.time_budget import TimeBudget
from flightdeck.handlers._sqs import attempt_of, first_sent_ms, process_batch, retry_later
from flightdeck.observability import lambda_entry
from flightdeck.settings import get_settings
from flightdeck.wiring import deps_within, preload

if TYPE_CHECKING:
    from flightdeck.domain.a2a.push_delivery import PushDelivery

get_settings()
preload(http=True)  # every record is a POST to a peer


@lambda_entry
def handler(event: dict[str, Any], context: Any) -> PartialItemFailureResponse:
    # Every call within what is left of the invocation: what cannot be sent in time goes back
    # before the timeout instead of the whole batch coming back after it.
    budget = TimeBudget.of(context)
    d = deps_within(budget)
    outcomes: dict[str, DeliveryOutcome] = {}
    answers: list[Pending] = []
    pushes: list[tuple[SQSRecord, PushDelivery]] = []
    for record in map(SQSRecord, event.get("Records", [])):
        try:
            body = json.loads(record.body)
            # A2A push notifications (kind "a2a_push") share the queue: one POST each.
            if isinstance(body, dict) and body.get("kind") == PUSH_KIND:
                # The A2A add-on is imported by the first push, not at init: most deliveries are answers.
                from flightdeck.domain.a2a import push_delivery as a2a

                pushes.append((record, a2a.PushDelivery.model_validate(body)))
            else:
                message = DeliveryMessage.model_validate(body)
                # The retry budget counts from the first attempt, inline in the turn worker when it was.
                first = min(message.created_ms or first_sent_ms(record), first_sent_ms(record) or message.created_ms)
                answers.append(Pending(record.message_id, message, attempt_of(record), first))
        except ValueError as exc:  # not JSON, or not a delivery (pydantic's ValidationError is a ValueError)
            outcomes[record.message_id] = DeliveryOutcome(DeliveryStatus.DEAD, detail=f"malformed message: {exc}"[:500])
    # Answers for the same service share one request, so the whole batch is planned first...
    outcomes.update(deliver_answers(d, answers, budget))
    for record, push in pushes:
        from flightdeck.domain.a2a import push_delivery as a2a  # imported by the push's message above

        send = functools.partial(a2a.deliver_push, d, push, attempt_of(record), first_sent_ms(record))
        outcomes[record.message_id] = if_time_allows(d, budget, first_sent_ms(record), send)

    # ...then Powertools reports each record's own outcome as a partial batch failure.
    def _record(record: SQSRecord) -> str:
        outcome = outcomes[record.message_id]
        if outcome.status is DeliveryStatus.RETRY:
            retry_later(d.queues, get_settings().delivery_queue_url, record, outcome.retry_after_s)
        if outcome.status in (DeliveryStatus.DEAD, DeliveryStatus.REFUSED):
            dead_letter(d, record.body, outcome)
        return outcome.status.value

    return process_batch(event, context, _record)
