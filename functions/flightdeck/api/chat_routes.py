"""POST /api/chat and GET /api/sessions/{session_id}."""

from __future__ import annotations

from typing import Annotated

from aws_lambda_powertools.event_handler import Response, content_types
from aws_lambda_powertools.event_handler.api_gateway import Router
from aws_lambda_powertools.event_handler.openapi.params import Header, Path
from aws_lambda_powertools.event_handler.openapi.types import (
    OpenAPIResponse,
    OpenAPIResponseContentModel,
    OpenAPIResponseContentSchema,
)

from flightdeck import topology, tracing
from flightdeck.api import auth
from flightdeck.api.auth import current_peer
from flightdeck.api.chat_payloads import MESSAGE_ID_PATTERN, ChatAccepted, ChatRequest
from flightdeck.api.payloads import SESSION_ID_PATTERN, ErrorResponse
from flightdeck.api.resolver import ApiError
from flightdeck.api.session_payloads import SessionView
from flightdeck.domain import token_use
from flightdeck.domain.allowlist import UnknownServiceError
from flightdeck.domain.asking import pending_question
from flightdeck.domain.chat import (
    MAX_QUEUED_MESSAGES,
    ReplyRequest,
    chat_contract,
    ingest_chat,
    read_session,
    user_turn,
)
from flightdeck.domain.peers import PeerRefusedError
from flightdeck.domain.records import AgentBusyError, InboxFullError, SessionBusyError, SessionNotFoundError
from flightdeck.domain.session_outcome import outcome
from flightdeck.domain.skills.contract import CallError, Contract, checked_result
from flightdeck.domain.skills.schemas import SchemaError
from flightdeck.observability import bind, trace_id_of, valid_traceparent
from flightdeck.wiring import deps

router = Router()  # type: ignore[no-untyped-call]  # Powertools' Router.__init__ has no annotations

AGENT_BUSY_RETRY_AFTER_S = AgentBusyError.retry_after_s

_ERROR_BODY: dict[str, OpenAPIResponseContentSchema | OpenAPIResponseContentModel] = {
    "application/json": {"model": ErrorResponse}
}
_AUTH_ERRORS: dict[int, OpenAPIResponse] = {
    401: {"description": "No peer bearer token, or a malformed one (WWW-Authenticate: Bearer)", "content": _ERROR_BODY},
    403: {"description": "The token is unknown, wrong or revoked", "content": _ERROR_BODY},
}
_ERRORS: dict[int, OpenAPIResponse] = {
    400: {
        "description": "Not JSON (malformed_json; not UTF-8 too), nested deeper than 32 levels (json_too_deep), "
        "an object of over 1,000 members or an array of over 10,000 items (json_too_wide), a number "
        "out of range or NaN/Infinity (bad_number); a callbackService that is not allowed; or "
        "message_id and Idempotency-Key both given and different (conflicting_message_ids)",
        "content": {"application/json": {"schema": ErrorResponse.model_json_schema()}},
    },
    **_AUTH_ERRORS,
    404: {
        "description": "session_id names a session of another peer (it does not exist for this caller), or, with "
        "continue_session, no session at all",
        "content": _ERROR_BODY,
    },
    409: {
        "description": "The session could not take the message now (session_busy: its state kept changing under "
        "the write); send again"
    },
    413: {"description": "Body too large"},
    422: {
        "description": "Body does not match the schema, holds text that is not valid Unicode (a lone surrogate), "
        "or a message_id / Idempotency-Key that is not 1-128 visible ASCII characters"
    },
    429: {
        "description": f"The session is busy and {MAX_QUEUED_MESSAGES} messages already wait in its inbox "
        "(inbox_full); send again once it has taken some. Or the message would start a turn and the agent is at "
        "its max_concurrent_tasks (agent_busy, with Retry-After); a message to a busy session still queues",
        "content": _ERROR_BODY,
    },
}


def _contract(request: ChatRequest) -> tuple[str, Contract | None]:
    """The request's contract, its skill bound on the caller's channel: a peer agent calls the skills exposed
    to a2a, the agent's own user every skill. Whether the caller is a user is asked only when a peer could not
    make the call (its token is then read: no read on the happy path), so a refusal lists only what it may call."""
    fields = (request.content, request.skill, request.arguments, request.response_schema, request.timeout_seconds)
    try:
        return chat_contract(deps(), *fields, channel="a2a")
    except CallError:
        if not auth.caller_is(topology.USER):
            raise
    return chat_contract(deps(), *fields, channel="internal")


@router.post(
    "/api/chat",
    summary="Give this agent a task",
    status_code=202,
    responses={
        202: {
            "description": "Accepted: a turn was started; or queued: the session is busy, and the message waits in "
            "its inbox (position says where) to be its own turn once the turns before it end",
            "content": {"application/json": {"model": ChatAccepted}},
        },
        **_ERRORS,
    },
)
def post_chat(
    request: ChatRequest,
    idempotency_key: Annotated[
        str | None,
        Header(
            alias="Idempotency-Key",
            pattern=MESSAGE_ID_PATTERN,
            description="The client's id for this message, as the body's message_id can give it: a repeat changes "
            "nothing and gets the first answer again",
        ),
    ] = None,
) -> Response[ChatAccepted]:
    reply = ReplyRequest(request.reply.callbackService, request.reply.bearerToken) if request.reply else None
    # The request's span (tracing.entry) is the session's parent when traced.
    traceparent = tracing.traceparent(valid_traceparent(router.current_event.headers.get("traceparent")))
    if traceparent:
        bind(trace_id=trace_id_of(traceparent))
    if request.message_id and idempotency_key and request.message_id != idempotency_key:
        raise ApiError(
            400,
            "conflicting_message_ids",
            "message_id and the Idempotency-Key header name different messages: give one, or the same id in both",
        )
    try:
        content, contract = _contract(request)
    except SchemaError as exc:
        raise ApiError(400, "invalid_response_schema", f"responseSchema: {exc}") from None
    except CallError as exc:
        raise ApiError(400, "invalid_arguments", str(exc)) from None
    try:
        accepted = ingest_chat(
            deps(),
            content,
            request.session_id,
            reply,
            traceparent,
            caller=current_peer(),
            message_id=request.message_id or idempotency_key,
            continue_session=request.continue_session,
            proof=auth.pending_proof(),
            contract=contract,
        )
    except PeerRefusedError as exc:
        auth.refused(exc.result)
        raise ApiError(403, "forbidden", auth.REFUSED_MESSAGE) from None
    except SessionNotFoundError:
        raise ApiError(
            404,
            "session_not_found",
            f"no session {request.session_id!r}" + (" to continue" if request.continue_session else ""),
        ) from None
    except UnknownServiceError as exc:
        raise ApiError(400, "unknown_callback_service", str(exc)) from None
    except InboxFullError as exc:
        raise ApiError(
            429,
            "inbox_full",
            f"the session is busy and {exc.waiting} messages already wait in its inbox; "
            "send again once it has taken some",
            headers={"Retry-After": "5"},
        ) from None
    except SessionBusyError:
        raise ApiError(409, "session_busy", "the session could not take the message now; send again") from None
    except AgentBusyError as exc:
        raise ApiError(
            429,
            "agent_busy",
            f"the agent is at its max_concurrent_tasks ({exc.limit} tasks under way); send again later "
            "(a message to a session already busy still queues)",
            headers={"Retry-After": str(AGENT_BUSY_RETRY_AFTER_S)},
        ) from None
    if accepted.caller_verified:
        auth.proof_checked()
    if accepted.queued:
        status = "queued"
    else:
        status = "replayed" if accepted.replayed else "accepted"
    body = ChatAccepted(
        session_id=accepted.session_id,
        turn=user_turn(deps(), accepted),
        iteration=accepted.turn or None,
        status=status,
        position=accepted.position if accepted.queued else None,
    )
    # Response[ChatAccepted] names the documented schema; the body goes out as the model's dump.
    return Response(status_code=202, content_type=content_types.APPLICATION_JSON, body=body.model_dump())  # type: ignore[arg-type]


@router.get(
    "/api/sessions/<session_id>",
    summary="A session's status and messages",
    responses={
        200: {"description": "The session", "content": {"application/json": {"model": SessionView}}},
        **_AUTH_ERRORS,
        404: {"description": "No such session, or one of another peer"},
    },
)
def get_session(session_id: Annotated[str, Path(pattern=SESSION_ID_PATTERN)]) -> SessionView:
    try:
        session = read_session(deps(), session_id, caller=current_peer())
    except SessionNotFoundError:
        raise ApiError(404, "session_not_found", f"no session {session_id!r}") from None
    return SessionView(
        session_id=session.session_id,
        status=session.status,
        turn=session.user_messages,
        queued=len(session.queued),
        iteration=session.turn,
        messages=session.messages,
        created_at=session.created_at,
        updated_at=session.updated_at,
        question=pending_question(session.messages) if session.status == "idle" else None,
        tokens=token_use.total(session).as_dict(),
        tokens_by_turn=[{"turn": turn, **used.as_dict()} for turn, used in token_use.by_turn(session)],
        outcome=outcome(session),
        result=checked_result(session.messages) if session.status == "idle" else None,
    )
