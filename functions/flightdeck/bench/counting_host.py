"""The agent host `flightdeck bench` runs: the local runtime's host (flightdeck.local.agent_host),
counting every AWS request of its process and of each of its sandboxes, and every invocation, into
the directory its environment names (flightdeck.bench.counter). The local runtime knows nothing of
the bench: the bench starts its stack with this module as the host (LocalStack(host_module=...)),
which names `count_in_sandbox` as the host's sandbox initializer.

    python -m flightdeck.bench.counting_host ...   (the agent host's own arguments)
"""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any

from flightdeck.bench import counter
from flightdeck.local import agent_host

MODULE = "flightdeck.bench.counting_host"


def _agent() -> str:
    return os.environ.get("AGENT_NAME", "agent")


def count_in_sandbox(function_name: str, handler_module: str) -> Callable[[dict[str, Any], Callable[[], Any]], Any]:
    """In each sandbox, before its handler is imported: count its AWS calls, and wrap each invocation."""
    fn = handler_module.rsplit(".", 1)[-1]
    sink = counter.install(os.environ[counter.ENV], _agent(), function=fn)
    return functools.partial(counter.observe_invocation, sink, fn)


def main(argv: Sequence[str] | None = None) -> int:
    # The host's own requests: the pollers standing in for the event source mappings, the peer gate's.
    counter.install(os.environ[counter.ENV], _agent())
    args = list(sys.argv[1:] if argv is None else argv)
    return agent_host.main([*args, "--sandbox-initializer", f"{MODULE}:count_in_sandbox"])


if __name__ == "__main__":
    sys.exit(main())
