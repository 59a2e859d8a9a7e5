"""POST /api/sessions/{id}/cancel (issue 14, point 10, B's side): the session's owner stops waiting;
the session stops at its next think boundary, delivers nothing, cancels what it delegated in turn,
and is closed (a closing line, idle again).

One agent's real handlers on moto (tests/integration/test_two_agents.py runs it across two agents).
"""

from __future__ import annotations

import json

import pytest

from flightdeck.domain.dispatch import peer_session_id
from flightdeck.domain.session_cancel import CLOSING_TEXT
from flightdeck.wiring import state_store
from tests.support.harness import hand_outbound_to_queues, make_agent, new_session_id
from tests.support.peer import ScriptedPeer

CALLER_TOKEN = "a-reply-token-of-the-delegating-agent"


@pytest.fixture
def worker():
    p = ScriptedPeer()
    yield p
    p.close()


@pytest.fixture
def agent(aws, monkeypatch, worker):
    return make_agent(monkeypatch, allow=f"worker:{worker.url},orchestrator:{worker.url}")


def delegated_task(agent, content="summarise the launch plan", sid=None, token=CALLER_TOKEN) -> str:
    """A task as a delegating agent sends it (with a reply route): the think is queued, not run."""
    sid = sid or new_session_id()
    status, _, body = post_delegated(agent, sid, content, token)
    assert status == 202, body
    return sid


def post_delegated(agent, sid, content, token):
    return agent.api(
        "chat_post_with_reply",
        SESSION_ID=sid,
        TOKEN=token,
        body={
            "session_id": sid,
            "content": content,
            "reply": {"callbackService": "orchestrator", "bearerToken": token},
        },
    )


def cancel(agent, sid, **kw):
    return agent.api("session_cancel", SESSION_ID=sid, **kw)


def view(agent, sid):
    return agent.api("session_get", SESSION_ID=sid)[2]


def deliveries(worker):
    return [r for r in worker.requests if r["path"].startswith("/api/tools/response")]


def test_a_pending_think_is_canceled_and_the_task_delivers_nothing(agent, worker):
    sid = delegated_task(agent)
    status, _, body = cancel(agent, sid)
    assert (status, body) == (200, {"session_id": sid, "status": "canceled", "iteration": 1})
    session = view(agent, sid)
    assert session["status"] == "idle"
    assert [m["role"] for m in session["messages"]] == ["user", "assistant"]
    assert session["messages"][-1]["content"][0]["text"] == CLOSING_TEXT
    agent.run_queue("turns")  # the think that was queued: the session moved on, nothing happens
    assert agent.item(f"S#{sid}", "ITER#000001") is None
    assert deliveries(worker) == [] and agent.receive("delivery") == []
    assert cancel(agent, sid)[:1] == (409,)  # idle now: nothing to cancel
    # The session takes a new task afterwards, and answers it.
    assert agent.api("chat_post", body={"session_id": sid, "content": "next"})[0] == 202
    agent.run_queue("turns")
    assert view(agent, sid)["messages"][-1]["content"][0]["text"].startswith("[orchestrator]")


def test_a_think_under_way_when_canceled_cannot_store_its_reply(agent, worker, monkeypatch):
    from flightdeck.wiring import deps

    sid = delegated_task(agent)
    d = deps()
    model = d.model()

    class CanceledWhileThinking:
        def converse(self, **kwargs):
            assert cancel(agent, sid)[0] == 200  # the caller gives up while the model works
            return model.converse(**kwargs)

    monkeypatch.setattr(d, "model", lambda: CanceledWhileThinking())
    agent.run_queue("turns")
    assert agent.item(f"S#{sid}", "ITER#000001") is None  # the refused write stored nothing
    assert deliveries(worker) == [] and agent.receive("delivery") == []
    session = view(agent, sid)
    assert session["status"] == "idle" and session["messages"][-1]["content"][0]["text"] == CLOSING_TEXT


def test_a_session_waiting_on_its_delegations_completes_canceled_and_cancels_them_in_turn(agent, worker):
    sid = new_session_id()
    assert agent.api("chat_post", body={"session_id": sid, "content": "@worker one @worker two"})[0] == 202
    agent.run_queue("turns")
    assert agent.turn_item(sid, 1)["status"] == "waiting"
    assert cancel(agent, sid)[0] == 200
    turn = agent.turn_item(sid, 1)
    assert turn["status"] == "complete" and turn["completed_by"] == "session_cancel"
    reply = json.loads(agent.item(f"S#{sid}", "ITER#000001")["reply"])
    ids = [b["toolUse"]["toolUseId"] for b in reply["message"]["content"] if "toolUse" in b]
    # Its own delegates are told to stop: each on the session its delegation created there.
    assert sorted(r["path"] for r in worker.requests if r["path"].endswith("/cancel")) == sorted(
        f"/api/sessions/{peer_session_id('orchestrator', sid, i)}/cancel" for i in ids
    )
    session = view(agent, sid)
    assert session["status"] == "idle"
    results = [b["toolResult"] for b in session["messages"][2]["content"]]
    assert [json.loads(r["content"][0]["text"])["reason"] for r in results] == ["canceled", "canceled"]
    assert session["messages"][-1]["content"][0]["text"] == CLOSING_TEXT
    assert agent.receive("turns") == []  # no next think: the session is closed
    # A worker answering now is late.
    token = agent.token(sid, 1, ids[0], total=2)
    assert agent.api("tool_response", TOKEN=token, RESULT="too late")[0] == 410


def test_only_the_owner_may_cancel_and_a_refusal_changes_nothing(agent, worker):
    sid = delegated_task(agent)
    before = sorted(json.dumps(i, sort_keys=True) for i in agent.table_items())
    assert cancel(agent, sid, token=None)[:1] == (401,)
    assert cancel(agent, sid, token=agent.add_peer("stranger"))[0] == 404  # another's session does not exist
    after_peer = sorted(json.dumps(i, sort_keys=True) for i in agent.table_items() if '"PEER#' not in json.dumps(i))
    assert after_peer == [i for i in before if '"PEER#' not in i]
    status, _, body = cancel(agent, "no-such-session")
    assert (status, body["error"]["code"]) == (404, "session_not_found")
    status, _, body = cancel(agent, "not a session id!")
    assert status == 422
    assert view(agent, sid)["status"] == "busy"


def test_a_canceller_that_dies_after_its_write_leaves_the_close_to_the_sweep(agent, worker, monkeypatch):
    import time

    from flightdeck.domain.deadlines import sweep
    from flightdeck.wiring import deps

    hand_outbound_to_queues(monkeypatch)
    sid = delegated_task(agent)
    d = deps()
    assert state_store().cancel_session(sid, "tester") == ("canceled", 1)  # ...and the function died here
    assert view(agent, sid)["status"] == "canceled"
    agent.run_queue("turns")  # the queued think is the boundary: it closes the session instead of thinking
    assert view(agent, sid)["status"] == "idle" and agent.item(f"S#{sid}", "ITER#000001") is None
    assert agent.receive("delivery") == []

    # Had that think never been sent either, the owed mark the cancel wrote brings the sweep to send it.
    def lost(*args, **kwargs):
        raise RuntimeError("the think was never sent")

    with monkeypatch.context() as m:
        m.setattr(d.thinks, "start", lost)
        sid = delegated_task(agent)
    assert agent.receive("turns") == []
    assert state_store().cancel_session(sid, "tester")[0] == "canceled"
    with monkeypatch.context() as m:
        m.setattr(state_store(), "_clock", lambda: int(time.time() * 1000) + state_store().owed_think_grace_ms + 1)
        assert sweep(d) >= 1
    agent.run_queue("turns")
    session = view(agent, sid)
    assert session["status"] == "idle" and session["messages"][-1]["content"][0]["text"] == CLOSING_TEXT
    assert agent.receive("delivery") == []


def _count_aws(d):
    from flightdeck.bench import counter

    sink = counter.ListSink()
    counter.attach(state_store().client, sink)
    counter.attach(d.queues.client, sink)
    return lambda: dict(sorted(__import__("collections").Counter(r["op"] for r in sink.records).items()))


def test_what_a_cancel_costs_the_canceled_agent(agent, worker):
    """The figures docs/API.md gives (Cancellation): AWS requests of one cancel on the agent that stops."""
    from flightdeck.wiring import deps

    sid = delegated_task(agent)
    requests = _count_aws(deps())
    assert cancel(agent, sid)[0] == 200
    # The caller's token (GetItem), the conditional write, the session read, the close.
    assert requests() == {"GetItem": 1, "Query": 1, "TransactWriteItems": 1, "UpdateItem": 1}

    sid = new_session_id()
    assert agent.api("chat_post", body={"session_id": sid, "content": "@worker one"})[0] == 202
    agent.run_queue("turns")
    requests = _count_aws(deps())
    assert cancel(agent, sid)[0] == 200
    # Waiting on a delegation, the same and: the turn and its results read, the completion (canceled
    # results), the call list read (to cancel its delegate: one HTTP request), the session read again.
    assert requests() == {"GetItem": 3, "Query": 3, "TransactWriteItems": 2, "UpdateItem": 1}
    assert len([r for r in worker.requests if r["path"].endswith("/cancel")]) == 1


# --- issue 24: a cancel never strands the inbox, and retires the route it canceled ----------------------


def _drain(agent, sid, rounds: int = 20):
    for _ in range(rounds):
        agent.run_queue("turns")
        session = view(agent, sid)
        if session["status"] == "idle" and session["queued"] == 0:
            return session
    raise AssertionError(f"session {sid} never went idle with nothing waiting: {view(agent, sid)}")


def test_a_cancel_while_a_follow_up_waits_in_the_inbox_starts_the_follow_up_s_turn(agent, worker):
    sid = new_session_id()
    assert agent.api("chat_post", body={"session_id": sid, "content": "@worker one"})[0] == 202
    agent.run_queue("turns")
    status, _, body = agent.api("chat_post", body={"session_id": sid, "content": "and then this"})
    assert (status, body["status"], body["position"]) == (202, "queued", 1)
    assert cancel(agent, sid)[0] == 200
    session = view(agent, sid)
    # Never idle with a message left waiting: the close started the follow-up's turn (its think owed).
    assert (session["status"], session["queued"]) == ("busy", 0)
    assert agent.item(f"S#{sid}", "META")["owed_think"] == session["iteration"]
    session = _drain(agent, sid)
    texts = [b.get("text", "") for m in session["messages"] for b in m["content"]]
    assert CLOSING_TEXT in texts and 'Task: "and then this"' in session["messages"][-1]["content"][0]["text"]


def test_a_cancel_while_a_delegation_waits_in_the_inbox_answers_that_delegation(agent, worker, monkeypatch):
    hand_outbound_to_queues(monkeypatch)
    sid = delegated_task(agent, "the first delegated task")
    second = "a-second-reply-token-of-the-delegating-agent"
    status, _, body = post_delegated(agent, sid, "the second delegated task", second)
    assert (status, body["status"]) == (202, "queued")
    assert cancel(agent, sid)[0] == 200
    _drain(agent, sid)
    # The canceled task answers nothing; the queued one is answered on its own route, once.
    delivered = agent.bodies("delivery")
    assert [d["bearer_token"] for d in delivered] == [second]
    assert 'Task: "the second delegated task"' in delivered[0]["result"]


def test_a_canceled_delegated_session_retires_its_reply_route(agent, worker, monkeypatch):
    hand_outbound_to_queues(monkeypatch)
    sid = delegated_task(agent)
    assert cancel(agent, sid)[0] == 200
    assert agent.item(f"S#{sid}", "META")["route"]["status"] == "retired"
    # Its owner continues the session with a new route: taken at once, not 409 session_busy.
    token = "a-continuation-token-of-the-delegating-agent"
    status, _, body = post_delegated(agent, sid, "continue, please", token)
    assert (status, body["status"], body["turn"]) == (202, "accepted", 2), body
    _drain(agent, sid)
    assert [d["bearer_token"] for d in agent.bodies("delivery")] == [token]
    # A message without a route is answered to nobody: the canceled delegation's caller hears nothing.
    assert agent.api("chat_post", body={"session_id": sid, "content": "one more"})[0] == 202
    _drain(agent, sid)
    assert agent.bodies("delivery") == []
