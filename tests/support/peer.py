"""A scripted HTTP peer on loopback: answers each request with the next status in its script.

delay_s makes it a slow peer: each request is answered that long after it arrived (at once on close()).
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class ScriptedPeer:
    def __init__(self, statuses: list[int] | None = None, default: int = 202, body: Any = None):
        self.statuses = list(statuses or [])
        self.default = default
        self.body = body if body is not None else {"status": "accepted"}
        self.requests: list[dict[str, Any]] = []
        self.delay_s = 0.0
        self._closing = threading.Event()
        peer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 - stdlib name
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length)
                peer.requests.append(
                    {"path": self.path, "headers": dict(self.headers), "body": json.loads(raw or b"null")}
                )
                if peer.delay_s and peer._closing.wait(peer.delay_s):
                    return  # closing: the caller has long given up
                status = peer.statuses.pop(0) if peer.statuses else peer.default
                payload = json.dumps(
                    peer.body(self.path, peer.requests[-1]) if callable(peer.body) else peer.body
                ).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_port}"

    def close(self) -> None:
        self._closing.set()
        self.server.shutdown()
        self.server.server_close()
