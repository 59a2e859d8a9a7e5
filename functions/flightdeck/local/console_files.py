"""The web console's static files (the repository's console/), served by each agent's local gateway under
/console/, as the deployed stack's console route serves them from S3 (infra/console.py): same origin as the
agent's API, so the page calls it without CORS. Locally /console/agents.json also lists every agent of the
deployment file and its URL, so the console can open any of them (on AWS it is absent: one agent's console)."""

from __future__ import annotations

import json
import mimetypes
from pathlib import Path

import flightdeck

PREFIX = "/console"
# The checkout's console/ (functions/flightdeck/__init__.py -> the repository root).
CONSOLE_DIR = Path(flightdeck.__file__).resolve().parents[2] / "console"
_TYPES = {
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".html": "text/html; charset=utf-8",
}
# The page runs our own scripts and talks to its own origin only.
SECURITY_HEADERS = [
    (
        "Content-Security-Policy",
        "default-src 'self'; img-src 'self' data:; object-src 'none'; base-uri 'self'; frame-ancestors 'none'",
    ),
    ("X-Content-Type-Options", "nosniff"),
    ("Referrer-Policy", "no-referrer"),
    ("Cache-Control", "no-cache"),
]


class ConsoleFiles:
    def __init__(self, root: Path = CONSOLE_DIR, agents: dict[str, str] | None = None):
        self.root = root.resolve()
        self.agents = dict(agents or {})

    def handles(self, path: str) -> bool:
        return path == PREFIX or path.startswith(PREFIX + "/")

    def answer(self, method: str, path: str) -> tuple[int, list[tuple[str, str]], bytes]:
        """(status, headers, body) for a request under /console."""
        if method not in ("GET", "HEAD"):
            return 405, [("Allow", "GET, HEAD"), ("Content-Type", "application/json")], _error("method_not_allowed")
        if path == PREFIX:
            return 301, [("Location", PREFIX + "/")], b""
        name = path[len(PREFIX) + 1 :] or "index.html"
        if name == "agents.json" and self.agents:
            return 200, [("Content-Type", "application/json"), *SECURITY_HEADERS], json.dumps(self.agents).encode()
        target = (self.root / name).resolve()
        if not target.is_relative_to(self.root) or not target.is_file():
            return 404, [("Content-Type", "application/json")], _error("not_found")
        kind = _TYPES.get(target.suffix) or mimetypes.guess_type(target.name)[0] or "application/octet-stream"
        return 200, [("Content-Type", kind), *SECURITY_HEADERS], target.read_bytes()


def _error(code: str) -> bytes:
    return json.dumps({"error": {"code": code, "message": code.replace("_", " ")}}).encode()
