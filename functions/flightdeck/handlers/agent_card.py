"""Lambda: GET /.well-known/agent-card.json."""

from flightdeck.api import card_routes
from flightdeck.api.resolver import http_handler

handler = http_handler(card_routes.router)
