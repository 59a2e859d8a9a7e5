"""The MCP rows of `flightdeck bench`: a tools/call on an agent's /mcp, and a turn that calls an MCP server's tool.

- `LoopbackMcp`: the smallest MCP server an agent's client (flightdeck.adapters.mcp_http) talks to: 2026-07-28
  stateless, tools/list and tools/call of one `lookup` tool answered at once, on loopback. What a turn's MCP call
  adds is then the client, the think that takes the result and the records, not a server's own work.
- `call`: one JSON-RPC tools/call to an agent's /mcp, as an MCP client sends it.
"""

from __future__ import annotations

import http.server
import json
import threading
from typing import Any

import requests

MODERN = "2026-07-28"
SERVER = "benchmcp"  # the agent's mcp_servers name: its tool is benchmcp__lookup
TOOL = "lookup"
_TOOLS = [
    {
        "name": TOOL,
        "description": "The figures of a report, by its name",
        "inputSchema": {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]},
    }
]


class LoopbackMcp:
    """An MCP server on 127.0.0.1 answering tools/list and tools/call (2026-07-28) at once; counts its calls."""

    def __init__(self) -> None:
        self.calls = 0
        owner = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:  # noqa: N802 - stdlib name
                length = int(self.headers.get("Content-Length") or 0)
                try:
                    body = json.loads(self.rfile.read(length) or b"{}")
                except ValueError:
                    body = {}
                method = body.get("method")
                if method == "tools/list":
                    result: dict[str, Any] = {"tools": _TOOLS}
                elif method == "tools/call":
                    owner.calls += 1
                    query = str((body.get("params") or {}).get("arguments", {}).get("query", ""))
                    result = {"content": [{"type": "text", "text": f"{query}: the figures add up"}], "isError": False}
                else:
                    self._send(
                        404, {"jsonrpc": "2.0", "id": body.get("id"), "error": {"code": -32601, "message": "no"}}
                    )
                    return
                self._send(
                    200, {"jsonrpc": "2.0", "id": body.get("id"), "result": {"resultType": "complete", **result}}
                )

            def _send(self, status: int, payload: dict[str, Any]) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.base_url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.url = f"{self.base_url}/mcp"
        self._thread = threading.Thread(target=self.server.serve_forever, name="loopback-mcp", daemon=True)

    def start(self) -> LoopbackMcp:
        self._thread.start()
        return self

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def call(
    http: requests.Session, url: str, token: str | None, tool: str, arguments: dict[str, Any], request_id: int
) -> dict[str, Any]:
    """One tools/call to an agent's /mcp (2026-07-28); its result, or raises RuntimeError."""
    body: dict[str, Any] = {
        "jsonrpc": "2.0",
        "id": request_id,
        "method": "tools/call",
        "params": {
            "name": tool,
            "arguments": arguments,
            "_meta": {
                "io.modelcontextprotocol/protocolVersion": MODERN,
                "io.modelcontextprotocol/clientCapabilities": {},
            },
        },
    }
    headers = {"MCP-Protocol-Version": MODERN, "Mcp-Method": "tools/call", "Mcp-Name": tool}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    resp = http.post(url, json=body, headers=headers, timeout=60)
    answer = resp.json() if resp.headers.get("Content-Type", "").startswith("application/json") else {}
    result = answer.get("result")
    if resp.status_code != 200 or not isinstance(result, dict) or result.get("isError"):
        raise RuntimeError(f"/mcp tools/call {tool} answered {resp.status_code}: {resp.text[:300]}")
    return result
