"""HTTP adapter: the only place that talks to other agents."""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from flightdeck.adapters import http_deadline
from flightdeck.domain.time_budget import TimeBudget
from flightdeck.observability import payload_sha256

if TYPE_CHECKING:
    import requests

OUT_OF_TIME = "not sent: the invocation is out of time"
# A peer's answer longer than this is not read (API Gateway's payload limit: no Flightdeck agent answers more).
MAX_ANSWER_BYTES = 10_000_000


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


class SharedSession:
    """One requests.Session (one connection pool) per thread, made on first use: requests is imported by
    the first call, not when the adapter is built, so a function that makes no HTTP call never loads it
    (those whose every invocation calls load it at init: flightdeck.wiring.load_http). Per thread because
    requests does not promise a Session is thread-safe, and a batch's thinks run on threads of their own
    (flightdeck.handlers.think_batch). A session given (a test's) serves every thread."""

    def __init__(self, session: requests.Session | None = None):
        self._given = session
        self._local = threading.local()

    def get(self) -> requests.Session:
        if self._given is not None:
            return self._given
        session: requests.Session | None = getattr(self._local, "session", None)
        if session is None:
            session = self._local.session = http_deadline.deadline_session()
        return session


class Peers:
    def __init__(
        self,
        timeout_s: float,
        session: requests.Session | SharedSession | None = None,
        budget: TimeBudget | None = None,
        max_answer_bytes: int = MAX_ANSWER_BYTES,
    ):
        self.timeout_s = timeout_s
        self._session = session if isinstance(session, SharedSession) else SharedSession(session)
        self._budget = budget
        self._max_answer_bytes = max_answer_bytes

    def within(self, budget: TimeBudget) -> Peers:
        """The same peers (and connection pool) for one invocation: no call outlasts its budget."""
        return Peers(self.timeout_s, self._session, budget, self._max_answer_bytes)

    def load(self) -> None:
        """Import requests and make the connection pool now (at init) rather than at the first call."""
        self._session.get()

    def post_json(
        self, url: str, body: Any, headers: dict[str, str] | None = None, timeout_s: float | None = None
    ) -> PeerResponse:
        data = json_bytes(body)
        sent = payload_sha256(data)
        limit_s = min(self.timeout_s, timeout_s) if timeout_s else self.timeout_s
        timeout_s = limit_s if self._budget is None else self._budget.call_timeout_s(limit_s)
        if timeout_s <= 0:
            return PeerResponse(0, None, OUT_OF_TIME, sent)
        # Never follows redirects: a peer must not bounce us to a URL we did not allow.
        answer = fetch(
            self._session,
            "POST",
            url,
            timeout_s,
            self._max_answer_bytes,
            data=data,
            headers={"Content-Type": "application/json", **(headers or {})},
        )
        return PeerResponse(answer.status, parsed_json(answer.body), answer.error, sent)


def fetch(
    session: SharedSession, method: str, url: str, timeout_s: float, max_bytes: int, **kwargs: Any
) -> PeerResponse:
    """One request and its answer (body: bytes), the whole exchange within timeout_s (flightdeck.adapters.
    http_deadline); no redirect followed. Status 0 and why when no answer came, or one longer than max_bytes."""
    http = session.get()
    import requests  # loaded by the session above

    try:
        with http_deadline.exchange(http, method, url, time.monotonic() + timeout_s, **kwargs) as sent:
            return PeerResponse(sent.response.status_code, sent.read_body(max_bytes))
    except http_deadline.OutOfTime:
        return PeerResponse(0, None, f"Timeout: no answer within {timeout_s:g} s")
    except http_deadline.TooLarge as exc:
        return PeerResponse(0, None, str(exc))
    except requests.RequestException as exc:
        return PeerResponse(0, None, f"{type(exc).__name__}: {exc}"[:500])


def parsed_json(body: bytes | None) -> Any:
    """An answer's JSON, else (not JSON) the start of its text."""
    if body is None:
        return None
    try:
        return json.loads(body)
    except ValueError:
        return body[:2000].decode("utf-8", "replace")
