"""What the web console (console/, docs/CONSOLE.md) reads that the other routes do not give, for any client:

- GET /api/sessions/{session_id}/delegations/{tool_use_id}/events?agent=NAME: a delegate's own timeline
  of one of the caller's delegations, read by this agent with its own peer token
  (flightdeck.domain.delegate_lane says why isolation holds);
- GET /api/inspector/card?url=URL and POST /api/inspector/rpc: an A2A agent's card and its JSON-RPC
  endpoint, relayed for a browser (which cannot read another origin), to URLs under ALLOWED_HOST_MAPPING only
  (flightdeck.domain.inspector).
"""

from __future__ import annotations

import json
from typing import Annotated, Any, Literal
from urllib.parse import quote

from aws_lambda_powertools.event_handler import Response
from aws_lambda_powertools.event_handler.api_gateway import Router
from aws_lambda_powertools.event_handler.openapi.params import Body, Path, Query
from aws_lambda_powertools.event_handler.openapi.types import (
    OpenAPIResponse,
    OpenAPIResponseContentModel,
    OpenAPIResponseContentSchema,
)
from pydantic import BaseModel, ConfigDict, Field

from flightdeck.api.auth import current_peer
from flightdeck.api.payloads import SESSION_ID_PATTERN, ErrorResponse
from flightdeck.api.resolver import ApiError
from flightdeck.api.sse import EVENT_STREAM, SSE_HEADERS
from flightdeck.domain.allowlist import UnknownServiceError
from flightdeck.domain.chat import read_session
from flightdeck.domain.delegate_lane import LaneNotReadableError, delegate_lane
from flightdeck.domain.inspector import CARD_PATH, V1, card_url_of, check_card, is_card_url
from flightdeck.domain.peers import require_caller
from flightdeck.domain.records import SessionNotFoundError
from flightdeck.wiring import deps

router = Router()  # type: ignore[no-untyped-call]  # Powertools' Router.__init__ has no annotations

_ERROR_BODY: dict[str, OpenAPIResponseContentSchema | OpenAPIResponseContentModel] = {
    "application/json": {"model": ErrorResponse}
}
_AUTH: dict[int, OpenAPIResponse] = {
    401: {"description": "No peer bearer token, or a malformed one (WWW-Authenticate: Bearer)", "content": _ERROR_BODY},
    403: {
        "description": "The token is unknown, wrong or revoked, or not a user's (the console's routes are its "
        "user's alone: docs/PEERS.md)",
        "content": _ERROR_BODY,
    },
    404: {"description": "The console is off on this agent: its routes do not exist", "content": _ERROR_BODY},
}
TOOL_USE_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$"
AGENT_PATTERN = r"^[a-z0-9][a-z0-9_-]{0,63}$"


class InspectorCard(BaseModel):
    url: str = Field(description="The card's URL, normalised (what was fetched)")
    card: dict[str, Any] = Field(description="The agent card as its agent serves it")
    version: Literal["1.0", "0.3", ""] = Field(
        description='The A2A version to talk: 1.0 when a JSONRPC 1.0 interface is listed, else 0.3; "": neither'
    )
    rpc_url: str = Field(description="Its JSON-RPC endpoint for that version")
    rpc_allowed: bool = Field(
        description="Whether that endpoint is under ALLOWED_HOST_MAPPING too (POST /api/inspector/rpc)"
    )
    problems: list[str] = Field(description="What the card lacks or gets wrong (empty: valid)")


class InspectorRpc(BaseModel):
    model_config = ConfigDict(extra="forbid")

    url: str = Field(
        max_length=2048, description="The agent's JSON-RPC endpoint (the card's), under ALLOWED_HOST_MAPPING"
    )
    version: Literal["1.0", "0.3"] = Field(description="1.0 adds the A2A-Version: 1.0 header")
    request: dict[str, Any] = Field(description="The JSON-RPC 2.0 request, sent as it is")
    token: str | None = Field(
        None, max_length=4096, description="A bearer token for that agent (the user's own there); none: sent without"
    )


class InspectorRpcReply(BaseModel):
    status: int = Field(description="The agent's HTTP status")
    body: Any = Field(description="Its answer: the JSON-RPC response (text when it is not JSON)")


def _allowed(url: str) -> str:
    checked = deps().settings.allowed_host_mapping.check_url(url)
    if checked is None:
        raise ApiError(400, "url_not_allowed", f"{url!r} is under none of this agent's ALLOWED_HOST_MAPPING base URLs")
    return checked


@router.get(
    "/api/sessions/<session_id>/delegations/<tool_use_id>/events",
    summary="A delegate's own timeline of one of the caller's delegations",
    responses={
        200: {
            "description": "text/event-stream: the delegate's session as it stands (its events route with "
            "follow=false, read with this agent's token: the session is this agent's, started for the caller's "
            "session). Reads: this route's token check and one query of the caller's session, then the "
            "delegate's token check and its query (and its turn's results while it waits)",
            "content": {EVENT_STREAM: {"schema": {"type": "string"}}},
        },
        **_AUTH,
        404: {
            "description": "No such session of the caller (`session_not_found`), or no delegate session to read: "
            "an agent this one does not delegate to, an A2A peer, or no such call (`lane_not_readable`); the console "
            "is off on this agent (`not_found`)",
            "content": _ERROR_BODY,
        },
        422: {"description": "session_id, tool_use_id or agent malformed", "content": _ERROR_BODY},
        502: {"description": "The delegate did not answer (`delegate_unreachable`)", "content": _ERROR_BODY},
    },
)
def get_delegate_lane(
    session_id: Annotated[str, Path(pattern=SESSION_ID_PATTERN)],
    tool_use_id: Annotated[str, Path(pattern=TOOL_USE_ID_PATTERN)],
    agent: Annotated[str, Query(pattern=AGENT_PATTERN, description="the delegate (the delegating event's agent)")],
) -> Response[str]:
    d = deps()
    try:
        read_session(d, session_id, current_peer())
        lane = delegate_lane(d.settings.agent, session_id, tool_use_id, agent)
        base = d.settings.allowed_host_mapping.resolve(lane.service)
    except SessionNotFoundError:
        raise ApiError(404, "session_not_found", f"no session {session_id!r}") from None
    except (LaneNotReadableError, UnknownServiceError):
        raise ApiError(404, "lane_not_readable", f"{agent!r} is not one of our agents this one delegates to") from None
    from flightdeck.adapters import peer_reads  # the console's reads only: requests loads on first use

    token = d.token_for(lane.service)
    answer = peer_reads.get(
        f"{base}/api/sessions/{quote(lane.peer_session_id, safe='')}/events?follow=false",
        {"Accept": EVENT_STREAM, **({"Authorization": f"Bearer {token}"} if token else {})},
    )
    if answer.status == 404:
        raise ApiError(404, "lane_not_readable", f"{agent} holds no session for call {tool_use_id!r}")
    if answer.status != 200 or not isinstance(answer.body, str):
        raise ApiError(502, "delegate_unreachable", f"{agent}: {answer.error or f'HTTP {answer.status}'}")
    return Response(
        status_code=200,
        content_type=SSE_HEADERS["Content-Type"],
        body=answer.body,
        headers={k: v for k, v in SSE_HEADERS.items() if k != "Content-Type"},
    )


@router.get(
    "/api/inspector/card",
    summary="An A2A agent's card, validated, for the console's inspector",
    responses={
        200: {
            "description": "The card, its problems, the version to talk",
            "content": {"application/json": {"model": InspectorCard}},
        },
        400: {
            "description": "The URL is under none of ALLOWED_HOST_MAPPING's base URLs (`url_not_allowed`), or is "
            "not an agent card's: a base URL (which gets /.well-known/agent-card.json appended), or one ending in "
            "/.well-known/agent-card.json (or agent.json), no query (`not_a_card_url`)",
            "content": _ERROR_BODY,
        },
        **_AUTH,
        422: {"description": "url missing or too long", "content": _ERROR_BODY},
        502: {
            "description": "No card there: no answer, not 200, or not JSON (`card_unreadable`)",
            "content": _ERROR_BODY,
        },
    },
)
def get_inspector_card(
    url: Annotated[str, Query(min_length=1, max_length=2048, description="the card's URL, or the agent's base URL")],
) -> InspectorCard:
    d = deps()
    require_caller(d.settings.inbound_auth, current_peer())
    checked = _allowed(card_url_of(url))
    if not is_card_url(checked):
        raise ApiError(400, "not_a_card_url", f"{checked!r} is not an agent card's URL (it ends in {CARD_PATH})")
    from flightdeck.adapters import peer_reads  # the console's reads only: requests loads on first use

    answer = peer_reads.get(checked, {"Accept": "application/json"})
    try:
        card = json.loads(answer.body) if answer.status == 200 and isinstance(answer.body, str) else None
    except ValueError:
        card = None
    if not isinstance(card, dict):
        detail = answer.error or f"HTTP {answer.status}" if answer.status != 200 else "not a JSON object"
        raise ApiError(502, "card_unreadable", f"no agent card at {checked}: {detail}")
    found = check_card(card)
    rpc_allowed = bool(found.rpc_url) and d.settings.allowed_host_mapping.allows_url(found.rpc_url)
    return InspectorCard(
        url=checked,
        card=card,
        version=found.version,
        rpc_url=found.rpc_url,
        rpc_allowed=rpc_allowed,
        problems=found.problems,
    )


@router.post(
    "/api/inspector/rpc",
    summary="Relay one JSON-RPC request to an A2A agent, for the console's inspector",
    responses={
        200: {
            "description": "The agent's HTTP status and answer, as they came",
            "content": {"application/json": {"model": InspectorRpcReply}},
        },
        400: {
            "description": "The URL is under none of ALLOWED_HOST_MAPPING's base URLs (`url_not_allowed`)",
            "content": _ERROR_BODY,
        },
        **_AUTH,
        422: {"description": "The body is not {url, version, request[, token]}", "content": _ERROR_BODY},
        502: {"description": "The agent did not answer (`agent_unreachable`)", "content": _ERROR_BODY},
    },
)
def post_inspector_rpc(body: Annotated[InspectorRpc, Body()]) -> InspectorRpcReply:
    d = deps()
    require_caller(d.settings.inbound_auth, current_peer())
    checked = _allowed(body.url)
    from flightdeck.adapters import peer_reads  # the console's reads only: requests loads on first use

    headers = {"Accept": "application/json", **({"A2A-Version": V1} if body.version == V1 else {})}
    if body.token:
        headers["Authorization"] = f"Bearer {body.token}"
    answer = peer_reads.post_json(checked, body.request, headers)
    if answer.status == 0:
        raise ApiError(502, "agent_unreachable", f"{checked}: {answer.error}")
    return InspectorRpcReply(status=answer.status, body=answer.body)
