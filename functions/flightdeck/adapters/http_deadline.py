"""One deadline for a whole outbound HTTP exchange (an MCP server, a peer agent, a push receiver, a card).

requests' timeout bounds each wait for bytes, not the exchange: a server that sends something (an SSE
keep-alive, a progress notification, a space before its JSON, a header a byte at a time) more often than that
keeps a request going for as long as it likes. So an exchange (`exchange`) runs under a watchdog that shuts its
connection's socket down when the deadline passes, which wakes whatever read or write is waiting: the request
going out, the status line and headers, the body, a read inside HTTP's chunk framing or a decoder. Its body is
read by `Exchange.read_body`, a socket read at a time, the deadline checked after each. The watchdog finds the
connection through the session's connection class (`deadline_session`); with another session it finds it once
the headers are in, and only the per-read timeouts (cut to the time left) bound the headers.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import requests

CONNECT_S = 5.0
READ_BYTES = 16_384
_sending = threading.local()  # .watchdog: the exchange this thread is sending, for its connection to join


class OutOfTime(Exception):
    """The deadline passed before the answer was read (its connection is closed)."""


class TooLarge(Exception):
    """The answer is longer than its limit."""


class Exchange:
    def __init__(self, response: requests.Response, watchdog: _Watchdog):
        self.response = response
        self._watchdog = watchdog

    def read_body(self, max_bytes: int, until: Callable[[bytes], bool] | None = None) -> bytes:
        """The (decoded) body, read by the deadline: OutOfTime when it passes, TooLarge past max_bytes, a
        requests.ConnectionError when the connection breaks. until: given each chunk read, whether to stop
        reading now (an SSE answer that is in; the connection is then closed, not reused)."""
        import requests  # loaded by the session that sent the request
        from urllib3.exceptions import HTTPError

        chunks: list[bytes] = []
        size = 0
        while True:
            try:
                chunk = self.response.raw.read1(READ_BYTES, decode_content=True)
            except (HTTPError, OSError) as exc:
                self._watchdog.check()
                raise requests.ConnectionError(exc) from exc
            self._watchdog.check()  # a socket shut at the deadline reads as the body's end
            if not chunk:
                return b"".join(chunks)
            size += len(chunk)
            if size > max_bytes:
                raise TooLarge(f"the answer exceeds {max_bytes} bytes")
            chunks.append(chunk)
            if until is not None and until(chunk):
                return b"".join(chunks)


@contextmanager
def exchange(session: requests.Session, method: str, url: str, deadline: float, **kwargs: Any) -> Iterator[Exchange]:
    """The request sent and its answer's headers read by the deadline; the body is left for read_body. Redirects
    are not followed. Raises OutOfTime when the deadline passes, else what requests raises."""
    import requests  # loaded by the session

    remaining = deadline - time.monotonic()
    if remaining <= 0:
        raise OutOfTime("no time left")
    watchdog = _Watchdog(deadline)
    try:
        _sending.watchdog = watchdog
        try:
            response = session.request(
                method,
                url,
                timeout=(min(remaining, CONNECT_S), remaining),
                allow_redirects=False,
                stream=True,
                **kwargs,
            )
        except requests.RequestException:
            watchdog.check()
            raise
        finally:
            _sending.watchdog = None
        with response:
            watchdog.watch(response.raw.connection)  # a session of another kind: from its answer's headers on
            yield Exchange(response, watchdog)
    finally:
        watchdog.stop()


def deadline_session() -> requests.Session:
    """A requests.Session whose connections join the exchange sending on them (so that its watchdog can cut the
    request and the headers short, not only the body)."""
    import requests

    session = requests.Session()
    adapter = _adapter_class()
    session.mount("http://", adapter())
    session.mount("https://", adapter())
    return session


class _Watchdog:
    """Shuts the exchange's socket down at the deadline, unless stopped first; `check` then raises OutOfTime."""

    def __init__(self, deadline: float):
        self.deadline = deadline
        self._connection: Any = None
        self._lock = threading.Lock()
        self._fired = False
        self._stopped = False
        self._timer = threading.Timer(max(0.0, deadline - time.monotonic()), self._fire)
        self._timer.daemon = True
        self._timer.start()

    def watch(self, connection: Any) -> None:
        with self._lock:
            if connection is not None and not self._stopped:
                self._connection = connection
                if self._fired:  # joined after the deadline: shut at once
                    self._shut()

    def check(self) -> None:
        """OutOfTime (the connection closed) once the deadline has passed."""
        if self._fired or time.monotonic() >= self.deadline:
            # Closed here too: a shut socket can end a body that then looks whole (a chunk size of "0..."), and
            # its connection would go back to the pool, still open.
            if self._connection is not None:
                self._connection.close()
            raise OutOfTime("the deadline passed")

    def _fire(self) -> None:
        with self._lock:
            if not self._stopped:
                self._fired = True
                self._shut()

    def _shut(self) -> None:
        sock = getattr(self._connection, "sock", None)
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)  # wakes a read or write blocked in the sending thread
            except OSError:
                pass  # already closed

    def stop(self) -> None:
        with self._lock:
            self._stopped = True
        self._timer.cancel()


_ADAPTER: Any = None


def _adapter_class() -> Any:
    """requests' HTTPAdapter with connections that join the exchange sending on them (made at first use: requests
    and urllib3 load with the first HTTP call, not at import)."""
    global _ADAPTER
    if _ADAPTER is None:
        from requests.adapters import HTTPAdapter
        from urllib3.connection import HTTPConnection, HTTPSConnection
        from urllib3.connectionpool import HTTPConnectionPool, HTTPSConnectionPool

        class Joining:
            def request(self, *args: Any, **kwargs: Any) -> Any:
                watchdog = getattr(_sending, "watchdog", None)
                if watchdog is not None:
                    watchdog.watch(self)
                sent = super().request(*args, **kwargs)  # type: ignore[misc]
                if watchdog is not None:
                    watchdog.watch(self)  # again, its socket made: a deadline passed while connecting shuts it now
                return sent

        class Connection(Joining, HTTPConnection):
            pass

        class TlsConnection(Joining, HTTPSConnection):
            pass

        class Pool(HTTPConnectionPool):
            ConnectionCls = Connection

        class TlsPool(HTTPSConnectionPool):
            ConnectionCls = TlsConnection

        class Adapter(HTTPAdapter):
            def init_poolmanager(self, *args: Any, **kwargs: Any) -> None:
                super().init_poolmanager(*args, **kwargs)
                self.poolmanager.pool_classes_by_scheme = {"http": Pool, "https": TlsPool}

        _ADAPTER = Adapter
    return _ADAPTER
