"""Lambda: POST /a2a, the A2A v0.3 JSON-RPC endpoint (the agent card's url), and /mcp, the MCP endpoint.

With STREAMING on, message/stream and tasks/resubscribe answer Server-Sent Events: this entry
then returns a flightdeck.api.sse.StreamReply, which the function's web server writes as it
comes (flightdeck.handlers.web, behind the Lambda Web Adapter; locally the gateway). /mcp
(flightdeck.api.mcp) has an entry of its own in the same function: its refusals are MCP's, and a
tools/call may answer SSE progress.
"""

import functools
from collections.abc import Callable
from typing import Any

from flightdeck.api import a2a_routes, a2a_stream_routes
from flightdeck.api.resolver import http_handler
from flightdeck.wiring import preload

# A body over MAX_BODY_BYTES, not JSON-typed or not UTF-8: a JSON-RPC error (HTTP 200), not the REST
# API's 413/415/400. The caller is authenticated first (HTTP 401/403: authentication belongs to the
# transport, not to JSON-RPC).
a2a_handler = http_handler(a2a_routes.router, refuse=a2a_routes.refusal, stream=a2a_stream_routes.open_stream)
preload(a2a_records=True)  # every method reads or writes a task


@functools.cache
def mcp_handler() -> Callable[[dict[str, Any], Any], Any]:
    # Imported and built by the first /mcp request, not at init: most of this function's calls are A2A (cold start).
    from flightdeck.api import mcp_routes
    from flightdeck.api.mcp import server as mcp_server

    return http_handler(mcp_routes.router, refuse=mcp_server.refusal, stream=mcp_server.handle)


def handler(event: dict[str, Any], context: Any) -> Any:
    if event.get("resource") == "/mcp":
        return mcp_handler()(event, context)
    return a2a_handler(event, context)


handler.app = a2a_handler.app  # type: ignore[attr-defined]
