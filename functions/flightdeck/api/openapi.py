"""The OpenAPI 3.1 document of the whole HTTP API, generated from the resolver.

    python -m flightdeck.api.openapi > openapi.json
"""

from __future__ import annotations

import json
import sys
from typing import Any

from flightdeck import __version__, topology

PEER_TOKEN_SCHEME = "peerToken"


def document() -> dict[str, Any]:
    from flightdeck.api import a2a_routes, callback_routes, card_routes, chat_routes
    from flightdeck.api.resolver import build_resolver

    app = build_resolver(chat_routes.router, callback_routes.router, card_routes.router, a2a_routes.router,
                         a2a_routes.push_router)
    schema = app.get_openapi_json_schema(
        title="Flightdeck agent API",
        version=__version__,
        summary="Asynchronous, secure agent-to-agent delegation",
        description="Every agent serves these routes. Errors share one shape: {\"error\": {\"code\", \"message\"}}.",
    )
    doc = json.loads(schema)
    # Routes that need a peer bearer token (flightdeck.api.auth) say so.
    doc.setdefault("components", {}).setdefault("securitySchemes", {})[PEER_TOKEN_SCHEME] = {
        "type": "http",
        "scheme": "bearer",
        "description": "A peer token `fdp_<peer_id>_<secret>` issued by this agent's operator "
                       "(`flightdeck peers add`). Missing or malformed: 401; unknown, wrong or revoked: 403.",
    }
    for route in topology.ROUTES:
        operation = doc["paths"].get(route.path, {}).get(route.method.lower())
        if operation is not None and route.auth == topology.PEER_AUTH:
            operation["security"] = [{PEER_TOKEN_SCHEME: []}]
    return doc


def render() -> str:
    return json.dumps(document(), indent=2, sort_keys=True) + "\n"


if __name__ == "__main__":
    sys.stdout.write(render())
