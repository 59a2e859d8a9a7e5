"""The OpenAPI 3.1 document of the whole HTTP API, generated from the resolver.

    python -m flightdeck.api.openapi > openapi.json

The repository's openapi.json is a link to flightdeck/api/openapi.json, the copy in the package
that GET /openapi.json serves (a test fails when either drifts from the code).
"""

from __future__ import annotations

import json
import sys
from typing import Any

from flightdeck import __version__, topology
from flightdeck.api.auth import PEER_TOKEN_SCHEME
from flightdeck.domain.numerals import parse_nonneg_int


def document() -> dict[str, Any]:
    from flightdeck.api import (
        a2a_push_routes,
        a2a_routes,
        callback_routes,
        card_routes,
        chat_routes,
        console_routes,
        mcp_routes,
        service_routes,
        session_events_routes,
        session_routes,
    )
    from flightdeck.api.resolver import build_resolver

    app = build_resolver(
        chat_routes.router,
        session_routes.router,
        console_routes.router,
        session_events_routes.router,
        callback_routes.router,
        card_routes.router,
        service_routes.router,
        a2a_routes.router,
        a2a_push_routes.router,
        mcp_routes.router,
    )
    schema = app.get_openapi_json_schema(
        title="Flightdeck agent API",
        version=__version__,
        summary="Asynchronous, secure agent-to-agent delegation",
        description=(
            'Every agent serves these routes. Errors share one shape: {"error": {"code", "message"}}. '
            "413 `payload_too_large`: a body over MAX_BODY_BYTES (the function), or over API Gateway's "
            "10 MB (the gateway). On AWS a body whose Lambda event exceeds 6 MB (a body of 2 to 10 MB) "
            'is refused with 413 by API Gateway itself, in its own shape ({"message": ...}).'
        ),
    )
    doc: dict[str, Any] = json.loads(schema)
    # Routes that need a peer bearer token (flightdeck.api.auth) say so.
    doc.setdefault("components", {}).setdefault("securitySchemes", {})[PEER_TOKEN_SCHEME] = {
        "type": "http",
        "scheme": "bearer",
        "description": "A peer token `fdp_<peer_id>_<secret>` issued by this agent's operator "
        "(`flightdeck peers add`). Missing or malformed: 401; unknown, wrong or revoked: 403.",
    }
    for route in topology.ROUTES:
        operation = doc["paths"].get(route.path, {}).get(route.method.lower())
        if operation is None:
            continue
        responses = operation.setdefault("responses", {})
        if route.auth == topology.PEER_AUTH:
            operation["security"] = [{PEER_TOKEN_SCHEME: []}]
            responses.setdefault(
                "429",
                {
                    "description": "Over the stage's throttle (`throttled`), or over the calling "
                    "peer's usage plan: its rate (`throttled`) or daily quota "
                    "(`quota_exceeded`)"
                },
            )
        else:
            responses.setdefault("429", {"description": "Over the stage's throttle (`throttled`)"})
        if route.auth != topology.PUBLIC:
            responses.setdefault(
                "503",
                {
                    "description": "A dependency is unavailable (`service_unavailable`); "
                    "retry after `Retry-After` seconds"
                },
            )
    _one_error_shape(doc)
    return doc


_ERROR_CONTENT = {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorResponse"}}}
# Success answers the resolver would otherwise document with the route's main model.
_SUCCESS_CONTENT = {
    ("/api/tools/response", "post", "200"): "ToolResponseStatus",
    ("/api/a2a/push", "post", "200"): "ToolResponseStatus",
}


# Paths whose function answers protocol errors in the protocol's own shape (MCP: JSON-RPC errors with HTTP 4xx,
# flightdeck.api.mcp): the content their routes declare is what is sent.
_JSON_RPC_ERRORS = {"/mcp"}


def _one_error_shape(doc: dict[str, Any]) -> None:
    """Every 4xx/5xx the resolver answers has the one error shape (flightdeck.api.resolver).

    Powertools documents an error response without its own content with the route's
    success model, and 422 with its own HTTPValidationError; neither is what is sent.
    """
    for path, operations in doc["paths"].items():
        for method, operation in operations.items():
            if method == "post":  # the checks every body goes through (flightdeck.api.resolver)
                responses = operation.setdefault("responses", {})
                responses.setdefault("400", {"description": "The body is not valid (UTF-8) JSON"})
                responses.setdefault("413", {"description": "The body exceeds MAX_BODY_BYTES"})
                responses.setdefault("415", {"description": "The body is declared as something other than JSON"})
            for status, response in operation.get("responses", {}).items():
                if (path, method, status) in _SUCCESS_CONTENT:
                    response["content"] = {
                        "application/json": {
                            "schema": {"$ref": f"#/components/schemas/{_SUCCESS_CONTENT[(path, method, status)]}"}
                        }
                    }
                elif (parse_nonneg_int(status) or 0) >= 400:
                    if path in _JSON_RPC_ERRORS and "HTTPValidationError" not in json.dumps(
                        response.get("content", "")
                    ):
                        response.setdefault("content", _ERROR_CONTENT)  # its own JSON-RPC errors stay as declared
                    else:
                        response["content"] = _ERROR_CONTENT
    referenced = json.dumps(doc["paths"])
    for unused in ("HTTPValidationError", "ValidationError"):
        if f'/{unused}"' not in referenced:
            doc["components"]["schemas"].pop(unused, None)


def render() -> str:
    return json.dumps(document(), indent=2, sort_keys=True) + "\n"


if __name__ == "__main__":
    sys.stdout.write(render())
