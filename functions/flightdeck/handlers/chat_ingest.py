"""Lambda: POST /api/chat, GET /api/sessions/{session_id}, GET /api/sessions and POST /api/sessions/{session_id}/cancel."""

from flightdeck.api import chat_routes, session_routes
from flightdeck.api.resolver import http_handler

handler = http_handler(chat_routes.router, session_routes.router)
