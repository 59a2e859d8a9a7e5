"""A push notification's delivery (the delivery worker's, kind "a2a_push"): the task POSTed to one webhook in the
version its config was made in (v0.3: the Task; v1.0: a StreamResponse {"task": ...}), the URL re-checked against
ALLOWED_HOST_MAPPING, retried with backoff within the reply retry budget. Enqueued by flightdeck.domain.a2a.push.
"""

from __future__ import annotations

import base64
from typing import Any, Literal
from urllib.parse import urlsplit

from pydantic import BaseModel

from flightdeck.domain.a2a.wire_v1 import task_to_wire
from flightdeck.domain.delivery import DeliveryOutcome, DeliveryStatus
from flightdeck.domain.dispatch import RETRYABLE_STATUSES, backoff_s
from flightdeck.domain.ports import Deps, audit_post
from flightdeck.observability import count, logger, timeline


class PushDelivery(BaseModel):
    kind: Literal["a2a_push"]
    session_id: str
    task_id: str
    config: dict[str, Any]
    task: dict[str, Any]
    created_ms: int = 0


def push_headers(config: dict[str, Any]) -> dict[str, str]:
    headers: dict[str, str] = {}
    if config.get("token"):
        headers["X-A2A-Notification-Token"] = str(config["token"])
    auth = config.get("authentication") or {}
    credentials = auth.get("credentials")
    for scheme in auth.get("schemes") or []:
        if credentials and scheme.lower() == "bearer":
            headers["Authorization"] = f"Bearer {credentials}"
            break
        if credentials and scheme.lower() == "basic":
            # Credentials given as user:password are encoded; anything else is taken as already encoded.
            value = credentials
            if ":" in credentials:
                value = base64.b64encode(credentials.encode()).decode()
            headers["Authorization"] = f"Basic {value}"
            break
    return headers


def deliver_push(deps: Deps, item: PushDelivery, attempt: int, first_sent_ms: int) -> DeliveryOutcome:
    """POST the task to one webhook; the URL is checked against the allowlist again, now."""
    ids = {"session_id": item.session_id, "task_id": item.task_id}
    url = deps.settings.allowed_host_mapping.check_url(str(item.config.get("url", "")))
    if url is None:
        count("A2APushesRefused")
        logger.error("push notification refused: URL no longer allowed", extra=ids)
        return DeliveryOutcome(DeliveryStatus.DEAD, detail="push URL is not under ALLOWED_HOST_MAPPING")
    # A config set through v1.0 gets v1.0's body: the task in a StreamResponse ({"task": ...}).
    body = {"task": task_to_wire(item.task)} if item.config.get("a2aVersion") == "1.0" else item.task
    answer = deps.peers.post_json(url, body, push_headers(item.config))
    audit_post("push_notification", urlsplit(url).netloc or None, answer, **ids)
    detail = answer.error or (str(answer.body)[:300] if answer.status >= 300 else "")
    if 200 <= answer.status < 300:
        count("A2APushesDelivered")
        timeline("a2a_push_delivered", f"push notification delivered for {item.task_id}", **ids)
        return DeliveryOutcome(DeliveryStatus.DELIVERED)
    if answer.status in RETRYABLE_STATUSES:
        spent = deps.clock.now_ms() - (first_sent_ms or item.created_ms or deps.clock.now_ms())
        budget = deps.settings.reply_retry_max_ms
        if spent < budget:
            delay = min(backoff_s(attempt), max(1, (budget - spent) // 1000))
            logger.warning("push notification will be retried", extra={**ids, "detail": detail, "retry_in_s": delay})
            return DeliveryOutcome(DeliveryStatus.RETRY, delay, detail)
        logger.error("push notification retry budget spent", extra={**ids, "detail": detail})
        return DeliveryOutcome(DeliveryStatus.DEAD, detail=f"retry budget spent: {detail}")
    count("A2APushesRefused")
    logger.warning("push notification refused by the receiver; not retrying", extra={**ids, "detail": detail})
    return DeliveryOutcome(
        DeliveryStatus.REFUSED, detail=f"refused by the receiver: HTTP {answer.status} {detail}".rstrip()
    )
