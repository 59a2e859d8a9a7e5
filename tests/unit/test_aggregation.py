"""A turn's results on fakes (tests.fakes): each recorded once, the turn completed once, the next think started
once, whoever brings the last result (a callback, a timeout, the sweep) and in whatever order."""

from __future__ import annotations

import json

import pytest

from flightdeck.domain.agent import DelegateTool
from flightdeck.domain.aggregation import record_and_advance
from flightdeck.domain.callbacks import CallbackStatus, accept_callback
from flightdeck.domain.deadlines import TimerMessage, fire_timer, sweep
from flightdeck.domain.records import RecordOutcome, ResultSource, ToolResult
from tests.fakes.model import answer, call, calls
from tests.fakes.outbound import PeerReply, ThinkSendFailed
from tests.fakes.state import OWED_THINK_GRACE_MS
from tests.fakes.world import AGENT, delegating_agent, world

ACCEPTED = PeerReply(202, {"status": "accepted"})


def delegated(w, *tasks):
    """Given a session whose think delegated `tasks` (tool ids t1, t2...) to peers that took them: its id, and
    the token each delegation's answer must carry, by tool id."""
    for url in {f"{b}/api/chat" for b in w.deps.settings.allowed_host_mapping.services.values()}:
        w.peers.answer(url, ACCEPTED)
    w.model.says(calls(*(call(tool, f"t{n}", task=f"task {n}") for n, tool in enumerate(tasks, 1))))
    sid = w.message("go").session_id
    assert w.think(sid, 1) == "tool_use"
    w.thinks.take()
    tokens = {f"t{n}": p.body["reply"]["bearerToken"] for n, p in enumerate(w.peers.posts, 1)}
    return sid, tokens


def callback(tool_use_id, text):
    return ToolResult(tool_use_id, "success", text, ResultSource.CALLBACK)


def test_the_last_of_several_answers_completes_the_turn_once_and_starts_one_think():
    w = world()
    sid, tokens = delegated(w, "ask_worker", "ask_worker", "ask_worker")
    # When the answers come back in any order
    outcomes = [accept_callback(w.deps, tokens[t], f"answer {t}") for t in ("t2", "t3", "t1")]
    # Then each is accepted, only the last completes the turn, and one think starts
    assert [(o.status, o.completed) for o in outcomes] == [
        (CallbackStatus.ACCEPTED, False),
        (CallbackStatus.ACCEPTED, False),
        (CallbackStatus.ACCEPTED, True),
    ]
    assert w.thinks.take() == [(sid, 2)]
    assert w.session(sid).aggregation is None  # the session moved on to turn 2
    assert [r.text for r in w.state.get_results(sid, 1)] == ["answer t1", "answer t2", "answer t3"]


def test_an_answer_sent_again_is_a_duplicate_and_changes_nothing():
    w = world()
    sid, tokens = delegated(w, "ask_worker", "ask_worker")
    accept_callback(w.deps, tokens["t1"], "first")
    # When the same answer (or another text for the same call) comes again
    again = accept_callback(w.deps, tokens["t1"], "second thoughts")
    # Then it is a duplicate: the first stands, the turn still waits, nothing starts
    assert (again.status, again.completed) == (CallbackStatus.DUPLICATE, False)
    assert [r.text for r in w.state.get_results(sid, 1)] == ["first"]
    assert w.session(sid).aggregation.received == 1 and w.thinks.take() == []
    # ...and after the turn completed, a repeat of the last answer starts no second think
    assert accept_callback(w.deps, tokens["t2"], "done").completed
    assert accept_callback(w.deps, tokens["t2"], "done").status is CallbackStatus.DUPLICATE
    assert w.thinks.take() == [(sid, 2)]


def test_an_answer_after_its_deadline_is_late_and_the_timeout_result_stands():
    w = world(async_tool_timeout_ms=10_000)
    sid, tokens = delegated(w, "ask_worker")
    # When the deadline passes, the timer synthesizes the timeout and completes the turn
    [(timer, delay_s)] = w.queues.timers
    assert delay_s == 10
    w.clock.advance(10_000)
    assert fire_timer(w.deps, TimerMessage.model_validate(timer)) == "expired"
    assert w.thinks.take() == [(sid, 2)]
    # Then the answer that comes after is late: refused, and the timeout result is what the model hears
    assert accept_callback(w.deps, tokens["t1"], "too late").status is CallbackStatus.LATE
    [result] = w.state.get_results(sid, 1)
    assert result.source is ResultSource.TIMEOUT and json.loads(result.text)["reason"] == "timeout"
    assert w.thinks.take() == []
    # A timer that fires again finds the turn complete
    assert fire_timer(w.deps, TimerMessage.model_validate(timer)) == "already_complete"


def test_each_delegation_times_out_at_its_own_deadline_and_the_turn_waits_for_the_rest():
    agent = delegating_agent(
        DelegateTool(agent="quick", callback_service=AGENT, timeout_ms=5_000),
        DelegateTool(agent="slow", callback_service=AGENT, timeout_ms=20_000),
    )
    w = world(agent, allowed={"quick": "http://quick.test", "slow": "http://slow.test"})
    sid, tokens = delegated(w, "ask_quick", "ask_slow")
    t0 = w.clock.now
    [(timer, _)] = w.queues.timers
    assert timer["deadline_ms"] == t0 + 5_000
    # When the first deadline passes with no answer from either
    w.clock.advance(5_000)
    assert fire_timer(w.deps, TimerMessage.model_validate(timer)) == "rearmed"
    # Then only the quick one timed out, and the timer is armed again for the slow one's deadline
    assert [(r.tool_use_id, r.source) for r in w.state.get_results(sid, 1)] == [("t1", ResultSource.TIMEOUT)]
    assert w.queues.timers[-1] == ({**timer, "deadline_ms": t0 + 20_000}, 15)
    assert w.thinks.take() == []
    # When the slow one answers in time, Then it completes the turn
    assert accept_callback(w.deps, tokens["t2"], "slow but sure").completed
    assert w.thinks.take() == [(sid, 2)]


def test_a_result_for_a_call_the_turn_never_made_is_late():
    w = world()
    sid, _ = delegated(w, "ask_worker")
    advance = record_and_advance(w.deps, sid, 1, callback("t9", "who asked?"), by="callback", total=1)
    assert (advance.outcome, advance.completed) == (RecordOutcome.LATE, False)
    assert w.state.get_results(sid, 1) == [] and w.thinks.take() == []


def test_a_retry_of_an_answer_whose_first_attempt_died_before_completing_completes_the_turn():
    w = world()
    sid, _ = delegated(w, "ask_worker")
    # Given the answer recorded by an attempt that died before it completed the turn
    assert w.state.record_result(sid, 1, callback("t1", "done"), 10**9) == (RecordOutcome.ACCEPTED, False)
    # When the peer retries (it got no answer), Then the duplicate completes the turn, once
    advance = record_and_advance(w.deps, sid, 1, callback("t1", "done"), by="callback")
    assert (advance.outcome, advance.completed) == (RecordOutcome.DUPLICATE, True)
    assert w.thinks.take() == [(sid, 2)]
    assert not record_and_advance(w.deps, sid, 1, callback("t1", "done"), by="callback").completed


def test_a_think_whose_start_was_lost_after_the_completion_is_resent_by_the_sweep_after_its_grace():
    w = world()
    sid, tokens = delegated(w, "ask_worker")
    w.model.says(answer("all done"))
    # Given the completing answer, whose function died before the next think was started
    w.thinks.fail_next = 1
    with pytest.raises(ThinkSendFailed):
        accept_callback(w.deps, tokens["t1"], "done")
    assert w.thinks.take() == [] and w.session(sid).turn == 2  # the completion is committed
    # When the sweep runs within the grace, Then it leaves the think alone (it may be running)
    assert sweep(w.deps) == 0
    # When the grace has passed, Then the sweep sends it, and the session gets its answer
    w.clock.advance(OWED_THINK_GRACE_MS)
    assert sweep(w.deps) == 1 and w.thinks.take() == [(sid, 2)]
    assert w.think(sid, 2) == "end_turn" and w.session(sid).status == "idle"
    assert sweep(w.deps) == 0  # nothing is owed any more


def test_the_sweep_times_out_a_turn_whose_timer_was_lost():
    w = world(async_tool_timeout_ms=10_000)
    sid, _ = delegated(w, "ask_worker", "ask_worker")
    w.queues.timers.clear()  # the timer message is lost
    # The session stays listed where its owed think was (a grace on), the sweep being the timer's backstop.
    w.clock.advance(OWED_THINK_GRACE_MS)
    assert sweep(w.deps) == 1
    assert {r.source for r in w.state.get_results(sid, 1)} == {ResultSource.TIMEOUT}
    assert w.thinks.take() == [(sid, 2)]


def test_a_forged_answer_records_nothing_and_an_oversized_one_ends_its_call_as_too_large():
    w = world(max_result_bytes=100)
    sid, tokens = delegated(w, "ask_worker")
    assert accept_callback(w.deps, tokens["t1"] + "x" * 101, "forged").status is CallbackStatus.UNAUTHORIZED
    assert w.state.get_results(sid, 1) == [] and w.session(sid).aggregation.status == "waiting"
    # Its token is good: the call ends now, with an error saying why (the text itself is never stored).
    outcome = accept_callback(w.deps, tokens["t1"], "x" * 101)
    assert (outcome.status, outcome.completed) == (CallbackStatus.TOO_LARGE, True)
    [result] = w.state.get_results(sid, 1)
    assert (result.status, json.loads(result.text)["reason"]) == ("error", "result_too_large")
    assert w.thinks.take() == [(sid, 2)]
