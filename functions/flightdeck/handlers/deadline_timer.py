"""Lambda: the timers queue: a turn's deadline has come (or the timer chains on), or an A2A poll."""

import json
from typing import Any

from aws_lambda_powertools.utilities.batch.types import PartialItemFailureResponse
from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord

from flightdeck.domain.a2a.constants import POLL_KIND
from flightdeck.domain.deadlines import TimerMessage, fire_timer
from flightdeck.domain.time_budget import TimeBudget
from flightdeck.handlers._sqs import process_batch
from flightdeck.observability import bind, lambda_entry
from flightdeck.settings import get_settings
from flightdeck.wiring import deps_within

get_settings()


@lambda_entry
def handler(event: dict[str, Any], context: Any) -> PartialItemFailureResponse:
    # A poll's tasks/get ends within what is left of the invocation; one cut short (or not
    # sent for want of time) is a transient failure, and the poll is scheduled again.
    d = deps_within(TimeBudget.of(context))

    def _record(record: SQSRecord) -> str:
        body = json.loads(record.body)
        if body.get("kind") == POLL_KIND:  # an A2A peer that does not push: poll its task
            # The A2A client is imported by the first poll, not at init: most timers are turn deadlines.
            from flightdeck.domain.a2a.client import PollMessage, poll_remote_task

            poll = PollMessage.model_validate(body)
            bind(session_id=poll.session_id, turn=poll.turn, tool_use_id=poll.tool_use_id)
            return poll_remote_task(d, poll)
        timer = TimerMessage.model_validate(body)
        bind(session_id=timer.session_id, turn=timer.turn)
        return fire_timer(d, timer)

    return process_batch(event, context, _record)
