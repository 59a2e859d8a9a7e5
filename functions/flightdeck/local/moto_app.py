"""moto's WSGI app with one request at a time.

DynamoDB applies each request atomically; moto's in-memory backend does not
(TransactWriteItems deep-copies tables that concurrent writes mutate). Serving
requests one at a time restores per-request atomicity, so conditional writes and
transactions race as they would on AWS, while clients stay truly concurrent.
"""

from __future__ import annotations

import threading
from typing import Any, Callable, Iterable


def serialized_moto_app() -> Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]:
    from moto.moto_server.werkzeug_app import DomainDispatcherApplication, create_backend_app

    app = DomainDispatcherApplication(create_backend_app)
    lock = threading.Lock()

    def serialized(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        with lock:
            return list(app(environ, start_response))

    return serialized


class MotoServerThread:
    """A serialized moto server in a background thread (tests and in-process tools)."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0):
        from moto.moto_server.werkzeug_app import MotoRequestHandler
        from werkzeug.serving import make_server

        self._server = make_server(host, port, serialized_moto_app(), threaded=True,
                                   request_handler=MotoRequestHandler)
        self._thread = threading.Thread(target=self._server.serve_forever, name="moto-server", daemon=True)

    @property
    def endpoint(self) -> str:
        return f"http://{self._server.host}:{self._server.port}"

    def start(self) -> "MotoServerThread":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._thread.join(timeout=5)
