"""A local MCP agent for the conformance suite (.ci/mcp-conformance.sh): tests/support/mcp/agents.toml's
`assistant` with INBOUND_AUTH off (the suite sends no credentials: the local runtime keeps "off" for
isolated rigs; keys are tested by tests/integration/test_mcp_server.py). Prints `READY <mcp url>` and
serves until stdin closes or it is killed."""

from __future__ import annotations

import sys
from pathlib import Path

from flightdeck import config_file
from flightdeck.local.stack import LocalStack

CONFIG = Path(__file__).with_name("agents.toml")


def main() -> None:
    deployment = config_file.load(CONFIG)
    env = {"INBOUND_AUTH": "off", "MCP_WAIT_MS": "10000"}
    with LocalStack(deployment, relay=None, extra_env=env) as stack:
        print("READY", stack.urls["assistant"].rstrip("/") + "/mcp", flush=True)
        sys.stdin.read()


if __name__ == "__main__":
    main()
