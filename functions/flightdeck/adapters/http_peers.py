"""HTTP adapter: the only place that talks to other agents."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import requests


@dataclass(frozen=True)
class PeerResponse:
    status: int  # 0: no HTTP answer (connection refused, timeout, DNS)
    body: Any
    error: str = ""


class Peers:
    def __init__(self, timeout_s: float, session: requests.Session | None = None):
        self.timeout_s = timeout_s
        self._session = session or requests.Session()

    def post_json(self, url: str, body: Any, headers: dict[str, str] | None = None) -> PeerResponse:
        try:
            # Never follow redirects: a peer must not bounce us to a URL we did not allow.
            resp = self._session.post(url, json=body, headers=headers or {}, timeout=self.timeout_s,
                                      allow_redirects=False)
        except requests.RequestException as exc:
            return PeerResponse(0, None, f"{type(exc).__name__}: {exc}"[:500])
        try:
            parsed = resp.json()
        except ValueError:
            parsed = resp.text[:2000]
        return PeerResponse(resp.status_code, parsed)
