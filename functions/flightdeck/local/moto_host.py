"""A moto server on a listening socket inherited from the parent (flightdeck.local.stack).

    python -m flightdeck.local.moto_host --listen-fd 5 --parent-pid 1234

The parent binds the port itself, so a port clash is reported there at once and
no other process can take the port between choosing and serving it. moto runs
in its own process so its (slow, GIL-bound) work does not compete with the
parent's or the agents'.
"""

from __future__ import annotations

import argparse
import logging
import os
import socket
import sys
import threading
import time
from typing import Sequence

PARENT_CHECK_INTERVAL_S = 0.5


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m flightdeck.local.moto_host")
    parser.add_argument("--listen-fd", type=int, required=True, help="an inherited, listening TCP socket")
    parser.add_argument("--parent-pid", type=int, help="exit when this process is no longer the parent")
    args = parser.parse_args(argv)

    from moto.moto_server.werkzeug_app import DomainDispatcherApplication, MotoRequestHandler, create_backend_app
    from werkzeug.serving import make_server

    # werkzeug logs every request; only problems are worth relaying.
    logging.getLogger("werkzeug").setLevel(logging.WARNING)
    app = DomainDispatcherApplication(create_backend_app)
    listening = socket.socket(fileno=args.listen_fd)
    host, port = listening.getsockname()[:2]
    listening.detach()  # werkzeug wraps the descriptor itself; host and port only pick the address family
    server = make_server(host, port, app, threaded=True, request_handler=MotoRequestHandler, fd=args.listen_fd)

    if args.parent_pid:
        def watch() -> None:
            while True:
                time.sleep(PARENT_CHECK_INTERVAL_S)
                if os.getppid() != args.parent_pid:
                    os._exit(0)  # nothing to flush: moto's state dies with the stack anyway

        threading.Thread(target=watch, name="parent-watch", daemon=True).start()

    print(f"moto server on http://{host}:{port}", file=sys.stderr, flush=True)
    server.serve_forever()  # SIGTERM's default action ends the process
    return 0


if __name__ == "__main__":
    sys.exit(main())
