"""Lambda: GET /.well-known/agent-card.json, GET /health and GET /openapi.json."""

from flightdeck.api import card_routes, service_routes
from flightdeck.api.resolver import http_handler

handler = http_handler(card_routes.router, service_routes.router)
