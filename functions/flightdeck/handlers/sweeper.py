"""Lambda: the EventBridge-scheduled backstop sweep over the deadline index."""

from flightdeck.domain.deadlines import sweep
from flightdeck.observability import lambda_entry, logger
from flightdeck.settings import get_settings
from flightdeck.wiring import deps

get_settings()


@lambda_entry
def handler(event: dict, context) -> dict:
    expired = sweep(deps())
    if expired:
        logger.info("sweep expired overdue turns", extra={"expired": expired})
    return {"expired": expired}
