"""Lambda: the EventBridge-scheduled backstop sweep over the deadline index."""

from flightdeck.domain.deadlines import sweep
from flightdeck.observability import logger, metrics, tracer
from flightdeck.settings import get_settings
from flightdeck.wiring import deps

get_settings()


@logger.inject_lambda_context(clear_state=True)
@tracer.capture_lambda_handler
@metrics.log_metrics
def handler(event: dict, context) -> dict:
    expired = sweep(deps())
    if expired:
        logger.info("sweep expired overdue turns", extra={"expired": expired})
    return {"expired": expired}
