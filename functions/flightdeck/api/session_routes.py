"""GET /api/sessions: the caller's own sessions, newest first, a page at a time; and
POST /api/sessions/{session_id}/cancel: its owner stops waiting for a session's work."""

from __future__ import annotations

from typing import Annotated

from aws_lambda_powertools.event_handler.api_gateway import Router
from aws_lambda_powertools.event_handler.openapi.params import Path, Query
from aws_lambda_powertools.event_handler.openapi.types import OpenAPIResponseContentModel, OpenAPIResponseContentSchema

from flightdeck.api.auth import current_peer
from flightdeck.api.payloads import SESSION_ID_PATTERN, ErrorResponse
from flightdeck.api.resolver import ApiError
from flightdeck.api.session_payloads import SessionCanceled, SessionList, SessionSummary
from flightdeck.domain.records import SessionNotFoundError
from flightdeck.domain.session_cancel import cancel_session
from flightdeck.domain.session_list import DEFAULT_PAGE_SIZE, MAX_PAGE_SIZE, InvalidCursorError, list_sessions
from flightdeck.wiring import deps, session_index

router = Router()  # type: ignore[no-untyped-call]  # Powertools' Router.__init__ has no annotations

_ERROR_BODY: dict[str, OpenAPIResponseContentSchema | OpenAPIResponseContentModel] = {
    "application/json": {"model": ErrorResponse}
}


@router.get(
    "/api/sessions",
    summary="The caller's own sessions, newest first",
    responses={
        200: {
            "description": "A page of sessions (two DynamoDB requests: the sessions index, then the sessions)",
            "content": {"application/json": {"model": SessionList}},
        },
        400: {
            "description": "A cursor this listing did not hand out to this caller (`invalid_cursor`)",
            "content": _ERROR_BODY,
        },
        401: {
            "description": "No peer bearer token, or a malformed one (WWW-Authenticate: Bearer)",
            "content": _ERROR_BODY,
        },
        403: {"description": "The token is unknown, wrong or revoked", "content": _ERROR_BODY},
        422: {"description": "limit is not a whole number between 1 and 100", "content": _ERROR_BODY},
    },
)
def get_sessions(
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE_SIZE, description="sessions per page")] = DEFAULT_PAGE_SIZE,
    cursor: Annotated[str | None, Query(max_length=2048, description="next_cursor of the previous page")] = None,
) -> SessionList:
    settings = deps().settings
    agent = settings.agent_name
    try:
        page = list_sessions(session_index(), settings.inbound_auth, current_peer(), limit, cursor)
    except InvalidCursorError as exc:
        raise ApiError(400, "invalid_cursor", str(exc)) from None
    return SessionList(
        sessions=[
            SessionSummary(
                session_id=s.session_id,
                status=s.status,
                created_at=s.created_at,
                updated_at=s.updated_at,
                agent=agent,
                first_message=s.first_message,
                turns=s.turns,
                delegations=s.delegations,
            )
            for s in page.sessions
        ],
        next_cursor=page.cursor,
        delegates=[d.agent for d in settings.agent.delegates],
    )


@router.post(
    "/api/sessions/<session_id>/cancel",
    summary="Stop a session's work (its caller stopped waiting)",
    responses={
        200: {
            "description": "Canceled: a think under way stores nothing, delegations it waits on are canceled in "
            "turn, nothing is delivered; the session is closed (a closing line) and idle again",
            "content": {"application/json": {"model": SessionCanceled}},
        },
        401: {
            "description": "No peer bearer token, or a malformed one (WWW-Authenticate: Bearer)",
            "content": _ERROR_BODY,
        },
        403: {"description": "The token is unknown, wrong or revoked", "content": _ERROR_BODY},
        404: {"description": "No such session, or one of another peer", "content": _ERROR_BODY},
        409: {"description": "The session is idle: nothing to cancel (`session_idle`)", "content": _ERROR_BODY},
    },
)
def post_session_cancel(session_id: Annotated[str, Path(pattern=SESSION_ID_PATTERN)]) -> SessionCanceled:
    try:
        outcome = cancel_session(deps(), session_id, current_peer())
    except SessionNotFoundError:
        raise ApiError(404, "session_not_found", f"no session {session_id!r}") from None
    if not outcome.canceled:
        raise ApiError(409, "session_idle", "the session is not working on anything; nothing to cancel")
    return SessionCanceled(session_id=session_id, status="canceled", iteration=outcome.turn)
