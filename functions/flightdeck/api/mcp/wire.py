"""MCP wire constants and the params of the methods served, per protocol version.

Two eras share one endpoint (docs/MCP.md):

- 2026-07-28, stateless: no handshake; every request carries its version (the MCP-Protocol-Version
  header, equal to `_meta["io.modelcontextprotocol/protocolVersion"]`), Mcp-Method (and Mcp-Name for
  tools/call); server/discover says what the server supports; results carry `resultType`.
- 2025-11-25, the last with the `initialize` handshake: initialize, notifications/initialized, ping;
  this server mints no Mcp-Session-Id (sessions are optional for servers in that version).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

MODERN = "2026-07-28"
LEGACY = "2025-11-25"
SUPPORTED_VERSIONS: tuple[str, ...] = (MODERN, LEGACY)

META_VERSION = "io.modelcontextprotocol/protocolVersion"
META_CLIENT_INFO = "io.modelcontextprotocol/clientInfo"
META_CLIENT_CAPABILITIES = "io.modelcontextprotocol/clientCapabilities"
META_SERVER_INFO = "io.modelcontextprotocol/serverInfo"

HEADER_VERSION = "mcp-protocol-version"
HEADER_METHOD = "mcp-method"
HEADER_NAME = "mcp-name"

# JSON-RPC 2.0 and MCP error codes.
PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603
HEADER_MISMATCH = -32020  # 2026-07-28: a required header missing, malformed, or not the body's value
UNSUPPORTED_VERSION = -32022  # 2026-07-28: UnsupportedProtocolVersionError
# An implementation-defined server error (JSON-RPC's -32000 to -32099): the agent is at its max_concurrent_tasks
# and took nothing; data.retryAfterSeconds says when to send again (the A2A door's code for the same).
AGENT_BUSY = -32000

# How long a client may cache a list (2026-07-28 CacheableResult): the tools change only with a redeploy.
LIST_TTL_MS = 300_000


class McpError(Exception):
    """A JSON-RPC error answer: its code, message, data, and the HTTP status it goes out with."""

    def __init__(self, code: int, message: str, data: Any = None, http_status: int = 200):
        super().__init__(message)
        self.code, self.message, self.data, self.http_status = code, message, data, http_status


class _Params(BaseModel):
    # Unknown members are ignored, as JSON-RPC peers add fields over versions (2026-07-28: extra params).
    # defer_build: built by the first /mcp request that uses it, not when the a2a function starts (cold start).
    model_config = ConfigDict(extra="allow", defer_build=True)

    meta: dict[str, Any] | None = Field(None, alias="_meta")


class InitializeParams(_Params):
    protocolVersion: str = Field(max_length=64)
    capabilities: dict[str, Any] = Field(default_factory=dict)
    clientInfo: dict[str, Any] = Field(default_factory=dict)


class ListParams(_Params):
    cursor: str | None = Field(None, max_length=1024)


class CallParams(_Params):
    name: str = Field(min_length=1, max_length=128)
    arguments: dict[str, Any] | None = None


class AnyParams(_Params):
    pass


class CancelledParams(_Params):
    requestId: str | int | None = None
    reason: str | None = Field(None, max_length=1000)
