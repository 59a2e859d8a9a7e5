"""Each agent's MCP servers asked for their tools once, at `flightdeck local up` and by `flightdeck check --aws`,
so that a server that is down or a `tools` entry it does not offer is said at start, naming the server, its TOML
key and the fix, not found later as a turn that quietly went without the tool (the agents then list the servers
themselves: flightdeck.domain.mcp_tools)."""

from __future__ import annotations

import difflib
from collections.abc import Callable, Mapping

from flightdeck.adapters.mcp_http import McpHttp
from flightdeck.config_file import toml_key
from flightdeck.config_models import DeploymentFile
from flightdeck.domain.agent import McpServer
from flightdeck.domain.mcp_tools import read_listing

PROBE_TIMEOUT_S = 5.0


def warnings(deployment: DeploymentFile, environment: Mapping[str, str], client: McpHttp | None = None) -> list[str]:
    """Locally: each server's token from this environment (its `env:` credential)."""

    def unset(server: McpServer) -> str:
        name = server.credential.removeprefix("env:")
        return f"{server.credential} is not set in this shell. Fix: export {name}=<the server's token>"

    return probe(deployment, lambda agent, server: _token(server, environment), unset, client)


def probe(
    deployment: DeploymentFile,
    token_of: Callable[[str, McpServer], str | None],
    unset: Callable[[McpServer], str],
    client: McpHttp | None = None,
) -> list[str]:
    """One line per problem: a credential that cannot be had (`unset` says why and the fix), a server that does not
    answer tools/list, or a listed tool it does not offer. token_of(agent, server): its bearer token ("" for none),
    or None."""
    client = client or McpHttp()
    lines: list[str] = []
    for agent, spec in deployment.agents.items():
        for index, server in enumerate(spec.mcp_servers):
            key = toml_key(("agents", agent, "mcp_servers", index))
            token = token_of(agent, server)
            if token is None:
                lines.append(f"{key} credential: {agent} cannot call {server.name!r}: {unset(server)}")
                continue
            exchange = client.list_tools(server.url, token or None, PROBE_TIMEOUT_S)
            listing = read_listing(server, server.url, exchange)
            if listing.problem:
                lines.append(
                    f"{key} url: the MCP server {server.name!r} at {server.url} did not list its tools "
                    f"({listing.problem}): {agent}'s model gets none of them until it answers. Fix: start the "
                    "server, or correct the url"
                )
                continue
            offered = [t["name"] for t in (exchange.result or {}).get("tools", []) if isinstance(t, dict)]
            for missing in listing.missing:
                lines.append(f"{key} tools: {_missing_line(server, missing, offered)}")
    return lines


def _token(server: McpServer, environment: Mapping[str, str]) -> str | None:
    """The bearer token ("" for none), or None when its env: variable is unset (a secret: is read on AWS only)."""
    if not server.credential.startswith("env:"):
        return ""
    return environment.get(server.credential.removeprefix("env:"))


def _missing_line(server: McpServer, missing: str, offered: list[object]) -> str:
    configured = [t.name for t in server.tools or ()]
    names = [n for n in offered if isinstance(n, str) and n not in configured]
    close = difflib.get_close_matches(missing, names, n=1)
    fix = (
        f'did you mean "{close[0]}"?'
        if close
        else f'remove "{missing}" (it offers: {", ".join(names) or "nothing else"})'
    )
    return (
        f'"{missing}" is not a tool the MCP server {server.name!r} offers: it is never offered to the model. Fix: {fix}'
    )
