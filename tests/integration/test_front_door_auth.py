"""A bad token is refused before any other work, on every authenticated route of both front doors, counted.

On the lean door (docs/FRONT_DOORS.md) the function URLs have AuthType NONE: the in-function check is the
only gate, so it must run before anything else is read or written. Each case sends one route of the real
handler, on moto, the event its door delivers (REST door: API Gateway's proxy event; lean door: a function
URL's payload 2.0 event for the functions with a URL, the proxy event for the rest, which the HTTP API's
payload 1.0 and the Web Adapter's streaming functions deliver alike), with a bad token: missing, malformed,
forged, revoked (a callback token: signed with a key that is not ours, or expired). A botocore hook counts
every AWS request the function makes: none, or for a well-formed peer token the peer check's own request
(one GetItem of PEER#<peer>; on POST /api/chat, whose one write checks the peer's record in its own
transaction, that refused write); nothing is stored, nothing queued.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

import botocore.session
import pytest

from flightdeck import topology, wiring
from flightdeck.domain.peers import new_token
from flightdeck.local.function_url import build_function_url_event
from flightdeck.local.gateway import GatewayIdentity, Router, build_proxy_event
from tests.support.harness import TEST_PEER

DOORS = ("rest", "lean")
AUTHENTICATED = [r for r in topology.ROUTES if r.auth != topology.PUBLIC]
PEER_CASES = ("missing", "malformed", "forged", "revoked")
CALLBACK_CASES = ("missing", "malformed", "forged", "expired")
OTHER_SECRET = "not-this-agents-secret-0123456789abcdef0123456789"


@pytest.fixture
def aws_requests(monkeypatch) -> Iterator[list[tuple[str, str, dict[str, Any]]]]:
    """Every AWS request of every botocore client created from here on: (service, operation, params)."""
    seen: list[tuple[str, str, dict[str, Any]]] = []
    original = botocore.session.Session.create_client

    def create_client(self: Any, *args: Any, **kwargs: Any) -> Any:
        client = original(self, *args, **kwargs)

        def record(params: dict[str, Any], model: Any, **_: Any) -> None:
            seen.append((model.service_model.service_name, model.name, params))

        client.meta.events.register("before-parameter-build", record)
        return client

    monkeypatch.setattr(botocore.session.Session, "create_client", create_client)
    yield seen


def _path(route: topology.Route) -> str:
    return route.path.replace("{session_id}", "s-0123456789").replace("{tool_use_id}", "tu-1")


def _body(route: topology.Route, token: str | None) -> str:
    if route.path == "/api/tools/responses":
        return json.dumps({"items": [{"token": token or "", "result": "an answer"}]})
    if route.path in ("/a2a", "/mcp", "/api/inspector/rpc"):
        return json.dumps({"jsonrpc": "2.0", "id": "1", "method": "tasks/get", "params": {"id": "t-1"}})
    if route.path == "/api/a2a/push":
        return json.dumps({"id": "t-1", "status": {"state": "completed"}})
    if route.path == "/api/inspector/rpc":
        return json.dumps({"url": "http://127.0.0.1:9/a2a", "version": "1.0", "request": {}})
    if route.path.startswith("/api/tools/"):
        return json.dumps({"result": "an answer"})
    return json.dumps({"content": "hello"})  # valid: a refusal must not hinge on a bad body


def _event(door: str, route: topology.Route, headers: dict[str, str], body: str) -> dict[str, Any]:
    path = _path(route)
    pairs = [("Host", "agent.example"), ("Content-Type", "application/json"), *headers.items()]
    data = body.encode() if route.method == "POST" else b""
    if door == "lean" and route.handler in topology.URL_HANDLERS and not route.stream:
        return build_function_url_event(
            method=route.method,
            raw_path=path,
            query_string="",
            headers=pairs,
            body=data,
            source_ip="198.51.100.7",
            url_id="abcdefghij",
        )
    return build_proxy_event(
        method=route.method,
        raw_path=path,
        query_string="",
        headers=pairs,
        body=data,
        match=Router().match(route.method, path),
        source_ip="198.51.100.7",
        identity=GatewayIdentity(),
        local_port=443,
    )


def _peer_headers(agent, case: str) -> dict[str, str]:
    if case == "missing":
        return {}
    if case == "malformed":
        return {"Authorization": "Bearer not-a-peer-token"}
    if case == "forged":
        return {"Authorization": f"Bearer {new_token(TEST_PEER)}"}
    token = agent.add_peer("revoked-peer")
    agent.registry.revoke("revoked-peer")
    return {"Authorization": f"Bearer {token}"}


def _callback_token(agent, case: str) -> str | None:
    if case == "missing":
        return None
    if case == "malformed":
        return "not.a.token"
    if case == "forged":
        return agent.token("s-0123456789", 1, "tu-1", secret=OTHER_SECRET)
    return agent.token("s-0123456789", 1, "tu-1", exp_in_s=-600, iat=0)


def _call(agent, route: topology.Route, event: dict[str, Any]) -> tuple[int, Any]:
    status, _, body = agent.call(event, handler=route.handler)
    return status, body


@pytest.mark.parametrize("door", DOORS)
@pytest.mark.parametrize("route", AUTHENTICATED, ids=lambda r: f"{r.method} {r.path}")
def test_a_bad_token_is_refused_before_any_other_read_or_write(orchestrator, aws_requests, door, route):
    cases = PEER_CASES if route.auth == topology.PEER_AUTH else CALLBACK_CASES
    before = orchestrator.table_items()
    for case in cases:
        if route.auth == topology.PEER_AUTH:
            headers, body = _peer_headers(orchestrator, case), _body(route, None)
        else:
            token = _callback_token(orchestrator, case)
            headers = {}
            if route.token_header == "authorization" and token is not None:
                headers = {"Authorization": f"Bearer {token}"}
            elif route.token_header and token is not None:
                headers = {route.token_header: token}
            body = _body(route, token)
        event = _event(door, route, headers, body)
        before = orchestrator.table_items()
        wiring.reset()  # the handler's clients are made anew, through the counting hook
        del aws_requests[:]
        status, answer = _call(orchestrator, route, event)
        made = [(service, op) for service, op, _ in aws_requests]
        if route.path == "/api/tools/responses":  # the tokens are in the items: each refused on its own
            # (a missing one is an item without a token: invalid, 422, as its schema says)
            refused = "invalid" if case == "missing" else "unauthorized"
            assert status == 200 and [r["status"] for r in answer["results"]] == [refused], (case, answer)
        else:
            assert status in (401, 403), (case, status, answer)
        if route.auth == topology.PEER_AUTH and case in ("forged", "revoked") and route.checked_by_write:
            # The peer check is the request's one write, which checks the peer's record in its transaction
            # (topology checked_by_write): refused, it stores nothing (the table is compared below).
            assert made == [("dynamodb", "TransactWriteItems")], (case, made)
            [(_, _, params)] = aws_requests
            checks = [i["ConditionCheck"]["Key"]["pk"]["S"] for i in params["TransactItems"] if "ConditionCheck" in i]
            assert any(pk.startswith("PEER#") for pk in checks), params
        elif route.auth == topology.PEER_AUTH and case in ("forged", "revoked"):
            # The peer check's own read, and nothing else.
            assert made == [("dynamodb", "GetItem")], (case, made)
            [(_, _, params)] = aws_requests
            assert params["Key"]["pk"]["S"].startswith("PEER#"), params
        else:
            assert made == [], (case, made)
        assert orchestrator.table_items() == before, case
    assert all(orchestrator.receive(key) == [] for key in ("turns", "dispatch", "delivery", "timers"))


def test_a_function_url_answers_a_route_of_another_function_404_without_a_token_check(orchestrator, aws_requests):
    # A function URL passes any path: the callback function's URL asked for /api/chat is a 404, not a registry read.
    [chat] = [r for r in topology.ROUTES if (r.method, r.path) == ("POST", "/api/chat")]
    event = _event("lean", chat, {"Authorization": f"Bearer {new_token(TEST_PEER)}"}, _body(chat, None))
    wiring.reset()
    status, _, body = orchestrator.call(event, handler="callback")
    assert status == 404 and body["error"]["code"] == "not_found"
    assert [(s, op) for s, op, _ in aws_requests] == []


def test_the_lean_door_s_events_are_function_url_events():
    [chat] = [r for r in topology.ROUTES if (r.method, r.path) == ("POST", "/api/chat")]
    event = _event("lean", chat, {"Authorization": "Bearer x", "Cookie": "a=1; b=2"}, "{}")
    assert event["version"] == "2.0" and event["routeKey"] == "$default" and "resource" not in event
    assert event["requestContext"]["http"]["method"] == "POST" and event["rawPath"] == "/api/chat"
    assert event["headers"]["authorization"] == "Bearer x" and event["cookies"] == ["a=1", "b=2"]
    assert urlsplit("https://" + event["requestContext"]["domainName"]).hostname == "agent.example"
