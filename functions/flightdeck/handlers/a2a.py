"""Lambda: POST /a2a, the A2A v0.3 JSON-RPC endpoint (the agent card's url)."""

from flightdeck.api import a2a_routes
from flightdeck.api.resolver import http_handler

# Over MAX_BODY_BYTES: a JSON-RPC -32600 (HTTP 200), not the REST API's 413. The caller is
# authenticated first (HTTP 401/403: authentication belongs to the transport, not to JSON-RPC).
handler = http_handler(a2a_routes.router, oversize=a2a_routes.too_large)
