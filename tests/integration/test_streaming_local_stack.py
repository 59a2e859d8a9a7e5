"""Streaming against the local stack: two agents in their own processes, moto, loopback HTTP, the peer
gate (authorizer and usage plans) in front, a real delegation from the orchestrator to the worker.

The a2a-sdk client (streaming=True) follows a task to its final event; it gets the worker's answer
in pieces while the worker thinks (the live relay); it resubscribes to a task that is running;
GET /api/sessions/{id}/events follows a full delegation.
"""

from __future__ import annotations

import asyncio
import json
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

[agents.worker]
allow = ["orchestrator"]
callback_secret = "test-only-worker-secret-0123456789abcdef01234"
[agents.worker.peers]
orchestrator = "{ORCHESTRATOR_TOKEN}"
[agents.worker.model]
think_delay_ms = 1200    # the orchestrator's task works long enough to be resubscribed to, the worker's
                         # answer streams long enough to come in pieces
"""
AS_USER = {"Authorization": f"Bearer {USER_TOKEN}"}
AS_ORCHESTRATOR = {"Authorization": f"Bearer {ORCHESTRATOR_TOKEN}"}


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    path = Path(tmp_path_factory.mktemp("streaming")) / "agents.toml"
    path.write_text(CONFIG)
    with LocalStack(path, relay=None) as local:
        yield local


def _message(text: str) -> sdk.Message:
    return sdk.Message(role=sdk.Role.user, parts=[sdk.Part(root=sdk.TextPart(text=text))], message_id=str(uuid.uuid4()))


async def _client(http: httpx.AsyncClient, url: str):
    card = await A2ACardResolver(http, url).get_agent_card()
    assert card.capabilities.streaming is True
    return ClientFactory(ClientConfig(streaming=True, httpx_client=http)).create(card)


def _steps(events) -> list[str]:
    return [
        e.metadata["flightdeck"]["kind"] for e in events if isinstance(e, sdk.TaskStatusUpdateEvent) and not e.final
    ]


def _answer(events) -> str:
    return "".join(e.artifact.parts[0].root.text for e in events if isinstance(e, sdk.TaskArtifactUpdateEvent))


def test_sdk_client_streams_a_delegated_task_to_its_final_event(stack):
    url = stack.urls["orchestrator"]

    async def scenario():
        async with httpx.AsyncClient(timeout=60, headers=AS_USER) as http:
            client = await _client(http, url)
            return [
                update or task.model_copy(deep=True)
                async for task, update in client.send_message(_message("@worker name two rivers"))
            ]

    events = asyncio.run(scenario())
    assert isinstance(events[0], sdk.Task) and events[0].status.state == sdk.TaskState.working
    assert [s for s in _steps(events) if s != "thinking"] == ["delegating", "callback_accepted"]
    final = events[-1]
    assert isinstance(final, sdk.TaskStatusUpdateEvent) and final.final
    assert final.status.state == sdk.TaskState.completed
    answer = _answer(events)
    assert "1 of 1 delegation answered." in answer and "[worker]" in answer and "name two rivers" in answer
    assert final.status.message.parts[0].root.text == answer


def test_sdk_client_gets_the_answer_in_pieces_while_the_agent_thinks(stack):
    url = stack.urls["worker"]  # called as its peer, the orchestrator: its think is the slow one

    async def state(http: httpx.AsyncClient, task_id: str) -> dict:
        got = await http.post(
            f"{url}/a2a", json={"jsonrpc": "2.0", "id": "g", "method": "tasks/get", "params": {"id": task_id}}
        )
        return got.json()["result"]

    async def scenario():
        async with httpx.AsyncClient(timeout=60, headers=AS_ORCHESTRATOR) as http:
            client = await _client(http, url)
            events, states = [], []
            async for task, update in client.send_message(_message("tell me about the tides of the sea " * 3)):
                events.append(update or task.model_copy(deep=True))
                if isinstance(update, sdk.TaskArtifactUpdateEvent):
                    states.append((await state(http, task.id))["status"]["state"])
            return events, states, await state(http, events[0].id)

    events, states, stored = asyncio.run(scenario())
    assert events[-1].final and events[-1].status.state == sdk.TaskState.completed
    assert states.count("working") >= 2, states  # pieces came before the think was over
    chunks = [e for e in events if isinstance(e, sdk.TaskArtifactUpdateEvent)]
    assert [c.append for c in chunks] == [False] + [True] * (len(chunks) - 1) and chunks[-1].last_chunk
    assert _answer(events) == stored["artifacts"][0]["parts"][0]["text"]


def test_sdk_client_resubscribes_to_a_running_task(stack):
    url = stack.urls["orchestrator"]

    async def scenario():
        async with httpx.AsyncClient(timeout=60, headers=AS_USER) as http:
            sent = await http.post(
                f"{url}/a2a",
                json={
                    "jsonrpc": "2.0",
                    "id": 1,
                    "method": "message/send",
                    "params": {
                        "message": _message("@worker list three owls").model_dump(mode="json", exclude_none=True)
                    },
                },
            )
            task_id = sent.json()["result"]["id"]
            client = await _client(http, url)
            return [
                update or task.model_copy(deep=True)
                async for task, update in client.resubscribe(sdk.TaskIdParams(id=task_id))
            ]

    events = asyncio.run(scenario())
    assert isinstance(events[0], sdk.Task) and events[0].status.state == sdk.TaskState.working  # the replay
    assert events[-1].final and events[-1].status.state == sdk.TaskState.completed
    assert "list three owls" in _answer(events)


def test_session_events_follow_a_full_delegation(stack):
    url = stack.urls["orchestrator"]
    accepted = httpx.post(f"{url}/api/chat", headers=AS_USER, json={"content": "@worker say hello"})
    assert accepted.status_code == 202
    sid = accepted.json()["session_id"]
    events = []
    with httpx.Client(timeout=60, headers=AS_USER) as http:
        with http.stream("GET", f"{url}/api/sessions/{sid}/events") as response:
            assert response.status_code == 200
            assert response.headers["content-type"].startswith("text/event-stream")
            for line in response.iter_lines():
                if line.startswith("data: "):
                    events.append(json.loads(line[6:]))
    assert [e["kind"] for e in events] == [
        "message",
        "thinking",
        "delegating",
        "callback_accepted",
        "thinking",
        "answer",
        "idle",
    ]
    assert events[2]["agent"] == "worker" and events[3]["status"] == "success" and "[worker]" in events[3]["text"]
    assert events[3]["text"] in events[5]["text"]
    # The same peer gate as the other peer routes: no token, no stream.
    assert httpx.get(f"{url}/api/sessions/{sid}/events").status_code == 401
