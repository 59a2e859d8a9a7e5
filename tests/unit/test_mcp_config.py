"""An agent's MCP servers in the deployment file (issue 28): what the check refuses, each naming its TOML key."""

from __future__ import annotations

from pathlib import Path

import pytest

from flightdeck import config_check, config_file, config_models

AGENT = """
[agents.reader]
allowed_hosts = { notes = "http://127.0.0.1:8931" }
callback_secret = "local-only-reader-callback-secret-0123456789"
[[agents.reader.mcp_servers]]
name = "notes"
url = "http://127.0.0.1:8931/mcp"
credential = "env:NOTES_TOKEN"
tools = ["search", { name = "get_note", timeout_ms = 3000 }]
"""


def _check(tmp_path: Path, text: str, runtime: config_check.Runtime = "local") -> config_models.DeploymentFile:
    path = tmp_path / "agents.toml"
    path.write_text(text)
    return config_check.load_checked(path, runtime)


def _problems(tmp_path: Path, text: str, runtime: config_check.Runtime = "local") -> list[str]:
    with pytest.raises(config_file.ConfigFileError) as caught:
        _check(tmp_path, text, runtime)
    return [line.split("agents.toml: ", 1)[1] for line in str(caught.value).splitlines()]


def test_a_server_with_its_allowlist_and_timeouts_is_read(tmp_path):
    server = _check(tmp_path, AGENT).agents["reader"].mcp_servers[0]
    assert (server.name, server.credential) == ("notes", "env:NOTES_TOKEN")
    assert server.allows("search") and server.allows("get_note") and not server.allows("add_note")
    assert (server.timeout_of("get_note"), server.timeout_of("search")) == (3000, 10_000)


def test_an_unknown_key_is_refused_with_its_table(tmp_path):
    [line] = _problems(tmp_path, AGENT.replace('credential = "env:NOTES_TOKEN"', 'token = "abc"'))
    assert line.startswith('[[agents.reader.mcp_servers]] #1 token: unknown key "token"')


def test_a_url_outside_the_allowlist_is_refused(tmp_path):
    [line] = _problems(tmp_path, AGENT.replace('url = "http://127.0.0.1:8931/mcp"', 'url = "http://10.0.0.9/mcp"'))
    assert line.startswith("[[agents.reader.mcp_servers]] #1 url: http://10.0.0.9/mcp is not under any base URL")
    assert 'allowed_hosts = { notes = "http://10.0.0.9" }' in line


def test_a_credential_given_as_a_value_is_refused_without_echoing_it(tmp_path):
    [line] = _problems(tmp_path, AGENT.replace('"env:NOTES_TOKEN"', '"sk-live-very-secret-token"'))
    assert line.startswith("[[agents.reader.mcp_servers]] #1 credential: an MCP credential is a reference")
    assert "sk-live-very-secret-token" not in line


def test_on_aws_the_credential_is_a_secret(tmp_path):
    [line] = _problems(tmp_path, AGENT, "aws")
    assert line.startswith("[[agents.reader.mcp_servers]] #1 credential: env:NOTES_TOKEN names an environment variable")
    assert _check(tmp_path, AGENT.replace("env:NOTES_TOKEN", "secret:flightdeck/notes-token"), "aws")


def test_a_server_named_like_a_delegate_is_refused(tmp_path):
    text = AGENT.replace('name = "notes"', 'name = "worker"') + '[[agents.reader.delegates]]\nagent = "worker"\n'
    problems = _problems(tmp_path, text)
    assert any("#1 name: is 'worker', a delegate's agent name" in p for p in problems)


def test_a_tool_timeout_past_what_a_worker_can_wait_is_refused(tmp_path):
    [line] = _problems(tmp_path, AGENT.replace("timeout_ms = 3000", "timeout_ms = 60000"))
    assert line.startswith("[[agents.reader.mcp_servers]] #1 tools[1].timeout_ms") and "25000" in line
