"""Dispatch and delivery inline in the turn worker, with SQS only as the retry path (flightdeck.domain.outbox)."""

import json

import pytest

from tests.support.harness import make_agent, new_session_id
from tests.support.peer import ScriptedPeer


@pytest.fixture
def peer():
    p = ScriptedPeer()
    yield p
    p.close()


@pytest.fixture
def agent(aws, monkeypatch, peer):
    return make_agent(
        monkeypatch, allow=f"worker:{peer.url},orchestrator:{peer.url}", extra_env={"DISPATCH_MAX_ATTEMPTS": "3"}
    )


def think(agent, content, sid=None, reply=None):
    sid = sid or new_session_id()
    body = {"session_id": sid, "content": content, **({"reply": reply} if reply else {})}
    assert agent.api("chat_post", body=body)[0] == 202
    agent.run_queue("turns")
    return sid


def test_a_think_sends_its_delegations_itself_and_queues_nothing(agent, peer):
    think(agent, "@worker one @worker two @worker three")
    assert sorted(r["body"]["content"] for r in peer.requests) == ["one", "three", "two"]
    assert agent.receive("dispatch") == []  # no queue hop on the happy path


def test_a_retryable_refusal_goes_to_the_dispatch_queue_as_the_second_attempt(agent, peer):
    peer.statuses = [503]
    think(agent, "@worker one")
    [queued] = agent.receive("dispatch")
    body = json.loads(queued["Body"])
    assert body["prior_attempts"] == 1 and body["task"] == "one"
    assert agent.run_queue("dispatch", [queued]) == {"batchItemFailures": []}
    assert len(peer.requests) == 2 and peer.requests[0]["body"] == peer.requests[1]["body"]


def test_a_final_refusal_inline_records_dispatch_failed_and_completes_the_turn(agent, peer):
    peer.statuses = [400]
    sid = think(agent, "@worker one")
    assert agent.receive("dispatch") == []
    assert agent.turn_item(sid, 1)["status"] == "complete"
    assert len(agent.bodies("turns")) == 1  # the next think


def test_an_answer_is_delivered_by_the_turn_that_ends_and_the_route_retires(agent, peer):
    sid = think(agent, "just answer", reply={"callbackService": "orchestrator", "bearerToken": "tok-" + "a" * 40})
    [req] = peer.requests
    assert req["path"] == "/api/tools/response" and req["headers"]["Authorization"] == "Bearer tok-" + "a" * 40
    assert agent.receive("delivery") == []
    assert agent.item(f"S#{sid}", "META")["route"]["status"] == "retired"


def test_an_undeliverable_answer_is_retried_through_the_queue(agent, peer):
    peer.statuses = [503]
    think(agent, "just answer", reply={"callbackService": "orchestrator", "bearerToken": "tok-" + "b" * 40})
    [queued] = agent.receive("delivery")
    assert json.loads(queued["Body"])["bearer_token"] == "tok-" + "b" * 40
    assert agent.run_queue("delivery", [queued]) == {"batchItemFailures": []}
    assert len(peer.requests) == 2


def test_an_answer_the_caller_refuses_is_dead_lettered_not_retried(agent, peer):
    peer.statuses = [401]
    think(agent, "just answer", reply={"callbackService": "orchestrator", "bearerToken": "tok-" + "c" * 40})
    assert agent.receive("delivery") == []
    [dead] = agent.receive("delivery", dlq=True)
    assert "401" in json.loads(dead["Body"])["reason"] or json.loads(dead["Body"])["status"] == "refused"
