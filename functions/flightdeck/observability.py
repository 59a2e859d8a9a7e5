"""Logger, tracer and metrics for every function, and the W3C trace context we carry.

Every log line carries service (the agent), the invocation's function_request_id, and
session_id and tool_use_id when known; nothing a log group already says (function name,
ARN, memory size) and no source location: CloudWatch bills each byte of each line.
Lines with a `timeline` key mark the steps of a delegation (the local demo and
`flightdeck local up` draw them). The routine steps are DEBUG: on AWS (INFO, the default)
a delegation writes its audit lines, its metrics and whatever went wrong
(dispatch failures, timeouts, late answers); POWERTOOLS_LOG_LEVEL=DEBUG adds the steps.
"""

from __future__ import annotations

import functools
import gc
import hashlib
import os
import re
import secrets
import threading
from collections.abc import Callable
from typing import Any

from aws_lambda_powertools import Logger, Metrics
from aws_lambda_powertools.metrics import MetricUnit

from flightdeck import tracing

_service = os.environ.get("POWERTOOLS_SERVICE_NAME") or os.environ.get("AGENT_NAME") or "flightdeck"
logger = Logger(service=_service)
# Audit lines have their own logger at INFO, so a quieter POWERTOOLS_LOG_LEVEL never drops them.
# Its Python logger name is outside the main logger's hierarchy (no line is written twice);
# the lines still say service = the agent, and carry the keys bound for the invocation.
audit_logger = Logger(service=f"flightdeck-audit:{_service}", level="INFO")
audit_logger.append_keys(service=_service)
for _logger in (logger, audit_logger):
    _logger.remove_keys(["location"])  # file:line of the logging call: for developers, not operators


def _tracing_on() -> bool:
    # Powertools disables tracing outside Lambda anyway; not constructing the Tracer there also
    # spares every cold start of a function without tracing the X-Ray SDK's import (~125 ms).
    disabled = os.environ.get("POWERTOOLS_TRACE_DISABLED", "").lower() in ("1", "true")
    return bool(os.environ.get("AWS_LAMBDA_FUNCTION_NAME")) and not disabled


def _tracer() -> Any:
    from aws_lambda_powertools import Tracer

    return Tracer(service=_service)


@functools.cache
def _function_tracer() -> Any:
    """The function's tracer, made by its entry point at init (what the function's environment says)."""
    return _tracer() if _tracing_on() else None


metrics = Metrics(namespace=os.environ.get("POWERTOOLS_METRICS_NAMESPACE", "Flightdeck"), service=_service)


# The keys bind() added during this invocation: the next one starts without them.
_bound: set[str] = set()


# A thread of a batch of thinks (flightdeck.handlers.think_batch) binds its keys to its own lines alone.
_thread = threading.local()


def keys_per_thread() -> None:
    """From now on, bind() in this thread (one of a batch's) adds keys to this thread's log lines alone."""
    _thread.own_keys = True
    for each in (logger, audit_logger):
        each.thread_safe_clear_keys()


def bind(**keys: object) -> None:
    """Add keys (session_id, tool_use_id, trace_id...) to every later log line of this invocation, audit
    lines included. A key given None is removed (e.g. the next item of a batch has no trace)."""
    added = {k: v for k, v in keys.items() if v is not None}
    gone = [k for k, v in keys.items() if v is None]
    if getattr(_thread, "own_keys", False):
        for each in (logger, audit_logger):
            each.thread_safe_append_keys(**added)
            each.thread_safe_remove_keys(gone)
        return
    for each in (logger, audit_logger):
        each.append_keys(**added)
        each.remove_keys(gone)
    _bound.update(added)
    _bound.difference_update(gone)


def _unbind_all() -> None:
    for each in (logger, audit_logger):
        each.remove_keys(_bound)
    _bound.clear()


def lambda_entry(handler: Callable[[dict[str, Any], Any], Any]) -> Callable[[dict[str, Any], Any], Any]:
    """Every Lambda entry point: the request id on log lines, tracing, and metrics flushed once per invocation.

    Not Powertools' inject_lambda_context: it puts the function's name, ARN, memory size and
    cold start on every line, which the log group and Lambda's REPORT line already say.
    """

    @functools.wraps(handler)
    def invocation(event: dict[str, Any], context: Any) -> Any:
        # An execution environment serves one invocation at a time: the previous one's keys go.
        _unbind_all()
        request_id = getattr(context, "aws_request_id", None)
        if request_id:
            bind(function_request_id=request_id)
        try:
            with tracing.entry(event):
                return handler(event, context)
        finally:
            tracing.flush()
            # Nothing counted, nothing to publish (flushing an empty set only warns).
            if metrics.metric_set:
                metrics.flush_metrics()

    tracer = _function_tracer()
    if not gc.isenabled():
        # The init phase ends here (flightdeck.handlers turned the collector off for it): what it made lives as
        # long as the process, so no collection need ever scan it.
        gc.freeze()
        gc.enable()
    return tracer.capture_lambda_handler(invocation) if tracer else invocation


# Steps every delegation takes: DEBUG (see the module doc). Any other timeline event (dispatch_failed,
# timeout_synthesized, callback_late, a2a_task_canceled...) is news to an operator: INFO.
ROUTINE_STEPS = frozenset(
    {
        "chat_received",
        "turn_started",
        "thinking",
        "tool_use",
        "dispatched",
        "callback_accepted",
        "turn_complete",
        "answer_ready",
        "answer_delivered",
        "final_answer",
        "a2a_task_started",
        "a2a_task_completed",
        "a2a_poll_done",
        "a2a_push_delivered",
    }
)


def timeline(event: str, message: str, **fields: object) -> None:
    """Log one step of a delegation, for people following it across agents."""
    log = logger.debug if event in ROUTINE_STEPS else logger.info
    log(message, extra={"timeline": event, **{k: v for k, v in fields.items() if v is not None}})


def payload_sha256(data: bytes | str) -> str:
    """Hex SHA-256 of a request body as sent or received (str: its UTF-8 bytes)."""
    return hashlib.sha256(data.encode("utf-8", "surrogatepass") if isinstance(data, str) else data).hexdigest()


def audit(
    direction: str, operation: str, peer: str | None, payload_sha256: str, outcome: str, **fields: object
) -> None:
    """One audit line for one delegation call, inbound or outbound: `"audit": true`, timestamped by the logger.

    direction: "inbound" | "outbound"; operation: chat, a2a:<method>, tool_response, tool_responses,
    a2a_push (inbound) or dispatch, a2a:<method>, delivery, delivery_batch, push_notification (outbound);
    peer: the authenticated caller (inbound) or the service called (outbound), "" when unknown;
    outcome: a short word (accepted, forbidden, http_502, unreachable...). Extra fields as given.
    """
    audit_logger.info(
        f"audit {direction} {operation}: {outcome}",
        extra={
            "audit": True,
            "direction": direction,
            "operation": operation,
            "peer": peer or "",
            "payload_sha256": payload_sha256,
            "outcome": outcome,
            **{k: v for k, v in fields.items() if v is not None},
        },
    )


def count(name: str, value: float = 1) -> None:
    metrics.add_metric(name=name, unit=MetricUnit.Count, value=value)


_TRACEPARENT = re.compile(r"^00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$")


def valid_traceparent(value: str | None) -> str:
    """The header if it is a well-formed W3C traceparent, else ''."""
    if value and _TRACEPARENT.match(value.strip().lower()):
        return value.strip().lower()
    return ""


def child_traceparent(parent: str | None) -> str:
    """A traceparent for the next hop: same trace id, new span id (a new trace if none)."""
    match = _TRACEPARENT.match(parent or "")
    trace_id = match.group(1) if match else secrets.token_hex(16)
    return f"00-{trace_id}-{secrets.token_hex(8)}-01"


def trace_id_of(traceparent: str) -> str:
    match = _TRACEPARENT.match(traceparent or "")
    return match.group(1) if match else ""
