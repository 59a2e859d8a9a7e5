"""HTTP GET for A2A agent cards (POSTs go through flightdeck.adapters.http_peers.Peers)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from flightdeck.adapters.http_peers import OUT_OF_TIME, PeerResponse, SharedSession, fetch, parsed_json
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
        # Never follows redirects: a card must be served where the allowlist says.
        answer = fetch(
            self._session,
            "GET",
            url,
            timeout_s,
            MAX_CARD_BYTES,
            headers={"Accept": "application/json", **(headers or {})},
        )
        return PeerResponse(answer.status, parsed_json(answer.body), answer.error)
