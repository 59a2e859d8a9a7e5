"""A moto server in its own process, on a listening socket inherited from the parent.

    python -m flightdeck.local.moto_host --listen-fd 5 --parent-pid 1234

The parent (flightdeck.local.stack) binds the port itself, so a clash is
reported there at once and no other process can take the port between choosing
and serving it. moto gets its own process so its slow, GIL-bound work does not
compete with the parent's or the agents'.
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
import threading
import time
from collections.abc import Sequence

from flightdeck.local.moto_app import make_wsgi_server

PARENT_CHECK_INTERVAL_S = 0.5


def exit_when_orphaned(parent_pid: int) -> None:
    def watch() -> None:
        while True:
            time.sleep(PARENT_CHECK_INTERVAL_S)
            if os.getppid() != parent_pid:
                os._exit(0)  # nothing to flush: moto's state dies with the stack anyway

    threading.Thread(target=watch, name="parent-watch", daemon=True).start()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m flightdeck.local.moto_host")
    parser.add_argument("--listen-fd", type=int, required=True, help="an inherited, listening TCP socket")
    parser.add_argument("--parent-pid", type=int, help="exit when this process is no longer the parent")
    args = parser.parse_args(argv)

    server = make_wsgi_server(socket.socket(fileno=args.listen_fd))
    if args.parent_pid:
        exit_when_orphaned(args.parent_pid)
    host, port = server.server_address[:2]
    print(f"moto server on {host}:{port}", file=sys.stderr, flush=True)
    server.serve_forever()  # SIGTERM's default action ends the process
    return 0


if __name__ == "__main__":
    sys.exit(main())
