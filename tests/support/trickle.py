"""An HTTP server on loopback whose answer never quite comes: after its headers it sends a few bytes (an SSE
keep-alive, a progress notification, a space before JSON, a digit of a chunk's size) every `every_s`, `beats`
times, the way a slow or hostile server holds a client that bounds only each wait for bytes.

`closed` is set when the client hung up mid-trickle, `finished` when the server sent its whole trickle: a client
that returned while `finished` is unset was not held by the server (no clock is read to say so)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

KEEP_ALIVE = b": keep-alive\n\n"
PROGRESS = b'data: {"jsonrpc":"2.0","method":"notifications/progress","params":{"progress":1}}\n\n'


@dataclass
class Trickle:
    content_type: str = "text/event-stream"
    beat: bytes = KEEP_ALIVE
    # "close": the body ends when the connection does (HTTP/1.0); "chunked": each beat a chunk;
    # "chunk-size": one chunk whose size line is sent a digit ("0") per beat, never ending; "headers": a header
    # line sent a letter per beat, never ending (no body).
    framing: str = "close"
    every_s: float = 0.1
    beats: int = 300  # 30 s at 0.1 s: far past any deadline a test gives its client
    opening: tuple[bytes, ...] = ()  # sent first, a piece per beat (an answer amid the trickle)
    closed: threading.Event = field(default_factory=threading.Event)
    finished: threading.Event = field(default_factory=threading.Event)
    requests: list[tuple[str, int]] = field(default_factory=list)  # (method and path, the client's port)
    url: str = ""
    _stop: threading.Event = field(default_factory=threading.Event)

    def _body(self) -> Iterator[bytes]:
        yield from self.opening
        for _ in range(self.beats):
            if self.framing == "chunked":
                yield b"%x\r\n%s\r\n" % (len(self.beat), self.beat)
            elif self.framing == "chunk-size":
                yield b"0"
            elif self.framing == "headers":
                yield b"a"
            else:
                yield self.beat


@contextmanager
def trickling(trickle: Trickle) -> Iterator[Trickle]:
    """The server, serving `trickle` at trickle.url (any path, GET or POST) until the block ends."""

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.0" if trickle.framing == "close" else "HTTP/1.1"

        def log_message(self, *args: object) -> None:
            pass

        def do_GET(self) -> None:
            self._trickle()

        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            self._trickle()

        def _trickle(self) -> None:
            trickle.requests.append((f"{self.command} {self.path}", self.client_address[1]))
            self.send_response(200)
            self.send_header("Content-Type", trickle.content_type)
            if trickle.framing != "close":
                self.send_header("Transfer-Encoding", "chunked")
            if trickle.framing == "headers":
                self._headers_buffer.append(b"X-Slow: ")
                self.flush_headers()
            else:
                self.end_headers()
            try:
                for piece in trickle._body():
                    self.wfile.write(piece)
                    self.wfile.flush()
                    if trickle._stop.wait(trickle.every_s):
                        return
            except OSError:  # the client hung up: a write to its closed connection fails
                trickle.closed.set()
                return
            if trickle.framing == "chunked":
                self.wfile.write(b"0\r\n\r\n")  # the body's end: the connection may carry another request
            else:
                self.close_connection = True
            trickle.finished.set()

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    trickle.url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        yield trickle
    finally:
        trickle._stop.set()  # ends a trickle still going (a client that never hung up)
        server.shutdown()
        server.server_close()
