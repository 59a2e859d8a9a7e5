"""LOCAL ONLY: the example MCP servers of a deployment file's [local.mcp_servers], started beside the agents.

Each is served on a free loopback port the stack binds itself and hands to the server as its listening socket
(`--listen-fd`), so parallel stacks never collide and no port can be taken between choosing and serving it. The
file names a server by the address the agents' URLs use (`http://127.0.0.1:<port>`); `with_served_urls` points
those URLs (each agent's `mcp_servers` url and `allowed_hosts`) at the port actually served.
"""

from __future__ import annotations

import os
import secrets
import socket
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from flightdeck import config_file
from flightdeck.config_models import DeploymentFile
from flightdeck.local.net import StackError, base_url, listen

START_TIMEOUT_S = 30.0
LOOPBACK = ("127.0.0.1", "localhost")


@dataclass
class McpServers:
    """The running servers: their processes, the tokens they take (for the agents' environment too), and
    name -> the base URL each is served at."""

    processes: list[subprocess.Popen[bytes]] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    urls: dict[str, str] = field(default_factory=dict)

    def start(self, deployment: DeploymentFile, base_env: Mapping[str, str]) -> None:
        """Start every server of the file (its token: the environment variable it names, else a fresh one)."""
        root = config_file.DEFAULT_CONFIG.parents[1]
        for name, server in deployment.local.mcp_servers.items():
            env = dict(base_env)
            if server.token_env:
                token = os.environ.get(server.token_env) or self.env.get(server.token_env) or secrets.token_urlsafe(24)
                self.env[server.token_env] = env[server.token_env] = token
            script = Path(server.script) if Path(server.script).is_absolute() else root / server.script
            sock = listen("127.0.0.1", 0, f"the MCP server {name!r}")
            port = sock.getsockname()[1]
            args = [sys.executable, str(script), "--listen-fd", str(sock.fileno())]
            if server.token_env:
                args += ["--token-env", server.token_env]
            try:
                process = subprocess.Popen(args, env=env, stdout=subprocess.DEVNULL, pass_fds=(sock.fileno(),))
            finally:
                sock.close()  # the server holds the port now
            self.processes.append(process)
            self.urls[name] = base_url("127.0.0.1", port)
            _wait_until_listening(name, script, port, process)

    def stop(self) -> None:
        for process in self.processes:
            process.terminate()
        for process in self.processes:
            try:
                process.wait(5)
            except subprocess.TimeoutExpired:
                process.kill()
        self.processes.clear()

    def with_served_urls(self, deployment: DeploymentFile) -> DeploymentFile:
        """The file with every agent URL naming a local server's address (scheme, loopback host, its `port`)
        pointed at the port it is served on; anything else unchanged."""
        moved = {
            server.port: urlsplit(self.urls[name]).netloc
            for name, server in deployment.local.mcp_servers.items()
            if name in self.urls
        }

        def served(url: str) -> str:
            parts = urlsplit(url)
            if parts.scheme != "http" or parts.hostname not in LOOPBACK or parts.port not in moved:
                return url
            return urlunsplit(parts._replace(netloc=moved[parts.port]))

        agents = {
            name: spec.model_copy(
                update={
                    "allowed_hosts": {k: served(v) for k, v in spec.allowed_hosts.items()},
                    "mcp_servers": [s.model_copy(update={"url": served(s.url)}) for s in spec.mcp_servers],
                }
            )
            for name, spec in deployment.agents.items()
        }
        return deployment.model_copy(update={"agents": agents})


def _wait_until_listening(name: str, script: Path, port: int, process: subprocess.Popen[bytes]) -> None:
    # The socket accepts connections from the start (the kernel queues them); an answer to one proves the server
    # took it. A process that exits ends the wait at once.
    deadline = time.monotonic() + START_TIMEOUT_S
    while True:
        try:
            with socket.create_connection(("127.0.0.1", port), 0.5) as conn:
                conn.sendall(b"GET /mcp HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")
                if conn.recv(1):
                    return
        except OSError:
            pass
        if time.monotonic() > deadline or process.poll() is not None:
            raise StackError(f"the MCP server {name!r} ({script}) did not start")
        time.sleep(0.1)
