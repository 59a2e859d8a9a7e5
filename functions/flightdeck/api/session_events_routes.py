"""GET /api/sessions/{session_id}/events: the session's timeline as Server-Sent Events.

Each event is `id: <stable id>`, `event: <kind>`, `data: <JSON>` (flightdeck.domain.timeline):
message, thinking, delegating, tool_call, callback_accepted, timeout, dispatch_failed,
canceled, tool_result, answer (or question: the agent asks for input), and last idle. The stream replays the timeline from the start,
then follows the session until it is idle again (or STREAM_MAX_MS); `?follow=false` sends the
timeline as it stands and ends. Following, it also sends `text_delta` events: the text of the
think under way as the model produces it (flightdeck.domain.session_events). Same peer authentication as GET /api/sessions/{id}: another
peer's session is 404.

With STREAMING on, the session_events function's entry point answers from `open_stream`
(the resolver's `stream` hook) as the events come; with it off the route below answers the
timeline so far in one response.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Annotated, Any, Literal

from aws_lambda_powertools.event_handler import Response
from aws_lambda_powertools.event_handler.api_gateway import Router
from aws_lambda_powertools.event_handler.openapi.params import Header, Path, Query
from aws_lambda_powertools.event_handler.openapi.types import OpenAPIResponseContentModel, OpenAPIResponseContentSchema

from flightdeck.api.auth import current_peer
from flightdeck.api.payloads import SESSION_ID_PATTERN, ErrorResponse
from flightdeck.api.resolver import ApiError, proxy_error
from flightdeck.api.sse import EVENT_STREAM, SSE_HEADERS, StreamReply, comment, event_schema, frame, last_event_id
from flightdeck.domain import resume
from flightdeck.domain.records import SessionNotFoundError
from flightdeck.domain.resume import Marked
from flightdeck.domain.session_events import TEXT_DELTA, open_session, session_events
from flightdeck.domain.streaming import Note, Pace
from flightdeck.domain.timeline import DATA_SCHEMA as TIMELINE_DATA_SCHEMA
from flightdeck.domain.timeline import KINDS as TIMELINE_KINDS
from flightdeck.domain.timeline import TimelineEvent
from flightdeck.observability import count, logger
from flightdeck.settings import get_settings
from flightdeck.wiring import deps

router = Router()  # type: ignore[no-untyped-call]  # Powertools' Router.__init__ has no annotations

_ERROR_BODY: dict[str, OpenAPIResponseContentSchema | OpenAPIResponseContentModel] = {
    "application/json": {"model": ErrorResponse}
}
_SESSION_ID = re.compile(SESSION_ID_PATTERN)


def _frames(session_id: str, events: Iterator[Marked[TimelineEvent] | Note]) -> Iterator[bytes]:
    try:
        for item in events:
            if isinstance(item, Note):
                yield comment(item.text)
            else:
                event = item.event
                yield frame(event.as_dict(session_id), event=event.kind, event_id=item.id)
    except Exception:  # a read failed mid-stream: say so, then end it (the client may reconnect)
        logger.exception("session event stream failed", extra={"session_id": session_id})
        yield frame(
            {"kind": "error", "code": "stream_failed", "message": "the stream could not go on; reconnect"},
            event="error",
        )


def _with_data(schema: dict[str, Any]) -> dict[str, Any]:
    """The event's schema with its data line's fields (JSON Schema contentSchema of that JSON string)."""
    schema["properties"]["data"]["contentSchema"] = TIMELINE_DATA_SCHEMA
    return schema


def _not_found(session_id: str) -> ApiError:
    return ApiError(404, "session_not_found", f"no session {session_id!r}")


def open_stream(event: dict[str, Any], context: Any) -> StreamReply | dict[str, Any] | None:
    """The stream, or a 404; None (the route answers) when streaming is off or the request is malformed."""
    d = deps()
    session_id = (event.get("pathParameters") or {}).get("session_id") or ""
    follow = ((event.get("queryStringParameters") or {}).get("follow") or "true").lower()
    if get_settings().streaming != "on" or not _SESSION_ID.match(session_id) or follow not in ("true", "false"):
        return None  # the route's validation answers a malformed request (422), as GET /api/sessions/{id}
    try:
        session = open_session(d, session_id, current_peer())
    except SessionNotFoundError:
        error = _not_found(session_id)
        return proxy_error(error.status, error.code, error.message)
    remaining = getattr(context, "get_remaining_time_in_millis", None)
    pace = Pace.of(d.settings, int(remaining()) if callable(remaining) else None)
    count("SessionStreamsOpened")
    cursor = resume.decode(last_event_id(event.get("headers")))
    return StreamReply(_frames(session_id, session_events(d, session, pace, follow=follow == "true", cursor=cursor)))


@router.get(
    "/api/sessions/<session_id>/events",
    summary="A session's timeline as Server-Sent Events",
    responses={
        200: {
            "description": "text/event-stream: each event `id`, `event` (its kind) and one `data` line of JSON "
            "{id, kind, session_id, ...}; kinds: message, thinking, delegating, tool_call, "
            "callback_accepted, timeout, dispatch_failed, canceled, tool_result, answer, question (the "
            "agent asks for input: the next message answers it), idle (last). "
            "Replayed from the start, then live until the session is idle; comments keep it open. Live "
            "only: text_delta {iteration, attempt, offset, text}, the text of the think under way as the "
            "model produces it (offset 0 again: it starts over); an iteration's deltas joined are its "
            "text, the answer event's text for the think that answered. Each event has `at` (ISO 8601 "
            "UTC, ms); a think its duration and tokens, a delegation the delegate's session and the trace id, "
            "a result its latency from the dispatch (the data schema)",
            "content": {
                EVENT_STREAM: {
                    "schema": _with_data(
                        event_schema(
                            "a timeline event: data is {id, kind, session_id, ...} (flightdeck.domain.timeline)",
                            [*TIMELINE_KINDS, TEXT_DELTA],
                        )
                    )
                }
            },
        },
        401: {
            "description": "No peer bearer token, or a malformed one (WWW-Authenticate: Bearer)",
            "content": _ERROR_BODY,
        },
        403: {"description": "The token is unknown, wrong or revoked", "content": _ERROR_BODY},
        404: {"description": "No such session, or one of another peer", "content": _ERROR_BODY},
        422: {"description": "session_id or follow malformed", "content": _ERROR_BODY},
    },
)
def get_session_events(
    session_id: Annotated[str, Path(pattern=SESSION_ID_PATTERN)],
    follow: Annotated[
        Literal["true", "false"], Query(description="false: the timeline as it stands, then the end")
    ] = "true",
    last_event: Annotated[
        str | None,
        Header(
            alias="Last-Event-ID",
            description="The id of the last event the client has: only the events after it are sent (one this "
            "server did not hand out: from the start)",
        ),
    ] = None,
) -> Response[str]:
    # Reached when streaming is off (or with a malformed request, refused by validation before this
    # runs): one response holds the timeline so far, after Last-Event-ID, so a client polling it with the
    # last id it read gets each event once (flightdeck.domain.resume), as a streaming client does.
    d = deps()
    try:
        session = open_session(d, session_id, current_peer())
    except SessionNotFoundError:
        raise _not_found(session_id) from None
    events = session_events(d, session, Pace.of(d.settings), follow=False, cursor=resume.decode(last_event))
    body = b"".join(_frames(session_id, events))
    return Response(
        status_code=200,
        content_type=SSE_HEADERS["Content-Type"],
        body=body.decode("utf-8"),
        headers={k: v for k, v in SSE_HEADERS.items() if k != "Content-Type"},
    )
