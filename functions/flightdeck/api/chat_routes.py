"""POST /api/chat and GET /api/sessions/{session_id}."""

from __future__ import annotations

from typing import Annotated

from aws_lambda_powertools.event_handler import Response, content_types
from aws_lambda_powertools.event_handler.api_gateway import Router
from aws_lambda_powertools.event_handler.openapi.params import Path

from flightdeck.api.auth import current_peer
from flightdeck.api.models import SESSION_ID_PATTERN, ChatAccepted, ChatRequest, ErrorResponse, SessionView
from flightdeck.api.resolver import ApiError
from flightdeck.domain.allowlist import UnknownServiceError
from flightdeck.domain.asking import pending_question
from flightdeck.domain.chat import ReplyRequest, ingest_chat, read_session, user_turn
from flightdeck.domain.records import SessionBusyError, SessionNotFoundError
from flightdeck.observability import bind, trace_id_of, valid_traceparent
from flightdeck.wiring import deps

router = Router()

_ERROR_BODY = {"application/json": {"model": ErrorResponse}}
_AUTH_ERRORS = {
    401: {"description": "No peer bearer token, or a malformed one (WWW-Authenticate: Bearer)", "content": _ERROR_BODY},
    403: {"description": "The token is unknown, wrong or revoked", "content": _ERROR_BODY},
}
_ERRORS = {
    400: {"description": "Not JSON (malformed_json; not UTF-8 too), nested deeper than 32 levels (json_too_deep), "
                         "an object of over 1,000 members or an array of over 10,000 items (json_too_wide), a number "
                         "out of range or NaN/Infinity (bad_number); or a callbackService that is not allowed",
          "content": {"application/json": {"schema": ErrorResponse.model_json_schema()}}},
    **_AUTH_ERRORS,
    404: {"description": "session_id names a session of another peer (it does not exist for this caller), or, with "
                         "continue_session, no session at all",
          "content": _ERROR_BODY},
    409: {"description": "The session is busy with a turn"},
    413: {"description": "Body too large"},
    422: {"description": "Body does not match the schema, or holds text that is not valid Unicode (a lone surrogate)"},
}


@router.post("/api/chat", summary="Give this agent a task", status_code=202, responses={
    202: {"description": "Accepted: a turn was started", "content": {"application/json": {"model": ChatAccepted}}},
    **_ERRORS,
})
def post_chat(request: ChatRequest) -> Response[ChatAccepted]:
    reply = ReplyRequest(request.reply.callbackService, request.reply.bearerToken) if request.reply else None
    traceparent = valid_traceparent(router.current_event.headers.get("traceparent"))
    if traceparent:
        bind(trace_id=trace_id_of(traceparent))
    try:
        accepted = ingest_chat(deps(), request.content, request.session_id, reply, traceparent, caller=current_peer(),
                               continue_session=request.continue_session)
    except SessionNotFoundError:
        raise ApiError(404, "session_not_found", f"no session {request.session_id!r}"
                       + (" to continue" if request.continue_session else "")) from None
    except UnknownServiceError as exc:
        raise ApiError(400, "unknown_callback_service", str(exc)) from None
    except SessionBusyError:
        raise ApiError(409, "session_busy", "the session is working on a turn; send again when it is idle") from None
    body = ChatAccepted(session_id=accepted.session_id, turn=user_turn(deps(), accepted), iteration=accepted.turn,
                        status="replayed" if accepted.replayed else "accepted")
    return Response(status_code=202, content_type=content_types.APPLICATION_JSON, body=body.model_dump())


@router.get("/api/sessions/<session_id>", summary="A session's status and messages", responses={
    200: {"description": "The session", "content": {"application/json": {"model": SessionView}}},
    **_AUTH_ERRORS,
    404: {"description": "No such session, or one of another peer"},
})
def get_session(session_id: Annotated[str, Path(pattern=SESSION_ID_PATTERN)]) -> SessionView:
    try:
        session = read_session(deps(), session_id, caller=current_peer())
    except SessionNotFoundError:
        raise ApiError(404, "session_not_found", f"no session {session_id!r}") from None
    return SessionView(session_id=session.session_id, status=session.status, turn=session.user_messages,
                       iteration=session.turn, messages=session.messages, created_at=session.created_at,
                       updated_at=session.updated_at,
                       question=pending_question(session.messages) if session.status == "idle" else None)
