"""Delivery on fakes (tests.fakes): a finished answer goes to the service that asked, and only there; it is
retried while its retry time lasts, and otherwise counted, logged and dead-lettered with the reason."""

from __future__ import annotations

from flightdeck.domain.delivery import (
    BATCH_CALLBACK_PATH,
    CALLBACK_PATH,
    DeliveryMessage,
    DeliveryStatus,
    Pending,
    deliver_answers,
)
from flightdeck.domain.outbox import deliver_now
from flightdeck.domain.time_budget import TimeBudget
from tests.fakes.model import answer
from tests.fakes.outbound import PeerReply
from tests.fakes.world import CALLER_URL, world

ANSWER_URL = f"{CALLER_URL}{CALLBACK_PATH}"
BATCH_URL = f"{CALLER_URL}{BATCH_CALLBACK_PATH}"
DOWN = PeerReply(503, None)


def pending(w, key="m1", token="tok-1", result="the answer", service="caller", attempt=1, first_sent_ms=None):
    message = DeliveryMessage(session_id=f"s-{key}", callback_service=service, bearer_token=token, result=result)
    return Pending(key, message, attempt, w.clock.now if first_sent_ms is None else first_sent_ms)


def test_an_answer_reaches_the_caller_that_delegated_with_its_token_and_the_route_is_retired():
    # Given a task delegated by "caller", with the token its answer must carry
    w = world()
    w.peers.answer(ANSWER_URL, PeerReply(200, {"status": "accepted"}))
    w.model.says(answer("42"))
    sid = w.message("what is the answer?", reply_token="tok-1").session_id
    # When the agent answers
    assert w.think(sid, 1) == "end_turn"
    # Then the caller got it, once, at its callback, with the token; nothing waits for a retry
    [post] = w.peers.posts
    assert (post.url, post.body, post.headers["Authorization"]) == (ANSWER_URL, {"result": "42"}, "Bearer tok-1")
    assert w.queues.deliveries == [] and w.queues.dead_letters == []
    route = w.session(sid).route
    assert (route.status, route.retired_turn) == ("retired", 1)


def test_a_caller_that_is_down_gets_the_answer_from_the_delivery_queue():
    w = world()
    w.peers.answer(ANSWER_URL, DOWN)
    w.model.says(answer("42"))
    sid = w.message("what is the answer?", reply_token="tok-1").session_id
    w.think(sid, 1)
    [queued] = w.queues.deliveries
    assert (queued["session_id"], queued["result"], queued["bearer_token"]) == (sid, "42", "tok-1")
    assert queued["created_ms"] == w.clock.now  # its retry time counts from this first attempt


def test_a_retryable_failure_is_retried_while_the_retry_time_lasts_then_the_answer_is_dead():
    w = world(reply_retry_max_ms=120_000)
    w.peers.answer(ANSWER_URL, DOWN)
    first = w.clock.now
    outcome = deliver_answers(w.deps, [pending(w, first_sent_ms=first)])["m1"]
    assert outcome.status is DeliveryStatus.RETRY and 1 <= outcome.retry_after_s <= 120
    # Near the end of its time, a retry comes no later than the time left
    w.clock.advance(118_500)
    assert deliver_answers(w.deps, [pending(w, attempt=6, first_sent_ms=first)])["m1"].retry_after_s == 1
    w.clock.advance(1_500)
    dead = deliver_answers(w.deps, [pending(w, attempt=7, first_sent_ms=first)])["m1"]
    assert dead.status is DeliveryStatus.DEAD and dead.detail.startswith("retry budget spent")


def test_an_answer_the_caller_refuses_is_dead_lettered_with_the_reason_and_not_retried():
    w = world()
    w.peers.answer(ANSWER_URL, PeerReply(410, {"error": "the turn is over"}))
    body = pending(w).message.model_dump()
    deliver_now(w.deps, body, None)
    [dead] = w.queues.dead_letters
    assert dead["status"] == "refused" and "HTTP 410" in dead["reason"]
    assert w.queues.deliveries == [] and len(w.peers.posts) == 1


def test_an_answer_for_a_service_that_is_not_allowed_is_never_sent():
    w = world()
    deliver_now(w.deps, pending(w, service="stranger").message.model_dump(), None)
    [dead] = w.queues.dead_letters
    assert dead["status"] == "dead" and "'stranger' is not an allowed service" in dead["reason"]
    assert w.peers.posts == []


def test_answers_for_one_caller_go_in_one_batch_request_each_judged_on_its_own():
    w = world()
    w.peers.answer(BATCH_URL, PeerReply(200, {"results": [{"http_status": 202}, {"http_status": 410}]}))
    outcomes = deliver_answers(w.deps, [pending(w, "m1", "tok-1"), pending(w, "m2", "tok-2")])
    assert {k: o.status for k, o in outcomes.items()} == {"m1": DeliveryStatus.DELIVERED, "m2": DeliveryStatus.REFUSED}
    [post] = w.peers.posts
    assert [i["token"] for i in post.body["items"]] == ["tok-1", "tok-2"]


def test_a_batch_too_large_together_is_sent_in_halves_and_one_refused_as_a_whole_one_by_one():
    w = world()
    w.peers.answer(BATCH_URL, PeerReply(413, None), PeerReply(404, None))
    w.peers.answer(ANSWER_URL, PeerReply(202, None))
    items = [pending(w, f"m{n}", f"tok-{n}") for n in range(1, 4)]
    outcomes = deliver_answers(w.deps, items)
    assert {o.status for o in outcomes.values()} == {DeliveryStatus.DELIVERED}
    # 3 together: too large; then m1 alone and [m2, m3] as a batch, which the caller does not serve: one each
    assert [(p.url, len(p.body.get("items", [1]))) for p in w.peers.posts] == [
        (BATCH_URL, 3),
        (ANSWER_URL, 1),
        (BATCH_URL, 2),
        (ANSWER_URL, 1),
        (ANSWER_URL, 1),
    ]


def test_with_no_time_left_an_answer_is_put_back_unless_its_retry_time_is_spent():
    w = world(reply_retry_max_ms=120_000)
    spent = TimeBudget(lambda: 500)
    back = deliver_answers(w.deps, [pending(w)], spent)["m1"]
    assert (back.status, back.retry_after_s, back.detail) == (DeliveryStatus.RETRY, 1, "out of time")
    w.clock.advance(120_000)
    assert deliver_answers(w.deps, [pending(w, first_sent_ms=w.clock.now - 120_000)], spent)["m1"].status is (
        DeliveryStatus.DEAD
    )
    assert w.peers.posts == []
