"""POST /api/tools/response (one result) and /api/tools/responses (a batch of up to 100)."""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools.event_handler import Response, content_types
from aws_lambda_powertools.event_handler.api_gateway import Router
from pydantic import ValidationError

from flightdeck.api.auth import CALLBACK_WWW_AUTHENTICATE, note
from flightdeck.api.callback_payloads import (
    BatchItem,
    BatchItemResult,
    BatchRequest,
    BatchResponse,
    ToolResponse,
    ToolResponseStatus,
)
from flightdeck.api.resolver import ApiError
from flightdeck.domain.callbacks import CallbackOutcome, CallbackStatus, accept_callback
from flightdeck.observability import bind, trace_id_of, valid_traceparent
from flightdeck.wiring import deps

router = Router()  # type: ignore[no-untyped-call]  # Powertools' Router.__init__ has no annotations

WWW_AUTHENTICATE = CALLBACK_WWW_AUTHENTICATE

# (HTTP status, what the caller should understand) per outcome.
_HTTP = {
    CallbackStatus.ACCEPTED: (202, "recorded"),
    CallbackStatus.DUPLICATE: (200, "already recorded; do not retry"),
    CallbackStatus.LATE: (410, "the turn is complete or unknown, or this result was not expected; do not retry"),
    CallbackStatus.UNAUTHORIZED: (401, "invalid or expired callback token"),
    CallbackStatus.TOO_LARGE: (413, "the result exceeds the maximum size; recorded as a result_too_large error"),
}


def _bearer_token() -> str:
    header = router.current_event.headers.get("authorization") or ""
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise ApiError(401, "unauthorized", "missing bearer token", WWW_AUTHENTICATE)
    return token.strip()


@router.post(
    "/api/tools/response",
    summary="Deliver one delegated result",
    status_code=202,
    responses={
        202: {"description": "Accepted", "content": {"application/json": {"model": ToolResponseStatus}}},
        200: {"description": "Duplicate: already recorded (success; do not retry)"},
        400: {"description": "Not JSON, nested deeper than 32 levels, too wide, or a number out of range"},
        401: {"description": "Bad, tampered or expired token (checked before the body is read)"},
        410: {"description": "Late: the turn is complete or unknown, or the id was not expected (do not retry)"},
        413: {"description": "Result or body too large (recorded as a result_too_large error result)"},
        422: {"description": "Body does not match the schema, or the result is not valid Unicode text"},
    },
)
def post_tool_response(body: ToolResponse) -> Response[ToolResponseStatus]:
    traceparent = valid_traceparent(router.current_event.headers.get("traceparent"))
    if traceparent:
        bind(trace_id=trace_id_of(traceparent))
    outcome = accept_callback(deps(), _bearer_token(), body.result, body.status, body.context_id or "")
    note(peer=outcome.claims.name if outcome.claims else None)
    return _single_response(outcome)


def _single_response(outcome: CallbackOutcome) -> Response[Any]:
    status, message = _HTTP[outcome.status]
    if outcome.status is CallbackStatus.UNAUTHORIZED:
        raise ApiError(status, "unauthorized", message, WWW_AUTHENTICATE)
    if outcome.status in (CallbackStatus.LATE, CallbackStatus.TOO_LARGE):
        raise ApiError(status, outcome.status.value, message)
    body = ToolResponseStatus(status=outcome.status.value, completed_turn=outcome.completed)
    return Response(status_code=status, content_type=content_types.APPLICATION_JSON, body=body.model_dump())


@router.post(
    "/api/tools/responses",
    summary="Deliver a batch of delegated results",
    responses={
        200: {
            "description": "Each item's outcome (an item whose text is not valid Unicode: invalid, 422)",
            "content": {"application/json": {"model": BatchResponse}},
        },
        400: {"description": "Not JSON, nested deeper than 32 levels, too wide, or a number out of range"},
        413: {"description": "Body too large"},
        422: {"description": "Body does not match the schema"},
    },
)
def post_tool_responses(body: BatchRequest) -> BatchResponse:
    results = []
    peers: set[str] = set()
    for index, raw in enumerate(body.items):
        try:
            item = BatchItem.model_validate(raw)
        except ValidationError as exc:
            first = exc.errors()[0]
            results.append(
                BatchItemResult(
                    index=index,
                    status="invalid",
                    http_status=422,
                    message=f"{'.'.join(map(str, first['loc'])) or 'item'}: {first['msg']}",
                )
            )
            continue
        traceparent = valid_traceparent(item.traceparent)
        bind(trace_id=trace_id_of(traceparent) if traceparent else None)
        outcome = accept_callback(deps(), item.token, item.result, item.status, item.context_id or "")
        if outcome.claims:
            peers.add(outcome.claims.name)
        status, message = _HTTP[outcome.status]
        results.append(BatchItemResult(index=index, status=outcome.status.value, http_status=status, message=message))
    note(peer=",".join(sorted(peers)) or None)
    return BatchResponse(results=results)
