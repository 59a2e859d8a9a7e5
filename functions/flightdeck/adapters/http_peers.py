"""HTTP adapter: the only place that talks to other agents."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import requests

from flightdeck.observability import payload_sha256


@dataclass(frozen=True)
class PeerResponse:
    status: int  # 0: no HTTP answer (connection refused, timeout, DNS)
    body: Any
    error: str = ""
    # Hex SHA-256 of the request body exactly as sent (the audit log's payload hash).
    request_sha256: str = ""


def json_bytes(body: Any) -> bytes:
    """The bytes a JSON body goes out as (ASCII-only JSON, so no encoding question arises)."""
    return json.dumps(body, allow_nan=False).encode("ascii")


class Peers:
    def __init__(self, timeout_s: float, session: requests.Session | None = None):
        self.timeout_s = timeout_s
        self._session = session or requests.Session()

    def post_json(self, url: str, body: Any, headers: dict[str, str] | None = None) -> PeerResponse:
        data = json_bytes(body)
        sent = payload_sha256(data)
        try:
            # Never follow redirects: a peer must not bounce us to a URL we did not allow.
            resp = self._session.post(url, data=data, headers={"Content-Type": "application/json", **(headers or {})},
                                      timeout=self.timeout_s, allow_redirects=False)
        except requests.RequestException as exc:
            return PeerResponse(0, None, f"{type(exc).__name__}: {exc}"[:500], sent)
        try:
            parsed = resp.json()
        except ValueError:
            parsed = resp.text[:2000]
        return PeerResponse(resp.status_code, parsed, request_sha256=sent)
