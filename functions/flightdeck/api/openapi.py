"""The OpenAPI 3.1 document of the whole HTTP API, generated from the resolver.

    python -m flightdeck.api.openapi > openapi.json
"""

from __future__ import annotations

import json
import sys
from typing import Any

from flightdeck import __version__


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
    return json.loads(schema)


def render() -> str:
    return json.dumps(document(), indent=2, sort_keys=True) + "\n"


if __name__ == "__main__":
    sys.stdout.write(render())
