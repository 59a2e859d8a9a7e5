"""HTTP GET for A2A agent cards (POSTs go through flightdeck.adapters.http_peers.Peers)."""

from __future__ import annotations

import requests

from flightdeck.adapters.http_peers import PeerResponse

MAX_CARD_BYTES = 256_000


class A2AHttp:
    def __init__(self, timeout_s: float, session: requests.Session | None = None):
        self.timeout_s = timeout_s
        self._session = session or requests.Session()

    def get_json(self, url: str, headers: dict[str, str] | None = None) -> PeerResponse:
        try:
            # Never follow redirects: a card must be served where the allowlist says.
            resp = self._session.get(url, headers={"Accept": "application/json", **(headers or {})},
                                     timeout=self.timeout_s, allow_redirects=False)
        except requests.RequestException as exc:
            return PeerResponse(0, None, f"{type(exc).__name__}: {exc}"[:500])
        if len(resp.content) > MAX_CARD_BYTES:
            return PeerResponse(resp.status_code, None, f"response larger than {MAX_CARD_BYTES} bytes")
        try:
            parsed = resp.json()
        except ValueError:
            parsed = resp.text[:2000]
        return PeerResponse(resp.status_code, parsed)
