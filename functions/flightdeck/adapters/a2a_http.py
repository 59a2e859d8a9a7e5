"""HTTP GET for A2A agent cards (POSTs go through flightdeck.adapters.http_peers.Peers)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from flightdeck.adapters.http_peers import OUT_OF_TIME, PeerResponse, SharedSession
from flightdeck.domain.time_budget import TimeBudget

if TYPE_CHECKING:
    import requests

MAX_CARD_BYTES = 256_000


class A2AHttp:
    def __init__(
        self,
        timeout_s: float,
        session: requests.Session | SharedSession | None = None,
        budget: TimeBudget | None = None,
    ):
        self.timeout_s = timeout_s
        # Its own pool, made on first use (flightdeck.adapters.http_peers.SharedSession): few invocations fetch a card.
        self._session = session if isinstance(session, SharedSession) else SharedSession(session)
        self._budget = budget

    def within(self, budget: TimeBudget) -> A2AHttp:
        """The same client for one invocation: no GET outlasts its budget."""
        return A2AHttp(self.timeout_s, self._session, budget)

    def get_json(self, url: str, headers: dict[str, str] | None = None) -> PeerResponse:
        timeout_s = self.timeout_s if self._budget is None else self._budget.call_timeout_s(self.timeout_s)
        if timeout_s <= 0:
            return PeerResponse(0, None, OUT_OF_TIME)
        session = self._session.get()
        import requests  # loaded by the session above

        try:
            # Never follow redirects: a card must be served where the allowlist says.
            resp = session.get(
                url, headers={"Accept": "application/json", **(headers or {})}, timeout=timeout_s, allow_redirects=False
            )
        except requests.RequestException as exc:
            return PeerResponse(0, None, f"{type(exc).__name__}: {exc}"[:500])
        if len(resp.content) > MAX_CARD_BYTES:
            return PeerResponse(resp.status_code, None, f"response larger than {MAX_CARD_BYTES} bytes")
        try:
            parsed = resp.json()
        except ValueError:
            parsed = resp.text[:2000]
        return PeerResponse(resp.status_code, parsed)
