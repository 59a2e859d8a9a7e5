"""Loopback networking shared by the local runtime: listening sockets, base URLs, liveness probes."""

from __future__ import annotations

import errno
import logging
import socket
import sys
import urllib.error
import urllib.request

# Straight to loopback, whatever proxy the environment configures.
direct_opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))


class StackError(RuntimeError):
    """The local runtime could not start (or restart) something."""


class PortInUseError(StackError):
    def __init__(self, host: str, port: int, owner: str):
        super().__init__(f"port {port} on {host} is already in use (wanted by {owner})")
        self.host, self.port, self.owner = host, port, owner


def listen(host: str, port: int, owner: str) -> socket.socket:
    """A listening TCP socket on host:port (0: a free port); owner names the user in errors."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        # SO_REUSEADDR (set by create_server) lets a restarted server reclaim its
        # port from TIME_WAIT, never from another listener.
        return socket.create_server((host, port), family=family, backlog=128)
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE:
            raise PortInUseError(host, port, owner) from None
        raise StackError(f"cannot listen on {host}:{port} for {owner}: {exc.strerror or exc}") from None


def base_url(host: str, port: int) -> str:
    # A wildcard bind is reached through loopback.
    host = {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}.get(host, host)
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def answers_http(url: str, timeout_s: float = 2.0) -> bool:
    """True when something at url answers HTTP at all (any status)."""
    try:
        with direct_opener.open(url, timeout=timeout_s):
            return True
    except urllib.error.HTTPError:
        return True
    except (OSError, urllib.error.URLError):
        return False


class QuietDisconnects:
    """For a socketserver server: a client that hangs up mid-answer is a debug line, not a traceback on stderr
    (socketserver prints one for every error it catches; a closed browser tab or a Ctrl-C'd curl is no error)."""

    def handle_error(self, request: object, client_address: object) -> None:
        if isinstance(sys.exc_info()[1], ConnectionError):  # reset, broken pipe, aborted
            logging.getLogger(__name__).debug("client %s disconnected", client_address)
            return
        super().handle_error(request, client_address)  # type: ignore[misc]
