"""One agent's HTTP gateway and its queue pollers in the test's own process (handlers on the active moto mock)."""

from __future__ import annotations

import threading
import time
from contextlib import contextmanager

from flightdeck.local.gateway import ApiGateway, GatewayServer
from flightdeck.local.invocation import FunctionRegistry


@contextmanager
def gateway(agent_name: str):
    """The agent's API on a loopback port (the local gateway, in this process): yields its base URL."""
    server = GatewayServer(ApiGateway(FunctionRegistry(agent_name)), address=("127.0.0.1", 0))
    server.start_background()
    try:
        yield f"http://127.0.0.1:{server.port}"
    finally:
        server.shutdown()
        server.server_close()


@contextmanager
def pumping(agent, *queues: str):
    """Run these queues' handlers in the background, as Lambda's event source mappings would."""
    stop = threading.Event()

    def loop():
        while not stop.is_set():
            for key in queues:
                agent.run_queue(key)
            time.sleep(0.05)

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
