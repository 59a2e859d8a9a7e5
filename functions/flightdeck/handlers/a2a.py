"""Lambda: POST /a2a, the A2A v0.3 JSON-RPC endpoint (the agent card's url).

With STREAMING on, message/stream and tasks/resubscribe answer Server-Sent Events: this entry
then returns a flightdeck.api.sse.StreamReply, which the function's web server writes as it
comes (flightdeck.handlers.web, behind the Lambda Web Adapter; locally the gateway).
"""

from flightdeck.api import a2a_routes, a2a_stream_routes
from flightdeck.api.resolver import http_handler
from flightdeck.wiring import preload

# A body over MAX_BODY_BYTES, not JSON-typed or not UTF-8: a JSON-RPC error (HTTP 200), not the REST
# API's 413/415/400. The caller is authenticated first (HTTP 401/403: authentication belongs to the
# transport, not to JSON-RPC).
handler = http_handler(a2a_routes.router, refuse=a2a_routes.refusal, stream=a2a_stream_routes.open_stream)
preload(a2a_records=True)  # every method reads or writes a task
