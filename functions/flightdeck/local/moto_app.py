"""moto's server application on a socket we bound ourselves, one request at a time.

moto's ThreadedMotoServer binds inside its thread and waits forever when the
port is taken; here the caller binds first (flightdeck.local.net.listen), so a
clash raises PortInUseError at once, and the same code serves an in-process
thread (tests) or a child process (flightdeck.local.moto_host).

moto's backends are not thread-safe: TransactWriteItems deep-copies the tables
it touches and, when a condition fails, puts the copies back, wiping writes
that other request threads made meanwhile; concurrent conditional updates can
both succeed. DynamoDB makes each request atomic, so this server runs one
request at a time. The one exception is SQS ReceiveMessage: a long poll waits
inside moto on the queue's own lock, and holding ours through it would stall
every other caller.

It also gives TransactWriteItems DynamoDB's idempotency, which moto lacks: botocore
fills ClientRequestToken once per call, so an SDK retry of a transaction that did
commit (its answer lost on the way) is answered with the first success, as DynamoDB
answers within 10 minutes, instead of failing its conditions against its own writes.
"""

from __future__ import annotations

import copy
import io
import json
import logging
import os
import socket
import threading
import time
from typing import Any

from flightdeck.local.net import base_url, listen

_UNSERIALIZED_TARGETS = {"AmazonSQS.ReceiveMessage"}
_TRANSACT_WRITE = "DynamoDB_20120810.TransactWriteItems"
# How long DynamoDB remembers a ClientRequestToken.
IDEMPOTENCY_WINDOW_S = 600.0


class SerializedApp:
    """A WSGI wrapper that lets one request at a time into moto (long polls excepted)."""

    def __init__(self, app: Any, clock: Any = time.monotonic):
        self.app = app
        self.clock = clock
        self._lock = threading.Lock()
        # ClientRequestToken -> (when, status, headers, body) of a committed TransactWriteItems.
        self._committed: dict[str, tuple[float, str, list[tuple[str, str]], list[bytes]]] = {}

    @staticmethod
    def _is_long_poll(environ: dict[str, Any]) -> bool:
        # SQS's JSON protocol names the action in X-Amz-Target; the query protocol in the query string.
        return environ.get("HTTP_X_AMZ_TARGET") in _UNSERIALIZED_TARGETS or "Action=ReceiveMessage" in environ.get(
            "QUERY_STRING", ""
        )

    def __call__(self, environ: dict[str, Any], start_response: Any) -> Any:
        if self._is_long_poll(environ):
            return self.app(environ, start_response)
        token = self._transaction_token(environ)
        with self._lock:
            if token is not None:
                return self._idempotent(token, environ, start_response)
            # Produce the whole body inside the lock: a lazy iterable would run moto after it.
            return list(self.app(environ, start_response))

    @staticmethod
    def _transaction_token(environ: dict[str, Any]) -> str | None:
        """A TransactWriteItems' ClientRequestToken (its body is read, and put back for moto)."""
        if environ.get("HTTP_X_AMZ_TARGET") != _TRANSACT_WRITE:
            return None
        length = int(environ.get("CONTENT_LENGTH") or 0)
        body = environ["wsgi.input"].read(length) if length else b""
        environ["wsgi.input"] = io.BytesIO(body)
        try:
            token = json.loads(body or b"{}").get("ClientRequestToken")
        except (ValueError, AttributeError):
            return None
        return token if isinstance(token, str) and token else None

    def _idempotent(self, token: str, environ: dict[str, Any], start_response: Any) -> list[bytes]:
        now = self.clock()
        self._committed = {t: c for t, c in self._committed.items() if now - c[0] < IDEMPOTENCY_WINDOW_S}
        if token in self._committed:
            _, status, headers, body = self._committed[token]
            start_response(status, headers)
            return body
        seen: dict[str, Any] = {}

        def recording_start_response(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> Any:
            seen.update(status=status, headers=list(headers))
            return start_response(status, headers, exc_info) if exc_info else start_response(status, headers)

        body = list(self.app(environ, recording_start_response))
        if str(seen.get("status", "")).startswith("200"):
            self._committed[token] = (now, seen["status"], seen["headers"], body)
        return body


def share_stream_records() -> None:
    """moto deep-copies a table for every TransactWriteItems (to put it back if a condition fails), its stream's
    records with it, so with a stream on (THINK_START = "stream", or the bench's index accounting) every transaction
    costs more than the one before. A record never changes once written: the copy shares them (a list of its own,
    so a rollback still drops the records the transaction added)."""
    from moto.dynamodb.models.table import StreamShard

    def deepcopy_sharing_records(shard: Any, memo: dict[int, Any]) -> Any:
        clone = copy.copy(shard)
        memo[id(shard)] = clone
        clone.table = memo.get(id(shard.table), shard.table)  # the table being copied, when it is
        clone.items = list(shard.items)
        return clone

    StreamShard.__deepcopy__ = deepcopy_sharing_records  # type: ignore[attr-defined]  # moto defines none: this is its copy


def serialized_moto_app() -> SerializedApp:
    """moto's WSGI application (every service), one request at a time."""
    from moto.moto_server.werkzeug_app import DomainDispatcherApplication, create_backend_app

    share_stream_records()
    return SerializedApp(DomainDispatcherApplication(create_backend_app))


def make_wsgi_server(listening: socket.socket) -> Any:
    """A threaded werkzeug server running moto on an already listening socket (which it takes over)."""
    from moto.moto_server.werkzeug_app import MotoRequestHandler
    from werkzeug.serving import make_server

    # werkzeug logs every request; only problems are worth showing.
    logging.getLogger("werkzeug").setLevel(logging.WARNING)
    host, port = listening.getsockname()[:2]
    # werkzeug wraps the descriptor itself; host and port then only pick the address family.
    fd = listening.detach()
    app = serialized_moto_app()
    try:
        return make_server(host, port, app, threaded=True, request_handler=MotoRequestHandler, fd=fd)
    finally:
        os.close(fd)  # werkzeug serves on its own duplicate of it


class MotoServerThread:
    """A moto server in a daemon thread of this process, on loopback."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0):
        self.host = host
        self.port = port
        self._server: Any = None
        self._thread: threading.Thread | None = None

    @property
    def endpoint(self) -> str:
        if self._server is None:
            raise RuntimeError("the moto server is not started")
        return base_url(self.host, self.port)

    def start(self) -> MotoServerThread:
        sock = listen(self.host, self.port, "the moto server")
        self.port = sock.getsockname()[1]
        self._server = make_wsgi_server(sock)
        self._thread = threading.Thread(target=self._server.serve_forever, name="moto-server", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._server = self._thread = None

    def __enter__(self) -> MotoServerThread:
        return self.start()

    def __exit__(self, *exc_info: Any) -> None:
        self.stop()
