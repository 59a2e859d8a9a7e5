"""Lambda: POST /a2a, the A2A v0.3 JSON-RPC endpoint (the agent card's url)."""

from flightdeck.api import a2a_routes
from flightdeck.api.resolver import http_handler

_serve = http_handler(a2a_routes.router)


def handler(event: dict, context) -> dict:
    # Over MAX_BODY_BYTES: a JSON-RPC -32600 (HTTP 200), not the REST API's 413.
    return a2a_routes.too_large(event) or _serve(event, context)


handler.app = _serve.app  # type: ignore[attr-defined]
