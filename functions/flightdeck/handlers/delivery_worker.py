"""Lambda: the delivery queue: send finished answers back to the agents that asked."""

import json

from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord

from flightdeck.domain.a2a import PUSH_KIND, PushDelivery, deliver_push
from flightdeck.domain.delivery import DeliveryMessage, DeliveryStatus, Pending, dead_letter, deliver_answers
from flightdeck.handlers._sqs import attempt_of, first_sent_ms, process_batch, retry_later
from flightdeck.observability import lambda_entry
from flightdeck.settings import get_settings
from flightdeck.wiring import deps

get_settings()


@lambda_entry
def handler(event: dict, context) -> dict:
    d = deps()
    records = event.get("Records", [])
    # A2A push notifications (kind "a2a_push") share the queue: one POST each.
    pushes = {r["messageId"]: r for r in records if json.loads(r["body"]).get("kind") == PUSH_KIND}
    # Answers for the same service share one request, so plan the whole batch first...
    pending = [
        Pending(r["messageId"], DeliveryMessage.model_validate_json(r["body"]),
                attempt_of(SQSRecord(r)), first_sent_ms(SQSRecord(r)))
        for r in records if r["messageId"] not in pushes
    ]
    outcomes = deliver_answers(d, pending)
    for key, r in pushes.items():
        outcomes[key] = deliver_push(d, PushDelivery.model_validate_json(r["body"]), attempt_of(SQSRecord(r)),
                                     first_sent_ms(SQSRecord(r)))

    # ...then let Powertools report each record's own outcome as a partial batch failure.
    def _record(record: SQSRecord) -> str:
        outcome = outcomes[record.message_id]
        if outcome.status is DeliveryStatus.RETRY:
            retry_later(d.queues, d.settings.delivery_queue_url, record, outcome.retry_after_s)
        if outcome.status in (DeliveryStatus.DEAD, DeliveryStatus.REFUSED):
            dead_letter(d, record.body, outcome)
        return outcome.status.value

    return process_batch(event, context, _record)
