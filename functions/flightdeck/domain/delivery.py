"""B's side: deliver a finished answer to the service that asked, and only there.

The callback service is resolved through ALLOWED_HOST_MAPPING again at delivery
time (fail closed). Answers bound for the same service in one batch go in one
request to its batch endpoint; a batch refused for its size (413) is sent again
in halves, and one refused as a whole in any other way goes one answer per
request. An answer its caller cannot take for its size (over the protocol's
answer limit, flightdeck.domain.limits, or refused 413) goes as a small
`result_too_large` error result instead, so the caller's call ends at once. An
answer is dropped only when the target refuses that answer itself or its retries
are spent, and then it is counted, logged and dead-lettered.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass

from pydantic import BaseModel

from flightdeck.domain.allowlist import CALLBACK_ENDPOINT, UnknownServiceError
from flightdeck.domain.asking import INPUT_REQUIRED, recorded_text
from flightdeck.domain.dispatch import RETRYABLE_STATUSES, backoff_s
from flightdeck.domain.limits import MAX_ANSWER_BYTES
from flightdeck.domain.ports import Deps, audit_post
from flightdeck.domain.records import error_text
from flightdeck.domain.time_budget import OUT_OF_TIME_RETRY_S, TimeBudget
from flightdeck.observability import count, logger, timeline

CALLBACK_PATH = "/api/tools/response"
BATCH_CALLBACK_PATH = "/api/tools/responses"


class DeliveryMessage(BaseModel):
    session_id: str
    callback_service: str
    bearer_token: str
    result: str
    traceparent: str = ""
    created_ms: int = 0
    status: str = "success"  # "error": the agent could not do the task (the result says why)
    # status "input_required": the result is the agent's question, and this the session that takes the answer.
    context_id: str = ""


class DeliveryStatus(str, enum.Enum):
    DELIVERED = "delivered"  # accepted, or already recorded (duplicate)
    REFUSED = "refused"  # the target refused this answer itself (401/403/410...): no retry, dead-lettered
    RETRY = "retry"
    DEAD = "dead"  # unknown service or retry budget spent: to the dead-letter queue


@dataclass(frozen=True)
class Pending:
    key: str  # the caller's handle for this item (SQS message id)
    message: DeliveryMessage
    attempt: int
    first_sent_ms: int


@dataclass(frozen=True)
class DeliveryOutcome:
    status: DeliveryStatus
    retry_after_s: int = 0
    detail: str = ""


def _classify(deps: Deps, item: Pending, http_status: int, detail: str) -> DeliveryOutcome:
    ids = {"session_id": item.message.session_id, "callback_service": item.message.callback_service}
    if http_status in (200, 201, 202):
        count("AnswersDelivered")
        timeline("answer_delivered", f"answer delivered to {item.message.callback_service}", **ids)
        return DeliveryOutcome(DeliveryStatus.DELIVERED, detail=detail)
    if http_status in RETRYABLE_STATUSES:
        spent = deps.clock.now_ms() - item.first_sent_ms
        if spent < deps.settings.reply_retry_max_ms:
            count("DeliveryRetries")
            delay = min(backoff_s(item.attempt), max(1, (deps.settings.reply_retry_max_ms - spent) // 1000))
            logger.warning("delivery will be retried", extra={**ids, "detail": detail, "retry_in_s": delay})
            return DeliveryOutcome(DeliveryStatus.RETRY, delay, detail)
        count("DeliveryFailures")
        logger.error("delivery retry budget spent", extra={**ids, "detail": detail})
        return DeliveryOutcome(DeliveryStatus.DEAD, detail=f"retry budget spent: {detail}")
    count("DeliveriesRefused")
    logger.warning("delivery refused by the target; not retrying", extra={**ids, "detail": detail})
    return DeliveryOutcome(
        DeliveryStatus.REFUSED,
        detail=f"refused by {item.message.callback_service}: HTTP {http_status} {detail}".rstrip(),
    )


def _answer_bytes(message: DeliveryMessage) -> int:
    """The answer's size as its caller measures it (flightdeck.domain.callbacks)."""
    return len(recorded_text(message.result, message.status, message.context_id).encode("utf-8", "surrogatepass"))


def too_large_instead(item: Pending, detail: str) -> Pending:
    """A small result_too_large error result in place of an answer its caller cannot take: the caller's call
    ends now, not at its deadline (the answer itself is never cut short)."""
    count("AnswersTooLarge")
    error = error_text("result_too_large", f"the answer is {_answer_bytes(item.message)} bytes; {detail}")
    message = item.message.model_copy(update={"result": error, "status": "error", "context_id": ""})
    return dataclasses.replace(item, message=message)


def _sendable(item: Pending) -> Pending:
    """The answer, or, over the protocol's answer limit (which every caller's default takes), its error."""
    if _answer_bytes(item.message) <= MAX_ANSWER_BYTES:
        return item
    logger.warning("answer over the protocol's limit; a result_too_large error goes instead")
    return too_large_instead(item, f"at most {MAX_ANSWER_BYTES} are sent")


def deliver_answers(deps: Deps, items: list[Pending], budget: TimeBudget | None = None) -> dict[str, DeliveryOutcome]:
    """budget: the invocation's time; what there is no time left to send goes back (see `if_time_allows`)."""
    outcomes: dict[str, DeliveryOutcome] = {}
    by_service: dict[str, list[Pending]] = defaultdict(list)
    for item in map(_sendable, items):
        try:
            base = deps.settings.allowed_host_mapping.resolve(item.message.callback_service, CALLBACK_ENDPOINT)
        except UnknownServiceError as exc:
            count("DeliveryFailures")
            logger.error(
                "delivery refused: unknown callback service",
                extra={"session_id": item.message.session_id, "detail": str(exc)},
            )
            outcomes[item.key] = DeliveryOutcome(DeliveryStatus.DEAD, detail=str(exc))
            continue
        by_service[base].append(item)
    for base, group in by_service.items():
        outcomes.update(_deliver_group(deps, base, group, budget))
    return outcomes


def _answer_body(message: DeliveryMessage) -> dict[str, str]:
    # "status" only when it says something, so a peer that predates it still takes success answers.
    body = {"result": message.result}
    if message.status in ("error", INPUT_REQUIRED):
        body["status"] = message.status
    if message.status == INPUT_REQUIRED:
        body["context_id"] = message.context_id
    return body


def if_time_allows(
    deps: Deps, budget: TimeBudget | None, first_sent_ms: int, send: Callable[[], DeliveryOutcome]
) -> DeliveryOutcome:
    """send(), if the invocation has time for a call. Else the message is not tried now: it comes back
    soon, or, when its retry time is spent, it is dead (and dead-lettered) rather than left to the DLQ."""
    if budget is None or budget.allows_a_call():
        return send()
    now = deps.clock.now_ms()
    if now - (first_sent_ms or now) < deps.settings.reply_retry_max_ms:
        count("DeliveriesDeferred")
        return DeliveryOutcome(DeliveryStatus.RETRY, OUT_OF_TIME_RETRY_S, "out of time")
    count("DeliveryFailures")
    logger.error("delivery retry budget spent; its last attempt ran out of time")
    return DeliveryOutcome(DeliveryStatus.DEAD, detail="retry budget spent: the last attempt ran out of time")


def dead_letter(deps: Deps, record_body: str, outcome: DeliveryOutcome) -> None:
    """An answer given up (refused by its target, or out of retries): counted, logged, kept with the reason."""
    count("DeliveriesDeadLettered")
    logger.error("answer dead-lettered", extra={"delivery_status": outcome.status.value, "detail": outcome.detail})
    deps.queues.send_delivery_dead_letter(
        {"body": record_body, "reason": outcome.detail, "status": outcome.status.value}
    )


def _headers(item: Pending) -> dict[str, str]:
    headers = {"Authorization": f"Bearer {item.message.bearer_token}"}
    if item.message.traceparent:
        headers["traceparent"] = item.message.traceparent
    return headers


def _deliver_one(deps: Deps, base: str, item: Pending, *, refused_size: bool = False) -> DeliveryOutcome:
    """refused_size: the caller refused this answer for its size already (413): this is its error, sent once."""
    answer = deps.peers.post_json(base + CALLBACK_PATH, _answer_body(item.message), _headers(item))
    audit_post(
        "delivery", item.message.callback_service, answer, session_id=item.message.session_id, attempt=item.attempt
    )
    if answer.status == 413 and not refused_size:
        return _too_large_refused(deps, base, item)
    detail = answer.error or (str(answer.body)[:300] if answer.status >= 300 else "")
    return _classify(deps, item, answer.status, detail)


def _too_large_refused(deps: Deps, base: str, item: Pending) -> DeliveryOutcome:
    """The caller refused the answer for its size (its MAX_RESULT_BYTES or MAX_BODY_BYTES is below ours): its
    result_too_large error goes in its place (a caller that recorded one already answers it as a duplicate)."""
    logger.warning("answer refused for its size (413); a result_too_large error goes instead")
    return _deliver_one(deps, base, too_large_instead(item, "its caller refused it for its size"), refused_size=True)


def _deliver_each(deps: Deps, base: str, group: list[Pending], budget: TimeBudget | None) -> dict[str, DeliveryOutcome]:
    return {
        i.key: if_time_allows(deps, budget, i.first_sent_ms, functools.partial(_deliver_one, deps, base, i))
        for i in group
    }


def _deliver_group(
    deps: Deps, base: str, group: list[Pending], budget: TimeBudget | None
) -> dict[str, DeliveryOutcome]:
    """Answers for one service: one request to its batch endpoint when there are several."""
    if len(group) == 1 or (budget is not None and not budget.allows_a_call()):
        return _deliver_each(deps, base, group, budget)
    body = {
        "items": [
            {
                "token": i.message.bearer_token,
                **_answer_body(i.message),
                **({"traceparent": i.message.traceparent} if i.message.traceparent else {}),
            }
            for i in group
        ]
    }
    answer = deps.peers.post_json(base + BATCH_CALLBACK_PATH, body)
    audit_post(
        "delivery_batch",
        group[0].message.callback_service,
        answer,
        items=len(group),
        session_ids=[i.message.session_id for i in group],
    )
    if answer.status == 413:
        # Too large together, not each: halves, down to one answer per request if need be.
        count("DeliveryBatchesSplit")
        half = len(group) // 2
        return {**_deliver_group(deps, base, group[:half], budget), **_deliver_group(deps, base, group[half:], budget)}
    if not 200 <= answer.status < 300 and answer.status not in RETRYABLE_STATUSES:
        # No batch endpoint (404/405), or the batch refused as a whole: the target has judged no
        # single answer, so none is dropped for it. One request each.
        return _deliver_each(deps, base, group, budget)
    results = answer.body.get("results") if answer.status == 200 and isinstance(answer.body, dict) else None
    if not isinstance(results, list) or len(results) != len(group):
        detail = answer.error or f"batch answered HTTP {answer.status}"
        status = answer.status if answer.status != 200 else 502
        return {i.key: _classify(deps, i, status, detail) for i in group}
    return {
        item.key: _too_large_refused(deps, base, item)
        if int(r.get("http_status", 0)) == 413
        else _classify(deps, item, int(r.get("http_status", 0)), str(r.get("status", "")))
        for item, r in zip(group, results)
    }
