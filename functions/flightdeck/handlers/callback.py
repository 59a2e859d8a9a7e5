"""Lambda: POST /api/tools/response and /api/tools/responses, and A2A peers' POST /api/a2a/push."""

from flightdeck.api import a2a_push_routes, callback_routes
from flightdeck.api.resolver import http_handler
from flightdeck.wiring import preload

handler = http_handler(callback_routes.router, a2a_push_routes.router)
preload(secrets=True)  # every call's token is checked against the callback keys
