"""Roles by route (issue 36): every route the routers serve has a row in the one route x role table
(flightdeck.topology ROUTES' roles, written out in docs/PEERS.md), and each role's credential gets through
exactly the routes the table gives it; a skill call is bound on the caller's channel; the inspector is its
user's, reads cards only, and exists only where the console is on.

One agent's real handlers on moto; each role has its own credential: a token for each token channel,
the callback token this agent minted for a delegation, none at all.
"""

from __future__ import annotations

import importlib
import json
import pkgutil
import re
from pathlib import Path
from typing import Any

import pytest
from aws_lambda_powertools.event_handler.api_gateway import Router

from flightdeck import topology
from tests.integration.test_skills_api import config_with_skills
from tests.support.harness import load_event, make_agent, new_session_id

DOC = Path(__file__).resolve().parents[2] / "docs" / "PEERS.md"
# Who holds each token role here: a peer id, and the channels its token opens.
HOLDERS = {topology.USER: "alice", topology.PEER_AGENT: "other-agent", topology.MCP_CLIENT: "claude"}
_REFUSED = (401, 403)


def _router_routes() -> set[tuple[str, str]]:
    """(method, path) of every route any router of flightdeck.api serves, read from the routers themselves."""
    import flightdeck.api

    found = set()
    for info in pkgutil.walk_packages(flightdeck.api.__path__, "flightdeck.api."):
        for value in vars(importlib.import_module(info.name)).values():
            if isinstance(value, Router):
                for key in value._routes:
                    rule, methods = key[0], key[1]
                    found |= {(method, re.sub(r"<([^>]+)>", r"{\1}", rule)) for method in methods}
    return found


def test_every_route_the_routers_serve_has_a_row_in_the_role_table():
    assert _router_routes() == {(r.method, r.path) for r in topology.ROUTES}


def _doc_table() -> dict[tuple[str, str], set[str]]:
    """docs/PEERS.md's route x role table: (method, path) -> the roles ticked."""
    rows: dict[tuple[str, str], set[str]] = {}
    for line in DOC.read_text(encoding="utf-8").splitlines():
        match = re.match(r"^\| `(GET|POST|DELETE) ([^`]+)`[^|]*\|(.*)\|$", line)
        if match:
            cells = [c.strip() for c in match.group(3).split("|")]
            assert len(cells) == len(topology.ROLES), line
            rows[(match.group(1), match.group(2))] = {r for r, c in zip(topology.ROLES, cells, strict=True) if c}
    return rows


def test_the_documented_table_is_the_enforced_one():
    assert _doc_table() == {(r.method, r.path): set(r.roles) for r in topology.ROUTES}


@pytest.fixture
def agent(aws, monkeypatch):
    agent = make_agent(monkeypatch, "worker", delegates=[], extra_env={"AGENT_CONFIG": config_with_skills()})
    agent.role_tokens = {role: agent.add_peer(peer, (role,)) for role, peer in HOLDERS.items()}
    return agent


def _request(agent, route: topology.Route, role: str, sid: str) -> dict[str, Any]:
    """A request to `route` carrying `role`'s credential where that route looks for one of its kind."""
    credential = agent.role_tokens.get(role) or (agent.token(sid, 1, "call-1") if role == topology.DELEGATE else "")
    event = load_event("api/session_get.json", SESSION_ID=sid)
    path = route.path.replace("{session_id}", sid).replace("{tool_use_id}", "call-1")
    params = {k: v for k, v in (("session_id", sid), ("tool_use_id", "call-1")) if "{" + k + "}" in route.path}
    headers = {"Host": "127.0.0.1"}  # the agent's own (an agent on loopback takes no other at /mcp)
    if credential and route.path != "/api/tools/responses":
        header = route.token_header if route.token_header and role == topology.DELEGATE else "Authorization"
        headers[header] = credential if header.startswith("x-") else f"Bearer {credential}"
    body: Any = None
    if route.method == "POST":
        body = {"result": "done"}
        if route.path == "/api/tools/responses":
            body = {"items": [{"token": credential or "none", "result": "done"}]}
        elif route.path in ("/a2a", "/mcp"):
            body = {"jsonrpc": "2.0", "id": 1, "method": "tasks/get", "params": {"id": "t-1"}}
    event.update(
        resource=route.path,
        path=path,
        httpMethod=route.method,
        pathParameters=params or None,
        body=json.dumps(body) if body is not None else None,
    )
    for name, value in headers.items():
        event["headers"][name] = value
        event["multiValueHeaders"][name] = [value]
    return event


def _answer(agent, route: topology.Route, event: dict[str, Any]) -> tuple[int, Any]:
    """The status (for a batch of callbacks, its one item's) and body of the route's handler's answer."""
    module = importlib.import_module(f"flightdeck.handlers.{route.handler}")
    from aws_lambda_powertools.utilities.typing import LambdaContext

    response = module.handler(event, LambdaContext())
    if not isinstance(response, dict):  # a stream: its status is the answer's
        return response.status, None
    body = json.loads(response["body"]) if response.get("body") else None
    if isinstance(body, dict) and isinstance(body.get("results"), list):
        return body["results"][0]["http_status"], body
    return response["statusCode"], body


@pytest.mark.parametrize("route", topology.ROUTES, ids=lambda r: f"{r.method} {r.path}")
def test_each_role_gets_through_exactly_the_routes_the_table_gives_it(agent, route):
    sid = new_session_id()
    for role in topology.ROLES:
        status, body = _answer(agent, route, _request(agent, route, role, sid))
        if role in route.roles or topology.ANYONE in route.roles:  # anyone: every caller, whatever it holds
            assert status not in _REFUSED, (role, status, body)
            assert not (status == 404 and body["error"]["code"] == "not_found"), (role, body)  # the route exists
        else:
            assert status in _REFUSED, (role, status, body)


@pytest.mark.parametrize("route", [r for r in topology.ROUTES if r.console], ids=lambda r: f"{r.method} {r.path}")
def test_the_console_s_routes_do_not_exist_where_the_console_is_off(aws, monkeypatch, route):
    agent = make_agent(monkeypatch, "worker", delegates=[], extra_env={"CONSOLE": "off"})
    agent.role_tokens = {topology.USER: agent.add_peer("alice", (topology.USER,))}
    status, body = _answer(agent, route, _request(agent, route, topology.USER, new_session_id()))
    assert (status, body["error"]["code"]) == (404, "not_found"), body


def test_a_peer_agent_calls_only_the_skills_exposed_to_a2a_and_is_told_only_of_those(agent):
    peer = agent.auth_headers(agent.role_tokens[topology.PEER_AGENT])
    before = agent.table_items()
    for skill in ("secret_sauce", "no_such_skill"):  # internal only; unknown
        status, _, body = agent.api("chat_post", body={"skill": skill, "arguments": {}}, headers=peer)
        assert (status, body["error"]["code"]) == (400, "invalid_arguments"), body
        # get_quote and count_words are exposed to a2a; secret_sauce (internal) is not named.
        assert body["error"]["message"].endswith("(skills: count_words, get_quote)"), body
    status, _, body = agent.api("chat_post", body={"content": 'skill:secret_sauce {"x": 1}'}, headers=peer)
    assert status == 400 and "secret_sauce" not in body["error"]["message"].split("skills:")[1], body
    assert agent.table_items() == before  # nothing stored
    # The same call as a peer the model answers: a skill exposed to a2a.
    status, _, body = agent.api("chat_post", body={"skill": "count_words", "arguments": {"text": "a b"}}, headers=peer)
    assert status == 202, body


def test_the_agent_s_user_calls_every_skill_and_is_told_of_every_one(agent):
    user = agent.auth_headers(agent.role_tokens[topology.USER])
    status, _, body = agent.api("chat_post", body={"skill": "no_such_skill", "arguments": {}}, headers=user)
    assert status == 400 and body["error"]["message"].endswith("(skills: count_words, get_quote, secret_sauce)")
    status, _, body = agent.api("chat_post", body={"skill": "secret_sauce", "arguments": {}}, headers=user)
    assert status == 202, body


def test_an_internal_skill_call_is_refused_to_a_revoked_user(agent):
    """The user's token is read for an internal skill (the write would not say which channel it passed on)."""
    agent.registry.revoke(HOLDERS[topology.USER])
    user = agent.auth_headers(agent.role_tokens[topology.USER])
    before = agent.table_items()
    status, _, body = agent.api("chat_post", body={"skill": "secret_sauce", "arguments": {}}, headers=user)
    assert (status, body["error"]["code"]) == (403, "forbidden"), body
    assert agent.table_items() == before


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:9/admin",
        "http://127.0.0.1:9/.well-known/agent-card.json?next=/admin",
        "http://127.0.0.1:9/admin;/.well-known/agent-card.json",
        "http://127.0.0.1:9/mcp",
    ],
)
def test_the_inspector_reads_only_an_agent_card(agent, url):
    user = agent.auth_headers(agent.role_tokens[topology.USER])
    route = topology.route_for("GET", "/api/inspector/card")
    event = _request(agent, route, topology.USER, new_session_id())
    event["headers"].update(user)
    event["queryStringParameters"] = {"url": url}
    event["multiValueQueryStringParameters"] = {"url": [url]}
    status, body = _answer(agent, route, event)
    assert (status, body["error"]["code"]) == (400, "not_a_card_url"), body
