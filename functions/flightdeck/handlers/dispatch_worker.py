"""Lambda: the dispatch queue: send each delegation to its peer (the "pending" ack)."""

from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord

from flightdeck.domain.dispatch import DispatchMessage, DispatchStatus, dispatch_delegation
from flightdeck.handlers._sqs import attempt_of, process_batch, retry_later
from flightdeck.observability import bind, lambda_entry
from flightdeck.settings import get_settings
from flightdeck.wiring import deps

get_settings()


def _record(record: SQSRecord) -> str:
    message = DispatchMessage.model_validate_json(record.body)
    bind(session_id=message.session_id, tool_use_id=message.tool_use_id)
    d = deps()
    outcome = dispatch_delegation(d, message, attempt_of(record))
    if outcome.status is DispatchStatus.RETRY:
        retry_later(d.queues, d.settings.dispatch_queue_url, record, outcome.retry_after_s)
    return outcome.status.value


@lambda_entry
def handler(event: dict, context) -> dict:
    return process_batch(event, context, _record)
