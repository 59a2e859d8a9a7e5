"""The agent host `flightdeck bench` runs: the local runtime's host (flightdeck.local.agent_host),
counting every AWS request and local invocation of its process into the directory its
environment names (flightdeck.bench.counter). The local runtime knows nothing of the bench: the
bench starts its stack with this module as the host (LocalStack(host_module=...)).

    python -m flightdeck.bench.counting_host ...   (the agent host's own arguments)
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

from flightdeck.bench import counter
from flightdeck.local import agent_host

MODULE = "flightdeck.bench.counting_host"


def main(argv: Sequence[str] | None = None) -> int:
    counter.install(os.environ[counter.ENV], os.environ.get("AGENT_NAME", "agent"))
    return agent_host.main(argv)


if __name__ == "__main__":
    sys.exit(main())
