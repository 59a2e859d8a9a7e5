"""Lambda: GET /api/sessions/{session_id}/events, a session's timeline as Server-Sent Events.

Its answer is a flightdeck.api.sse.StreamReply, which the function's web server writes as it
comes (flightdeck.handlers.web, behind the Lambda Web Adapter; locally the gateway).
"""

from flightdeck.api import session_events_routes
from flightdeck.api.resolver import http_handler

handler = http_handler(session_events_routes.router, stream=session_events_routes.open_stream)
