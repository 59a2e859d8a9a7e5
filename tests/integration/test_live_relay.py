"""The live relay over loopback HTTP, in one process (flightdeck.domain.live): the a2a-sdk client gets the
answer in pieces while the think runs (the local model's think delay spread over its words), a
resubscribe mid-answer gets the rest, the events route sends text_delta events; nobody watching,
a think makes not one request more. State on moto in-process, turns run by a background pump."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time

import httpx
import pytest
from a2a import types as sdk

from flightdeck import wiring
from flightdeck.domain.model import word_chunks
from tests.integration.test_a2a_streaming import STREAMING, _check_shapes, _client, _events, _message
from tests.support.harness import agent_config, make_agent, new_session_id
from tests.support.inprocess import gateway, pumping

THINK_MS = 1500
# Long enough an answer that a 1.5 s think spreads over many words (the local model repeats the task).
TASK = "describe the tides of the northern sea " * 4


@pytest.fixture
def slow(aws, monkeypatch):
    with gateway("orchestrator") as url:
        agent = make_agent(
            monkeypatch,
            extra_env={**STREAMING, "AGENT_CONFIG": agent_config("orchestrator", ["worker"], think_delay_ms=THINK_MS)},
        )
        yield agent, url


async def _state(http: httpx.AsyncClient, url: str, task_id: str) -> str:
    got = await http.post(
        f"{url}/a2a", json={"jsonrpc": "2.0", "id": "g", "method": "tasks/get", "params": {"id": task_id}}
    )
    return got.json()["result"]["status"]["state"]


async def _answer(http: httpx.AsyncClient, url: str, task_id: str) -> str:
    got = await http.post(
        f"{url}/a2a", json={"jsonrpc": "2.0", "id": "g", "method": "tasks/get", "params": {"id": task_id}}
    )
    return got.json()["result"]["artifacts"][0]["parts"][0]["text"]


def _chunks(events) -> list[sdk.TaskArtifactUpdateEvent]:
    return [e for e in events if isinstance(e, sdk.TaskArtifactUpdateEvent)]


def test_message_stream_gets_the_answer_while_the_think_runs(slow):
    agent, url = slow

    async def scenario():
        async with httpx.AsyncClient(timeout=30, headers=agent.auth_headers()) as http:
            client = await _client(http, url)
            events, states = [], []
            with pumping(agent, "turns"):
                async for task, update in client.send_message(_message(TASK)):
                    events.append(update if update is not None else task.model_copy(deep=True))
                    if isinstance(update, sdk.TaskArtifactUpdateEvent):
                        states.append(await _state(http, url, task.id))  # the task as the chunk arrives
            return events, states, await _answer(http, url, events[0].id)

    events, states, stored = asyncio.run(scenario())
    _check_shapes(events)
    assert events[-1].status.state == sdk.TaskState.completed
    # Pieces of the answer came while the think still ran (the task completes when its reply is stored)...
    assert states.count("working") >= 2, states
    # ...and they are not the stored answer cut in words afterwards: the relay's pieces hold several words.
    chunks = _chunks(events)
    live = [c.artifact.parts[0].root.text for c, s in zip(chunks, states) if s == "working"]
    assert any(len(piece.split()) > 1 for piece in live), live
    # The stored answer is the source of truth: the chunks joined are it, as the sdk's tracker has it.
    assert "".join(c.artifact.parts[0].root.text for c in chunks) == stored
    assert stored.startswith("[orchestrator] Task:") and len(word_chunks(stored)) > 30


def test_resubscribe_mid_answer_gets_the_rest(slow):
    agent, url = slow
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "message/stream",
        "params": {"message": _message(TASK).model_dump(mode="json", exclude_none=True)},
    }

    async def scenario():
        async with httpx.AsyncClient(timeout=30, headers=agent.auth_headers()) as http:
            first, heard = None, []
            with pumping(agent, "turns"):
                async with http.stream("POST", f"{url}/a2a", json=body) as response:
                    async for line in response.aiter_lines():
                        if not line.startswith("data:"):
                            continue
                        result = json.loads(line[5:])["result"]
                        first = first or result
                        if result["kind"] == "artifact-update":
                            heard.append(result["artifact"]["parts"][0]["text"])
                            if len(heard) == 2:
                                break  # the connection drops mid-answer
                client = await _client(http, url)
                events, states = [], []
                async for task, update in client.resubscribe(sdk.TaskIdParams(id=first["id"])):
                    events.append(update if update is not None else task.model_copy(deep=True))
                    if isinstance(update, sdk.TaskArtifactUpdateEvent):
                        states.append(await _state(http, url, first["id"]))
            return heard, events, states, await _answer(http, url, first["id"])

    heard, events, states, stored = asyncio.run(scenario())
    _check_shapes(events)
    assert events[0].status.state == sdk.TaskState.working and events[-1].status.state == sdk.TaskState.completed
    chunks = _chunks(events)
    # The text so far first (at least what the dropped stream had heard), then the rest, while the think ran.
    assert chunks[0].artifact.parts[0].root.text.startswith("".join(heard)) and states[0] == "working"
    assert "".join(c.artifact.parts[0].root.text for c in chunks) == stored


def test_the_events_route_sends_the_think_s_text_as_deltas(slow):
    agent, url = slow
    sid = new_session_id()
    assert agent.api("chat_post", body={"session_id": sid, "content": TASK})[0] == 202
    seen: list[tuple[str, str, dict]] = []
    pumped = False
    with contextlib.ExitStack() as running, httpx.Client(timeout=30, headers=agent.auth_headers()) as http:
        with http.stream("GET", f"{url}/api/sessions/{sid}/events") as response:
            buffer = ""
            for piece in response.iter_text():
                buffer += piece
                while "\n\n" in buffer:
                    block, buffer = buffer.split("\n\n", 1)
                    seen.extend(_events(block + "\n\n"))
                if seen and not pumped:
                    # The stream has marked the session watched: now the think may start.
                    running.enter_context(pumping(agent, "turns"))
                    pumped = True
    kinds = [kind for _, kind, _ in seen]
    deltas = [data for _, kind, data in seen if kind == "text_delta"]
    assert kinds[:2] == ["message", "thinking"] and kinds[-2:] == ["answer", "idle"]
    assert set(kinds[2:-2]) == {"text_delta"} and len(deltas) >= 3
    answer = next(data for _, kind, data in seen if kind == "answer")["text"]
    assert "".join(d["text"] for d in deltas) == answer
    assert [d["offset"] for d in deltas] == [sum(len(x["text"]) for x in deltas[:i]) for i in range(len(deltas))]
    assert {(d["iteration"], d["attempt"]) for d in deltas} == {(1, 1)}
    ids = [event_id for event_id, _, _ in seen]
    assert len(set(ids)) == len(ids)
    # Replayed afterwards: the timeline, the answer whole, no deltas.
    replay = httpx.get(f"{url}/api/sessions/{sid}/events?follow=false", headers=agent.auth_headers())
    assert [k for _, k, _ in _events(replay.text)] == ["message", "thinking", "answer", "idle"]


def _dynamodb_calls(agent, session_id: str) -> list[tuple[str, str]]:
    """(operation, sort key) of every DynamoDB request the turn worker makes for this session's think."""
    calls: list[tuple[str, str]] = []

    def record(params, model, **_):
        key = params.get("Key") or params.get("Item") or {}
        calls.append((model.name, key.get("sk", {}).get("S", "") if isinstance(key, dict) else ""))

    client = wiring.state_store().client
    client.meta.events.register("before-parameter-build.dynamodb", record)
    try:
        agent.run_queue("turns")
    finally:
        client.meta.events.unregister("before-parameter-build.dynamodb", record)
    return calls


def test_nobody_watching_a_think_costs_no_request_more(aws, monkeypatch):
    agent = make_agent(
        monkeypatch,
        extra_env={**STREAMING, "AGENT_CONFIG": agent_config("orchestrator", ["worker"], think_delay_ms=600)},
    )
    unwatched, watched = new_session_id(), new_session_id()
    assert agent.api("chat_post", body={"session_id": unwatched, "content": "say hi in five short words"})[0] == 202
    alone = _dynamodb_calls(agent, unwatched)
    assert agent.api("chat_post", body={"session_id": watched, "content": "say hi in five short words"})[0] == 202
    wiring.deps().live.watch(watched, wiring.state_store().now_ms() + 60_000)
    started = time.monotonic()
    followed = _dynamodb_calls(agent, watched)
    took_ms = (time.monotonic() - started) * 1000
    relay = [c for c in followed if c[1] == "LIVE"]
    # Watched: the text written a few times, at most once per 100 ms of the think (600 ms, or longer when
    # the machine is busy: the bound is what it took), then deleted.
    assert relay[-1] == ("DeleteItem", "LIVE") and 2 <= len(relay) - 1 <= max(6, took_ms // 100)
    assert all(c == ("PutItem", "LIVE") for c in relay[:-1])
    # Nobody watching: the very same requests, without those.
    assert alone == [c for c in followed if c[1] != "LIVE"] and not any(c[1] in ("LIVE", "WATCH") for c in alone)
    assert [m["content"] for m in agent.api("session_get", SESSION_ID=watched)[2]["messages"]][-1] == [
        m["content"] for m in agent.api("session_get", SESSION_ID=unwatched)[2]["messages"]
    ][-1]
