"""Writes that meet another write on DynamoDB (issue 36, defect 6): each collision is retried within the
write's budget (flightdeck.adapters.dynamo.conflicts), so a peer never sees it; one that outlasts the
budget is answered 503 with Retry-After and changes nothing.

moto serializes requests and never collides: AWS's errors are injected at the client
(tests.support.collisions), at each write of a delegation round trip (both sides), of a session
cancel, and across a fan-out of 20 callbacks answered at once.
"""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor

import pytest

from flightdeck import wiring
from flightdeck.domain.session_cancel import CLOSING_TEXT
from tests.integration.test_api_callbacks import post, result_items, start_turn
from tests.integration.test_session_cancel import cancel, view
from tests.support.collisions import colliding
from tests.support.harness import make_agent, new_session_id
from tests.support.peer import ScriptedPeer


@pytest.fixture
def worker():
    p = ScriptedPeer()
    yield p
    p.close()


@pytest.fixture
def agent(aws, monkeypatch, worker):
    # The scripted peer stands for the delegate ("worker") and for the caller's callback ("orchestrator").
    return make_agent(monkeypatch, allow=f"worker:{worker.url},orchestrator:{worker.url}")


def client():
    return wiring.state_store().client


def sent(worker, path_prefix):
    return [r for r in worker.requests if r["path"].startswith(path_prefix)]


def round_trip(agent, worker) -> dict:
    """One delegation, both sides on this one agent: the caller's chat and think (its dispatch reaches
    the scripted peer), the delegate's intake of that dispatch and its think (its answer's delivery
    reaches the scripted peer), the caller's callback with that answer, and the caller's next think."""
    worker.requests.clear()
    # The agent's clock stands still: each think runs within its window, alone (no claim: ARCHITECTURE §6),
    # however long a collision's retries or this machine take.
    now = wiring.state_store().now_ms()
    wiring.state_store()._clock = lambda: now
    sid = new_session_id()
    statuses = [agent.api("chat_post", body={"session_id": sid, "content": "@worker add two and two"})[0]]
    agent.run_queue("turns")
    [dispatch] = sent(worker, "/api/chat")
    statuses.append(agent.api("chat_post", body=dispatch["body"])[0])  # the delegate takes the task
    agent.run_queue("turns")
    [delivery] = sent(worker, "/api/tools/response")
    token = dispatch["body"]["reply"]["bearerToken"]
    status, _, answer = post(agent, token, delivery["body"]["result"])  # the delegate's answer comes back
    statuses.append(status)
    agent.run_queue("turns")
    session = view(agent, sid)
    return {
        "statuses": statuses,
        "callback": answer,
        "results": [i["text"]["S"] for i in result_items(agent, sid)],
        "delegate": [m["role"] for m in view(agent, dispatch["body"]["session_id"])["messages"]],
        "session": (session["status"], [m["role"] for m in session["messages"]]),
        "answer": session["messages"][-1]["content"][0]["text"],
    }


def waiting_on_two(agent, worker) -> str:
    sid = new_session_id()
    assert agent.api("chat_post", body={"session_id": sid, "content": "@worker one @worker two"})[0] == 202
    agent.run_queue("turns")
    worker.requests.clear()
    return sid


def cancel_while_waiting(agent, worker, sid) -> dict:
    """The session's owner cancels it while it waits on two delegations."""
    status, _, body = cancel(agent, sid)
    session = view(agent, sid)
    turn = agent.turn_item(sid, 1)
    return {
        "answer": (status, body["status"]),
        "turn": (turn["status"], turn["completed_by"]),
        "results": [
            json.loads(b["toolResult"]["content"][0]["text"])["reason"] for b in session["messages"][2]["content"]
        ],
        "session": (
            session["status"],
            [m["role"] for m in session["messages"]],
            session["messages"][-1]["content"][0]["text"],
        ),
        "cancels_sent": len([r for r in worker.requests if r["path"].endswith("/cancel")]),
        "next_thinks": agent.receive("turns"),
    }


def collide_at_each_write(act, prepare=lambda: None) -> tuple[dict, list[str]]:
    """act(prepare()) clean, then once per write act made, with that write answered by a collision
    twice (its first try and its first retry): each must end exactly as the clean one. Only act's
    writes are counted. Returns the clean outcome and its writes."""
    state = prepare()
    with colliding(client()) as clean:
        expected = act(state)
    assert clean.calls, "the scenario wrote nothing"
    for n, op in enumerate(clean.calls, start=1):
        state = prepare()
        with colliding(client(), lambda k, _op, _params, n=n: k in (n, n + 1)) as hook:
            got = act(state)
        assert hook.injected[:1] == [n] and hook.calls[n - 1 : n + 2] == [op] * 3, (n, op, hook.calls)
        assert got == expected, f"a collision at write {n} ({op}) changed the outcome"
    return expected, clean.calls


def test_a_collision_at_each_write_of_a_delegation_round_trip_changes_nothing(agent, worker):
    outcome, writes = collide_at_each_write(lambda _: round_trip(agent, worker))
    answer = '[orchestrator] Task: "add two and two" — answer: 4 words; reversed: "two and two add"'
    assert outcome == {
        "statuses": [202, 202, 202],
        "callback": {"status": "accepted", "completed_turn": True},
        "results": [answer],
        "delegate": ["user", "assistant"],
        "session": ("idle", ["user", "assistant", "user", "assistant"]),
        "answer": outcome["answer"],
    }
    assert answer in outcome["answer"]
    # The caller's intake and think, the delegate's intake and think, the result's put and count, the next think.
    assert writes == ["TransactWriteItems"] * 4 + ["PutItem", "UpdateItem", "TransactWriteItems"], writes


def test_a_collision_at_each_write_of_a_session_cancel_changes_nothing(agent, worker):
    outcome, writes = collide_at_each_write(
        lambda sid: cancel_while_waiting(agent, worker, sid), prepare=lambda: waiting_on_two(agent, worker)
    )
    assert outcome == {
        "answer": (200, "canceled"),
        "turn": ("complete", "session_cancel"),
        "results": ["canceled", "canceled"],
        "session": ("idle", ["user", "assistant", "user", "assistant"], CLOSING_TEXT),
        "cancels_sent": 2,
        "next_thinks": [],
    }
    # The cancel's write, the turn's completion with canceled results, the close.
    assert writes == ["UpdateItem", "TransactWriteItems", "TransactWriteItems"]


def test_a_fan_out_of_20_callbacks_colliding_records_each_result_once(orchestrator):
    sid, turn, ids = start_turn(orchestrator, 20)
    tokens = [orchestrator.token(sid, turn, i, total=20) for i in ids]
    # Every third write collides, whichever callback makes it: the results' puts and counts on META.
    with colliding(client(), lambda n, _op, _params: n % 3 == 0) as hook:
        with ThreadPoolExecutor(max_workers=20) as pool:
            answers = list(pool.map(lambda t: post(orchestrator, t, f"answer {t[-6:]}"), tokens))
    assert [a[0] for a in answers] == [202] * 20, [a[:3:2] for a in answers]
    assert len(hook.injected) >= 13  # a third of the 40 writes at least, each retried
    assert sum(a[2]["completed_turn"] for a in answers) == 1
    assert sorted(i["text"]["S"] for i in result_items(orchestrator, sid)) == sorted(f"answer {t[-6:]}" for t in tokens)
    assert orchestrator.bodies("turns") == [
        {"session_id": sid, "turn": turn + 1, "traceparent": "", "first_start": True}
    ]
    meta = orchestrator.item(f"S#{sid}", "META")
    assert (meta["agg_turn"], meta["agg_status"], "agg_open" in meta) == (turn, "complete", False)


def test_a_collision_that_outlasts_the_budget_is_503_with_retry_after_and_changes_nothing(agent, worker):
    every_write = lambda _n, _op, _params: True  # noqa: E731 - the peer's other write never ends
    sid = new_session_id()
    before = agent.table_items()
    with colliding(client(), every_write) as hook:
        status, headers, body = agent.api("chat_post", body={"session_id": sid, "content": "@worker add two and two"})
    assert (status, body["error"]["code"], headers["retry-after"]) == (503, "service_unavailable", "1")
    assert len(hook.calls) > 1 and set(hook.calls) == {"TransactWriteItems"}  # retried, then given up
    assert agent.table_items() == before
    assert agent.api("chat_post", body={"session_id": sid, "content": "@worker add two and two"})[0] == 202
    agent.run_queue("turns")

    # A callback: its first write (the result's put) never gets through.
    [dispatch] = sent(worker, "/api/chat")
    token = dispatch["body"]["reply"]["bearerToken"]
    before = agent.table_items()
    with colliding(client(), every_write) as hook:
        status, headers, body = post(agent, token, "four")
    assert (status, body["error"]["code"], headers["retry-after"]) == (503, "service_unavailable", "1")
    assert len(hook.calls) > 1 and set(hook.calls) == {"PutItem"}
    assert agent.table_items() == before
    status, _, body = post(agent, token, "four")  # the peer's retry
    assert (status, body) == (202, {"status": "accepted", "completed_turn": True})
    assert [i["text"]["S"] for i in result_items(agent, sid)] == ["four"]


def test_a_canceled_transaction_with_a_failed_condition_is_never_retried(agent):
    """A collision beside a failed condition: the condition is the answer, at once, as before."""

    def failed_and_colliding(_op, params):
        return {
            "__type": "com.amazonaws.dynamodb.v20120810#TransactionCanceledException",
            "CancellationReasons": [
                {"Code": "ConditionalCheckFailed", "Message": "The conditional request failed"},
                {"Code": "TransactionConflict", "Message": "Transaction is ongoing for the item"},
            ],
            "Message": "Transaction cancelled, please refer cancellation reasons for specific reasons "
            "[ConditionalCheckFailed, TransactionConflict]",
        }

    store = wiring.state_store()
    check = {
        "TableName": store.table,
        "Key": {"pk": {"S": "X"}, "sk": {"S": "Y"}},
        "ConditionExpression": "attribute_exists(pk)",
    }
    with colliding(client(), lambda *_: True, body=failed_and_colliding) as hook:
        reasons = store.transact(
            [{"ConditionCheck": check}, {"ConditionCheck": {**check, "Key": {"pk": {"S": "X"}, "sk": {"S": "Z"}}}}]
        )
    assert [r["Code"] for r in reasons] == ["ConditionalCheckFailed", "TransactionConflict"]
    assert hook.calls == ["TransactWriteItems"]
