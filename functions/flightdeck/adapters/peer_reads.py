"""HTTP reads the console's routes make of other agents: a delegate's timeline, an agent's card, a relayed
JSON-RPC call. Never follows a redirect (a peer must not bounce us to a URL we did not allow); an answer
over MAX_BYTES is cut off and reported as such, not relayed."""

from __future__ import annotations

from typing import Any

from flightdeck.adapters.http_peers import PeerResponse, Peers, SharedSession

MAX_BYTES = 1_000_000
TIMEOUT_S = 10.0
_SHARED = SharedSession()  # one connection pool per function, made on first use (requests loads then)


def get(url: str, headers: dict[str, str], timeout_s: float = TIMEOUT_S) -> PeerResponse:
    """The answer's status and its text (body: str); status 0 when nothing answered."""
    session = _SHARED.get()
    import requests  # loaded by the session above

    try:
        with session.get(url, headers=headers, timeout=timeout_s, allow_redirects=False, stream=True) as resp:
            data = resp.raw.read(MAX_BYTES + 1, decode_content=True)
            if len(data) > MAX_BYTES:
                return PeerResponse(0, None, f"the answer exceeds {MAX_BYTES} bytes")
            return PeerResponse(resp.status_code, data.decode("utf-8", errors="replace"))
    except requests.RequestException as exc:
        return PeerResponse(0, None, f"{type(exc).__name__}: {exc}"[:500])


def post_json(url: str, body: Any, headers: dict[str, str], timeout_s: float = TIMEOUT_S) -> PeerResponse:
    """POST a JSON body; the answer parsed as JSON (else its text)."""
    return Peers(timeout_s, _SHARED).post_json(url, body, headers)
