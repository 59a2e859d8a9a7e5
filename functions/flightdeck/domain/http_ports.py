"""What the domain needs from HTTP to other agents: a POST, and what came back.

Its own module so that the core ports (flightdeck.domain.ports) and the A2A ports
(flightdeck.domain.a2a.ports) both use it without importing each other.
"""

from __future__ import annotations

from typing import Any, Protocol


class PeerAnswer(Protocol):
    # Read-only members, so that a frozen dataclass (flightdeck.adapters.http_peers.PeerResponse) conforms.
    @property
    def status(self) -> int: ...
    @property
    def body(self) -> Any: ...
    @property
    def error(self) -> str: ...
    # Hex SHA-256 of the request body bytes as sent (the audit log's payload hash).
    @property
    def request_sha256(self) -> str: ...


class PeerPort(Protocol):
    # timeout_s: a shorter bound than the adapter's own for this call (a best-effort cancel).
    def post_json(
        self, url: str, body: Any, headers: dict[str, str] | None = None, timeout_s: float | None = None
    ) -> PeerAnswer: ...
