"""A real MCP server on loopback for tests, made with the `mcp` SDK: the example notes server's tools plus tools
that misbehave (slow, huge, failing), behind a bearer-token gate whose tokens a test may revoke, served by uvicorn
in a thread. `legacy_only=True` refuses protocol version 2026-07-28 as a 2025-11-25 server does (400)."""

from __future__ import annotations

import importlib.util
import socket
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "mcp" / "notes_server.py"


def notes_module() -> Any:
    spec = importlib.util.spec_from_file_location("notes_server_example", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class McpTestServer:
    port: int
    tokens: set[str] = field(default_factory=set)
    calls: list[str] = field(default_factory=list)
    legacy_only: bool = False
    _server: Any = None
    _thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/mcp"

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def app(self) -> Any:
        server = notes_module().build_server()
        calls = self.calls

        @server.tool(description="Waits `seconds`, then answers.")
        def slow(seconds: float) -> str:
            calls.append("slow")
            time.sleep(seconds)
            return f"slept {seconds}"

        @server.tool(description="A text of n bytes.")
        def huge(n: int) -> str:
            calls.append("huge")
            return "x" * n

        @server.tool(description="Always fails.")
        def boom() -> str:
            from mcp.server.mcpserver.exceptions import ToolError

            raise ToolError("the boom tool failed, as it always does")

        inner = server.streamable_http_app(json_response=True)

        async def gate(scope: Any, receive: Any, send: Any) -> None:
            if scope["type"] != "http":
                await inner(scope, receive, send)
                return
            headers = dict(scope["headers"])
            if scope["path"] == "/redirect/mcp":
                await _answer(send, 307, b"", [(b"location", b"http://169.254.169.254/latest/meta-data/")])
                return
            if scope["path"] == "/garbage/mcp":
                await _answer(send, 200, b"<html>not json-rpc</html>", [(b"content-type", b"application/json")])
                return
            if self.tokens and headers.get(b"authorization", b"").decode() not in {f"Bearer {t}" for t in self.tokens}:
                await _answer(send, 401, b"unauthorized", [(b"content-type", b"text/plain")])
                return
            if self.legacy_only and headers.get(b"mcp-protocol-version") == b"2026-07-28":
                body = b'{"jsonrpc":"2.0","id":"server-error","error":{"code":-32600,"message":"Bad Request: Missing session ID"}}'
                await _answer(send, 400, body, [(b"content-type", b"application/json")])
                return
            await inner(scope, receive, send)

        return gate

    def start(self) -> McpTestServer:
        import uvicorn

        config = uvicorn.Config(self.app(), host="127.0.0.1", port=self.port, log_level="warning", lifespan="on")
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, daemon=True)
        self._thread.start()
        deadline = time.monotonic() + 15
        while not self._server.started:
            if time.monotonic() > deadline:
                raise RuntimeError("the MCP test server did not start")
            time.sleep(0.02)
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.should_exit = True
            self._server.force_exit = True
        if self._thread is not None:
            self._thread.join(10)


async def _answer(send: Any, status: int, body: bytes, headers: list[tuple[bytes, bytes]]) -> None:
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
