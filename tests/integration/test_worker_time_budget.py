"""Dispatch and delivery against a slow peer: a batch of 10 in one invocation that has time for fewer.

Lambda ends an invocation at its timeout and hands the whole batch back, with nothing
recorded for the records never tried. The workers must finish inside the invocation's
remaining time (the context's get_remaining_time_in_millis, here a LocalLambdaContext
of a few seconds), put back what they did not try, and settle what has no retry left.
The peer is real HTTP on loopback that answers late (or later than anyone waits).
"""

from __future__ import annotations

import json

import pytest

from flightdeck.local.invocation import LocalLambdaContext
from tests.support.harness import hand_outbound_to_queues, make_agent, new_session_id
from tests.support.peer import ScriptedPeer

BATCH = 10
# What the invocation has left when the batch arrives: time for about one call to the slow
# peer after the reserve (flightdeck.domain.time_budget.RESERVE_MS, MIN_CALL_MS).
BUDGET_S = 3.2
SLOW_S = 0.4


@pytest.fixture(autouse=True)
def _outbound_through_the_queues(monkeypatch):
    # These tests drive the dispatch and delivery workers: the turn worker queues everything.
    hand_outbound_to_queues(monkeypatch)


@pytest.fixture
def peer():
    p = ScriptedPeer()
    yield p
    p.close()


def _agent(monkeypatch, peer, **env):
    services = ",".join(f"s{i}:{peer.url}/s{i}" for i in range(BATCH))
    return make_agent(
        monkeypatch,
        allow=f"worker:{peer.url},orchestrator:{peer.url},{services}",
        extra_env={"DISPATCH_MAX_ATTEMPTS": "3", **env},
    )


def _invoke(agent, key: str, messages: list[dict]) -> tuple[dict, int]:
    """The queue's handler on one batch, as Lambda would run it; returns its answer and the ms it had left."""
    import importlib

    from flightdeck import topology

    module = importlib.import_module(f"flightdeck.handlers.{topology.QUEUES_BY_KEY[key].handler}")
    context = LocalLambdaContext(function_name=f"{agent.name}-{key}", timeout_s=BUDGET_S)
    resp = module.handler(agent.sqs_event(key, messages), context)
    return resp, context.get_remaining_time_in_millis()


def _ten_dispatches(agent) -> tuple[str, list[dict]]:
    sid = new_session_id()
    content = " ".join(f"@worker job {i}" for i in range(BATCH))
    assert agent.api("chat_post", body={"session_id": sid, "content": content})[0] == 202
    agent.run_queue("turns")
    batch = agent.receive("dispatch")
    assert len(batch) == BATCH
    return sid, batch


def _back_soon(agent, key: str) -> list[dict]:
    """What is visible again within two seconds (a put-back record's visibility is one second)."""
    resp = agent.sqs.receive_message(QueueUrl=agent.queue_urls[key], MaxNumberOfMessages=10, WaitTimeSeconds=2)
    return resp.get("Messages", [])


def _results(agent, sid: str) -> list[dict]:
    return [
        json.loads(i["text"]["S"])
        for i in agent.table_items()
        if i["pk"]["S"] == f"S#{sid}" and i["sk"]["S"].startswith("RESULT#")
    ]


def test_dispatch_tries_what_fits_and_puts_the_rest_back_before_the_timeout(aws, monkeypatch, peer):
    agent = _agent(monkeypatch, peer)
    sid, batch = _ten_dispatches(agent)
    peer.delay_s = SLOW_S
    resp, left_ms = _invoke(agent, "dispatch", batch)
    tried = len(peer.requests)
    assert 1 <= tried < BATCH
    assert left_ms > 0  # it answered before its timeout
    failed = {f["itemIdentifier"] for f in resp["batchItemFailures"]}
    assert len(failed) == BATCH - tried  # the ones not tried go back; the tried ones were sent
    assert _results(agent, sid) == []  # nothing given up: they have attempts left
    assert {m["MessageId"] for m in _back_soon(agent, "dispatch")} == failed


def test_a_dispatch_not_tried_on_its_last_attempt_is_dispatch_failed(aws, monkeypatch, peer):
    agent = _agent(monkeypatch, peer, DISPATCH_MAX_ATTEMPTS="1")
    sid, batch = _ten_dispatches(agent)
    peer.delay_s = SLOW_S
    resp, left_ms = _invoke(agent, "dispatch", batch)
    tried = len(peer.requests)
    assert 1 <= tried < BATCH and left_ms > 0
    assert resp == {"batchItemFailures": []}  # every record settled: none is left to the DLQ
    results = _results(agent, sid)
    assert len(results) == BATCH - tried
    assert all(r["reason"] == "dispatch_failed" and "ran out of time" in r["detail"] for r in results)


def test_a_peer_slower_than_the_time_left_is_cut_off_in_time(aws, monkeypatch, peer):
    # The peer timeout (PEER_TIMEOUT_MS, 10 s) is longer than the invocation has left:
    # the call's own timeout is cut to fit.
    agent = _agent(monkeypatch, peer)
    _, batch = _ten_dispatches(agent)
    peer.delay_s = 30
    resp, left_ms = _invoke(agent, "dispatch", batch)
    assert len(peer.requests) == 1 and left_ms > 0
    assert len(resp["batchItemFailures"]) == BATCH  # the one cut off retries after its backoff, the rest soon


def _ten_answers(agent, **fields) -> list[dict]:
    from flightdeck.wiring import deps

    for i in range(BATCH):  # one service each, so one request each
        deps().queues.send_delivery(
            {
                "session_id": f"b-{i}",
                "callback_service": f"s{i}",
                "bearer_token": "t" * 20,
                "result": f"answer {i}",
                **fields,
            }
        )
    batch = agent.receive("delivery")
    assert len(batch) == BATCH
    return batch


def test_delivery_sends_what_fits_and_puts_the_rest_back_before_the_timeout(aws, monkeypatch, peer):
    agent = _agent(monkeypatch, peer)
    batch = _ten_answers(agent)
    peer.delay_s = SLOW_S
    resp, left_ms = _invoke(agent, "delivery", batch)
    tried = len(peer.requests)
    assert 1 <= tried < BATCH and left_ms > 0
    failed = {f["itemIdentifier"] for f in resp["batchItemFailures"]}
    assert len(failed) == BATCH - tried
    assert agent.receive("delivery", dlq=True) == []
    assert {m["MessageId"] for m in _back_soon(agent, "delivery")} == failed


def test_an_answer_not_tried_when_its_retry_time_is_spent_is_dead_lettered(aws, monkeypatch, peer):
    agent = _agent(monkeypatch, peer, REPLY_RETRY_MAX_MS="1")
    batch = _ten_answers(agent)
    peer.delay_s = SLOW_S
    resp, left_ms = _invoke(agent, "delivery", batch)
    tried = len(peer.requests)
    assert 1 <= tried < BATCH and left_ms > 0
    assert resp == {"batchItemFailures": []}
    dead = agent.receive("delivery", dlq=True)
    assert len(dead) == BATCH - tried
    assert all("ran out of time" in json.loads(m["Body"])["reason"] for m in dead)
