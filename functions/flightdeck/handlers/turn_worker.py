"""Lambda: the turns queue (SQS FIFO, group = session): one think iteration per message."""

import json

from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord

from flightdeck.domain.turn_loop import run_turn
from flightdeck.handlers._sqs import process_batch
from flightdeck.observability import bind, lambda_entry
from flightdeck.settings import get_settings
from flightdeck.wiring import deps

get_settings()


def _record(record: SQSRecord) -> str:
    body = json.loads(record.body)
    bind(session_id=body["session_id"], turn=body["turn"])
    return run_turn(deps(), body["session_id"], int(body["turn"]), body.get("traceparent", ""))


@lambda_entry
def handler(event: dict, context) -> dict:
    return process_batch(event, context, _record, fifo=True)
