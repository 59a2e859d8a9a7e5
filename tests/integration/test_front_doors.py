"""A few representative flows on each front door (docs/FRONT_DOORS.md), two agents on moto over loopback.

With `front_door = "lean"` the local gateway hands the functions that have a URL on AWS (chat_ingest,
callback) a Lambda function URL's event (payload 2.0) and puts no authorizer or usage plan in front, as
AWS does; the REST door's runs are the same tests on today's event. Round trip, input-required (a
question answered in the delegate's context), the session's event stream and an A2A stream.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from pathlib import Path

import httpx
import pytest
from a2a import types as sdk
from a2a.client import A2ACardResolver, ClientConfig, ClientFactory

from flightdeck.local.stack import LocalStack

pytestmark = pytest.mark.slow

USER_TOKEN = "fdp_user_test-only-user-token-0123456789abcdef"
ORCHESTRATOR_TOKEN = "fdp_orchestrator_test-only-orchestrator-token-0123456789"
CONFIG = f"""
[defaults]
TOOL_AGG_PUNCTUATE_INTERVAL_MS = 1000
STREAM_POLL_INTERVAL_MS = 100

[agents.orchestrator]
allow = ["worker"]
callback_secret = "test-only-orchestrator-secret-0123456789abcdef"
[[agents.orchestrator.delegates]]
agent = "worker"
[agents.orchestrator.peers]
user = "{USER_TOKEN}"
[agents.orchestrator.deploy]
front_door = "DOOR"

[agents.worker]
allow = ["orchestrator"]
callback_secret = "test-only-worker-secret-0123456789abcdef01234"
[agents.worker.peers]
orchestrator = "{ORCHESTRATOR_TOKEN}"
[agents.worker.deploy]
front_door = "DOOR"
"""
AS_USER = {"Authorization": f"Bearer {USER_TOKEN}"}


@pytest.fixture(scope="module", params=["rest", "lean"])
def stack(request, tmp_path_factory):
    path = Path(tmp_path_factory.mktemp(f"door-{request.param}")) / "agents.toml"
    path.write_text(CONFIG.replace("DOOR", request.param))
    with LocalStack(path, relay=None) as local:
        local.door = request.param
        yield local


def _chat(stack, content: str, **extra) -> str:
    url = stack.urls["orchestrator"]
    resp = httpx.post(f"{url}/api/chat", json={"content": content, **extra}, headers=AS_USER, timeout=10)
    assert resp.status_code == 202, resp.text
    return resp.json()["session_id"]


def _idle(stack, sid: str, timeout_s: float = 30.0) -> dict:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        session = httpx.get(f"{stack.urls['orchestrator']}/api/sessions/{sid}", headers=AS_USER, timeout=10).json()
        if session["status"] == "idle":
            return session
        time.sleep(0.1)
    raise AssertionError(f"session {sid} not idle after {timeout_s}s: {session}")


def _results(session: dict) -> list[dict]:
    return [b["toolResult"] for m in session["messages"] for b in m["content"] if "toolResult" in b]


def test_a_delegation_round_trip(stack):
    session = _idle(stack, _chat(stack, "@worker summarise the launch plan"))
    [result] = _results(session)
    assert result["status"] == "success"
    assert (
        result["content"][0]["text"].startswith("[worker]")
        and "summarise the launch plan" in result["content"][0]["text"]
    )
    assert result["content"][0]["text"] in session["messages"][-1]["content"][0]["text"]


def test_the_worker_asks_and_the_orchestrator_answers_in_its_context(stack):
    session = _idle(stack, _chat(stack, "@worker ?ask which year? summarise the plan ?answer 2024"))
    first, answered = _results(session)
    assert json.loads(first["content"][0]["text"])["status"] == "input_required"
    assert answered["content"][0]["text"].startswith(
        '[worker] Task: "summarise the plan" (asked "which year?", told "2024")'
    )


def test_the_session_events_stream_follows_a_delegation(stack):
    url = stack.urls["orchestrator"]
    sid = _chat(stack, "@worker say hello")
    events = []
    with httpx.Client(timeout=60, headers=AS_USER) as http:
        with http.stream("GET", f"{url}/api/sessions/{sid}/events") as response:
            assert response.status_code == 200
            assert response.headers["content-type"].startswith("text/event-stream")
            events = [json.loads(line[6:]) for line in response.iter_lines() if line.startswith("data: ")]
    kinds = [e["kind"] for e in events]
    assert kinds[0] == "message" and kinds[-1] == "idle" and "callback_accepted" in kinds
    assert httpx.get(f"{url}/api/sessions/{sid}/events").status_code == 401


def test_an_a2a_stream_follows_a_delegated_task_to_its_final_event(stack):
    url = stack.urls["orchestrator"]

    async def run() -> list:
        async with httpx.AsyncClient(timeout=60, headers=AS_USER) as http:
            card = await A2ACardResolver(http, url).get_agent_card()
            client = ClientFactory(ClientConfig(streaming=True, httpx_client=http)).create(card)
            message = sdk.Message(
                role=sdk.Role.user,
                parts=[sdk.Part(root=sdk.TextPart(text="@worker list three owls"))],
                message_id=str(uuid.uuid4()),
            )
            return [update or task async for task, update in client.send_message(message)]

    events = asyncio.run(run())
    assert events[-1].final and events[-1].status.state == sdk.TaskState.completed
    answers = [e.artifact.parts[0].root.text for e in events if isinstance(e, sdk.TaskArtifactUpdateEvent)]
    assert "list three owls" in "".join(answers)


def test_the_lean_door_has_no_gateway_in_front_the_function_refuses_a_bad_token(stack):
    url = stack.urls["orchestrator"]
    for headers, status in (
        ({}, 401),
        ({"Authorization": "Bearer nope"}, 401),
        (
            {"Authorization": "Bearer fdp_user_forged-forged-forged-forged-0123456789"},
            403,
        ),
    ):
        resp = httpx.post(f"{url}/api/chat", json={"content": "hi"}, headers=headers, timeout=10)
        assert resp.status_code == status, resp.text
        assert resp.json()["error"]["code"] in ("unauthorized", "forbidden")
