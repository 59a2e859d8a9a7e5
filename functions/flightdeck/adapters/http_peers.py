"""HTTP adapter: the only place that talks to other agents."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import requests

from flightdeck.domain.time_budget import TimeBudget
from flightdeck.observability import payload_sha256

OUT_OF_TIME = "not sent: the invocation is out of time"


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
    def __init__(self, timeout_s: float, session: requests.Session | None = None, budget: TimeBudget | None = None):
        self.timeout_s = timeout_s
        self._session = session or requests.Session()
        self._budget = budget

    def within(self, budget: TimeBudget) -> Peers:
        """The same peers (and connection pool) for one invocation: no call outlasts its budget."""
        return Peers(self.timeout_s, self._session, budget)

    def post_json(
        self, url: str, body: Any, headers: dict[str, str] | None = None, timeout_s: float | None = None
    ) -> PeerResponse:
        data = json_bytes(body)
        sent = payload_sha256(data)
        limit_s = min(self.timeout_s, timeout_s) if timeout_s else self.timeout_s
        timeout_s = limit_s if self._budget is None else self._budget.call_timeout_s(limit_s)
        if timeout_s <= 0:
            return PeerResponse(0, None, OUT_OF_TIME, sent)
        try:
            # Never follow redirects: a peer must not bounce us to a URL we did not allow.
            resp = self._session.post(
                url,
                data=data,
                headers={"Content-Type": "application/json", **(headers or {})},
                timeout=timeout_s,
                allow_redirects=False,
            )
        except requests.RequestException as exc:
            return PeerResponse(0, None, f"{type(exc).__name__}: {exc}"[:500], sent)
        try:
            parsed = resp.json()
        except ValueError:
            parsed = resp.text[:2000]
        return PeerResponse(resp.status_code, parsed, request_sha256=sent)
