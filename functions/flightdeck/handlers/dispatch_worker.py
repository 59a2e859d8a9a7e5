"""Lambda: the dispatch queue: send each delegation to its peer (the "pending" ack), retry its cancel, or make a
slow MCP tool call."""

import json
from typing import Any

from aws_lambda_powertools.utilities.batch.types import PartialItemFailureResponse
from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord

from flightdeck.domain.delegation_cancel import CancelMessage, cancel_delegation, is_cancel
from flightdeck.domain.dispatch import DispatchMessage, DispatchStatus, dispatch_delegation
from flightdeck.domain.mcp_tools import DeferredCall, is_deferred_message, run_deferred
from flightdeck.domain.time_budget import TimeBudget
from flightdeck.handlers._sqs import attempt_of, process_batch, retry_later
from flightdeck.observability import bind, lambda_entry
from flightdeck.settings import get_settings
from flightdeck.wiring import deps_within, preload

get_settings()
preload(
    http=True, secrets=True
)  # every record is a POST to a peer (a delegation, or its cancel), most with a callback token


@lambda_entry
def handler(event: dict[str, Any], context: Any) -> PartialItemFailureResponse:
    # One call per record, each within what is left of the invocation: what cannot be tried in
    # time goes back before the timeout instead of the whole batch coming back after it.
    budget = TimeBudget.of(context)
    d = deps_within(budget)

    def _record(record: SQSRecord) -> str:
        body = json.loads(record.body)
        if is_deferred_message(body):  # a slow MCP tool's call, made once (flightdeck.domain.mcp_tools)
            deferred = DeferredCall.of(body)
            bind(session_id=deferred.session_id, tool_use_id=deferred.tool_use_id)
            return run_deferred(d, deferred, budget)
        if is_cancel(body):  # a delegation's cancel at its peer, retried here (flightdeck.domain.delegation_cancel)
            cancel = CancelMessage.model_validate(body)
            bind(session_id=cancel.session_id, tool_use_id=cancel.tool_use_id)
            outcome = cancel_delegation(d, cancel, cancel.prior_attempts + attempt_of(record))
        else:
            message = DispatchMessage.model_validate(body)
            bind(session_id=message.session_id, tool_use_id=message.tool_use_id)
            outcome = dispatch_delegation(d, message, message.prior_attempts + attempt_of(record), budget)
        if outcome.status is DispatchStatus.RETRY:
            retry_later(d.queues, get_settings().dispatch_queue_url, record, outcome.retry_after_s)
        return outcome.status.value

    return process_batch(event, context, _record)
