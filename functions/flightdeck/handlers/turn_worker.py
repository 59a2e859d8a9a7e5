"""Lambda: the turns queue (SQS FIFO, group = session): one think iteration per message."""

import json

from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord

from flightdeck.domain.turn_loop import ThinkRetry, run_turn
from flightdeck.handlers._sqs import attempt_of, process_batch, retry_later
from flightdeck.observability import bind, lambda_entry
from flightdeck.settings import get_settings
from flightdeck.domain.time_budget import TimeBudget
from flightdeck.wiring import deps_within

get_settings()


def _record(record: SQSRecord, budget: TimeBudget | None) -> str | None:
    body = json.loads(record.body)
    bind(session_id=body["session_id"], turn=body["turn"])
    d = deps_within(budget)
    try:
        return run_turn(d, body["session_id"], int(body["turn"]), body.get("traceparent", ""), attempt_of(record),
                        budget)
    except ThinkRetry as retry:
        retry_later(d.queues, d.settings.turns_queue_url, record, retry.delay_s)  # raises: the record fails


@lambda_entry
def handler(event: dict, context) -> dict:
    # Dispatch and delivery run inline (flightdeck.domain.outbox), within what is left of the invocation.
    budget = TimeBudget.of(context)
    return process_batch(event, context, lambda record: _record(record, budget), fifo=True)
