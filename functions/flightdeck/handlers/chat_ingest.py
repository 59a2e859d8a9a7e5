"""Lambda: POST /api/chat, GET /api/sessions/{session_id}, GET /api/sessions, POST /api/sessions/{session_id}/cancel,
and the console's reads (flightdeck.api.console_routes)."""

from flightdeck.api import chat_routes, console_routes, session_routes
from flightdeck.api.resolver import http_handler

handler = http_handler(chat_routes.router, session_routes.router, console_routes.router)
