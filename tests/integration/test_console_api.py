"""What the web console reads (issue 29), in the public API: the listing's first message, agent and counts
(handlers on moto, DynamoDB requests counted), a delegate's own timeline read through the delegator for the
owner of the delegating session, and the inspector's allowlisted card and JSON-RPC relay (a two-agent local
stack on loopback). Each refusal changes nothing."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest
import requests

from flightdeck.domain.records import peer_session_id
from flightdeck.local.stack import LocalStack
from tests.integration.test_api_service_routes import Requests, _list
from tests.integration.test_event_fields import CONFIG, timeline
from tests.support.harness import load_event, make_agent, new_session_id

REPO = Path(__file__).resolve().parents[2]
USER = {"Authorization": "Bearer fdp_user_LOCAL-ONLY-demo-user-token-0123456789abcdef"}
ORCHESTRATOR_AT_WORKER = "fdp_orchestrator_LOCAL-ONLY-orchestrator-calls-worker-0123456789"


def test_the_listing_shows_first_message_agent_turns_and_delegations_in_the_same_requests(aws, monkeypatch):
    from flightdeck.wiring import state_store

    agent = make_agent(monkeypatch, delegates=[], extra_env={"AGENT_CONFIG": json.dumps(CONFIG)})
    sid = new_session_id()
    assert agent.api("chat_post", body={"session_id": sid, "content": "@maps chart the bay @tides tables"})[0] == 202
    agent.run_queue("turns")
    counted = Requests(state_store().client)
    status, _, body = _list(agent)
    assert status == 200, body
    assert counted.take() == ["GetItem", "Query", "BatchGetItem"]  # as before: the fields ride on META
    [row] = body["sessions"]
    assert row["first_message"] == "@maps chart the bay @tides tables"
    assert (row["agent"], row["turns"], row["delegations"], row["status"]) == ("orchestrator", 1, 2, "busy")
    # The agents a message may @-mention (the console's placeholder), from its configuration: no request more.
    assert body["delegates"] == ["maps", "tides"]
    # The timeline view's reads: the token, the session's query, its waiting turn's results.
    timeline(agent, sid)
    assert counted.take() == ["GetItem", "Query", "Query"]
    # A delegate's lane, this side: the token and the session's query (the owner's check), then the
    # delegate's own read of its timeline (here nobody answers at the worker's URL: 502, nothing changed).
    before = agent.table_items()
    reply = json.loads(agent.item(f"S#{sid}", "ITER#000001")["reply"])
    call = next(b["toolUse"]["toolUseId"] for b in reply["message"]["content"] if "toolUse" in b)
    event = load_event("api/session_get.json", SESSION_ID=sid)
    path = f"/api/sessions/{sid}/delegations/{call}/events"
    event.update(resource="/api/sessions/{session_id}/delegations/{tool_use_id}/events", path=path)
    event["pathParameters"] = {"session_id": sid, "tool_use_id": call}
    event["queryStringParameters"] = {"agent": "maps"}
    event["headers"].update(agent.auth_headers())
    status, _, body = agent.call(event, "chat_ingest")
    assert (status, body["error"]["code"]) == (502, "delegate_unreachable"), body
    assert counted.take() == ["GetItem", "Query"]
    assert agent.table_items() == before


@pytest.fixture(scope="module")
def stack():
    with LocalStack(REPO / "examples" / "two-agents.toml", relay=None) as local:
        yield local


def _wait_idle(url: str, sid: str, timeout_s: float = 30.0) -> dict:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        body = requests.get(f"{url}/api/sessions/{sid}", headers=USER, timeout=10).json()
        if body.get("status") == "idle":
            return body
        time.sleep(0.2)
    raise AssertionError(f"session {sid} never idle")


def _events(text: str) -> list[dict]:
    return [json.loads(line[6:]) for line in text.splitlines() if line.startswith("data: ")]


def test_a_delegates_lane_is_read_through_the_delegator_for_the_owner_only(stack):
    url = stack.urls["orchestrator"]
    sid = new_session_id()
    answer = requests.post(
        f"{url}/api/chat", json={"session_id": sid, "content": "@worker name two owls"}, headers=USER
    )
    assert answer.status_code == 202, answer.text
    assert _wait_idle(url, sid)["outcome"] == "completed"
    events = _events(requests.get(f"{url}/api/sessions/{sid}/events?follow=false", headers=USER).text)
    assert events[-1]["kind"] == "idle" and events[-1]["outcome"] == "completed"  # the list's and the timeline's word
    [delegation] = [e for e in events if e["kind"] == "delegating"]
    lane_url = f"{url}/api/sessions/{sid}/delegations/{delegation['tool_use_id']}/events?agent=worker"

    lane = requests.get(lane_url, headers=USER, timeout=10)
    assert lane.status_code == 200 and lane.headers["content-type"].startswith("text/event-stream"), lane.text
    worker_events = _events(lane.text)
    assert {e["session_id"] for e in worker_events} == {delegation["peer_session_id"]}
    assert [e["kind"] for e in worker_events][0] == "message" and worker_events[-1]["kind"] == "idle"
    assert any(e["kind"] == "answer" for e in worker_events)
    # The same as the delegate itself answers its owner (the orchestrator), and never the user there.
    direct = f"{stack.urls['worker']}/api/sessions/{delegation['peer_session_id']}/events?follow=false"
    own = requests.get(direct, headers={"Authorization": f"Bearer {ORCHESTRATOR_AT_WORKER}"}, timeout=10)
    assert _events(own.text) == worker_events
    assert requests.get(direct, headers=USER, timeout=10).status_code in (401, 403, 404)

    refusals = [
        (f"{url}/api/sessions/{sid}/delegations/no-such-call/events?agent=worker", USER, 404, "lane_not_readable"),
        (lane_url.replace("agent=worker", "agent=critic"), USER, 404, "lane_not_readable"),
        (lane_url.replace(sid, new_session_id()), USER, 404, "session_not_found"),
        (lane_url, {"Authorization": "Bearer fdp_user_wrong-token-0123456789abcdef0123"}, 403, "forbidden"),
        (lane_url, {}, 401, "unauthorized"),
        (lane_url.replace("agent=worker", "agent=Not%20A%20Name"), USER, 422, "invalid_request"),
        (lane_url.replace("?agent=worker", ""), USER, 422, "invalid_request"),
    ]
    for target, headers, status, code in refusals:
        answer = requests.get(target, headers=headers, timeout=10)
        assert (answer.status_code, answer.json()["error"]["code"]) == (status, code), (target, answer.text)
    # The lane is the session derived from the caller's own session and call: nothing else can be named.
    assert peer_session_id("orchestrator", sid, delegation["tool_use_id"]) == delegation["peer_session_id"]


def test_the_inspector_reads_an_allowlisted_card_and_relays_json_rpc(stack):
    url, worker = stack.urls["orchestrator"], stack.urls["worker"]
    card_url = f"{worker}/.well-known/agent-card.json"
    answer = requests.get(f"{url}/api/inspector/card", params={"url": card_url}, headers=USER, timeout=10)
    assert answer.status_code == 200, answer.text
    found = answer.json()
    assert found["card"]["name"] == "worker" and found["problems"] == [], found
    assert found["version"] == "1.0" and found["rpc_url"].startswith(worker) and found["rpc_allowed"] is True
    # Given the agent's base URL, the inspector reads the card there, as `flightdeck chat --a2a` does (issue 41).
    for base in (worker, worker + "/"):
        by_base = requests.get(f"{url}/api/inspector/card", params={"url": base}, headers=USER, timeout=10)
        assert by_base.status_code == 200, by_base.text
        assert by_base.json()["url"] == card_url and by_base.json()["card"] == found["card"]

    send = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "SendMessage",
        "params": {"message": {"messageId": "m-1", "role": "ROLE_USER", "parts": [{"text": "hello"}]}},
    }
    body = {"url": found["rpc_url"], "version": "1.0", "request": send}
    # Without a token of the worker's: its own refusal, relayed as it came.
    relayed = requests.post(f"{url}/api/inspector/rpc", json=body, headers=USER, timeout=20)
    assert relayed.status_code == 200 and relayed.json()["status"] == 401, relayed.text
    relayed = requests.post(
        f"{url}/api/inspector/rpc", json={**body, "token": ORCHESTRATOR_AT_WORKER}, headers=USER, timeout=20
    )
    assert relayed.status_code == 200 and relayed.json()["status"] == 200, relayed.text
    assert relayed.json()["body"]["id"] == 1 and "result" in relayed.json()["body"], relayed.text

    refusals = [
        (
            "GET",
            "/api/inspector/card",
            {"params": {"url": "http://169.254.169.254/latest/meta-data"}},
            400,
            "url_not_allowed",
        ),
        ("GET", "/api/inspector/card", {"params": {"url": "file:///etc/passwd"}}, 400, "url_not_allowed"),
        ("GET", "/api/inspector/card", {}, 422, "invalid_request"),
        ("POST", "/api/inspector/rpc", {"json": {**body, "url": "http://127.0.0.1:1/a2a"}}, 400, "url_not_allowed"),
        ("POST", "/api/inspector/rpc", {"json": {**body, "version": "2.0"}}, 422, "invalid_request"),
        ("POST", "/api/inspector/rpc", {"json": {"url": found["rpc_url"]}}, 422, "invalid_request"),
        ("POST", "/api/inspector/rpc", {"data": "{not json"}, 400, "malformed_json"),
        # Allowed, but not a card's URL (issue 36): nothing fetched.
        ("GET", "/api/inspector/card", {"params": {"url": f"{worker}/no-card-here"}}, 400, "not_a_card_url"),
        # Allowed, but no card there (the worker answers 404): said as the gateway's failure, nothing relayed.
        (
            "GET",
            "/api/inspector/card",
            {"params": {"url": f"{worker}/nested/.well-known/agent-card.json"}},
            502,
            "card_unreadable",
        ),
    ]
    for method, path, kwargs, status, code in refusals:
        answer = requests.request(method, f"{url}{path}", headers=USER, timeout=10, **kwargs)
        assert (answer.status_code, answer.json()["error"]["code"]) == (status, code), (path, kwargs, answer.text)
    answer = requests.get(f"{url}/api/inspector/card", params={"url": card_url}, timeout=10)
    assert answer.status_code == 401


def test_the_readmes_local_mcp_key_opens_the_workers_mcp(stack):
    """README "Using an agent from an MCP client", run as written against `./dev.sh up`'s example: the
    LOCAL ONLY key of examples/two-agents.toml opens the worker's /mcp, and /mcp only."""
    import re
    import shutil
    import subprocess

    if shutil.which("curl") is None:  # CI has curl: there a missing one is a failure, not a skip
        assert os.environ.get("CI") != "true", "curl is not installed"
        pytest.skip("curl is not installed")
    section = (REPO / "README.md").read_text().split("## Using an agent from an MCP client", 1)[1].split("\n## ", 1)[0]
    token = re.search(r"^TOKEN=(\S+)", section, re.MULTILINE).group(1)
    command = re.search(r"```bash\n(curl .*?)\n```", section, re.DOTALL).group(1)
    env = {"API": stack.urls["worker"].rstrip("/"), "TOKEN": token, "PATH": "/usr/bin:/bin"}
    out = subprocess.run(["bash", "-c", command], capture_output=True, text=True, env=env, timeout=60, check=True)
    names = [t["name"] for t in json.loads(out.stdout)["result"]["tools"]]
    assert {"summarise", "count_words", "ask"} <= set(names), names
    # An MCP client's key is not a peer's: the A2A door and the chat API refuse it.
    chat = requests.post(
        f"{stack.urls['worker'].rstrip('/')}/api/chat",
        json={"content": "hello"},
        headers={"Authorization": f"Bearer {token}"},
        timeout=30,
    )
    assert chat.status_code == 403, chat.text
