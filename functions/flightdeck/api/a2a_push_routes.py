"""POST /api/a2a/push: A2A peers' push notifications to us, for the tasks we delegated to them.

The callback function serves it with the tool responses; it imports the A2A client only when a push
comes, since most of that function's calls are our own agents' callbacks.
"""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools.event_handler import Response, content_types
from aws_lambda_powertools.event_handler.api_gateway import Router

from flightdeck.api import strict_json
from flightdeck.api.auth import note
from flightdeck.api.callback_payloads import ToolResponseStatus
from flightdeck.api.payloads import NOT_UNICODE
from flightdeck.api.resolver import ApiError
from flightdeck.wiring import deps

router = Router()  # type: ignore[no-untyped-call]  # Powertools' Router.__init__ has no annotations

# By flightdeck.domain.a2a.client.PushStatus value (a str enum: its members are these keys).
_PUSH_HTTP = {
    "accepted": 202,
    "duplicate": 200,
    "in_progress": 200,
}
_PUSH_ERRORS = {
    "late": (410, "late", "the turn is complete or unknown, or this result was not expected; do not retry"),
    "unauthorized": (401, "unauthorized", "invalid or expired notification token"),
    "too_large": (413, "too_large", "the answer exceeds the maximum size; recorded as an error"),
}


@router.post(
    "/api/a2a/push",
    summary="Push notification from an A2A peer (a task we delegated)",
    description=(
        "Body: the peer's A2A Task. Header X-A2A-Notification-Token: the token this agent gave with the task. "
        "A terminal task records the delegation's result (completed: its artifact or message text; failed, "
        "canceled, rejected, input-required: a structured error); other states are acknowledged only."
    ),
    status_code=202,
    responses={
        202: {"description": "Recorded", "content": {"application/json": {"model": ToolResponseStatus}}},
        200: {"description": "Already recorded, or not terminal yet (nothing recorded)"},
        400: {
            "description": "Body is not JSON, nested deeper than 32 levels, too wide, or holds a number out of range"
        },
        401: {"description": "Missing, bad, tampered or expired token (checked before the body is read)"},
        410: {"description": "Late: the turn is complete or unknown (do not retry)"},
        413: {"description": "Answer too large (recorded as an error result)"},
        422: {"description": "Body is not an A2A Task, or holds text that is not valid Unicode"},
    },
)
def post_a2a_push() -> Response[dict[str, Any]]:
    from flightdeck.domain.a2a.client import PushStatus, receive_push  # by the first push (the module's doc)

    # The token was verified before the body was read (flightdeck.api.auth); receive_push checks it again.
    headers = router.current_event.headers
    token = (headers.get("x-a2a-notification-token") or "").strip()
    if not token:
        raise ApiError(401, "unauthorized", "missing X-A2A-Notification-Token")
    if not router.current_event.body:
        raise ApiError(400, "malformed_json", "request body is not valid JSON: it is empty")
    body = router.current_event.json_body  # strict_json: a hostile body is a 400
    where = strict_json.lone_surrogate_at(body)
    if where is not None:
        raise ApiError(422, "invalid_request", f"{strict_json.dotted(where)}: {NOT_UNICODE}")
    outcome = receive_push(deps(), token, body)
    note(peer=outcome.peer)
    if outcome.status is PushStatus.INVALID:
        raise ApiError(422, "invalid_request", outcome.detail)
    if outcome.status in _PUSH_ERRORS:
        raise ApiError(*_PUSH_ERRORS[outcome.status])
    status = "accepted" if outcome.status is PushStatus.ACCEPTED else outcome.status.value
    return Response(
        status_code=_PUSH_HTTP[outcome.status],
        content_type=content_types.APPLICATION_JSON,
        body={"status": status, "completed_turn": outcome.completed},
    )
