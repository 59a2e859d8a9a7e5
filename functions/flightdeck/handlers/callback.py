"""Lambda: POST /api/tools/response and /api/tools/responses."""

from flightdeck.api import callback_routes
from flightdeck.api.resolver import http_handler

handler = http_handler(callback_routes.router)
