"""Lambda: POST /api/chat and GET /api/sessions/{session_id}."""

from flightdeck.api import chat_routes
from flightdeck.api.resolver import http_handler

handler = http_handler(chat_routes.router)
