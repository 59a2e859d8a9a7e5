"""Dispatch on fakes (tests.fakes): a delegation goes to an allowed peer, is retried while retrying may help,
and otherwise ends as a dispatch_failed result at once, so the turn does not wait for its deadline."""

from __future__ import annotations

import json

from flightdeck.domain.agent import DelegateTool
from flightdeck.domain.dispatch import DispatchMessage, DispatchOutcome, DispatchStatus, dispatch_delegation
from flightdeck.domain.records import ResultSource, error_result
from flightdeck.domain.time_budget import TimeBudget
from tests.fakes.model import call, calls
from tests.fakes.outbound import PeerReply
from tests.fakes.world import AGENT, WORKER_URL, delegating_agent, world

CHAT = f"{WORKER_URL}/api/chat"
DOWN = PeerReply(503, {"error": {"message": "overloaded"}})


def delegating(w, **task):
    """Given a think that delegated one task to the worker: its session id."""
    w.model.says(calls(call("ask_worker", "t1", task="the task", **task)))
    sid = w.message("go").session_id
    assert w.thinks.take() == [(sid, 1)]
    assert w.think(sid, 1) == "tool_use"
    return sid


def queued(w) -> DispatchMessage:
    """The dispatch the think handed to the queue (its inline attempt wants a retry)."""
    [body] = w.queues.dispatches
    return DispatchMessage.model_validate(body)


def failure(w, sid):
    [result] = w.state.get_results(sid, 1)
    assert result.source is ResultSource.DISPATCH_FAILED
    return json.loads(result.text)


def test_a_delegate_whose_service_is_not_allowed_fails_at_once_and_the_turn_goes_on():
    w = world(allowed={})  # the worker is not in ALLOWED_HOST_MAPPING
    sid = delegating(w)
    assert w.peers.posts == [] and w.queues.dispatches == []  # nothing was sent, nothing is retried
    assert failure(w, sid) == {
        "status": "error",
        "reason": "dispatch_failed",
        "detail": "peer service 'worker' is not in ALLOWED_HOST_MAPPING",
    }
    assert w.thinks.take() == [(sid, 2)]  # its only call is answered: the model hears why


def test_a_peer_that_is_down_is_retried_with_backoff_then_given_up_as_dispatch_failed():
    w = world(dispatch_max_attempts=3)
    w.peers.answer(CHAT, DOWN)
    sid = delegating(w)
    # Then the inline attempt's failure hands the task to the dispatch queue, counted as one attempt
    msg = queued(w)
    assert msg.prior_attempts == 1 and w.state.get_results(sid, 1) == []
    # When the queue's worker retries below the attempt budget, Then it asks for another try later
    retry = dispatch_delegation(w.deps, msg, attempt=2)
    assert retry.status is DispatchStatus.RETRY and retry.retry_after_s >= 1 and retry.detail == "HTTP 503 from worker"
    # When the last attempt fails too, Then the call ends as dispatch_failed, with the peer's reason
    assert dispatch_delegation(w.deps, msg, attempt=3).status is DispatchStatus.FAILED
    assert failure(w, sid)["detail"] == "HTTP 503 from worker: overloaded"
    assert w.thinks.take() == [(sid, 2)]
    # Every attempt sent the same task with the same token (the peer tells a retry from a new task)
    assert len({json.dumps(p.body, sort_keys=True) for p in w.peers.to(CHAT)}) == 1 and len(w.peers.to(CHAT)) == 3


def test_a_peer_that_refuses_the_task_is_not_asked_again():
    w = world()
    w.peers.answer(CHAT, PeerReply(401, {"error": {"message": "unknown peer token"}}))
    sid = delegating(w)
    assert w.queues.dispatches == [] and len(w.peers.posts) == 1
    assert failure(w, sid)["detail"] == "HTTP 401 from worker: unknown peer token"


def test_a_retry_is_skipped_once_the_turn_is_complete_or_its_deadline_has_passed():
    w = world(async_tool_timeout_ms=10_000)
    w.peers.answer(CHAT, DOWN)
    sid = delegating(w)
    msg = queued(w)
    # When the turn completed meanwhile (its caller canceled, say), Then the peer is not sent work for nothing
    canceled = lambda i: error_result(i, "canceled", ResultSource.TIMEOUT)
    assert w.state.complete_with_errors(sid, 1, canceled, "session_cancel", 60_000, 10**9).won
    skipped = dispatch_delegation(w.deps, msg, attempt=2)
    assert (skipped.status, skipped.detail) == (DispatchStatus.SKIPPED, "the turn is already complete")
    # When the deadline has passed, Then the timeout covers the call: no send, no second result
    w.clock.advance(10_000)
    assert dispatch_delegation(w.deps, msg, attempt=3).detail == "deadline passed; the timeout covers it"
    assert len(w.peers.posts) == 1 and len(w.state.get_results(sid, 1)) == 1


def test_with_too_little_time_left_a_dispatch_is_put_back_and_its_last_attempt_fails():
    w = world(dispatch_max_attempts=2)
    w.peers.answer(CHAT, DOWN)
    sid = delegating(w)
    msg = queued(w)
    spent = TimeBudget(lambda: 500)
    assert dispatch_delegation(w.deps, msg, attempt=1, budget=spent).retry_after_s == 1
    assert dispatch_delegation(w.deps, msg, attempt=2, budget=spent).status is DispatchStatus.FAILED
    assert "ran out of time" in failure(w, sid)["detail"] and len(w.peers.posts) == 1


def test_a_delegate_of_another_protocol_goes_through_its_transport_once():
    remote = DelegateTool(agent="remote", protocol="a2a", card_url="http://remote.test/card", callback_service=AGENT)
    w = world(delegating_agent(remote), allowed={"remote": "http://remote.test"})
    sent = []

    def transport(deps, msg, delegate, token, attempt):
        sent.append((msg.tool_use_id, delegate.agent, attempt))
        deps.dispatches.finish_dispatch(msg.session_id, msg.turn, msg.tool_use_id, "sent")
        return DispatchOutcome(DispatchStatus.SENT)

    w.deps.transports["a2a"] = transport
    w.model.says(calls(call("ask_remote", "t1", task="hello")))
    sid = w.message("go").session_id
    w.think(sid, 1)
    assert sent == [("t1", "remote", 1)] and w.peers.posts == []
    # A second delivery of the same dispatch finds it claimed and sent: a peer that may not deduplicate
    # is not sent the task twice.
    body = {"session_id": sid, "turn": 1, "tool_use_id": "t1", "tool_name": "ask_remote", "task": "hello"}
    msg = DispatchMessage.model_validate({**body, "total_tools": 1, "deadline_ms": w.clock.now + 60_000})
    assert dispatch_delegation(w.deps, msg, attempt=2).detail == "already dispatched" and len(sent) == 1


def test_a_delegate_of_a_protocol_with_no_transport_wired_fails_as_dispatch_failed():
    remote = DelegateTool(agent="remote", protocol="a2a", card_url="http://remote.test/card", callback_service=AGENT)
    w = world(delegating_agent(remote), allowed={"remote": "http://remote.test"})
    w.model.says(calls(call("ask_remote", "t1", task="hello")))
    sid = w.message("go").session_id
    w.think(sid, 1)
    assert failure(w, sid)["detail"] == "no transport for protocol 'a2a' is wired"
    assert not w.state.claim_dispatch(sid, 1, "t1", 10**9)  # its claim was settled: never sent later
