"""A small MCP server for the examples: notes, kept in memory, over Streamable HTTP on loopback.

Written with the `mcp` SDK (a dev and local dependency: the agents' own MCP client is flightdeck.adapters.mcp_http).
`flightdeck local up` starts it for a file whose [local.mcp_servers] names it (examples/mcp-tools.toml), on a free
port it binds itself and hands over (--listen-fd); by hand (it prints its URL; --port 0, the default: a free port):

    NOTES_TOKEN=secret .venv/bin/python examples/mcp/notes_server.py --port 8931

It serves protocol versions 2026-07-28 and 2025-11-25 on /mcp, and takes only the bearer token in the environment
variable --token-env names (NOTES_TOKEN; unset: any caller).
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
from typing import Any

NOTES = [
    {"id": 1, "title": "Owls", "text": "Barn owls hunt by sound; a tawny owl calls at dusk."},
    {"id": 2, "title": "Rivers", "text": "The Danube crosses ten countries; the Rhine flows north."},
    {"id": 3, "title": "Tides", "text": "Spring tides follow the new and the full moon."},
]


def build_server() -> Any:
    from mcp.server.mcpserver import MCPServer
    from mcp.server.mcpserver.exceptions import ToolError

    server = MCPServer("notes", version="1.0.0", log_level="WARNING")

    @server.tool(description="Search the notes: those whose title or text contains the query (case-insensitive).")
    def search(query: str) -> dict[str, Any]:
        q = query.lower()
        found = [n for n in NOTES if q in n["title"].lower() or q in n["text"].lower()]
        return {"query": query, "matches": [{"id": n["id"], "title": n["title"]} for n in found]}

    @server.tool(description="One note's text, by id.")
    def get_note(id: int) -> str:
        note = next((n for n in NOTES if n["id"] == id), None)
        if note is None:
            raise ToolError(f"no note {id}")
        return f"{note['title']}: {note['text']}"

    @server.tool(description="Add a note; answers its id.")
    def add_note(title: str, text: str) -> dict[str, Any]:
        note = {"id": max(n["id"] for n in NOTES) + 1, "title": title, "text": text}
        NOTES.append(note)
        return {"id": note["id"]}

    return server


def bearer_gate(app: Any, token: str | None) -> Any:
    """The ASGI app, answering 401 to a request without the bearer token (when one is set)."""
    if not token:
        return app
    expected = f"Bearer {token}".encode()

    async def gate(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and dict(scope["headers"]).get(b"authorization") != expected:
            await send({"type": "http.response.start", "status": 401, "headers": [(b"content-type", b"text/plain")]})
            await send({"type": "http.response.body", "body": b"unauthorized"})
            return
        await app(scope, receive, send)

    return gate


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0: a free port")
    parser.add_argument("--listen-fd", type=int, help="serve on this inherited listening socket instead")
    parser.add_argument("--token-env", default="NOTES_TOKEN")
    args = parser.parse_args()
    import uvicorn

    if args.listen_fd is not None:
        sock = socket.socket(fileno=args.listen_fd)
    else:
        sock = socket.create_server((args.host, args.port))
        print(f"notes MCP server on http://{args.host}:{sock.getsockname()[1]}/mcp", file=sys.stderr, flush=True)
    app = bearer_gate(build_server().streamable_http_app(json_response=True), os.environ.get(args.token_env))
    uvicorn.Server(uvicorn.Config(app, log_level="warning")).run(sockets=[sock])


if __name__ == "__main__":
    main()
