"""`flightdeck local demo --scenario tools` (issue 28): the stack starts the example MCP server of
examples/mcp-tools.toml on a free loopback port, points the orchestrator's URLs at it, the orchestrator's model
lists its tools, calls notes__search and answers with its result, and the timeline shows the call."""

from __future__ import annotations

import io
import socket
from urllib.parse import urlsplit

import httpx
import pytest

from flightdeck import config_check
from flightdeck.local import demo
from flightdeck.local.mcp_servers import McpServers
from flightdeck.local.net import listen

pytestmark = pytest.mark.slow


def _answers(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


def test_the_tools_scenario_calls_the_example_servers_tool_and_answers_with_its_result():
    deployment = config_check.load_checked(demo.TOOLS_SCENARIO_CONFIG, "local")
    declared = deployment.local.mcp_servers["notes"].port
    # The address the file names is held by someone else (as by a parallel run): the demo does not need it.
    try:
        squatter = listen("127.0.0.1", declared, "this test")
    except OSError:
        squatter = None  # already taken by another process: the point stands
    try:
        out = io.StringIO()
        answer = demo.run(deployment, "tools", out=out, logs=None)
    finally:
        if squatter is not None:
            squatter.close()
    assert answer.startswith("1 of 1 MCP tool call succeeded.")
    assert '!notes__search {"query": "owl"} → {"query": "owl", "matches": [{"id": 1, "title": "Owls"}]}' in answer
    shown = out.getvalue()
    assert "running notes__search" in shown and "notes__search finished" in shown


def test_each_server_is_served_on_a_free_port_and_the_agents_urls_point_there(monkeypatch):
    monkeypatch.delenv("NOTES_TOKEN", raising=False)
    deployment = config_check.load_checked(demo.TOOLS_SCENARIO_CONFIG, "local")
    first, second = McpServers(), McpServers()
    try:
        first.start(deployment, {})
        second.start(deployment, {})
        ports = {urlsplit(s.urls["notes"]).port for s in (first, second)}
        assert len(ports) == 2 and all(_answers(p) for p in ports if p)
        moved = second.with_served_urls(deployment).agents["orchestrator"]
        assert moved.mcp_servers[0].url == second.urls["notes"] + "/mcp"
        assert moved.allowed_hosts["notes"] == second.urls["notes"]
        # Each takes only its own token (a fresh one: none in this environment), which the agents get too.
        token = second.env["NOTES_TOKEN"]
        assert httpx.post(second.urls["notes"] + "/mcp", json={}).status_code == 401
        assert (
            httpx.post(second.urls["notes"] + "/mcp", json={}, headers={"Authorization": f"Bearer {token}"}).status_code
            != 401
        )
        # Anything not naming a local server's address is left as it is.
        assert moved.delegates == deployment.agents["orchestrator"].delegates
        assert second.with_served_urls(deployment).agents["worker"] == deployment.agents["worker"]
    finally:
        stopped = [urlsplit(s.urls["notes"]).port for s in (first, second) if "notes" in s.urls]
        first.stop()
        second.stop()
    assert stopped and not any(_answers(p) for p in stopped if p)


def test_local_up_names_a_server_that_is_down_and_a_tool_it_does_not_offer(monkeypatch):
    """Issue 41: the probe `flightdeck local up` runs at start (flightdeck.local.mcp_probe). Each problem is one
    line naming the server's TOML key and the fix; a server that answers with every listed tool says nothing."""
    from flightdeck.local import mcp_probe

    monkeypatch.delenv("NOTES_TOKEN", raising=False)
    deployment = config_check.load_checked(demo.TOOLS_SCENARIO_CONFIG, "local")
    servers = McpServers()
    try:
        servers.start(deployment, {})
        served = servers.with_served_urls(deployment)
        assert mcp_probe.warnings(served, servers.env) == []
        spec = served.agents["orchestrator"]
        [server] = spec.mcp_servers
        misspelled = server.model_copy(
            update={"tools": [t.model_copy(update={"name": "serch"}) for t in server.tools[:1]]}
        )
        wrong_tool = served.model_copy(
            update={"agents": {**served.agents, "orchestrator": spec.model_copy(update={"mcp_servers": [misspelled]})}}
        )
        [line] = mcp_probe.warnings(wrong_tool, servers.env)
        assert line.startswith("[[agents.orchestrator.mcp_servers]] #1 tools: ")
        assert "\"serch\" is not a tool the MCP server 'notes' offers" in line and 'Fix: did you mean "search"?' in line
        [unset] = mcp_probe.warnings(served, {})
        assert unset.startswith("[[agents.orchestrator.mcp_servers]] #1 credential: orchestrator cannot call")
        assert "env:NOTES_TOKEN is not set in this shell. Fix: export NOTES_TOKEN=" in unset
    finally:
        servers.stop()
    [down] = mcp_probe.warnings(served, servers.env)  # the same file, the server stopped
    assert down.startswith("[[agents.orchestrator.mcp_servers]] #1 url: the MCP server 'notes' at ")
    assert "did not list its tools (unreachable" in down and "Fix: start the server, or correct the url" in down


def test_check_aws_asks_each_mcp_server_with_the_token_its_secret_holds(tmp_path, monkeypatch, capsys):
    """Issue 41: `flightdeck check --aws` lists each MCP server's tools from this machine, with the token read from
    the Secrets Manager secret its credential names (moto's), and warns as `local up` does; the exit stays 0."""
    from moto import mock_aws

    from flightdeck import cli

    monkeypatch.delenv("NOTES_TOKEN", raising=False)
    for name, value in {
        "AWS_ACCESS_KEY_ID": "t",
        "AWS_SECRET_ACCESS_KEY": "t",
        "AWS_DEFAULT_REGION": "us-east-1",
    }.items():
        monkeypatch.setenv(name, value)
    deployment = config_check.load_checked(demo.TOOLS_SCENARIO_CONFIG, "local")
    servers = McpServers()
    try:
        servers.start(deployment, {})
        base = servers.urls["notes"]
        text = demo.TOOLS_SCENARIO_CONFIG.read_text().replace("http://127.0.0.1:8931", base)
        text = text.replace('credential = "env:NOTES_TOKEN"', 'credential = "secret:notes-token"')
        path = tmp_path / "tools.toml"
        path.write_text(text)
        with mock_aws():
            import boto3

            missing = cli.main(["check", "--config", str(path), "--aws"])
            _, err = capsys.readouterr()
            assert missing == cli.EXIT_OK
            assert "#1 credential: orchestrator cannot call 'notes': secret:notes-token cannot be read" in err
            boto3.client("secretsmanager", region_name="us-east-1").create_secret(
                Name="notes-token", SecretString=servers.env["NOTES_TOKEN"]
            )
            assert cli.main(["check", "--config", str(path), "--aws"]) == cli.EXIT_OK
            out, err = capsys.readouterr()
            assert "every MCP server listed its tools" in out and "warning" not in err
            path.write_text(text.replace('tools = ["search",', 'tools = ["serch",'))
            assert cli.main(["check", "--config", str(path), "--aws"]) == cli.EXIT_OK
            _, err = capsys.readouterr()
            assert "#1 tools: \"serch\" is not a tool the MCP server 'notes' offers" in err
    finally:
        servers.stop()
