"""`flightdeck local demo --scenario tools` (issue 28): the stack starts the example MCP server of
examples/mcp-tools.toml on loopback, the orchestrator's model lists its tools, calls notes__search and answers
with its result, and the timeline shows the call."""

from __future__ import annotations

import io
import socket

import pytest

from flightdeck import config_file
from flightdeck.local import demo

pytestmark = pytest.mark.slow


def _port_free(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) != 0


def test_the_tools_scenario_calls_the_example_servers_tool_and_answers_with_its_result():
    deployment = config_file.load_checked(demo.TOOLS_SCENARIO_CONFIG, "local")
    port = deployment.local.mcp_servers["notes"].port
    if not _port_free(port):
        pytest.skip(f"port {port} is taken")
    out = io.StringIO()
    answer = demo.run(deployment, "tools", out=out, logs=None)
    assert answer.startswith("1 of 1 MCP tool call succeeded.")
    assert '!notes__search {"query": "owl"} → {"query": "owl", "matches": [{"id": 1, "title": "Owls"}]}' in answer
    shown = out.getvalue()
    assert "running notes__search" in shown and "notes__search finished" in shown
    assert _port_free(port)  # the example server stopped with the stack
