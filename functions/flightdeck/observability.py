"""Logger, tracer and metrics for every function, and the W3C trace context we carry.

Every log line carries agent, session_id and tool_use_id when known. Lines with a
`timeline` key mark the steps of a delegation (the local demo draws them).
"""

from __future__ import annotations

import os
import re
import secrets

from aws_lambda_powertools import Logger, Metrics, Tracer
from aws_lambda_powertools.metrics import MetricUnit

_service = os.environ.get("POWERTOOLS_SERVICE_NAME") or os.environ.get("AGENT_NAME") or "flightdeck"
logger = Logger(service=_service)
logger.append_keys(agent=os.environ.get("AGENT_NAME", _service))
tracer = Tracer(service=_service)
metrics = Metrics(namespace=os.environ.get("POWERTOOLS_METRICS_NAMESPACE", "Flightdeck"), service=_service)


def timeline(event: str, message: str, **fields: object) -> None:
    """Log one step of a delegation, for people following it across agents."""
    logger.info(message, extra={"timeline": event, **{k: v for k, v in fields.items() if v is not None}})


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
