"""The turn loop on fakes (tests.fakes): what one think does with what the model said.

Each test: Given an agent and its session, When a think runs, Then what is stored, sent and started.
The state is the in-memory fake that tests/contract holds to the DynamoDB store's conditions.
"""

from __future__ import annotations

import json

import pytest

from flightdeck.domain.agent import DelegateTool
from flightdeck.domain.callbacks import CallbackStatus, accept_callback
from flightdeck.domain.dispatch import peer_session_id
from flightdeck.domain.tokens import verify
from flightdeck.domain.turn_loop import ThinkRetry
from tests.fakes.model import answer, asks, call, calls, model_error
from tests.fakes.outbound import PeerReply
from tests.fakes.world import AGENT, CALLER_URL, WORKER_URL, delegating_agent, world

ACCEPTED = PeerReply(202, {"status": "accepted"})


def _posted_token(post) -> str:
    return post.body["reply"]["bearerToken"]


def test_a_think_that_delegates_stores_its_reply_waits_for_the_call_and_sends_the_task():
    # Given an agent that delegates to a worker, and a model that does
    w = world(async_tool_timeout_ms=60_000)
    w.peers.answer(f"{WORKER_URL}/api/chat", ACCEPTED)
    w.model.says(calls(call("ask_worker", "tu-1", task="find the launch date")))
    sid = w.message("when is the launch?").session_id
    assert w.thinks.take() == [(sid, 1)]
    # When the think runs
    assert w.think(sid, 1) == "tool_use"
    # Then the turn waits for that one call, until its deadline, with a timer armed at it
    session = w.session(sid)
    assert (session.status, session.turn) == ("busy", 1)
    turn = session.aggregation
    assert (turn.expected, turn.status, turn.deadline_ms) == (frozenset({"tu-1"}), "waiting", w.clock.now + 60_000)
    assert w.queues.timers == [({"session_id": sid, "turn": 1, "deadline_ms": w.clock.now + 60_000}, 60)]
    # ...and the task went to the worker at once, with a token its answer must carry
    [post] = w.peers.posts
    assert post.url == f"{WORKER_URL}/api/chat" and post.body["content"] == "find the launch date"
    assert post.body["session_id"] == peer_session_id(AGENT, sid, "tu-1")
    assert post.body["reply"]["callbackService"] == AGENT
    claims = verify(_posted_token(post), w.keys, agent=AGENT, now=w.clock.now / 1000)
    assert (claims.session_id, claims.turn, claims.tool_use_id, claims.total_tools) == (sid, 1, "tu-1", 1)
    assert w.queues.dispatches == [] and w.thinks.take() == []  # nothing left to retry


def test_the_answer_to_a_delegation_starts_the_think_that_answers_with_it():
    # Given a think that delegated to a worker that took the task
    w = world()
    w.peers.answer(f"{WORKER_URL}/api/chat", ACCEPTED)
    w.model.says(calls(call("ask_worker", "tu-1", task="summarise")), answer("The summary is: short."))
    sid = w.message("summarise the report").session_id
    w.think(sid, 1)
    w.thinks.take()
    # When the worker's answer comes back with the token it was given
    outcome = accept_callback(w.deps, _posted_token(w.peers.posts[0]), "short")
    # Then the turn completes and the next think starts, once
    assert (outcome.status, outcome.completed) == (CallbackStatus.ACCEPTED, True)
    assert w.thinks.take() == [(sid, 2)]
    # When that think runs, the model hears the result and answers
    assert w.think(sid, 2) == "end_turn"
    heard = w.model.heard[-1].messages
    assert heard[-1]["content"][0]["toolResult"]["content"] == [{"text": "short"}]
    session = w.session(sid)
    assert session.status == "idle" and session.messages[-1]["content"] == [{"text": "The summary is: short."}]


def test_a_final_answer_ends_the_turn_and_releases_the_session():
    w = world()
    w.model.says(answer("Hello to you."))
    sid = w.message("hello").session_id
    assert w.think(sid, 1) == "end_turn"
    session = w.session(sid)
    assert (session.status, session.turn) == ("idle", 1)
    assert session.messages == [
        {"role": "user", "content": [{"text": "hello"}]},
        {"role": "assistant", "content": [{"text": "Hello to you."}]},
    ]
    # The model was given the agent's prompt and its tools (the delegate's, and ask_user)
    converse = w.model.heard[0]
    assert converse.system == w.deps.settings.agent.system_prompt
    assert {t["toolSpec"]["name"] for t in converse.tools} == {"ask_worker", "ask_user"}
    assert w.peers.posts == [] and w.queues.deliveries == []  # nobody is waiting on an answer


def test_a_redelivered_think_calls_the_model_no_more_and_resends_the_same_task():
    w = world()
    w.peers.answer(f"{WORKER_URL}/api/chat", ACCEPTED)
    w.model.says(calls(call("ask_worker", "tu-1", task="check")))
    sid = w.message("check it").session_id
    assert w.think(sid, 1) == "tool_use"
    # When the same think is delivered again (at-least-once)
    assert w.think(sid, 1) == "tool_use"
    # Then the stored reply is reused, and the task re-sent as a replay: the same bytes, the same token
    assert len(w.model.heard) == 1
    first, again = w.peers.posts
    assert first.body == again.body
    assert w.session(sid).aggregation.expected == frozenset({"tu-1"})


def test_a_think_of_a_turn_that_moved_on_is_skipped():
    w = world()
    w.model.says(answer("done"))
    sid = w.message("hi").session_id
    w.think(sid, 1)
    assert w.think(sid, 1) == "skipped" and w.think(sid, 7) == "skipped"
    assert len(w.model.heard) == 1


def test_a_throttled_model_is_retried_within_its_attempts_then_the_turn_ends_with_an_error_answer():
    # Given a delegation from a caller, and a model that keeps being throttled
    w = world(model_max_attempts=3)
    w.peers.answer(f"{CALLER_URL}/api/tools/response", ACCEPTED)
    w.model.says(*[model_error("ThrottlingException: slow down", retryable=True)] * 3)
    sid = w.message("a task", reply_token="caller-token").session_id
    # When its first two attempts fail, Then each asks to think again later, and stores nothing
    for attempt in (1, 2):
        with pytest.raises(ThinkRetry) as retry:
            w.think(sid, 1, attempt=attempt)
        assert 1 <= retry.value.delay_s <= 60
        assert w.session(sid).status == "busy" and w.session(sid).iteration is None
    # When the last attempt fails too, Then the turn ends with an error answer the caller is sent
    assert w.think(sid, 1, attempt=3) == "error"
    assert w.session(sid).status == "idle"
    [post] = w.peers.posts
    assert post.body["status"] == "error"
    error = json.loads(post.body["result"])
    assert error["reason"] == "model_error" and "retries exhausted after 3 attempt(s)" in error["detail"]


def test_a_model_error_that_cannot_be_retried_ends_the_turn_at_once():
    w = world(model_max_attempts=3)
    w.model.says(model_error("ValidationException: bad prompt", retryable=False))
    sid = w.message("hi").session_id
    assert w.think(sid, 1) == "error"
    reply = json.loads(w.session(sid).messages[-1]["content"][0]["text"])
    assert reply["reason"] == "model_error" and "not retryable" in reply["detail"]
    assert len(w.model.heard) == 1


def test_a_reply_that_asks_ends_the_turn_with_the_question_and_the_next_message_answers_it():
    # Given a delegation from a caller, and a model that cannot go on without knowing more
    w = world()
    w.peers.answer(f"{CALLER_URL}/api/tools/response", ACCEPTED)
    w.model.says(asks("Which city?"), answer("Paris it is."))
    sid = w.message("book a hotel", reply_token="t-1").session_id
    # When it thinks, Then the turn ends with the question, sent to the caller with the session to continue
    assert w.think(sid, 1) == "input_required"
    [post] = w.peers.posts
    assert post.body == {"result": "Which city?", "status": "input_required", "context_id": sid}
    assert post.headers["Authorization"] == "Bearer t-1"
    assert w.session(sid).status == "idle"
    # When the caller answers in the same session, Then the model hears it as its question's answer
    w.message("Paris", sid, reply_token="t-2")
    assert w.think(sid, 2) == "end_turn"
    [result] = w.model.heard[-1].messages[-1]["content"]
    assert result["toolResult"]["content"] == [{"text": "Paris"}] and result["toolResult"]["status"] == "success"
    assert w.peers.posts[-1].body == {"result": "Paris it is."}


def test_a_message_that_arrives_while_the_session_thinks_waits_then_starts_the_next_turn():
    w = world()
    w.model.says(answer("first answer"), answer("second answer"))
    sid = w.message("first").session_id
    w.thinks.take()
    # Given a second message while the first is being thought about
    waiting = w.message("second", sid)
    assert (waiting.queued, waiting.position, waiting.turn) == (True, 1, 0)
    assert w.thinks.take() == []  # it waits: no think for it yet
    # When the first think answers, Then the same write starts the second message's turn, and its think
    assert w.think(sid, 1) == "end_turn"
    assert w.thinks.take() == [(sid, 2)]
    session = w.session(sid)
    assert (session.status, session.turn, session.input.message) == (
        "busy",
        2,
        {"role": "user", "content": [{"text": "second"}]},
    )
    assert w.think(sid, 2) == "end_turn" and w.session(sid).status == "idle"
    assert [m["content"][0]["text"] for m in w.session(sid).messages] == [
        "first",
        "first answer",
        "second",
        "second answer",
    ]


def test_calls_past_the_per_turn_limit_get_an_error_result_and_are_not_sent():
    w = world(max_tools_per_turn=1)
    w.peers.answer(f"{WORKER_URL}/api/chat", ACCEPTED)
    w.model.says(calls(call("ask_worker", "tu-1", task="one"), call("ask_worker", "tu-2", task="two")))
    sid = w.message("two things").session_id
    assert w.think(sid, 1) == "tool_use"
    assert [p.body["content"] for p in w.peers.posts] == ["one"]
    [refused] = w.state.get_results(sid, 1)
    assert refused.tool_use_id == "tu-2" and json.loads(refused.text)["reason"] == "too_many_tools"
    assert w.session(sid).aggregation.received == 1  # the turn still waits for the one sent


def test_a_call_of_a_tool_the_agent_lacks_gets_an_error_result_and_the_turn_goes_on():
    w = world()
    w.model.says(calls(call("frobnicate", "tu-1")), answer("I could not."))
    sid = w.message("frobnicate it").session_id
    w.thinks.take()
    assert w.think(sid, 1) == "tool_use"
    [result] = w.state.get_results(sid, 1)
    assert json.loads(result.text)["reason"] == "unknown_tool"
    # Its only call answered, the turn completed and the next think started
    assert w.thinks.take() == [(sid, 2)] and w.think(sid, 2) == "end_turn"


def test_each_delegate_waits_for_its_own_timeout_and_other_calls_for_the_longest():
    agent = delegating_agent(
        DelegateTool(agent="quick", callback_service=AGENT, timeout_ms=5_000),
        DelegateTool(agent="slow", callback_service=AGENT, timeout_ms=50_000),
        builtin_tools=["word_count"],
    )
    w = world(agent, allowed={"quick": "http://quick.test", "slow": "http://slow.test"})
    w.model.says(
        calls(call("ask_quick", "q", task="a"), call("ask_slow", "s", task="b"), call("word_count", "w", text="x y"))
    )
    sid = w.message("go").session_id
    now = w.clock.now
    w.think(sid, 1)
    turn = w.session(sid).aggregation
    assert {i: turn.deadline_of(i) for i in "qsw"} == {"q": now + 5_000, "s": now + 50_000, "w": now + 50_000}
    assert w.queues.timers == [({"session_id": sid, "turn": 1, "deadline_ms": now + 5_000}, 5)]  # the earliest
