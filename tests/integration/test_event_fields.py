"""Events worth drawing (issue 29): every timeline event has its time, thinks their duration and tokens,
delegations the delegate's agent, session and the trace, results their latency from the dispatch; all read
from times the items carry anyway (no request more: `flightdeck bench` counts them).

One agent's real handlers on moto, the events route answering the timeline in one response (streaming off);
the two delegates never answer by themselves: each answer is posted with its callback token.
"""

from __future__ import annotations

import json
import re

from flightdeck.domain.agent import AgentDefinition, DelegateTool
from flightdeck.domain.records import Session, Stamp, ToolResult, TurnAggregation, peer_session_id
from flightdeck.domain.timeline import derive, iso_ms
from tests.integration.test_a2a_streaming import _events
from tests.support.harness import load_event, make_agent, new_session_id

CONFIG = {
    "name": "orchestrator",
    "model": {"provider": "local"},
    "delegates": [
        {"agent": "maps", "service": "worker", "callback_service": "orchestrator"},
        {"agent": "tides", "service": "worker", "callback_service": "orchestrator"},
    ],
}
TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
ISO_MS = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")


def timeline(agent, sid):
    event = load_event("api/session_get.json", SESSION_ID=sid)
    event.update(resource="/api/sessions/{session_id}/events", path=f"/api/sessions/{sid}/events")
    event["queryStringParameters"] = {"follow": "false"}
    event["headers"].update(agent.auth_headers())
    status, _, body = agent.call(event, "session_events")
    assert status == 200, body
    return [(kind, data) for _, kind, data in _events(body)]


def test_a_turn_with_two_delegations_has_times_tokens_peers_and_latencies(aws, monkeypatch):
    agent = make_agent(monkeypatch, delegates=[], extra_env={"AGENT_CONFIG": json.dumps(CONFIG)})
    sid = new_session_id()
    body = {"session_id": sid, "content": "@maps chart the bay @tides tables for june"}
    headers = {"traceparent": f"00-{TRACE}-00f067aa0ba902b7-01"}
    assert agent.api("chat_post", body=body, headers=headers)[0] == 202
    agent.run_queue("turns")
    reply = json.loads(agent.item(f"S#{sid}", "ITER#000001")["reply"])
    ids = [b["toolUse"]["toolUseId"] for b in reply["message"]["content"] if "toolUse" in b]
    for tool_use_id, text in zip(ids, ["the bay, charted", "high tide at noon"], strict=True):
        token = agent.token(sid, 1, tool_use_id, total=2)
        assert agent.api("tool_response", body={"result": text}, headers={"Authorization": f"Bearer {token}"})[0] == 202
    agent.run_queue("turns")

    events = timeline(agent, sid)
    kinds = [kind for kind, _ in events]
    assert kinds == ["message", "thinking", "delegating", "delegating"] + [
        "callback_accepted",
        "callback_accepted",
        "progress",
        "thinking",
        "answer",
        "idle",
    ]
    assert all(ISO_MS.match(data["at"]) for _, data in events), events
    assert [data["at"] for _, data in events] == sorted(data["at"] for _, data in events)
    thinks = [data for kind, data in events if kind == "thinking"]
    assert all(t["duration_ms"] >= 0 and t["tokens_in"] > 0 and t["tokens_out"] > 0 for t in thinks), thinks
    # The model's tokens (issue 37): per think, summed for the turn (the answer) and the session (idle), and the
    # same in the session API.
    keys = {"input": "tokens_in", "output": "tokens_out", "cache_read": "tokens_cache_read"}
    summed = {k: sum(t[v] for t in thinks) for k, v in keys.items()}
    summed.update(cache_write=sum(t["tokens_cache_write"] for t in thinks), thinks=2)
    assert next(d["tokens"] for k, d in events if k == "answer") == summed
    assert next(d["tokens"] for k, d in events if k == "idle") == summed
    view = agent.api("session_get", SESSION_ID=sid)[2]
    assert (view["tokens"], view["tokens_by_turn"]) == (summed, [{"turn": 1, **summed}])
    delegations = [data for kind, data in events if kind == "delegating"]
    assert [(d["agent"], d["protocol"], d["trace_id"]) for d in delegations] == [
        ("maps", "flightdeck", TRACE),
        ("tides", "flightdeck", TRACE),
    ]
    # The session each delegate runs its task in, which the delegator may read with its token.
    assert [d["peer_session_id"] for d in delegations] == [peer_session_id("orchestrator", sid, i) for i in ids]
    answers = [data for kind, data in events if kind == "callback_accepted"]
    assert [a["agent"] for a in answers] == ["maps", "tides"]
    assert all(a["latency_ms"] >= 0 and a["at"] >= delegations[0]["at"] for a in answers)


def test_a_timeout_and_a_delegate_question_carry_their_latency_and_fields():
    agent = AgentDefinition(name="a", delegates=[DelegateTool(agent="worker"), DelegateTool(agent="critic")])
    uses = [
        {"toolUseId": f"t{i}", "name": f"ask_{n}", "input": {"task": "x"}} for i, n in enumerate(["worker", "critic"])
    ]
    messages = [
        {"role": "user", "content": [{"text": "go"}]},
        {"role": "assistant", "content": [{"toolUse": u} for u in uses]},
    ]
    stamps = (
        Stamp(at=1_000),
        Stamp(at=1_900, started=1_100, tokens_in=7, tokens_out=3, cache_read=20, cache_write=4, dispatched=2_000),
    )
    asked = json.dumps({"status": "input_required", "question": "which year?", "context_id": "c-1"})
    pending = [
        ToolResult("t0", "error", json.dumps({"status": "error", "reason": "timeout"}), "timeout", 32_000),
        ToolResult("t1", "success", asked, "callback", 2_250),
    ]
    agg = TurnAggregation("s", 1, frozenset({"t0", "t1"}), 2, 1, "waiting", 32_000)
    session = Session("s", "busy", 1, messages, aggregation=agg, stamps=stamps)
    events = {e.kind: e.data for e in derive(session, pending, agent)}
    assert events["thinking"] == {
        "think": 1,
        "at": iso_ms(1_100),
        "duration_ms": 800,
        "tokens_in": 7,
        "tokens_out": 3,
        "tokens_cache_read": 20,
        "tokens_cache_write": 4,
        # Priced as the model the local model bills as: 7 x $3 + 3 x $15 + 20 x $0.30 + 4 x $3.75 per 1M.
        "model": "anthropic.claude-sonnet-4-20250514-v1:0",
        "cost_usd": 0.000087,
        "price": {"model": "anthropic.claude-sonnet-4-20250514-v1:0", "region": "us-east-1", "recorded": "2026-12-04"},
    }
    assert (events["timeout"]["latency_ms"], events["timeout"]["at"]) == (30_000, iso_ms(32_000))
    answered = events["callback_accepted"]
    assert (answered["latency_ms"], answered["question"], answered["context_id"]) == (250, "which year?", "c-1")
    assert iso_ms(1_700_000_000_123) == "2023-11-14T22:13:20.123Z"
