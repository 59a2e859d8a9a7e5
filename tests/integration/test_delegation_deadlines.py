"""Per-delegation timeouts (issue 14, point 7): each delegate's own `timeout_ms`, each missing result
synthesized at its own deadline, and a turn that waits no longer than its longest delegation.

One agent's real handlers and DynamoDB adapter on moto, with the state store's clock injected: time
moves by assignment, never by sleeping. The timer messages are recorded as they are sent (SQS delays
are real time) and fired by hand at the moment they are due, as the timers queue would.
"""

from __future__ import annotations

import json

import pytest

from flightdeck.domain.deadlines import TimerMessage, fire_timer, sweep
from flightdeck.domain.dispatch import peer_session_id
from flightdeck.wiring import state_store
from tests.support.harness import make_agent, new_session_id
from tests.support.peer import ScriptedPeer

QUICK_MS = 2_000  # the lookup delegate's own timeout_ms
DEFAULT_MS = 10_000  # ASYNC_TOOL_TIMEOUT_MS: the review delegate's (it sets none)
OWED_GRACE_MS = 1_000


class Clock:
    def __init__(self, now_ms: int):
        self.now = now_ms

    def __call__(self) -> int:
        return self.now


@pytest.fixture
def peer():
    p = ScriptedPeer()
    yield p
    p.close()


@pytest.fixture
def agent(aws, monkeypatch, peer):
    config = {
        "name": "orchestrator",
        "model": {"provider": "local"},
        "delegates": [
            {"agent": "quick", "service": "worker", "callback_service": "orchestrator", "timeout_ms": QUICK_MS},
            {"agent": "slow", "service": "worker", "callback_service": "orchestrator"},
            {"agent": "also", "service": "worker", "callback_service": "orchestrator"},
        ],
    }
    return make_agent(
        monkeypatch,
        delegates=[],
        allow=f"worker:{peer.url},orchestrator:{peer.url}",
        extra_env={"AGENT_CONFIG": json.dumps(config), "ASYNC_TOOL_TIMEOUT_MS": str(DEFAULT_MS)},
    )


@pytest.fixture
def world(agent, monkeypatch):
    """The agent's Deps with an injected clock, and the timers it arms (body, delay) as they are sent."""
    import time

    from flightdeck.wiring import deps

    d = deps()
    clock = Clock(int(time.time() * 1000))
    monkeypatch.setattr(state_store(), "_clock", clock)
    # An owed think's grace shorter than every deadline here: a think that opens a turn lists it at its
    # earliest deadline (a deadline inside the grace keeps the owed think's listing: see the test below).
    monkeypatch.setattr(state_store(), "owed_think_grace_ms", OWED_GRACE_MS)
    timers: list[tuple[dict, int]] = []
    send = d.queues.send_timer
    monkeypatch.setattr(
        d.queues, "send_timer", lambda body, delay_s: (timers.append((body, delay_s)), send(body, delay_s))
    )
    return d, clock, timers


def start(agent, content: str) -> str:
    sid = new_session_id()
    assert agent.api("chat_post", body={"session_id": sid, "content": content})[0] == 202
    agent.run_queue("turns")
    return sid


def calls(agent, sid) -> dict[str, str]:
    """tool name -> toolUseId of the turn's calls."""
    reply = json.loads(agent.item(f"S#{sid}", "ITER#000001")["reply"])
    return {b["toolUse"]["name"]: b["toolUse"]["toolUseId"] for b in reply["message"]["content"] if "toolUse" in b}


def result(agent, sid, tool_use_id) -> dict:
    return agent.item(f"S#{sid}", f"RESULT#000001#{tool_use_id}")


def test_two_delegates_with_their_own_timeouts_are_each_synthesized_at_their_own_deadline(agent, peer, world):
    d, clock, timers = world
    t0 = clock.now
    sid = start(agent, "@quick look up the launch date @slow review the plan")
    ids = calls(agent, sid)
    turn = agent.turn_item(sid, 1)
    # The turn waits no longer than its longest delegation; the index lists it at its earliest deadline.
    assert int(turn["deadline_ms"]) == t0 + DEFAULT_MS and int(turn["due_at"]) == t0 + QUICK_MS
    assert {k: int(v) for k, v in turn["deadlines"].items()} == {
        ids["ask_quick"]: t0 + QUICK_MS,
        ids["ask_slow"]: t0 + DEFAULT_MS,
    }
    # Each dispatch carries its own deadline (its callback token expires from it).
    [first_timer] = timers
    assert first_timer == ({"session_id": sid, "turn": 1, "deadline_ms": t0 + QUICK_MS}, QUICK_MS // 1000)

    clock.now = t0 + QUICK_MS  # the quick one's deadline
    assert fire_timer(d, TimerMessage(**first_timer[0])) == "rearmed"
    quick = result(agent, sid, ids["ask_quick"])
    assert json.loads(quick["text"])["reason"] == "timeout" and int(quick["recorded_at"]) == t0 + QUICK_MS
    assert result(agent, sid, ids["ask_slow"]) is None
    turn = agent.turn_item(sid, 1)
    assert (turn["status"], int(turn["received"]), int(turn["due_at"])) == ("waiting", 1, t0 + DEFAULT_MS)
    assert agent.receive("turns") == []  # no think yet: the slow one is still awaited
    # Re-armed once, for the next deadline still open.
    assert timers[1:] == [
        ({"session_id": sid, "turn": 1, "deadline_ms": t0 + DEFAULT_MS}, (DEFAULT_MS - QUICK_MS) // 1000)
    ]
    # The quick delegate was told to stop: its session on the peer, with our token for it.
    [cancel] = [r for r in peer.requests if r["path"].endswith("/cancel")]
    assert cancel["path"] == f"/api/sessions/{peer_session_id('orchestrator', sid, ids['ask_quick'])}/cancel"

    clock.now = t0 + DEFAULT_MS  # the slow one's: the turn completes at the second deadline
    assert fire_timer(d, TimerMessage(**timers[1][0])) == "expired"
    slow = result(agent, sid, ids["ask_slow"])
    assert json.loads(slow["text"])["reason"] == "timeout" and int(slow["recorded_at"]) == t0 + DEFAULT_MS
    turn = agent.turn_item(sid, 1)
    assert turn["status"] == "complete" and "due_at" not in turn
    agent.run_queue("turns")
    view = agent.api("session_get", SESSION_ID=sid)[2]
    assert view["status"] == "idle" and "0 of 2 delegations answered" in view["messages"][-1]["content"][0]["text"]
    assert len(timers) == 2  # one timer per distinct deadline, none after the turn completed


def test_an_answer_before_the_first_deadline_moves_the_turn_on_to_the_next(agent, peer, world):
    d, clock, timers = world
    t0 = clock.now
    sid = start(agent, "@quick look up the launch date @slow review the plan")
    ids = calls(agent, sid)
    token = next(
        r["body"]["reply"]["bearerToken"]
        for r in peer.requests
        if r["path"] == "/api/chat" and r["body"]["content"] == "look up the launch date"
    )
    clock.now = t0 + 500
    assert agent.api("tool_response", TOKEN=token, RESULT="June 3")[0] == 202
    clock.now = t0 + QUICK_MS
    assert fire_timer(d, TimerMessage(**timers[0][0])) == "rearmed"  # nothing due: on to the next deadline
    assert result(agent, sid, ids["ask_quick"])["text"] == "June 3"
    assert int(agent.turn_item(sid, 1)["due_at"]) == t0 + DEFAULT_MS
    assert not [r for r in peer.requests if r["path"].endswith("/cancel")]  # it answered: nothing to stop
    # The sweeper sees nothing overdue in between (the index no longer lists the answered deadline).
    clock.now = t0 + DEFAULT_MS - 1
    assert not [o for o in state_store().list_overdue(clock.now) if o.session_id == sid]
    clock.now = t0 + DEFAULT_MS
    assert fire_timer(d, TimerMessage(**timers[-1][0])) == "expired"
    assert json.loads(result(agent, sid, ids["ask_slow"])["text"])["reason"] == "timeout"


def test_the_sweep_synthesizes_each_result_at_its_own_deadline_when_the_timer_is_lost(agent, peer, world):
    d, clock, _ = world
    t0 = clock.now
    sid = start(agent, "@quick look up the launch date @slow review the plan")
    ids = calls(agent, sid)
    clock.now = t0 + QUICK_MS + 1  # past the quick deadline only
    sweep(d)
    assert json.loads(result(agent, sid, ids["ask_quick"])["text"])["reason"] == "timeout"
    assert result(agent, sid, ids["ask_slow"]) is None
    assert [o.due_ms for o in state_store().list_overdue(t0 + DEFAULT_MS) if o.session_id == sid] == [t0 + DEFAULT_MS]
    assert sweep(d) == 0  # not due again before the next deadline
    clock.now = t0 + DEFAULT_MS + 1
    assert sweep(d) == 1  # completed, at the slow one's deadline
    assert json.loads(result(agent, sid, ids["ask_slow"])["text"])["reason"] == "timeout"


def test_delegates_that_share_a_timeout_keep_one_deadline_and_one_timer(agent, peer, world):
    _, clock, timers = world
    t0 = clock.now
    sid = start(agent, "@slow review the plan @also review the budget")
    turn = agent.turn_item(sid, 1)
    assert int(turn["deadline_ms"]) == int(turn["due_at"]) == t0 + DEFAULT_MS and "deadlines" not in turn
    assert timers == [({"session_id": sid, "turn": 1, "deadline_ms": t0 + DEFAULT_MS}, DEFAULT_MS // 1000)]


def test_a_redelivered_think_rearms_at_the_same_earliest_deadline_and_sends_the_same_tokens(agent, peer, world):
    from flightdeck.domain.turn_loop import run_turn

    d, clock, timers = world
    t0 = clock.now
    sid = start(agent, "@quick look up the launch date @slow review the plan")

    def tokens():
        return sorted(r["body"]["reply"]["bearerToken"] for r in peer.requests if r["path"] == "/api/chat")

    sent = tokens()
    clock.now = t0 + 300
    assert run_turn(d, sid, 1) == "tool_use"  # the turn message delivered again
    assert timers[-1][0]["deadline_ms"] == t0 + QUICK_MS
    # Each delegation's token is a function of its own deadline and timeout: a re-send is a replay.
    assert tokens() == sorted(sent * 2)


@pytest.fixture
def a2a_peer():
    from tests.integration.test_a2a_client import A2APeer

    p = A2APeer()
    yield p
    p.close()


def test_an_a2a_delegate_has_its_own_timeout_and_is_sent_tasks_cancel_at_it(aws, monkeypatch, peer, a2a_peer):
    import time

    from flightdeck.domain.a2a.client import clear_card_cache
    from flightdeck.wiring import deps
    from tests.integration.test_a2a_client import CARD_PATH, _result, _task

    clear_card_cache()
    config = {
        "name": "orchestrator",
        "model": {"provider": "local"},
        "delegates": [
            {"agent": "remote", "protocol": "a2a", "card_url": f"{a2a_peer.url}{CARD_PATH}", "timeout_ms": QUICK_MS},
            {"agent": "slow", "service": "worker", "callback_service": "orchestrator"},
        ],
    }
    agent = make_agent(
        monkeypatch,
        delegates=[],
        allow=f"remote:{a2a_peer.url},worker:{peer.url},orchestrator:{peer.url}",
        extra_env={"AGENT_CONFIG": json.dumps(config), "ASYNC_TOOL_TIMEOUT_MS": str(DEFAULT_MS)},
    )
    a2a_peer.rpc = lambda body: (
        200,
        _result(body, _task("canceled" if body["method"] == "tasks/cancel" else "working")),
    )
    d = deps()
    clock = Clock(int(time.time() * 1000))
    monkeypatch.setattr(state_store(), "_clock", clock)
    # An owed think's grace shorter than every deadline here: a think that opens a turn lists it at its
    # earliest deadline (a deadline inside the grace keeps the owed think's listing: see the test below).
    monkeypatch.setattr(state_store(), "owed_think_grace_ms", OWED_GRACE_MS)
    t0 = clock.now
    sid = start(agent, "@remote quick question @slow long review")
    ids = calls(agent, sid)
    remote = d.a2a.store.get_remote(sid, 1, ids["ask_remote"])
    assert remote.deadline_ms == t0 + QUICK_MS  # polls and the push token end with its own deadline
    clock.now = t0 + QUICK_MS
    assert fire_timer(d, TimerMessage(session_id=sid, turn=1, deadline_ms=t0 + QUICK_MS)) == "rearmed"
    assert json.loads(result(agent, sid, ids["ask_remote"])["text"])["reason"] == "timeout"
    [cancel] = [p["body"] for p in a2a_peer.posts if p["body"]["method"] == "tasks/cancel"]
    assert cancel["params"] == {"id": "peer-task-1"}
    assert result(agent, sid, ids["ask_slow"]) is None  # the other delegation still has its own time


def test_what_stopping_a_delegation_costs_the_agent_whose_deadline_passed(agent, peer, world):
    """The figures docs/API.md gives (Cancellation): the timer's requests with and without the cancel."""
    from collections import Counter

    from flightdeck.bench import counter

    d, clock, timers = world
    t0 = clock.now
    start(agent, "@slow review the plan")
    sink = counter.ListSink()
    counter.attach(state_store().client, sink)
    counter.attach(d.queues.client, sink)
    clock.now = t0 + DEFAULT_MS
    assert fire_timer(d, TimerMessage(**timers[0][0])) == "expired"
    # The expiry as before (the turn and its results read, one transaction; the next think starts
    # as an asynchronous invoke, no queue request), and the cancel: the call list read, one HTTP
    # request to the peer.
    assert dict(Counter(r["op"] for r in sink.records)) == {"GetItem": 2, "Query": 1, "TransactWriteItems": 1}
    assert len(agent.receive("turns")) == 1  # that next think
    assert len([r for r in peer.requests if r["path"].endswith("/cancel")]) == 1


# --- A request's own deadline (issue 25: /api/chat timeout_seconds) caps every call deadline of its turn ----


def start_bounded(agent, content: str, timeout_seconds: int) -> str:
    sid = new_session_id()
    body = {"session_id": sid, "content": content, "timeout_seconds": timeout_seconds}
    assert agent.api("chat_post", body=body)[0] == 202
    agent.run_queue("turns")
    return sid


def test_a_request_s_timeout_caps_its_delegations_and_its_timer_fires_then(agent, peer, world):
    d, clock, timers = world
    t0 = clock.now
    # The slow delegate would be waited for DEFAULT_MS (10 s); the request allows 3 s. The peer never answers.
    sid = start_bounded(agent, "@quick look up the launch date @slow review the plan", 3)
    ids = calls(agent, sid)
    turn = agent.turn_item(sid, 1)
    # quick keeps its own, earlier deadline (2 s); slow's is the request's.
    assert {k: int(v) for k, v in turn["deadlines"].items()} == {
        ids["ask_quick"]: t0 + QUICK_MS,
        ids["ask_slow"]: t0 + 3_000,
    }
    assert int(turn["deadline_ms"]) == t0 + 3_000
    clock.now = t0 + QUICK_MS
    assert fire_timer(d, TimerMessage(**timers[0][0])) == "rearmed"
    assert timers[1] == ({"session_id": sid, "turn": 1, "deadline_ms": t0 + 3_000}, 1)  # re-armed at the request's
    clock.now = t0 + 3_000
    assert fire_timer(d, TimerMessage(**timers[1][0])) == "expired"
    slow = result(agent, sid, ids["ask_slow"])
    assert json.loads(slow["text"])["reason"] == "timeout" and int(slow["recorded_at"]) == t0 + 3_000
    agent.run_queue("turns")
    view = agent.api("session_get", SESSION_ID=sid)[2]
    assert view["status"] == "idle" and "0 of 2 delegations answered" in view["messages"][-1]["content"][0]["text"]


def test_the_sweep_expires_a_bounded_request_at_its_deadline_not_its_delegate_s(agent, peer, world):
    d, clock, timers = world
    t0 = clock.now
    sid = start_bounded(agent, "@slow review the plan", 4)
    [slow_id] = calls(agent, sid).values()
    assert timers == [({"session_id": sid, "turn": 1, "deadline_ms": t0 + 4_000}, 4)]
    # The timer is lost: the sweep finds the turn at the request's deadline, long before the delegate's.
    clock.now = t0 + 4_000 - 1
    assert sweep(d) == 0 and result(agent, sid, slow_id) is None
    clock.now = t0 + 4_000
    assert sweep(d) == 1
    assert json.loads(result(agent, sid, slow_id)["text"])["reason"] == "timeout"
    assert agent.turn_item(sid, 1)["status"] == "complete"
    # The peer was told to stop at that moment too.
    assert [r for r in peer.requests if r["path"].endswith("/cancel")]


def test_a_request_s_timeout_is_capped_by_the_agent_s_own(agent, peer, world):
    _, clock, _ = world
    t0 = clock.now
    sid = start_bounded(agent, "@slow review the plan", 3_600)  # an hour asked for: ASYNC_TOOL_TIMEOUT_MS rules
    assert int(agent.turn_item(sid, 1)["deadline_ms"]) == t0 + DEFAULT_MS


# --- the listing a round trip keeps (issue 31: no index write between a session's first and last step) ---

GRACE_MS = 35_000  # the owed think's grace as deployed (WORKER_TIMEOUT_S + 5 s)


@pytest.fixture
def deployed_grace(world, monkeypatch):
    """The world with the owed think's grace as deployed: longer than every deadline here."""
    monkeypatch.setattr(state_store(), "owed_think_grace_ms", GRACE_MS)
    return world


def test_a_deadline_inside_the_owed_grace_keeps_the_listing_and_the_sweep_expires_the_turn_at_the_grace(
    agent, peer, deployed_grace
):
    d, clock, timers = deployed_grace
    t0 = clock.now
    sid = start(agent, "@quick look up the launch date @slow review the plan")
    ids = calls(agent, sid)
    # The think that opened the turn left the owed think's listing as it was (no index write): it is later
    # than both deadlines. The timer still fires at the earliest one.
    meta = agent.item(f"S#{sid}", "META")
    assert int(meta["due_at"]) == t0 + GRACE_MS and meta["agg_status"] == "waiting"
    assert timers[0][0]["deadline_ms"] == t0 + QUICK_MS
    # The timers are lost: the backstop looks at the listed time, a grace late at most.
    clock.now = t0 + DEFAULT_MS + 1
    assert sweep(d) == 0 and result(agent, sid, ids["ask_quick"]) is None
    [listed] = [o for o in state_store().list_overdue(t0 + GRACE_MS) if o.session_id == sid]
    assert (listed.kind, listed.due_ms) == ("deadline", t0 + QUICK_MS)  # what is due, and since when
    clock.now = t0 + GRACE_MS
    assert sweep(d) == 1
    for tool_use_id in ids.values():
        assert json.loads(result(agent, sid, tool_use_id)["text"])["reason"] == "timeout"


def test_an_answer_keeps_the_listing_and_the_sweep_waits_out_the_owed_think_s_grace_before_re_sending(
    agent, peer, deployed_grace
):
    d, clock, _ = deployed_grace
    t0 = clock.now
    sid = start(agent, "@slow review the plan")
    [token] = [r["body"]["reply"]["bearerToken"] for r in peer.requests if r["path"] == "/api/chat"]
    answered = t0 + DEFAULT_MS - 1_000
    clock.now = answered
    assert agent.api("tool_response", TOKEN=token, RESULT="looks fine")[0] == 202
    # The completing count claims the next think and keeps the listing (no index write); the mark says when.
    meta = agent.item(f"S#{sid}", "META")
    assert int(meta["due_at"]) == t0 + GRACE_MS and int(meta["owed_at"]) == answered and int(meta["owed_think"]) == 2
    assert len(agent.receive("turns")) == 1  # the next think was started (and is still running, say)
    # Listed now, but the owed think is younger than its grace: the sweep looks again later, sends nothing.
    clock.now = t0 + GRACE_MS
    assert sweep(d) == 0 and agent.receive("turns") == []
    assert int(agent.item(f"S#{sid}", "META")["due_at"]) == clock.now + GRACE_MS
    # That think never ran: a grace after the mark (and at the time it is listed at), the sweep re-sends it.
    clock.now = clock.now + GRACE_MS
    assert sweep(d) == 1
    assert [json.loads(m["Body"])["turn"] for m in agent.receive("turns")] == [2]


def test_a_think_whose_listing_went_after_its_read_lists_the_turn_itself(agent, deployed_grace):
    from flightdeck.domain.records import TurnSeed

    _, clock, _ = deployed_grace
    store, sid = state_store(), new_session_id()
    store.take_message(sid, {"role": "user", "content": [{"text": "delegate"}]}, 3_600_000)
    view = store.get_session(sid)
    assert view is not None and view.listed_at_ms == clock.now + GRACE_MS  # the owed think's listing, as read
    # Gone before the think writes (whatever took it out): keeping "the listing as read" would leave no backstop.
    store.client.update_item(
        TableName=store.table,
        Key={"pk": {"S": f"S#{sid}"}, "sk": {"S": "META"}},
        UpdateExpression="REMOVE due_shard, due_at",
    )
    reply = {
        "stop_reason": "tool_use",
        "message": {
            "role": "assistant",
            "content": [{"toolUse": {"toolUseId": "tooluse_a", "name": "ask_slow", "input": {"task": "a"}}}],
        },
    }
    seed = TurnSeed(("tooluse_a",), clock.now + QUICK_MS, {"tooluse_a": clock.now + QUICK_MS})
    assert store.save_iteration(sid, 1, reply, 3_600_000, seed=seed, session=view).fresh
    meta = agent.item(f"S#{sid}", "META")
    assert int(meta["due_at"]) == clock.now + QUICK_MS and meta["due_shard"].startswith("open#")
