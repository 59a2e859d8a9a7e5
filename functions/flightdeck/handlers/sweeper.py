"""Lambda: the EventBridge-scheduled backstop sweep over the deadline index."""

from typing import Any

from flightdeck.domain.deadlines import sweep
from flightdeck.domain.time_budget import TimeBudget
from flightdeck.observability import lambda_entry, logger
from flightdeck.settings import get_settings
from flightdeck.wiring import deps_within

get_settings()


@lambda_entry
def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    # The cancels it sends after its expiries end within the invocation; what does not fit is queued.
    expired = sweep(deps_within(TimeBudget.of(context)))
    if expired:
        logger.info("sweep expired overdue turns", extra={"expired": expired})
    return {"expired": expired}
