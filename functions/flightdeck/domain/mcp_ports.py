"""What the domain needs of an MCP server (flightdeck.domain.mcp_tools): list its tools, call one within a budget.

Its own module so that the core ports (flightdeck.domain.ports) name it without importing the use cases.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol


@dataclass(frozen=True)
class McpExchange:
    """What one MCP request got back.

    outcome: "ok" (a JSON-RPC result), "rpc_error" (a JSON-RPC error), "http" (an HTTP status that is no answer),
    "unreachable", "timeout", "protocol" (a body that is not MCP), "too_large".
    """

    outcome: str
    result: dict[str, Any] | None = None
    detail: str = ""
    http_status: int = 0
    request_sha256: str = ""
    version: str = ""


class McpPort(Protocol):
    """An MCP client over Streamable HTTP (flightdeck.adapters.mcp_http): one request, bounded by timeout_s."""

    def list_tools(self, url: str, token: str | None, timeout_s: float) -> McpExchange: ...
    def call_tool(
        self, url: str, token: str | None, tool: str, arguments: dict[str, Any], timeout_s: float
    ) -> McpExchange: ...
