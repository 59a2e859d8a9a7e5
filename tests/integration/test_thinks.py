"""Starting thinks: the adapter's asynchronous invoke and delayed retry (on moto), and the turn worker's two event shapes."""

import importlib
import json

import pytest
from pydantic import ValidationError

from flightdeck import wiring
from flightdeck.adapters.lambda_thinks import LambdaThinks
from flightdeck.local.invocation import LocalLambdaContext
from tests.support.harness import new_session_id
from tests.support.invokes import RECORDER


def _sent_to(agent, key):
    """Every SendMessage the process makes to that queue (observed on the agent's SQS client)."""
    sent = []
    agent_queue = agent.queue_urls[key]
    wiring.deps().queues.client.meta.events.register(
        "before-parameter-build.sqs.SendMessage",
        lambda params, **_: sent.append(dict(params)) if params["QueueUrl"] == agent_queue else None,
    )
    return sent


def test_start_is_one_event_invoke_of_the_turn_worker_by_name(orchestrator):
    thinks = wiring.deps().thinks
    assert isinstance(thinks, LambdaThinks) and thinks.function_name == "orchestrator-turn-worker"
    calls = []
    thinks.client.meta.events.register(
        "before-parameter-build.lambda.Invoke", lambda params, **_: calls.append(dict(params))
    )
    thinks.start("s-1", 4, "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")
    [call] = calls
    assert call["FunctionName"] == "orchestrator-turn-worker" and call["InvocationType"] == "Event"
    assert json.loads(call["Payload"]) == {
        "session_id": "s-1",
        "turn": 4,
        "traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
        "first_start": True,  # the start its owing write made: its run may go without a claim (§6)
    }
    # Lambda (moto) accepted it: 202, recorded for the test to run; no queue was written.
    [invocation] = RECORDER.take("orchestrator-turn-worker")
    assert invocation.event == json.loads(call["Payload"])
    assert orchestrator.receive("turns") == []


def test_retry_later_is_a_delayed_message_on_the_turns_queue(orchestrator):
    sent = _sent_to(orchestrator, "turns")
    wiring.deps().thinks.retry_later("s-1", 2, "", attempt=3, delay_s=7)
    wiring.deps().thinks.retry_later("s-1", 2, "", attempt=3, delay_s=5_000)  # past SQS's 15 minutes: capped
    assert [m["DelaySeconds"] for m in sent] == [7, 900]
    assert json.loads(sent[0]["MessageBody"]) == {"session_id": "s-1", "turn": 2, "traceparent": "", "attempt": 3}
    assert RECORDER.take("orchestrator-turn-worker") == []  # not an invoke


def run(event):
    """The turn worker's handler on one event (imported here: its settings are the test's)."""
    handler = importlib.import_module("flightdeck.handlers.turn_worker").handler
    return handler(event, LocalLambdaContext(function_name="orchestrator-turn-worker"))


def _chat(orchestrator, content="just answer"):
    sid = new_session_id()
    assert orchestrator.api("chat_post", body={"session_id": sid, "content": content})[0] == 202
    [think] = orchestrator.receive("turns")
    return sid, think["Invocation"].event


def test_the_turn_worker_runs_an_asynchronous_invoke_s_event(orchestrator):
    sid, event = _chat(orchestrator)
    assert event == {"session_id": sid, "turn": 1, "traceparent": "", "first_start": True}
    assert run(event) == {"outcome": "end_turn"}
    assert run(event) == {"outcome": "skipped"}  # delivered twice: one effect


def test_the_turn_worker_runs_a_retry_from_the_turns_queue_and_hands_a_given_up_think_to_the_sweep(orchestrator):
    sid, event = _chat(orchestrator)
    body = {**event, "attempt": 2}
    messages = [{"MessageId": "m-1", "ReceiptHandle": "r", "Body": json.dumps(body), "Attributes": {}}]
    assert run(orchestrator.sqs_event("turns", messages)) == {"batchItemFailures": []}
    status, _, session = orchestrator.api("session_get", SESSION_ID=sid)
    assert session["status"] == "idle" and session["messages"][-1]["role"] == "assistant"
    # Lambda's record of an invocation it gave up on (its on-failure destination, the turns queue): the owed
    # mark goes into the deadline index, due after the grace, and the sweep runs the think then.
    sid, event = _chat(orchestrator)
    record = {"requestContext": {"condition": "RetriesExhausted"}, "requestPayload": event}
    messages = [{"MessageId": "m-2", "ReceiptHandle": "r", "Body": json.dumps(record), "Attributes": {}}]
    assert run(orchestrator.sqs_event("turns", messages)) == {"batchItemFailures": []}
    meta = orchestrator.item(f"S#{sid}", "META")
    assert meta["owed_think"] == event["turn"] and "due_shard" in meta
    assert orchestrator.api("session_get", SESSION_ID=sid)[2]["status"] == "busy"


def test_a_malformed_think_fails_its_invocation_or_its_record_and_changes_nothing(orchestrator):
    sid, _ = _chat(orchestrator)
    before = orchestrator.table_items()
    with pytest.raises(ValidationError, match="turn"):  # Lambda retries it, then it lands in the turns DLQ
        run({"session_id": sid, "turn": 0})
    messages = [{"MessageId": "m-1", "ReceiptHandle": "r", "Body": json.dumps({"turn": 1}), "Attributes": {}}]
    assert run(orchestrator.sqs_event("turns", messages)) == {"batchItemFailures": [{"itemIdentifier": "m-1"}]}
    assert orchestrator.table_items() == before


# --- a new session's first think starts from its ingest's snapshot -----------------------------------


def _clock_stopped():
    """The agent's clock stands still: a think runs as soon as its ingest wrote it, alone (no claim, §6)."""
    store = wiring.state_store()
    now = store.now_ms()
    store._clock = lambda: now
    return store, now


def _new_session(orchestrator, content="just answer"):
    """A message without a session id: a new session, its first think's event as the ingest started it."""
    status, _, accepted = orchestrator.api("chat_post", body={"content": content})
    assert status == 202
    [think] = orchestrator.receive("turns")
    return accepted["session_id"], think["Invocation"].event


def _store_calls():
    """Every DynamoDB operation the store's client makes from now on."""
    calls = []
    wiring.state_store().client.meta.events.register(
        "before-call.dynamodb", lambda model, **_: calls.append(model.name)
    )
    return calls


def test_a_new_session_s_first_think_reads_nothing_it_starts_from_what_its_ingest_wrote(orchestrator):
    store, now = _clock_stopped()
    sid, event = _new_session(orchestrator)
    assert event["session_id"] == sid and event["snapshot"]
    calls = _store_calls()
    assert run(event) == {"outcome": "end_turn"}
    assert calls == ["TransactWriteItems"]  # the reply and the turn's end; no Query, no claim
    session = orchestrator.api("session_get", SESSION_ID=sid)[2]
    assert session["status"] == "idle" and [m["role"] for m in session["messages"]] == ["user", "assistant"]
    # A later run of it (Lambda retrying it, past its window: it claims): its write finds the reply stored, and
    # it goes on from the store.
    later = now + store.owed_think_grace_ms + 1
    store._clock = lambda: later
    assert run(event) == {"outcome": "skipped"}
    assert orchestrator.api("session_get", SESSION_ID=sid)[2]["messages"] == session["messages"]


def test_a_message_to_an_existing_session_starts_its_think_without_a_snapshot(orchestrator):
    _, event = _chat(orchestrator)  # a session id the client chose: the store cannot vouch for its partition
    assert "snapshot" not in event


def test_a_snapshot_too_large_for_the_invoke_payload_is_left_out_and_the_think_reads(orchestrator):
    _clock_stopped()
    sid, event = _new_session(orchestrator, "x" * 70_000)
    assert "snapshot" not in event
    calls = _store_calls()
    assert run(event) == {"outcome": "end_turn"}
    assert calls == ["Query", "TransactWriteItems"]


def test_a_session_canceled_after_its_ingest_is_not_answered_by_its_first_think(orchestrator):
    sid, event = _new_session(orchestrator)
    status, _, canceled = orchestrator.api("session_cancel", SESSION_ID=sid)
    assert (status, canceled["status"]) == (200, "canceled")
    closed = orchestrator.api("session_get", SESSION_ID=sid)[2]  # the cancel closed it: idle, a closing line
    assert closed["status"] == "idle"
    # The snapshot says busy; the reply's conditional write says otherwise, and what is stored decides.
    assert run(event) == {"outcome": "skipped"}
    assert orchestrator.api("session_get", SESSION_ID=sid)[2]["messages"] == closed["messages"]


def test_a_message_queued_after_the_ingest_starts_the_next_turn_when_the_first_ends(orchestrator):
    sid, event = _new_session(orchestrator)
    status, _, queued = orchestrator.api("chat_post", body={"session_id": sid, "content": "and then this"})
    assert (status, queued["status"]) == (202, "queued")
    assert run(event) == {"outcome": "end_turn"}
    # The snapshot knew of no waiting message; the turn's end did, and started it in the same write.
    session = orchestrator.api("session_get", SESSION_ID=sid)[2]
    assert (session["status"], session["turn"]) == ("busy", 2)
    [think] = orchestrator.receive("turns")
    assert think["Invocation"].event["turn"] == 2 and "snapshot" not in think["Invocation"].event
