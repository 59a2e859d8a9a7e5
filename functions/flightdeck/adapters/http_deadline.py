"""One deadline for a whole outbound HTTP exchange (an MCP server, a peer agent, a push receiver, a card).

requests' timeout bounds each wait for bytes, not the exchange: a server that sends something (an SSE
keep-alive, a progress notification, a space before its JSON) more often than that keeps a read going for as
long as it likes. So a request goes out streamed (`send`: connect and read timeouts cut to the time left) and
its body is read by `read_body`: what one socket read brings at a time, the deadline checked after each, and a
watchdog that shuts the socket down when the deadline passes (that also wakes a read waiting inside HTTP's
chunk framing or a decoder). The status line and headers are read under the read timeout.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import requests

CONNECT_S = 5.0
READ_BYTES = 16_384


class OutOfTime(Exception):
    """The deadline passed before the answer was read."""


class TooLarge(Exception):
    """The answer is longer than its limit."""


def send(session: requests.Session, method: str, url: str, deadline: float, **kwargs: Any) -> requests.Response:
    """The request, its answer's headers read; its body is left for `read_body`. Redirects are not followed.
    Raises OutOfTime with no time left, else what requests raises (its Timeout: the deadline passed)."""
    remaining = deadline - time.monotonic()
    if remaining <= 0:
        raise OutOfTime("no time left")
    timeout = (min(remaining, CONNECT_S), remaining)
    return session.request(method, url, timeout=timeout, allow_redirects=False, stream=True, **kwargs)


def read_body(
    resp: requests.Response,
    deadline: float,
    max_bytes: int,
    until: Callable[[bytes], bool] | None = None,
) -> bytes:
    """The (decoded) body, read by the deadline: OutOfTime when it passes, TooLarge past max_bytes, a
    requests.ConnectionError when the connection breaks. until: given each chunk read, whether to stop
    reading now (an SSE answer that is in). The caller closes the response (a response cut short is not
    reused)."""
    import requests  # loaded by the session that sent the request
    from urllib3.exceptions import HTTPError

    watchdog = _Watchdog(resp, deadline)
    chunks: list[bytes] = []
    size = 0
    try:
        while True:
            try:
                chunk = resp.raw.read1(READ_BYTES, decode_content=True)
            except (HTTPError, OSError) as exc:
                if watchdog.fired or time.monotonic() >= deadline:
                    watchdog.hang_up()
                    raise OutOfTime("the deadline passed mid-answer") from exc
                raise requests.ConnectionError(exc) from exc
            if watchdog.fired or time.monotonic() >= deadline:
                watchdog.hang_up()
                raise OutOfTime("the deadline passed mid-answer")
            if not chunk:
                return b"".join(chunks)
            size += len(chunk)
            if size > max_bytes:
                raise TooLarge(f"the answer exceeds {max_bytes} bytes")
            chunks.append(chunk)
            if until is not None and until(chunk):
                return b"".join(chunks)
    finally:
        watchdog.stop()


class _Watchdog:
    """Shuts the response's socket down at the deadline (urllib3's HTTPResponse.shutdown, made to wake a read
    blocked in another thread), unless stopped first."""

    def __init__(self, resp: requests.Response, deadline: float):
        self.fired = False
        self._raw = resp.raw
        self._connection = resp.raw.connection
        self._lock = threading.Lock()
        self._stopped = False
        self._timer = threading.Timer(max(0.0, deadline - time.monotonic()), self._fire)
        self._timer.daemon = True
        self._timer.start()

    def _fire(self) -> None:
        with self._lock:
            if self._stopped:
                return
            self.fired = True
            try:
                self._raw.shutdown()
            except (ValueError, RuntimeError, OSError):
                pass  # the connection is back in the pool (read to its end) or already closed

    def hang_up(self) -> None:
        """Close the connection: a shut socket reads as the body's end, and a body that seems whole (a chunk
        size of "0..." cut short) puts its connection back in the pool, where it would stay open."""
        if self._connection is not None:
            self._connection.close()

    def stop(self) -> None:
        with self._lock:
            self._stopped = True
        self._timer.cancel()
