"""Never stuck: a fault between a committed write and its follow-up step leaves an owner that finishes it.

Each test goes through the real handlers on moto and fails exactly one step: the asynchronous
invoke that starts the next think right after a completion (callback, deadline timer, sweep, dispatch_failed,
local tool, A2A cancel, ingest), or the model itself. Then time passes the owed-think grace and
the scheduled sweep runs: the session must end idle with an answer, and nothing runs twice.
"""

import importlib
import json
import time
import uuid

import pytest
from botocore.exceptions import ClientError

from flightdeck import wiring
from flightdeck.adapters.dynamo.table import OWED_THINK_GRACE_MS
from flightdeck.domain.model import ModelError, ModelReply
from flightdeck.local.invocation import LocalLambdaContext
from tests.integration.test_api_callbacks import post, start_turn
from tests.support.harness import load_event, make_agent, new_session_id

LAMBDA_DOWN = ClientError({"Error": {"Code": "ServiceException", "Message": "injected"}}, "Invoke")


def fail_next_think_send(monkeypatch, times: int = 1) -> dict:
    """Lambda refuses the next `times` think starts (the step right after a completion)."""
    thinks = wiring.deps().thinks
    real = thinks.start
    state = {"left": times, "failed": 0}

    def start(*args, **kwargs):
        if state["left"] > 0:
            state["left"] -= 1
            state["failed"] += 1
            raise LAMBDA_DOWN
        return real(*args, **kwargs)

    monkeypatch.setattr(thinks, "start", start)
    return state


def shift_clock(ms: int) -> None:
    """Move the agent's clock forward (deadlines, tombstones and the owed-think grace read it)."""
    store = wiring.state_store()
    store._clock = lambda: int(time.time() * 1000) + ms


def handler(name: str):
    return importlib.import_module(f"flightdeck.handlers.{name}").handler


def run_sweep(agent) -> dict:
    return handler("sweeper")(
        load_event("schedule/sweep.json"), LocalLambdaContext(function_name=f"{agent.name}-sweep")
    )


def session(agent, sid):
    status, _, body = agent.api("session_get", SESSION_ID=sid)
    assert status == 200, body
    return body


def listed_in(agent, sid) -> int:
    """How long until the deadline index lists the session: a completion keeps the time the turn was listed
    at (at latest its earliest deadline), and the sweep re-sends a lost think then (ARCHITECTURE §3)."""
    return max(0, int(agent.item(f"S#{sid}", "META")["due_at"]) - int(time.time() * 1000))


def sweep_until_idle(agent, sid, offset_ms: int = 0):
    """After the owed-think grace: the sweep re-sends the think, the turn worker runs it."""
    shift_clock(offset_ms + OWED_THINK_GRACE_MS + 1_000)
    run_sweep(agent)
    thinks = agent.receive("turns")
    assert thinks, "the sweep re-sent no think"
    agent.run_queue("turns", thinks)
    body = session(agent, sid)
    assert body["status"] == "idle", body
    return body


def _as_messages(bodies):
    return [
        {
            "MessageId": str(uuid.uuid4()),
            "ReceiptHandle": "x",
            "Body": json.dumps(b),
            "Attributes": {"ApproximateReceiveCount": "1"},
        }
        for b in bodies
    ]


def final_text(body) -> str:
    return "".join(b.get("text", "") for b in body["messages"][-1]["content"])


def test_callback_completes_then_the_think_send_fails_and_the_sweep_sends_it(orchestrator, monkeypatch):
    sid, turn, [tid] = start_turn(orchestrator)
    failed = fail_next_think_send(monkeypatch)
    status, _, _ = post(orchestrator, orchestrator.token(sid, turn, tid), "the answer")
    assert status == 503 and failed["failed"] == 1  # the result is in; the think was not sent
    assert orchestrator.bodies("turns") == [] and session(orchestrator, sid)["status"] == "busy"
    body = sweep_until_idle(orchestrator, sid, listed_in(orchestrator, sid))
    assert "the answer" in final_text(body)


def test_timer_completes_then_the_send_fails_its_redelivery_finds_the_tombstone_gone_and_the_sweep_recovers(
    orchestrator, monkeypatch
):
    sid, turn, [tid] = start_turn(orchestrator)
    # The timer message is delayed until the deadline; its body is what the turn worker sent.
    deadline = int(orchestrator.item(f"S#{sid}", "META")["agg_deadline"])
    timer = {"session_id": sid, "turn": turn, "deadline_ms": deadline}
    shift_clock(301_000)  # past the deadline
    failed = fail_next_think_send(monkeypatch)
    event = orchestrator.sqs_event("timers", _as_messages([timer]))
    resp = handler("deadline_timer")(event, LocalLambdaContext(function_name="timer"))
    assert len(resp["batchItemFailures"]) == 1 and failed["failed"] == 1
    # Redelivered after the visibility timeout: the completed turn's tombstone has expired by then.
    shift_clock(301_000 + 400_000)
    resp = handler("deadline_timer")(event, LocalLambdaContext(function_name="timer"))
    assert resp["batchItemFailures"] == [] and orchestrator.bodies("turns") == []
    body = sweep_until_idle(orchestrator, sid, 301_000 + 400_000)
    assert "timeout" in final_text(body)


def test_the_sweep_completes_then_its_send_fails_and_the_next_sweep_recovers(orchestrator, monkeypatch):
    sid, turn, [tid] = start_turn(orchestrator)
    shift_clock(301_000)
    failed = fail_next_think_send(monkeypatch)
    run_sweep(orchestrator)
    assert failed["failed"] == 1 and orchestrator.bodies("turns") == []
    body = sweep_until_idle(orchestrator, sid, 301_000)
    assert "timeout" in final_text(body)


def test_dispatch_failed_completes_then_the_send_fails_and_the_sweep_recovers(aws, monkeypatch):
    # The worker is not in the allowlist: the inline dispatch fails at once and completes the turn.
    agent = make_agent(monkeypatch, allow="orchestrator:http://127.0.0.1:9")
    sid = new_session_id()
    assert agent.api("chat_post", body={"session_id": sid, "content": "@worker do it"})[0] == 202
    failed = fail_next_think_send(monkeypatch)
    agent.run_queue("turns")
    assert failed["failed"] == 1 and agent.bodies("turns") == []
    # Even with no dispatch retry (the inline step handed it to the queue), the sweep is its owner.
    body = sweep_until_idle(agent, sid, listed_in(agent, sid))
    assert "dispatch_failed" in final_text(body) or "failed" in final_text(body)


def test_queued_dispatch_failed_then_the_send_fails_and_the_sweep_recovers(aws, monkeypatch):
    from tests.support.harness import hand_outbound_to_queues

    hand_outbound_to_queues(monkeypatch)  # the dispatch worker is the one that fails it
    agent = make_agent(monkeypatch, allow="orchestrator:http://127.0.0.1:9")
    sid = new_session_id()
    assert agent.api("chat_post", body={"session_id": sid, "content": "@worker do it"})[0] == 202
    agent.run_queue("turns")
    failed = fail_next_think_send(monkeypatch)
    resp = agent.run_queue("dispatch")
    assert failed["failed"] == 1 and len(resp["batchItemFailures"]) == 1
    # Its redelivery sees the turn complete and skips: only the owed-think mark is left.
    agent.run_queue("dispatch", agent.receive("dispatch"))
    body = sweep_until_idle(agent, sid, listed_in(agent, sid))
    assert "dispatch_failed" in final_text(body) or "failed" in final_text(body)


def test_a_local_tool_completes_then_the_send_fails_and_the_sweep_recovers(aws, monkeypatch):
    agent = make_agent(monkeypatch, delegates=[], builtin_tools=["word_count"])
    sid = new_session_id()
    assert agent.api("chat_post", body={"session_id": sid, "content": "!word_count one two three"})[0] == 202
    failed = fail_next_think_send(monkeypatch)
    [think] = agent.receive("turns")
    with pytest.raises(ClientError):  # the invocation fails: Lambda runs it again
        agent.run_invocation(think["Invocation"])
    assert failed["failed"] == 1
    # Lambda's retry of the think sees a newer turn and skips.
    [retry] = agent.receive("turns")
    assert retry["Invocation"] is think["Invocation"]
    assert agent.run_invocation(retry["Invocation"]) == {"outcome": "skipped"} and agent.bodies("turns") == []
    body = sweep_until_idle(agent, sid, listed_in(agent, sid))
    assert "3" in final_text(body)


def test_a_think_that_fails_every_attempt_is_handed_to_the_sweep_which_recovers_it(orchestrator, monkeypatch):
    real = wiring.deps().model()
    calls = {"n": 0}

    class BrokenThenFixed:
        def converse(self, **kwargs):
            calls["n"] += 1
            if calls["n"] <= 3:
                raise RuntimeError("a bug (injected)")  # not a model error: the invocation fails
            return real.converse(**kwargs)

    monkeypatch.setattr(wiring.deps(), "model", lambda: BrokenThenFixed())
    sid = new_session_id()
    assert orchestrator.api("chat_post", body={"session_id": sid, "content": "just answer"})[0] == 202
    # Lambda runs a failed asynchronous invocation twice more, then sends it to its on-failure destination.
    for _ in range(3):
        [think] = orchestrator.receive("turns")
        with pytest.raises(RuntimeError):
            orchestrator.run_invocation(think["Invocation"])
    # Its record is on the turns queue (the delayed-retry queue): the turn worker puts the owed mark into
    # the deadline index instead of thinking, and nothing reaches the dead-letter queue.
    [message] = orchestrator.receive("turns")
    assert json.loads(message["Body"])["requestPayload"] == {
        "session_id": sid,
        "turn": 1,
        "traceparent": "",
        "first_start": True,
    }
    assert orchestrator.run_queue("turns", [message]) == {"batchItemFailures": []} and calls["n"] == 3
    assert orchestrator.receive("turns", dlq=True) == []
    assert "due_shard" in orchestrator.item(f"S#{sid}", "META")
    assert session(orchestrator, sid)["status"] == "busy"
    sweep_until_idle(orchestrator, sid)  # the think is still owed: the sweep starts it again


def test_ingest_stores_the_message_then_the_send_fails_answers_accepted_and_the_sweep_sends_the_think(
    orchestrator, monkeypatch
):
    failed = fail_next_think_send(monkeypatch)
    sid = new_session_id()
    status, _, body = orchestrator.api("chat_post", body={"session_id": sid, "content": "just answer"})
    assert (status, body["status"]) == (202, "accepted") and failed["failed"] == 1
    assert orchestrator.bodies("turns") == []
    sweep_until_idle(orchestrator, sid)


def test_a2a_cancel_dies_after_completing_and_the_sweep_closes_the_task(orchestrator, monkeypatch):
    from flightdeck.domain.a2a import tasks as a2a
    from tests.integration.test_a2a_server import get, ok, rpc, send

    task = send(orchestrator, "@worker a long job")
    orchestrator.run_queue("turns")  # delegating: the turn waits
    real = a2a.close_canceled
    monkeypatch.setattr(a2a, "close_canceled", lambda *a, **k: (_ for _ in ()).throw(RuntimeError("died")))
    resp = rpc(orchestrator, "tasks/cancel", {"id": task["id"]})
    assert "error" in resp  # the function died after the completing transaction
    monkeypatch.setattr(a2a, "close_canceled", real)
    body = sweep_until_idle(orchestrator, task["contextId"])
    assert "canceled" in final_text(body)
    assert get(orchestrator, task["id"])["status"]["state"] == "canceled"
    assert ok(rpc(orchestrator, "tasks/get", {"id": task["id"]}))["status"]["state"] == "canceled"


class _FailingModel:
    def __init__(self, retryable: bool):
        self.retryable, self.calls = retryable, 0

    def converse(self, **_):
        self.calls += 1
        exc = ModelError("throttled (injected)" if self.retryable else "validation (injected)")
        exc.retryable = self.retryable
        raise exc


@pytest.mark.parametrize("retryable", [True, False])
def test_a_model_error_is_retried_within_its_budget_then_ends_the_turn_with_an_error_answer(
    orchestrator, monkeypatch, retryable
):
    from flightdeck.domain import turn_loop

    model = _FailingModel(retryable)
    monkeypatch.setattr(wiring.deps(), "model", lambda: model)
    monkeypatch.setattr(turn_loop, "backoff_s", lambda attempt: 0)  # the backoff itself: its own test below
    sid = new_session_id()
    assert orchestrator.api("chat_post", body={"session_id": sid, "content": "hello"})[0] == 202
    attempts = []
    while thinks := orchestrator.receive("turns"):  # the invoke, then each retry from the turns queue
        attempts += [json.loads(t["Body"]).get("attempt", 1) for t in thinks]
        assert orchestrator.run_queue("turns", thinks) == {"batchItemFailures": []}
    assert attempts == ([1, 2, 3] if retryable else [1]) and model.calls == len(attempts)
    body = session(orchestrator, sid)
    assert body["status"] == "idle"
    answer = json.loads(final_text(body))
    assert answer["status"] == "error" and answer["reason"] == "model_error"


def test_a_throttled_think_waits_out_its_backoff_on_the_turns_queue(orchestrator, monkeypatch):
    model = _FailingModel(retryable=True)
    monkeypatch.setattr(wiring.deps(), "model", lambda: model)
    sent = []
    sqs = wiring.deps().queues.client
    hook = lambda params, **_: sent.append(dict(params))  # noqa: E731 - observes, changes nothing
    sqs.meta.events.register("before-parameter-build.sqs.SendMessage", hook)
    sid = new_session_id()
    assert orchestrator.api("chat_post", body={"session_id": sid, "content": "hello"})[0] == 202
    [think] = orchestrator.receive("turns")
    assert orchestrator.run_invocation(think["Invocation"]) == {"outcome": "retry_scheduled"}  # no failed invocation
    [retry] = [p for p in sent if p["QueueUrl"] == orchestrator.queue_urls["turns"]]
    assert json.loads(retry["MessageBody"]) == {"session_id": sid, "turn": 1, "traceparent": "", "attempt": 2}
    assert 1 <= retry["DelaySeconds"] <= 4  # backoff_s(1): full jitter over 2 s, at least 1 s
    attributes = orchestrator.sqs.get_queue_attributes(
        QueueUrl=orchestrator.queue_urls["turns"], AttributeNames=["ApproximateNumberOfMessagesDelayed"]
    )
    assert attributes["Attributes"]["ApproximateNumberOfMessagesDelayed"] == "1"
    assert orchestrator.receive("turns") == [] and session(orchestrator, sid)["status"] == "busy"


def test_the_sweep_does_not_start_a_throttled_think_again_while_its_retry_waits(orchestrator, monkeypatch):
    from flightdeck.domain import turn_loop

    model = _FailingModel(retryable=True)
    monkeypatch.setattr(wiring.deps(), "model", lambda: model)
    monkeypatch.setattr(turn_loop, "backoff_s", lambda attempt: 60)
    sid = new_session_id()
    assert orchestrator.api("chat_post", body={"session_id": sid, "content": "hello"})[0] == 202
    [think] = orchestrator.receive("turns")
    assert orchestrator.run_invocation(think["Invocation"]) == {"outcome": "retry_scheduled"}
    # The grace since the commit has passed, but the retry (attempt 2) still waits out its 60 s on the
    # turns queue: a re-send now would start the think again at attempt 1, and both would ask the model.
    shift_clock(OWED_THINK_GRACE_MS + 1_000)
    run_sweep(orchestrator)
    assert orchestrator.receive("turns") == [] and model.calls == 1
    # Only once the retry could have run (its delay and a grace) does the sweep take it as lost.
    shift_clock(60_000 + OWED_THINK_GRACE_MS + 1_000)
    run_sweep(orchestrator)
    [resent] = orchestrator.receive("turns")
    assert resent["Invocation"].event == {"session_id": sid, "turn": 1, "traceparent": ""}


def test_a_re_sent_think_is_not_re_sent_again_while_it_may_run(orchestrator, monkeypatch):
    failed = fail_next_think_send(monkeypatch)
    sid = new_session_id()
    assert orchestrator.api("chat_post", body={"session_id": sid, "content": "just answer"})[0] == 202
    assert failed["failed"] == 1
    shift_clock(OWED_THINK_GRACE_MS + 1_000)
    run_sweep(orchestrator)
    [resent] = orchestrator.receive("turns")  # started, and it may still be running:
    run_sweep(orchestrator)  # so the next sweeps, within its grace, leave it be
    shift_clock(2 * OWED_THINK_GRACE_MS)
    run_sweep(orchestrator)
    assert orchestrator.receive("turns") == []
    # Past the re-send's own grace with the mark still owed, that re-send is taken as lost: sent once more.
    body = sweep_until_idle(orchestrator, sid, OWED_THINK_GRACE_MS + 1_000)
    assert final_text(body)


def test_a_reply_cut_off_mid_tool_call_ends_the_turn_with_an_error_answer(orchestrator, monkeypatch):
    class Truncated:
        def converse(self, **_):
            return ModelReply(
                stop_reason="max_tokens",
                message={
                    "role": "assistant",
                    "content": [{"toolUse": {"toolUseId": "t1", "name": "ask_worker", "input": {}}}],
                },
            )

    monkeypatch.setattr(wiring.deps(), "model", lambda: Truncated())
    sid = new_session_id()
    assert orchestrator.api("chat_post", body={"session_id": sid, "content": "hello"})[0] == 202
    [think] = orchestrator.receive("turns")
    assert orchestrator.run_invocation(think["Invocation"]) == {"outcome": "error"}
    body = session(orchestrator, sid)
    assert body["status"] == "idle" and json.loads(final_text(body))["reason"] == "model_truncated"
    assert orchestrator.bodies("dispatch") == []


def test_a_delegated_session_whose_model_fails_answers_its_caller_with_status_error(aws, monkeypatch):
    worker = make_agent(monkeypatch, "worker", delegates=[], allow="orchestrator:http://127.0.0.1:9")
    model = _FailingModel(retryable=False)
    monkeypatch.setattr(wiring.deps(), "model", lambda: model)
    reply = {"callbackService": "orchestrator", "bearerToken": "tok-" + "x" * 40}
    sid = new_session_id()
    assert worker.api("chat_post", body={"session_id": sid, "content": "do it", "reply": reply})[0] == 202
    worker.run_queue("turns")
    [delivery] = worker.bodies("delivery")
    assert delivery["status"] == "error" and json.loads(delivery["result"])["reason"] == "model_error"


def test_seven_results_of_max_size_in_non_ascii_fit_and_the_next_think_runs(orchestrator):
    sid, turn, ids = start_turn(orchestrator, 7)
    big = "é" * 32_000  # 64,000 bytes as UTF-8: exactly MAX_RESULT_BYTES; 6x that once JSON-escaped
    for tid in ids:
        status, _, body = post(orchestrator, orchestrator.token(sid, turn, tid, total=7), big)
        assert status == 202, body
    orchestrator.run_queue("turns")
    body = session(orchestrator, sid)
    assert body["status"] == "idle"
    results = [m for m in body["messages"] if m["role"] == "user" and "toolResult" in m["content"][0]]
    assert [b["toolResult"]["content"][0]["text"] for b in results[0]["content"]] == [big] * 7


def test_chat_content_is_bounded_by_its_stored_size_not_its_characters(orchestrator):
    sid = new_session_id()
    status, _, body = orchestrator.api("chat_post", body={"session_id": sid, "content": "é" * 100_000})
    assert status == 202, body  # 200,000 bytes: within the limit, and stored
    orchestrator.run_queue("turns")
    assert session(orchestrator, sid)["status"] == "idle"
    status, _, body = orchestrator.api("chat_post", body={"content": "😀" * 60_000})
    assert status == 422 and "bytes" in json.dumps(body)  # 240,000 bytes: refused, saying why
