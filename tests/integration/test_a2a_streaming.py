"""Streaming over loopback HTTP, in one process: the a2a-sdk client (streaming=True) against our
handlers behind flightdeck.local.gateway (chunked, as it comes), state on moto in-process.

message/stream to its final event, step by step through a delegation; tasks/resubscribe to a
running task and to a finished one; a dropped stream leaves its task running; another peer's
task is not found; GET /api/sessions/{id}/events through a delegation; streaming off.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
import uuid

import httpx
import pytest
from a2a import types as sdk
from a2a.client import A2ACardResolver, ClientConfig, ClientFactory
from a2a.client.errors import A2AClientJSONRPCError

from tests.support.harness import make_agent, new_session_id
from tests.support.inprocess import gateway, pumping

STREAMING = {"STREAMING": "on", "STREAM_POLL_INTERVAL_MS": "100", "STREAM_KEEPALIVE_MS": "1000"}


@pytest.fixture
def served(aws, monkeypatch):
    with gateway("orchestrator") as url:
        agent = make_agent(monkeypatch, extra_env=STREAMING)
        yield agent, url


def _message(text: str, context_id: str | None = None) -> sdk.Message:
    return sdk.Message(
        role=sdk.Role.user,
        parts=[sdk.Part(root=sdk.TextPart(text=text))],
        message_id=str(uuid.uuid4()),
        context_id=context_id,
    )


async def _client(http: httpx.AsyncClient, url: str):
    card = await A2ACardResolver(http, url).get_agent_card()
    assert card.capabilities.streaming is True
    assert "a dropped connection does not cancel the task" in card.description
    return ClientFactory(ClientConfig(streaming=True, httpx_client=http)).create(card)


def _answer_of(updates) -> str:
    return "".join(u.artifact.parts[0].root.text for u in updates if isinstance(u, sdk.TaskArtifactUpdateEvent))


def _check_shapes(events) -> None:
    """A2A v0.3: the Task first, then updates of that task; artifact chunks append after the first;
    one final status-update, the last event."""
    first, rest = events[0], events[1:]
    assert isinstance(first, sdk.Task) and first.status.state in (sdk.TaskState.submitted, sdk.TaskState.working)
    for update in rest:
        assert update.task_id == first.id and update.context_id == first.context_id
    chunks = [u for u in rest if isinstance(u, sdk.TaskArtifactUpdateEvent)]
    assert [c.append for c in chunks] == [False] + [True] * (len(chunks) - 1)
    assert [c.last_chunk for c in chunks] == [False] * (len(chunks) - 1) + [True]
    finals = [u for u in rest if isinstance(u, sdk.TaskStatusUpdateEvent) and u.final]
    assert finals == [rest[-1]]


def _deliver(agent, sid: str, tool_use_id: str, text: str) -> None:
    status, _, body = agent.api(
        "tool_response", body={"result": text}, headers={"Authorization": f"Bearer {agent.token(sid, 1, tool_use_id)}"}
    )
    assert status == 202, body


def test_message_stream_to_the_final_event(served):
    agent, url = served

    async def scenario():
        async with httpx.AsyncClient(timeout=30, headers=agent.auth_headers()) as http:
            client = await _client(http, url)
            events = []
            with pumping(agent, "turns"):
                async for task, update in client.send_message(_message("how far is the moon")):
                    events.append(update if update is not None else task.model_copy(deep=True))
            return task, events

    task, events = asyncio.run(scenario())
    _check_shapes(events)
    assert events[-1].status.state == sdk.TaskState.completed
    answer = _answer_of(events)
    assert (
        "how far is the moon" in answer and len([e for e in events if isinstance(e, sdk.TaskArtifactUpdateEvent)]) > 3
    )
    # The sdk's task tracker appended the chunks' parts to the one artifact: the answer tasks/get gives.
    assert task.status.state == sdk.TaskState.completed and len(task.artifacts) == 1
    assert "".join(p.root.text for p in task.artifacts[0].parts) == answer


def test_message_stream_follows_a_delegation_step_by_step(served):
    agent, url = served

    async def scenario():
        async with httpx.AsyncClient(timeout=30, headers=agent.auth_headers()) as http:
            client = await _client(http, url)
            events = []
            with pumping(agent, "turns"):
                async for task, update in client.send_message(_message("@worker name two rivers")):
                    events.append(update if update is not None else task.model_copy(deep=True))
                    step = (
                        (update.metadata or {}).get("flightdeck", {})
                        if isinstance(update, sdk.TaskStatusUpdateEvent)
                        else {}
                    )
                    if step.get("kind") == "delegating":  # the worker is never reached: answer for it
                        await asyncio.to_thread(_deliver, agent, task.context_id, step["tool_use_id"], "Nile, Rhine")
            return events

    events = asyncio.run(scenario())
    _check_shapes(events)
    steps = [
        e.metadata["flightdeck"]["kind"] for e in events if isinstance(e, sdk.TaskStatusUpdateEvent) and not e.final
    ]
    # A think of the local model may be over between two polls: the steps that wait are always seen.
    assert [s for s in steps if s != "thinking"] == ["delegating", "callback_accepted"]
    working = [e for e in events if isinstance(e, sdk.TaskStatusUpdateEvent) and not e.final]
    assert all(e.status.state == sdk.TaskState.working for e in working)
    delegating = next(e for e in working if e.metadata["flightdeck"]["kind"] == "delegating")
    assert delegating.status.message.parts[0].root.text == "delegating to worker: name two rivers"
    assert events[-1].status.state == sdk.TaskState.completed
    assert "Nile, Rhine" in _answer_of(events)


def test_a_streamed_question_ends_its_stream_input_required_and_the_answer_streams_on_the_same_task(served):
    agent, url = served

    async def scenario():
        async with httpx.AsyncClient(timeout=30, headers=agent.auth_headers()) as http:
            client = await _client(http, url)
            asked, answered = [], []
            with pumping(agent, "turns"):
                async for task, update in client.send_message(_message("?ask which year? summarise the plan")):
                    asked.append(update if update is not None else task.model_copy(deep=True))
                answer = sdk.Message(
                    role=sdk.Role.user,
                    parts=[sdk.Part(root=sdk.TextPart(text="2024"))],
                    message_id=str(uuid.uuid4()),
                    task_id=task.id,
                    context_id=task.context_id,
                )
                async for task, update in client.send_message(answer):
                    answered.append(update if update is not None else task.model_copy(deep=True))
            return asked, answered

    asked, answered = asyncio.run(scenario())
    assert isinstance(asked[0], sdk.Task) and not any(isinstance(e, sdk.TaskArtifactUpdateEvent) for e in asked)
    final = asked[-1]
    assert [e for e in asked[1:] if e.final] == [final]
    assert final.status.state == sdk.TaskState.input_required
    assert final.status.message.parts[0].root.text == "which year?"
    _check_shapes(answered)
    assert answered[0].id == asked[0].id and answered[0].status.state == sdk.TaskState.working
    assert answered[-1].status.state == sdk.TaskState.completed and 'told "2024"' in _answer_of(answered)


def test_resubscribe_replays_the_running_task_and_follows_it_to_the_end(served):
    agent, url = served
    sid = new_session_id()

    async def scenario():
        async with httpx.AsyncClient(timeout=30, headers=agent.auth_headers()) as http:
            client = await _client(http, url)
            # message/send, not blocking: the task starts and delegates; nobody follows it yet.
            sent = await http.post(
                f"{url}/a2a",
                json={
                    "jsonrpc": "2.0",
                    "id": "s1",
                    "method": "message/send",
                    "params": {
                        "message": _message("@worker a long job", sid).model_dump(mode="json", exclude_none=True)
                    },
                },
            )
            task_id = sent.json()["result"]["id"]
            await asyncio.to_thread(agent.run_queue, "turns")
            events = []
            with pumping(agent, "turns"):
                async for task, update in client.resubscribe(sdk.TaskIdParams(id=task_id)):
                    events.append(update if update is not None else task.model_copy(deep=True))
                    if len(events) == 1:
                        # The replay: the task as it stands, working on its delegation.
                        assert task.status.state == sdk.TaskState.working
                        use = next(
                            b["toolUse"]
                            for m in _session(agent, sid)["messages"]
                            for b in m["content"]
                            if "toolUse" in b
                        )
                        await asyncio.to_thread(_deliver, agent, sid, use["toolUseId"], "done at last")
            # Resubscribing to the finished task: the task, then its final status.
            again = [
                update or task.model_copy(deep=True)
                async for task, update in client.resubscribe(sdk.TaskIdParams(id=task_id))
            ]
            return events, again

    events, again = asyncio.run(scenario())
    _check_shapes(events)
    assert events[-1].status.state == sdk.TaskState.completed and "done at last" in _answer_of(events)
    assert [type(e).__name__ for e in again] == ["Task", "TaskStatusUpdateEvent"]
    assert again[0].status.state == sdk.TaskState.completed and again[1].final
    assert "done at last" in again[0].artifacts[0].parts[0].root.text


def _session(agent, sid):
    return agent.api("session_get", SESSION_ID=sid)[2]


def test_a_dropped_stream_leaves_its_task_running(served):
    agent, url = served
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "message/stream",
        "params": {"message": _message("@worker keep going").model_dump(mode="json", exclude_none=True)},
    }
    with httpx.Client(timeout=10, headers=agent.auth_headers()) as http:
        with http.stream("POST", f"{url}/a2a", json=body) as response:
            assert response.headers["content-type"].startswith("text/event-stream")
            first = json.loads(next(line for line in response.iter_lines() if line.startswith("data:"))[5:])
        # The connection is closed here, after the first event.
    task = first["result"]
    assert first["id"] == 1 and task["kind"] == "task" and task["status"]["state"] == "working"
    agent.run_queue("turns")
    sid = task["contextId"]
    use = next(b["toolUse"] for m in _session(agent, sid)["messages"] for b in m["content"] if "toolUse" in b)
    _deliver(agent, sid, use["toolUseId"], "finished anyway")
    agent.run_queue("turns")
    got = httpx.post(
        f"{url}/a2a",
        headers=agent.auth_headers(),
        json={"jsonrpc": "2.0", "id": 2, "method": "tasks/get", "params": {"id": task["id"]}},
    ).json()["result"]
    assert got["status"]["state"] == "completed" and "finished anyway" in got["artifacts"][0]["parts"][0]["text"]


def test_refusals_are_the_one_event_of_their_stream(served):
    agent, url = served
    other = agent.add_peer("someone-else")

    async def scenario():
        async with httpx.AsyncClient(timeout=30, headers=agent.auth_headers()) as http:
            await _client(http, url)
            sent = await http.post(
                f"{url}/a2a",
                json={
                    "jsonrpc": "2.0",
                    "id": 1,
                    "method": "message/send",
                    "params": {"message": _message("mine").model_dump(mode="json", exclude_none=True)},
                },
            )
            task_id = sent.json()["result"]["id"]
        async with httpx.AsyncClient(timeout=30, headers={"Authorization": f"Bearer {other}"}) as http:
            intruder = await _client(http, url)
            with pytest.raises(A2AClientJSONRPCError) as hidden:
                async for _ in intruder.resubscribe(sdk.TaskIdParams(id=task_id)):
                    pass
            raw = await http.post(
                f"{url}/a2a",
                json={
                    "jsonrpc": "2.0",
                    "id": "x",
                    "method": "message/stream",
                    "params": {"message": {"kind": "message", "role": "user", "messageId": "m", "parts": []}},
                },
            )
        return hidden.value.error.code, raw

    code, raw = asyncio.run(scenario())
    assert code == -32001
    assert raw.headers["content-type"].startswith("text/event-stream")
    (line,) = [line for line in raw.text.splitlines() if line.startswith("data:")]
    assert json.loads(line[5:]) == {
        "jsonrpc": "2.0",
        "id": "x",
        "error": {"code": -32602, "message": "message.parts must not be empty"},
    }


def _events(text: str) -> list[tuple[str, str, dict]]:
    out = []
    for block in text.strip().split("\n\n"):
        fields = dict(line.split(": ", 1) for line in block.splitlines() if not line.startswith(":"))
        if "data" in fields:
            out.append((fields.get("id", ""), fields.get("event", ""), json.loads(fields["data"])))
    return out


def test_session_events_through_a_delegation(served):
    agent, url = served
    sid = new_session_id()
    assert agent.api("chat_post", body={"session_id": sid, "content": "@worker list three owls"})[0] == 202
    agent.run_queue("turns")
    seen: list[tuple[str, str, dict]] = []

    def deliver_when_delegated():
        while not any(kind == "delegating" for _, kind, _ in seen):
            time.sleep(0.02)
        use = next(data for _, kind, data in seen if kind == "delegating")
        _deliver(agent, sid, use["tool_use_id"], "barn, snowy, tawny")

    helper = threading.Thread(target=deliver_when_delegated, daemon=True)
    helper.start()
    with pumping(agent, "turns"), httpx.Client(timeout=30, headers=agent.auth_headers()) as http:
        with http.stream("GET", f"{url}/api/sessions/{sid}/events") as response:
            assert response.status_code == 200
            buffer = ""
            for piece in response.iter_text():
                buffer += piece
                while "\n\n" in buffer:
                    block, buffer = buffer.split("\n\n", 1)
                    seen.extend(_events(block + "\n\n"))
    helper.join(5)
    assert [kind for _, kind, _ in seen] == [
        "message",
        "thinking",
        "delegating",
        "callback_accepted",
        "thinking",
        "answer",
        "idle",
    ]
    ids = [event_id for event_id, _, _ in seen]
    # The SSE id is the event's own, or where it does not say it all (a result of a think still waiting), the
    # stream's position (flightdeck.domain.resume).
    assert len(set(ids)) == len(ids)
    assert all(data["id"] == event_id or event_id.startswith("c1.") for event_id, _, data in seen)
    by_kind = {kind: data for _, kind, data in seen}
    assert by_kind["delegating"]["agent"] == "worker" and by_kind["delegating"]["task"] == "list three owls"
    assert by_kind["callback_accepted"]["text"] == "barn, snowy, tawny"
    assert "barn, snowy, tawny" in by_kind["answer"]["text"]
    # Afterwards the same timeline, with the same ids, in one response that ends at once.
    replay = httpx.get(f"{url}/api/sessions/{sid}/events?follow=false", headers=agent.auth_headers())
    assert [(i, k) for i, k, _ in _events(replay.text)] == [(i, k) for i, k, _ in seen]
    # Another peer's session does not exist for it; a malformed id is refused as on GET /api/sessions/{id}.
    other = agent.add_peer("someone-else")
    assert (
        httpx.get(f"{url}/api/sessions/{sid}/events", headers={"Authorization": f"Bearer {other}"}).status_code == 404
    )
    assert httpx.get(f"{url}/api/sessions/{sid}/events").status_code == 401
    assert httpx.get(f"{url}/api/sessions/%20bad/events", headers=agent.auth_headers()).status_code == 422
    assert httpx.get(f"{url}/api/sessions/{sid}/events?follow=maybe", headers=agent.auth_headers()).status_code == 422


def test_streaming_off_says_so_everywhere(aws, monkeypatch):
    with gateway("orchestrator") as url:
        agent = make_agent(monkeypatch, extra_env={"STREAMING": "off"})
        card = httpx.get(f"{url}/.well-known/agent-card.json").json()
        assert card["capabilities"]["streaming"] is False
        answer = httpx.post(
            f"{url}/a2a",
            headers=agent.auth_headers(),
            json={
                "jsonrpc": "2.0",
                "id": 1,
                "method": "message/stream",
                "params": {"message": _message("hi").model_dump(mode="json", exclude_none=True)},
            },
        )
        assert answer.headers["content-type"].startswith("application/json")
        assert answer.json()["error"]["code"] == -32004 and "STREAMING=off" in answer.json()["error"]["message"]
        # The events route sends the timeline so far in one response.
        sid = new_session_id()
        agent.api("chat_post", body={"session_id": sid, "content": "hello"})
        agent.run_queue("turns")
        events = httpx.get(f"{url}/api/sessions/{sid}/events", headers=agent.auth_headers())
        assert events.headers["content-type"].startswith("text/event-stream")
        assert [k for _, k, _ in _events(events.text)] == ["message", "thinking", "answer", "idle"]


RAW_REQUESTS = [
    "{",
    "[]",
    '{"jsonrpc": "2.0", "id": 1, "method": "nope"}',
    '{"jsonrpc": "2.0", "id": 2, "method": "tasks/get", "params": {"id": "x~abc"}}',
    '{"jsonrpc": "2.0", "id": 3, "method": "message/send", "params": {"message": {"role": "user"}}}',
    '{"jsonrpc": "2.0", "method": "tasks/get", "params": {"id": "x~abc"}}',
    "[" * 40 + "]" * 40,
]


def test_with_streaming_on_the_other_answers_are_the_route_s_own(aws, monkeypatch):
    """With streaming on, the a2a entry answers every request ahead of the resolver: the same answers."""
    answers = {}
    for streaming in ("off", "on"):
        with gateway("orchestrator") as url:
            agent = make_agent(monkeypatch, extra_env={**STREAMING, "STREAMING": streaming})
            for raw in RAW_REQUESTS:
                got = httpx.post(
                    f"{url}/a2a", content=raw, headers={**agent.auth_headers(), "content-type": "application/json"}
                )
                assert got.status_code == 200 and got.headers["content-type"].startswith("application/json")
                answers.setdefault(raw, []).append(got.json())
    for raw, (off, on) in answers.items():
        assert off == on and "error" in off, raw
