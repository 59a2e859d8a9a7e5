"""/mcp in the resolver: what the OpenAPI document says of the MCP endpoint.

The a2a function's entry hands every /mcp request to flightdeck.api.mcp.server ahead of the resolver
(its `stream` hook: an answer may be Server-Sent Events); these routes answer the same way if reached.
"""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools.event_handler import Response
from aws_lambda_powertools.event_handler.api_gateway import Router

from flightdeck.api.mcp import server
from flightdeck.api.payloads import ErrorResponse
from flightdeck.api.sse import event_schema

router = Router()  # type: ignore[no-untyped-call]  # Powertools' Router.__init__ has no annotations

_RPC = {"type": "object", "required": ["jsonrpc"], "description": "a JSON-RPC 2.0 response (result or error)"}


def _answer() -> Response[Any]:
    reply = server.handle(router.current_event.raw_event, getattr(router, "lambda_context", None))
    if not isinstance(reply, dict):  # a stream is only opened ahead of the resolver
        return Response(status_code=500, content_type="application/json", body='{"error": "stream not served"}')
    return Response(
        status_code=reply["statusCode"], content_type="application/json", body=reply["body"], headers=reply["headers"]
    )


@router.post(
    "/mcp",
    summary="MCP endpoint (Streamable HTTP; protocol versions 2026-07-28 and 2025-11-25)",
    description=(
        "The Model Context Protocol over Streamable HTTP (docs/MCP.md): one JSON-RPC message per POST. "
        "2026-07-28 (stateless: MCP-Protocol-Version, Mcp-Method and Mcp-Name headers; server/discover, "
        "tools/list, tools/call) and 2025-11-25 (initialize, ping, tools/list, tools/call) on one URL. The tools "
        "are the agent's skills exposed to mcp, plus ask, get_result and cancel. Requires an MCP key (a peer "
        "token issued for the mcp channel: `flightdeck peers add --channel mcp`). A notification is 202; a "
        "tools/call with a progressToken whose client accepts text/event-stream is answered as SSE "
        "(notifications/progress, then the response). 400: not JSON (-32700), not one message (-32600), "
        "an unsupported version (-32022) or headers that do not match the body (-32020); 404: a method "
        "2026-07-28 does not define (-32601). A request that fails otherwise is -32603 (HTTP 200); a "
        "notification that could not be taken, HTTP 500 with that error and no id."
    ),
    responses={
        200: {
            "description": "A JSON-RPC response, or SSE (progress notifications, then the response)",
            "content": {
                "application/json": {"schema": _RPC},
                "text/event-stream": {"schema": event_schema("a JSON-RPC notification or the response")},
            },
        },
        202: {"description": "A notification, accepted"},
        400: {
            "description": "A JSON-RPC error: -32700, -32600, -32022, -32020",
            "content": {"application/json": {"schema": _RPC}},
        },
        401: {
            "description": "No bearer token, or a malformed one (WWW-Authenticate: Bearer)",
            "content": {"application/json": {"model": ErrorResponse}},
        },
        403: {
            "description": "The key is unknown, wrong, revoked or not issued for mcp; or another site's Origin",
            "content": {"application/json": {"model": ErrorResponse}},
        },
        404: {
            "description": "A method 2026-07-28 does not define (-32601)",
            "content": {"application/json": {"schema": _RPC}},
        },
        413: {"description": "Body too large (-32600)", "content": {"application/json": {"schema": _RPC}}},
        415: {"description": "Not a JSON body (-32600)", "content": {"application/json": {"schema": _RPC}}},
        500: {
            "description": "A notification that could not be taken (-32603, no id)",
            "content": {"application/json": {"schema": _RPC}},
        },
    },
)
def post_mcp() -> Response[Any]:
    return _answer()


_NOT_ALLOWED = {
    405: {
        "description": "Only POST: no standalone stream (GET) and no protocol session to end (DELETE); Allow: POST",
        "content": {"application/json": {"schema": _RPC}},
    }
}


@router.get("/mcp", summary="MCP endpoint: 405 (POST only)", responses=_NOT_ALLOWED)  # type: ignore[arg-type]
def get_mcp() -> Response[Any]:
    return _answer()


@router.delete("/mcp", summary="MCP endpoint: 405 (POST only)", responses=_NOT_ALLOWED)  # type: ignore[arg-type]
def delete_mcp() -> Response[Any]:
    return _answer()
