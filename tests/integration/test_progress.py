"""Progress while delegations are out (issue 25): "2 of 3 delegations answered", from the waiting turn's own
TURN item (received / total, read with the session: no request or write more), on the events route and in
A2A status updates; once the turn completed, "3 of 3" after its results.

One agent's real handlers on moto (the events route over the local gateway); the delegates never answer by
themselves: each answer is posted with its callback token.
"""

from __future__ import annotations

import json
import time

import httpx
import pytest

from flightdeck.domain.timeline import TimelineEvent, derive
from tests.integration.test_a2a_server import message, ok, rpc
from tests.integration.test_a2a_streaming import STREAMING, _events
from tests.support.harness import make_agent, new_session_id
from tests.support.inprocess import gateway

CONFIG = {
    "name": "orchestrator",
    "model": {"provider": "local"},
    "delegates": [
        {"agent": "maps", "service": "worker", "callback_service": "orchestrator"},
        {"agent": "tides", "service": "worker", "callback_service": "orchestrator"},
        {"agent": "moons", "service": "worker", "callback_service": "orchestrator"},
    ],
}
TASK = "@maps chart the bay @tides tables for june @moons phases for june"


@pytest.fixture
def served(aws, monkeypatch):
    with gateway("orchestrator") as url:
        agent = make_agent(monkeypatch, delegates=[], extra_env={**STREAMING, "AGENT_CONFIG": json.dumps(CONFIG)})
        yield agent, url


def calls(agent, sid) -> list[str]:
    reply = json.loads(agent.item(f"S#{sid}", "ITER#000001")["reply"])
    return [b["toolUse"]["toolUseId"] for b in reply["message"]["content"] if "toolUse" in b]


def answer(agent, sid, tool_use_id, text):
    status, _, body = agent.api(
        "tool_response",
        body={"result": text},
        headers={"Authorization": f"Bearer {agent.token(sid, 1, tool_use_id, total=3)}"},
    )
    assert status == 202, body


def progress_of(events) -> list[tuple[str, str]]:
    # The event's own id (its SSE id is the stream's position: flightdeck.domain.resume).
    return [(data["id"], data["text"]) for _, kind, data in events if kind == "progress"]


def test_the_events_route_tells_how_many_delegations_are_answered(served):
    agent, url = served
    sid = new_session_id()
    assert agent.api("chat_post", body={"session_id": sid, "content": TASK})[0] == 202
    agent.run_queue("turns")
    ids = calls(agent, sid)
    assert len(ids) == 3

    def timeline():
        got = httpx.get(f"{url}/api/sessions/{sid}/events?follow=false", headers=agent.auth_headers(), timeout=30)
        assert got.status_code == 200
        return _events(got.text)

    assert progress_of(timeline()) == []  # all three out: nothing answered yet
    answer(agent, sid, ids[1], "high tide at noon")
    events = timeline()
    assert progress_of(events) == [("progress.1.1", "1 of 3 delegations answered")]
    [(_, _, data)] = [e for e in events if e[1] == "progress"]
    assert (data["answered"], data["total"], data["think"]) == (1, 3, 1)
    # After the result it counts.
    kinds = [kind for _, kind, _ in events]
    assert kinds.index("progress") == kinds.index("callback_accepted") + 1
    answer(agent, sid, ids[0], "the bay, charted")
    assert progress_of(timeline()) == [("progress.1.2", "2 of 3 delegations answered")]
    # The last answer completes the turn: "3 of 3" after the results, and the next think answers.
    answer(agent, sid, ids[2], "full moon on the 11th")
    agent.run_queue("turns")
    events = timeline()
    assert progress_of(events) == [("progress.1.3", "3 of 3 delegations answered")]
    assert [kind for _, kind, _ in events][-5:] == ["callback_accepted", "progress", "thinking", "answer", "idle"]


def test_a2a_status_updates_carry_the_progress(served):
    from flightdeck.domain.a2a.ports import parse_task_id
    from flightdeck.domain.a2a.stream import follow
    from flightdeck.domain.streaming import Note, Pace
    from flightdeck.wiring import deps

    agent, _ = served
    task = ok(rpc(agent, "message/send", {"message": message(TASK)}))
    agent.run_queue("turns")
    sid, key = parse_task_id(task["id"])
    ids = calls(agent, sid)

    def updates():
        ticks = iter(range(10_000))
        pace = Pace(poll_s=0, max_s=2, keepalive_s=100, monotonic=lambda: next(ticks), sleep=lambda s: None)
        events = follow(deps(), sid, key, pace, "working", since_task_message=True)
        return [m.event for m in events if not isinstance(m, Note) and m.event["kind"] == "status-update"]

    answer(agent, sid, ids[0], "the bay, charted")
    answer(agent, sid, ids[2], "full moon on the 11th")
    steps = [u for u in updates() if u["metadata"]["flightdeck"]["kind"] == "progress"]
    assert [s["status"]["message"]["parts"][0]["text"] for s in steps] == ["2 of 3 delegations answered"]
    [step] = steps
    assert step["status"]["state"] == "working" and not step["final"]
    assert {k: step["metadata"]["flightdeck"][k] for k in ("answered", "total")} == {"answered": 2, "total": 3}


def test_one_delegation_or_local_tools_alone_tell_no_progress_and_mixed_calls_say_calls():
    from flightdeck.domain.agent import AgentDefinition, DelegateTool
    from flightdeck.domain.records import Session, ToolResult, TurnAggregation

    agent = AgentDefinition(name="a", delegates=[DelegateTool(agent="worker")], builtin_tools=["word_count"])

    def turn(*names):
        uses = [{"toolUseId": f"t{i}", "name": n, "input": {"task": "x"}} for i, n in enumerate(names)]
        return [
            {"role": "user", "content": [{"text": "go"}]},
            {"role": "assistant", "content": [{"toolUse": u} for u in uses]},
        ]

    def waiting(messages, received):
        total = sum(1 for b in messages[-1]["content"] if "toolUse" in b)
        agg = TurnAggregation("s", 1, frozenset(), total, received, "waiting", time.time_ns())
        pending = [ToolResult(f"t{i}", "success", "r", "callback") for i in range(received)]
        session = Session("s", "busy", 1, messages, aggregation=agg)
        return [e for e in derive(session, pending, agent) if e.kind == "progress"]

    assert waiting(turn("ask_worker"), 0) == []
    assert waiting(turn("ask_worker", "word_count"), 1) == [
        TimelineEvent(
            "progress.1.1", "progress", {"think": 1, "answered": 1, "total": 2, "text": "1 of 2 calls answered"}
        )
    ]
    assert waiting(turn("word_count", "word_count"), 1) == []  # nothing delegated: nothing out to wait for
