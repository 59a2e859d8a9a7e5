"""A loopback HTTP proxy a test can take down and bring back: an agent's endpoint 'down for a while'."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import requests


class FlakyProxy:
    def __init__(self):
        self.target = ""
        self.down = False
        self.refused: list[str] = []
        self.forwarded: list[tuple[str, int]] = []
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            def _relay(self, method: str) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                if proxy.down or not proxy.target:
                    proxy.refused.append(self.path)
                    status, headers, payload = (
                        503,
                        {"Content-Type": "application/json"},
                        b'{"error":{"code":"down","message":"down"}}',
                    )
                else:
                    fwd = {k: v for k, v in self.headers.items() if k.lower() not in ("host", "content-length")}
                    resp = requests.request(
                        method, proxy.target + self.path, data=body, headers=fwd, timeout=30, allow_redirects=False
                    )
                    proxy.forwarded.append((self.path, resp.status_code))
                    status, payload = resp.status_code, resp.content
                    headers = {"Content-Type": resp.headers.get("Content-Type", "application/json")}
                self.send_response(status)
                for k, v in headers.items():
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def do_POST(self):  # noqa: N802
                self._relay("POST")

            def do_GET(self):  # noqa: N802
                self._relay("GET")

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_port}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
