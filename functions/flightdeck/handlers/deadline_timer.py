"""Lambda: the timers queue: a turn's deadline has come (or the timer chains on)."""

from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord

from flightdeck.domain.deadlines import TimerMessage, fire_timer
from flightdeck.handlers._sqs import process_batch
from flightdeck.observability import logger, metrics, tracer
from flightdeck.settings import get_settings
from flightdeck.wiring import deps

get_settings()


def _record(record: SQSRecord) -> str:
    timer = TimerMessage.model_validate_json(record.body)
    logger.append_keys(session_id=timer.session_id, turn=timer.turn)
    return fire_timer(deps(), timer)


@logger.inject_lambda_context(clear_state=True)
@tracer.capture_lambda_handler
@metrics.log_metrics
def handler(event: dict, context) -> dict:
    return process_batch(event, context, _record)
