"""HTTP reads the console's routes make of other agents: a delegate's timeline, an agent's card, a relayed
JSON-RPC call. Never follows a redirect (a peer must not bounce us to a URL we did not allow); an answer
over MAX_BYTES is cut off and reported as such, not relayed; TIMEOUT_S bounds the whole exchange."""

from __future__ import annotations

from typing import Any

from flightdeck.adapters.http_peers import PeerResponse, Peers, SharedSession, fetch

MAX_BYTES = 1_000_000
TIMEOUT_S = 10.0
_SHARED = SharedSession()  # one connection pool per function, made on first use (requests loads then)


def get(url: str, headers: dict[str, str], timeout_s: float = TIMEOUT_S) -> PeerResponse:
    """The answer's status and its text (body: str); status 0 when nothing answered."""
    answer = fetch(_SHARED, "GET", url, timeout_s, MAX_BYTES, headers=headers)
    text = None if answer.body is None else answer.body.decode("utf-8", errors="replace")
    return PeerResponse(answer.status, text, answer.error)


def post_json(url: str, body: Any, headers: dict[str, str], timeout_s: float = TIMEOUT_S) -> PeerResponse:
    """POST a JSON body; the answer parsed as JSON (else its text)."""
    return Peers(timeout_s, _SHARED, max_answer_bytes=MAX_BYTES).post_json(url, body, headers)
