"""Streams resume without loss (issue 27): every event of an A2A stream (v0.3 and v1.0) and of GET
/api/sessions/{id}/events has an SSE id; a client that drops the connection at a random point and reconnects
with Last-Event-ID (the events route again; tasks/resubscribe, SubscribeToTask, or the same message sent
again) gets every event after it and none twice. The drop points come from fixed seeds; each connection reads
one to three events, then closes. One process: our handlers behind the local gateway, moto, the local model.

What is checked, over all the connections of one run: no SSE id twice; each timeline event (each step) once,
and all of them; the answer assembled from the chunks (append false replaces) is the stored answer; one final
status-update, the last event.
"""

from __future__ import annotations

import base64
import json
import random
import uuid
from typing import Any

import pytest
import requests

from flightdeck.chat_client.sse import ServerEvent, read_events
from flightdeck.domain.a2a import wire_v1
from tests.support.harness import make_agent, new_session_id
from tests.support.inprocess import gateway, pumping
from tests.support.stream_drops import STREAMING, answer_delegation, reconnecting, rpc

SEEDS = (1, 5)  # 1-8 pass; two keep the suite fast


@pytest.fixture
def served(aws, monkeypatch):
    with gateway("orchestrator") as url:
        yield make_agent(monkeypatch, extra_env=STREAMING), url


@pytest.mark.parametrize("seed", SEEDS)
def test_the_events_route_resumes_after_random_drops(served, seed):
    agent, url = served
    sid = new_session_id()
    headers = {**agent.auth_headers(), "Accept": "text/event-stream"}

    def open_stream(attempt: int, last: ServerEvent | None) -> requests.Response:
        extra = {"Last-Event-ID": last.id} if last else {}
        return requests.get(f"{url}/api/sessions/{sid}/events", headers={**headers, **extra}, stream=True, timeout=30)

    def delegated(event: ServerEvent):
        use = json.loads(event.data).get("tool_use_id") if event.event == "delegating" else None
        return (url, agent.token(sid, 1, use)) if use else None

    assert agent.api("chat_post", body={"session_id": sid, "content": "@worker name two rivers"})[0] == 202
    with pumping(agent, "turns"):
        seen = reconnecting(open_stream, random.Random(seed), lambda e: e.event == "idle", delegated)
    ids = [e.id for e in seen]
    assert len(set(ids)) == len(ids)
    timeline = [json.loads(e.data) for e in seen if e.event != "text_delta"]
    replay = requests.get(f"{url}/api/sessions/{sid}/events?follow=false", headers=headers, timeout=30).text
    expected = [json.loads(e.data)["id"] for e in read_events([replay.encode()]) if isinstance(e, ServerEvent)]
    assert sorted(d["id"] for d in timeline) == sorted(expected)  # each step once, all of them
    texts: dict[int, str] = {}
    for delta in (json.loads(e.data) for e in seen if e.event == "text_delta"):
        texts[delta["iteration"]] = texts.get(delta["iteration"], "")[: delta["offset"]] + delta["text"]
    answer = next(d for d in timeline if d["kind"] == "answer")
    if answer["think"] in texts:
        assert texts[answer["think"]] == answer["text"]


@pytest.mark.parametrize("version", ["0.3", "1.0"])
@pytest.mark.parametrize("seed", SEEDS)
def test_a2a_streams_resume_after_random_drops(served, version, seed):
    agent, url = served
    v1 = version == "1.0"
    headers = {**agent.auth_headers(), "Accept": "text/event-stream", **({"A2A-Version": "1.0"} if v1 else {})}
    message_id = str(uuid.uuid4())
    if v1:
        message = {"messageId": message_id, "role": "ROLE_USER", "parts": [{"text": "@worker name two rivers"}]}
    else:
        message = {
            "kind": "message",
            "messageId": message_id,
            "role": "user",
            "parts": [{"kind": "text", "text": "@worker name two rivers"}],
        }
    task_id: list[str] = []

    def open_stream(attempt: int, last: ServerEvent | None) -> requests.Response:
        extra = {"Last-Event-ID": last.id} if last else {}
        if not task_id or attempt % 3 == 1:  # the first, and now and then the same message again
            body = rpc("SendStreamingMessage" if v1 else "message/stream", {"message": message})
        else:
            body = rpc("SubscribeToTask" if v1 else "tasks/resubscribe", {"id": task_id[0]})
        return requests.post(f"{url}/a2a", json=body, headers={**headers, **extra}, stream=True, timeout=30)

    def result(event: ServerEvent) -> dict[str, Any]:
        body = json.loads(event.data)
        assert "result" in body, body
        found = wire_v1.event_from_wire(body["result"]) if v1 else body["result"]
        if found.get("kind") == "task" and not task_id:
            task_id.append(found["id"])
        return found

    def ended(event: ServerEvent) -> bool:
        found = result(event)
        return found.get("kind") == "status-update" and found.get("final") is True

    def delegated(event: ServerEvent):
        found = result(event)
        step = (found.get("metadata") or {}).get("flightdeck") or {}
        if step.get("kind") != "delegating":
            return None
        return url, agent.token(found["contextId"], 1, step["tool_use_id"])

    with pumping(agent, "turns"):
        seen = reconnecting(open_stream, random.Random(seed), ended, delegated)
    ids = [e.id for e in seen]
    events = [result(e) for e in seen]
    assert all(ids) and len(set(ids)) == len(ids)
    assert events[0]["kind"] == "task" and [e["kind"] for e in events[1:]].count("task") == 0
    finals = [e for e in events if e.get("kind") == "status-update" and e.get("final")]
    assert finals == [events[-1]] and finals[0]["status"]["state"] == "completed"
    steps = [e["metadata"]["flightdeck"]["id"] for e in events if (e.get("metadata") or {}).get("flightdeck")]
    assert len(steps) == len(set(steps))
    kinds = [e["metadata"]["flightdeck"]["kind"] for e in events if (e.get("metadata") or {}).get("flightdeck")]
    assert "delegating" in kinds
    text = ""
    for e in events:
        if e.get("kind") == "artifact-update":
            piece = "".join(p.get("text", "") for p in e["artifact"]["parts"])
            text = text + piece if e.get("append") else piece
    get = rpc("GetTask" if v1 else "tasks/get", {"id": task_id[0]})
    stored = requests.post(
        f"{url}/a2a", json=get, headers=agent.auth_headers() | ({"A2A-Version": "1.0"} if v1 else {})
    )
    task = stored.json()["result"]
    task = wire_v1.task_from_wire(task) if v1 else task
    answer = "".join(p.get("text", "") for a in task["artifacts"] for p in a["parts"])
    assert text == answer and "Nile, Rhine" in answer


@pytest.mark.parametrize("seed", SEEDS)
def test_the_buffered_events_route_resumes_from_last_event_id(aws, monkeypatch, seed):
    """With STREAMING off the events route answers the timeline so far in one response: a client polling it with
    the last id it read (its reads cut short at random, as a dropped response is) gets each event once."""
    rng = random.Random(seed)
    with gateway("orchestrator") as url:
        agent = make_agent(monkeypatch, extra_env={"STREAMING": "off"})
        sid = new_session_id()
        headers = agent.auth_headers()
        seen: list[ServerEvent] = []

        def poll() -> None:
            extra = {"Last-Event-ID": seen[-1].id} if seen else {}
            resp = requests.get(f"{url}/api/sessions/{sid}/events", headers={**headers, **extra}, timeout=30)
            assert resp.status_code == 200 and resp.headers["Content-Type"].startswith("text/event-stream")
            got = [e for e in read_events([resp.content]) if isinstance(e, ServerEvent)]
            seen.extend(got[: rng.randint(1, 3)])  # the rest of the response was lost: asked again next time

        assert agent.api("chat_post", body={"session_id": sid, "content": "@worker name two rivers"})[0] == 202
        agent.run_queue("turns")
        for _ in range(3):
            poll()
        use = next(json.loads(e.data)["tool_use_id"] for e in seen if e.event == "delegating")
        answer_delegation(url, agent.token(sid, 1, use))
        agent.run_queue("turns")
        for _ in range(50):
            if seen and seen[-1].event == "idle":
                break
            poll()
        full = requests.get(f"{url}/api/sessions/{sid}/events", headers=headers, timeout=30).content
        # Past the last event: nothing more (a text/event-stream of no events).
        after_all = requests.get(
            f"{url}/api/sessions/{sid}/events", headers={**headers, "Last-Event-ID": seen[-1].id}, timeout=30
        )
        # An id this server did not hand out names no position: the timeline from the start, as when streaming.
        unknown = requests.get(
            f"{url}/api/sessions/{sid}/events", headers={**headers, "Last-Event-ID": "c1.not-ours"}, timeout=30
        )
        # Nor one whose position is no number this server writes (Infinity was an OverflowError: a 5xx).
        infinite = "c1." + base64.urlsafe_b64encode(b'{"a":"x","t":[Infinity,0,0]}').decode()
        forged = requests.get(
            f"{url}/api/sessions/{sid}/events", headers={**headers, "Last-Event-ID": infinite}, timeout=30
        )
    expected = [e.id for e in read_events([full]) if isinstance(e, ServerEvent)]
    assert [e.id for e in seen] == expected and seen[-1].event == "idle"
    assert after_all.status_code == 200 and after_all.text == ""
    assert unknown.status_code == 200 and unknown.content == full
    assert forged.status_code == 200 and forged.content == full
