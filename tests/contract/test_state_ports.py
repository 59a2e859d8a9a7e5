"""The state ports' contract: every test here runs against the in-memory fake (tests.fakes.state) and
against the DynamoDB StateStore on moto, so the fast unit tier stands on the same conditions as production.

Each test is one core transition: a message taken in or queued, a think's reply stored once, a result
recorded once, a turn completed once (by its last result, a completion check or its deadlines), a reply
route answered once, a session canceled and closed, a dispatch claimed once, the deadline index.
"""

from __future__ import annotations

import dataclasses
import json
import uuid

import boto3
import pytest
from boto3.dynamodb.types import TypeSerializer
from moto import mock_aws

from flightdeck.adapters.dynamo import table as dynamo_table
from flightdeck.adapters.dynamo.store import StateStore
from flightdeck.adapters.peer_registry import PeerRegistry
from flightdeck.domain.liveness import Overdue
from flightdeck.domain.peers import ACTIVE, PeerRecord, PeerRefusedError, new_token, proof_of, token_sha256
from flightdeck.domain.records import (
    AgentBusyError,
    Completion,
    Expiry,
    InboxFullError,
    Intake,
    MessageSlot,
    QueuedMessage,
    RecordOutcome,
    ResultSource,
    SessionBusyError,
    SessionNotFoundError,
    TaskNotOpenError,
    ToolResult,
    TurnSeed,
)
from flightdeck.local.resources import create_table
from tests.conftest import MOTO_CONFIG
from tests.fakes import state as fake_state
from tests.fakes.state import MemoryState
from tests.fakes.world import FakeClock

RETENTION_MS = 86_400_000
TOMBSTONE_MS = 60_000
ROUTE_TTL_MS = 3_600_000
GRACE_MS = fake_state.OWED_THINK_GRACE_MS
SERIALIZER = TypeSerializer()


@pytest.fixture(scope="module")
def table():
    with mock_aws(config=MOTO_CONFIG):
        client = boto3.client("dynamodb", region_name="us-east-1")
        yield create_table(client, "contract"), client


@pytest.fixture
def clock():
    return FakeClock()


@pytest.fixture(params=["memory", "dynamodb"])
def state(request, clock):
    if request.param == "memory":
        return MemoryState(clock.now_ms)
    name, client = request.getfixturevalue("table")
    return StateStore(name, client=client, clock=clock.now_ms)


@pytest.fixture
def sid():
    return f"s-{uuid.uuid4().hex[:12]}"  # the moto table is shared by the module's tests


def user(text):
    return {"role": "user", "content": [{"text": text}]}


def final(text):
    return {"stop_reason": "end_turn", "message": {"role": "assistant", "content": [{"text": text}]}}


def tool_use(*ids):
    blocks = [{"toolUse": {"toolUseId": i, "name": "ask_worker", "input": {"task": i}}} for i in ids]
    return {"stop_reason": "tool_use", "message": {"role": "assistant", "content": blocks}}


def result(tool_use_id, text="done", source=ResultSource.CALLBACK):
    return ToolResult(tool_use_id, "success", text, source)


def timeout(tool_use_id):
    return ToolResult(tool_use_id, "error", '{"status": "error", "reason": "timeout"}', ResultSource.TIMEOUT)


def overdue(state, sid, now_ms):
    return [o for o in state.list_overdue(now_ms) if o.session_id == sid]


def delegated(state, clock, sid, *ids, deadlines=None):
    """Given a session whose first think called tools `ids` (the turn's aggregation opened with the reply)."""
    state.take_message(sid, user("delegate"), RETENTION_MS)
    deadlines = deadlines or dict.fromkeys(ids, clock.now + 10_000)
    seed = TurnSeed(tuple(ids), max(deadlines.values()), deadlines)
    assert state.save_iteration(sid, 1, tool_use(*ids), RETENTION_MS, seed=seed).fresh
    return deadlines


def test_the_fake_owes_a_think_as_long_as_the_store_does():
    assert fake_state.OWED_THINK_GRACE_MS == dynamo_table.OWED_THINK_GRACE_MS


# --- sessions and the inbox ------------------------------------------------------------------------------
def test_a_first_message_starts_turn_one_and_its_think_is_owed_until_it_runs(state, clock, sid):
    t0 = clock.now
    intake = state.take_message(sid, user("hello"), RETENTION_MS, owner="alice", likely_new=True)
    assert dataclasses.replace(intake, snapshot="") == Intake("started", 1, 1)
    session = state.get_session(sid)
    # A snapshot (the store's own, opaque; the fake makes none) reads back as the session does.
    assert intake.snapshot == "" or state.get_session(sid, intake.snapshot) == session
    assert (session.status, session.turn, session.user_messages, session.owner) == ("busy", 1, 1, "alice")
    assert session.messages == [user("hello")] and (session.created_at, session.updated_at) == (t0, t0)
    assert state.owed_think(sid) == 1
    assert overdue(state, sid, t0 + GRACE_MS - 1) == []
    assert overdue(state, sid, t0 + GRACE_MS) == [Overdue(sid, 1, "think", t0 + GRACE_MS)]
    # The think's write clears the mark: nothing is owed any more.
    state.save_iteration(sid, 1, final("hi"), RETENTION_MS, ends_turn=True)
    assert state.owed_think(sid) is None and overdue(state, sid, t0 + GRACE_MS) == []


def test_a_busy_session_queues_messages_in_order_and_refuses_one_past_its_limit(state, sid):
    state.take_message(sid, user("first"), RETENTION_MS)
    with pytest.raises(SessionBusyError):
        state.take_message(sid, user("no queue"), RETENTION_MS)
    assert state.take_message(sid, user("second"), RETENTION_MS, queue_limit=2) == Intake("queued", 0, 2, 1)
    assert state.take_message(sid, user("third"), RETENTION_MS, queue_limit=2, key="k3") == Intake("queued", 0, 3, 2)
    with pytest.raises(InboxFullError) as full:
        state.take_message(sid, user("fourth"), RETENTION_MS, queue_limit=2)
    assert full.value.waiting == 2
    # A repeat of a queued message is answered with its place, even with the inbox full.
    assert state.take_message(sid, user("third"), RETENTION_MS, queue_limit=2, key="k3") == Intake(
        "queued", 0, 3, 2, replayed=True
    )
    session = state.get_session(sid)
    assert [q.message for q in session.queued] == [user("second"), user("third")]
    assert [q.seq for q in session.queued] == [1, 2] and (session.inbox_accepted, session.inbox_consumed) == (2, 0)


def test_a_repeat_of_a_named_message_is_answered_as_the_first_stands_and_stores_nothing(state, sid):
    assert state.take_message(sid, user("hello"), RETENTION_MS, key="m1", message_id="id-1") == Intake("started", 1, 1)
    assert state.take_message(sid, user("hello"), RETENTION_MS, key="m1", queue_limit=5) == Intake(
        "started", 1, 1, replayed=True
    )
    session = state.get_session(sid)
    assert session.messages == [user("hello")] and session.queued == ()
    assert session.input == QueuedMessage("m1", 0, user("hello"), turn=1, message_id="id-1")


def test_another_peers_session_does_not_exist_for_the_caller(state, sid):
    state.take_message(sid, user("mine"), RETENTION_MS, owner="alice")
    state.save_iteration(sid, 1, final("ok"), RETENTION_MS, ends_turn=True)
    with pytest.raises(SessionNotFoundError):
        state.take_message(sid, user("theirs"), RETENTION_MS, owner="mallory")
    with pytest.raises(SessionNotFoundError):
        state.cancel_session(sid, "mallory")
    with pytest.raises(SessionNotFoundError):
        state.take_message(f"{sid}-none", user("continue"), RETENTION_MS, must_exist=True)
    assert state.take_message(sid, user("again"), RETENTION_MS, owner="alice") == Intake("started", 2, 2)


def test_a_message_that_continues_a_task_is_refused_when_no_such_task_works(state, sid):
    with pytest.raises(TaskNotOpenError):
        state.take_message(sid, user("go on"), RETENTION_MS, continues_task="k1")
    assert state.get_session(sid) is None  # nothing was written


# --- a think's reply ---------------------------------------------------------------------------------------
def test_a_final_answer_is_stored_once_and_ends_the_turn(state, clock, sid):
    state.take_message(sid, user("hello"), RETENTION_MS)
    clock.advance(500)
    first = state.save_iteration(sid, 1, final("hi"), RETENTION_MS, ends_turn=True)
    assert first.fresh and first.next_input is None
    again = state.save_iteration(sid, 1, final("another"), RETENTION_MS, ends_turn=True)
    assert not again.fresh and again.reply == final("hi")  # the first stands
    session = state.get_session(sid)
    assert (session.status, session.turn, session.updated_at) == ("idle", 1, clock.now)
    assert session.messages == [user("hello"), final("hi")["message"]]
    assert state.get_iteration(sid, 1).reply == final("hi")
    with pytest.raises(LookupError):  # a think of a turn that moved on stores nothing
        state.save_iteration(sid, 2, final("stale"), RETENTION_MS, ends_turn=True)


def test_an_answer_starts_the_first_queued_message_as_the_next_turn(state, sid):
    state.take_message(sid, user("first"), RETENTION_MS)
    state.take_message(sid, user("second"), RETENTION_MS, queue_limit=5, key="q2")
    state.take_message(sid, user("third"), RETENTION_MS, queue_limit=5, key="q3")
    ended = state.save_iteration(sid, 1, final("one"), RETENTION_MS, ends_turn=True, session=state.get_session(sid))
    assert ended.next_input == QueuedMessage("q2", 1, user("second"))
    session = state.get_session(sid)
    assert (session.status, session.turn, session.user_messages) == ("busy", 2, 2)
    assert session.input == QueuedMessage("q2", 1, user("second"), turn=2)
    assert [q.key for q in session.queued] == ["q3"] and session.inbox_consumed == 1
    assert session.messages == [user("first"), final("one")["message"], user("second")]
    assert state.owed_think(sid) == 2
    # The next turn's end takes the next message; the one after goes idle.
    assert state.finish_session_turn(sid, 2).next_input.key == "q3"
    end = state.finish_session_turn(sid, 3)
    assert end.ended and end.next_input is None and state.get_session(sid).status == "idle"
    assert not state.finish_session_turn(sid, 3).ended  # already done


def test_a_message_appended_to_a_think_takes_its_place_once(state, sid):
    state.take_message(sid, user("hello"), RETENTION_MS)
    assert state.append_message(sid, final("part")["message"], 1, RETENTION_MS, slot=MessageSlot.CLOSING_TEXT)
    assert not state.append_message(sid, final("again")["message"], 1, RETENTION_MS, slot=MessageSlot.CLOSING_TEXT)
    with pytest.raises(LookupError):
        state.append_message(sid, final("stale")["message"], 2, RETENTION_MS)
    assert state.get_session(sid).messages == [user("hello"), final("part")["message"]]
    assert state.owed_think(sid) is None


def test_a_turn_ends_with_its_closing_messages_in_one_write_and_its_owed_mark_stays_until_then(state, sid):
    state.take_message(sid, user("hello"), RETENTION_MS)
    closing = [(int(MessageSlot.CLOSING_TEXT), final("closed")["message"])]
    assert state.owed_think(sid) == 1  # nothing before the write clears it
    end = state.finish_session_turn(sid, 1, RETENTION_MS, messages=closing)
    assert end.ended and end.next_input is None
    session = state.get_session(sid)
    assert session.status == "idle" and session.messages == [user("hello"), final("closed")["message"]]
    assert state.owed_think(sid) is None
    assert not state.finish_session_turn(sid, 1, RETENTION_MS, messages=closing).ended  # once


def test_a_repeat_of_a_new_sessions_named_first_message_is_replayed_busy_or_idle(state, sid):
    # Without an A2A message id, a store keeps it on the session item: its repeat is recognised there.
    assert state.take_message(sid, user("hello"), RETENTION_MS, key="m1") == Intake("started", 1, 1)
    again = Intake("started", 1, 1, replayed=True)
    assert state.take_message(sid, user("hello"), RETENTION_MS, key="m1", queue_limit=5) == again
    assert state.get_session(sid).input == QueuedMessage("m1", 0, user("hello"), turn=1)
    state.save_iteration(sid, 1, final("hi"), RETENTION_MS, ends_turn=True)
    assert state.take_message(sid, user("hello"), RETENTION_MS, key="m1") == again  # idle: still no second turn
    session = state.get_session(sid)
    assert (session.status, session.turn, session.messages) == ("idle", 1, [user("hello"), final("hi")["message"]])


def test_a_repeat_of_a_message_that_started_its_turn_is_answered_on_a_busy_session_without_a_queue(state, sid):
    assert state.take_message(sid, user("hello"), RETENTION_MS, key="m1", message_id="id-1") == Intake("started", 1, 1)
    assert state.take_message(sid, user("hello"), RETENTION_MS, key="m1") == Intake("started", 1, 1, replayed=True)
    with pytest.raises(SessionBusyError):
        state.take_message(sid, user("other"), RETENTION_MS, key="m2")
    assert state.get_session(sid).messages == [user("hello")]


# --- results and completion --------------------------------------------------------------------------------
def test_each_result_counts_once_and_the_last_completes_the_turn_once(state, clock, sid):
    delegated(state, clock, sid, "a", "b")
    done = Completion("callback", 2, TOMBSTONE_MS)
    assert state.record_result(sid, 1, result("a", "first"), RETENTION_MS, done) == (RecordOutcome.ACCEPTED, False)
    assert state.record_result(sid, 1, result("a", "again"), RETENTION_MS, done) == (RecordOutcome.DUPLICATE, False)
    assert state.record_result(sid, 1, result("x"), RETENTION_MS, done) == (RecordOutcome.LATE, False)  # unexpected
    assert state.get_turn(sid, 1).received == 1
    assert state.record_result(sid, 1, result("b"), RETENTION_MS, done) == (RecordOutcome.ACCEPTED, True)
    turn = state.get_turn(sid, 1)
    assert (turn.status, turn.received, turn.completed_by, turn.due_ms) == ("complete", 2, "callback", 0)
    assert not state.complete_turn(sid, 1, "callback", TOMBSTONE_MS)  # once
    assert state.record_result(sid, 1, result("b"), RETENTION_MS, done) == (RecordOutcome.DUPLICATE, False)
    assert [r.text for r in state.get_results(sid, 1)] == ["first", "done"]  # the first stands
    session = state.get_session(sid)
    assert (session.status, session.turn, state.owed_think(sid)) == ("busy", 2, 2)
    assert session.messages[-1] == {
        "role": "user",
        "content": [result("a", "first").as_block(), result("b").as_block()],
    }


def test_a_wrong_guess_of_the_turns_size_is_corrected_from_the_turn(state, clock, sid):
    delegated(state, clock, sid, "a", "b", "c")
    # A caller that believes the turn has 2 calls: the turn's own count decides which result is the last.
    guess = Completion("callback", 2, TOMBSTONE_MS)
    assert state.record_result(sid, 1, result("a"), RETENTION_MS, guess) == (RecordOutcome.ACCEPTED, False)
    assert state.record_result(sid, 1, result("b"), RETENTION_MS, guess) == (RecordOutcome.ACCEPTED, False)
    assert state.record_result(sid, 1, result("c"), RETENTION_MS, guess) == (RecordOutcome.ACCEPTED, True)


def test_a_result_put_the_sdk_sent_again_is_this_call_s_own_not_a_duplicate(table, clock, sid):
    """The store only: a result's PutItem applied, its answer lost, and botocore sending it again (a read
    timeout on a busy network) finds the item its own first attempt stored: accepted, not a duplicate."""
    name, client = table
    store = StateStore(name, client=client, clock=clock.now_ms)
    delegated(store, clock, sid, "a", "b")
    sent_twice: list[str] = []

    def first_attempt_applied(params, **_):
        # The first attempt reaches the table; the SDK's retry (this call) then meets its condition.
        if params["Item"]["sk"]["S"].startswith("RESULT#") and not sent_twice:
            sent_twice.append(params["Item"]["tool_use_id"]["S"])
            boto3.client("dynamodb", region_name="us-east-1").put_item(**params)

    client.meta.events.register("provide-client-params.dynamodb.PutItem", first_attempt_applied)
    try:
        done = Completion("callback", 2, TOMBSTONE_MS)
        assert store.record_result(sid, 1, result("a"), RETENTION_MS, done) == (RecordOutcome.ACCEPTED, False)
    finally:
        client.meta.events.unregister("provide-client-params.dynamodb.PutItem", first_attempt_applied)
    assert sent_twice == ["a"]
    # Another call's same result is still a duplicate, and the turn counts each once.
    assert store.record_result(sid, 1, result("a"), RETENTION_MS, done) == (RecordOutcome.DUPLICATE, False)
    assert store.record_result(sid, 1, result("b"), RETENTION_MS, done) == (RecordOutcome.ACCEPTED, True)


def test_results_recorded_without_the_turns_size_complete_it_through_one_check(state, clock, sid):
    delegated(state, clock, sid, "a", "b")
    assert state.record_result(sid, 1, result("a"), RETENTION_MS) == (RecordOutcome.ACCEPTED, False)
    assert not state.complete_turn(sid, 1, "callback", TOMBSTONE_MS)  # one still missing
    assert state.record_result(sid, 1, result("b"), RETENTION_MS) == (RecordOutcome.ACCEPTED, False)
    assert state.complete_turn(sid, 1, "callback", TOMBSTONE_MS)
    assert not state.complete_turn(sid, 1, "sweep", TOMBSTONE_MS)
    assert state.get_turn(sid, 1).completed_by == "callback" and state.get_session(sid).turn == 2


def test_each_call_times_out_at_its_own_deadline_and_a_late_answer_is_refused(state, clock, sid):
    t0 = clock.now
    delegated(state, clock, sid, "quick", "slow", deadlines={"quick": t0 + 1_000, "slow": t0 + 5_000})
    assert overdue(state, sid, t0 + 1_000) == [Overdue(sid, 1, "deadline", t0 + 1_000)]
    clock.advance(1_000)
    first = state.complete_with_errors(sid, 1, timeout, "timer", TOMBSTONE_MS, RETENTION_MS, due_by_ms=clock.now)
    assert first == Expiry(False, ("quick",), t0 + 5_000)
    assert overdue(state, sid, t0 + 1_000) == [] and overdue(state, sid, t0 + 5_000)[0].due_ms == t0 + 5_000
    assert state.record_result(sid, 1, result("quick"), RETENTION_MS) == (RecordOutcome.LATE, False)
    again = state.complete_with_errors(sid, 1, timeout, "sweep", TOMBSTONE_MS, RETENTION_MS, due_by_ms=clock.now)
    assert again == Expiry(False, (), t0 + 5_000)  # nothing more is due yet
    done = Completion("callback", 2, TOMBSTONE_MS)
    assert state.record_result(sid, 1, result("slow"), RETENTION_MS, done) == (RecordOutcome.ACCEPTED, True)
    assert [(r.tool_use_id, r.source) for r in state.get_results(sid, 1)] == [
        ("quick", ResultSource.TIMEOUT),
        ("slow", ResultSource.CALLBACK),
    ]
    assert state.complete_with_errors(sid, 1, timeout, "timer", TOMBSTONE_MS, RETENTION_MS, clock.now) == Expiry(False)


def test_an_expiry_completes_a_turn_whose_results_are_all_in_but_not_counted_complete(state, clock, sid):
    delegated(state, clock, sid, "a")
    state.record_result(sid, 1, result("a"), RETENTION_MS)  # ...and the function died before completing
    clock.advance(20_000)
    assert state.complete_with_errors(sid, 1, timeout, "sweep", TOMBSTONE_MS, RETENTION_MS, clock.now) == Expiry(
        True, (), None
    )
    assert state.get_turn(sid, 1).status == "complete" and state.get_session(sid).turn == 2


def died_after_the_put(state, sid, turn, stored):
    """A callback that died between its two writes: its result stored, not counted toward the turn."""
    if isinstance(state, MemoryState):
        state._part(sid).results[(turn, stored.tool_use_id)] = stored
        return
    state.client.put_item(**state._result_put(sid, turn, stored, state.now_ms(), RETENTION_MS))


def test_a_result_stored_but_not_counted_is_counted_once_by_the_peers_retry(state, clock, sid):
    delegated(state, clock, sid, "a", "b")
    done = Completion("callback", 2, TOMBSTONE_MS)
    died_after_the_put(state, sid, 1, result("a", "first"))
    assert state.record_result(sid, 1, result("a", "retry"), RETENTION_MS, done) == (RecordOutcome.DUPLICATE, False)
    assert state.get_turn(sid, 1).received == 1
    assert state.record_result(sid, 1, result("a", "again"), RETENTION_MS, done) == (RecordOutcome.DUPLICATE, False)
    assert state.get_turn(sid, 1).received == 1  # never twice
    assert state.record_result(sid, 1, result("b"), RETENTION_MS, done) == (RecordOutcome.ACCEPTED, True)
    assert [r.text for r in state.get_results(sid, 1)] == ["first", "done"] and state.owed_think(sid) == 2


def test_a_last_result_stored_but_not_counted_completes_the_turn_through_its_retry(state, clock, sid):
    delegated(state, clock, sid, "a")
    died_after_the_put(state, sid, 1, result("a"))
    done = Completion("callback", 1, TOMBSTONE_MS)
    assert state.record_result(sid, 1, result("a"), RETENTION_MS, done) == (RecordOutcome.DUPLICATE, True)
    assert state.get_session(sid).turn == 2 and state.owed_think(sid) == 2


def test_the_timer_completes_a_turn_from_a_result_stored_but_not_counted(state, clock, sid):
    t0 = clock.now
    delegated(state, clock, sid, "a", "b", deadlines={"a": t0 + 1_000, "b": t0 + 5_000})
    died_after_the_put(state, sid, 1, result("b", "in time"))  # its peer never retries
    clock.advance(1_000)
    assert state.complete_with_errors(sid, 1, timeout, "timer", TOMBSTONE_MS, RETENTION_MS, clock.now) == Expiry(
        True, ("a",), None
    )
    assert [(r.tool_use_id, r.text) for r in state.get_results(sid, 1)] == [("a", timeout("a").text), ("b", "in time")]
    assert state.get_session(sid).turn == 2 and overdue(state, sid, clock.now + GRACE_MS)[0].kind == "think"


def legacy_turn(table, clock, sid, *ids, received=(), deadline_ms):
    """A session stored before the aggregation moved onto META (the store's older layout, no fake of it):
    its waiting turn 1 as a TURN item."""
    name, client = table
    store = StateStore(name, client=client, clock=clock.now_ms)
    store.take_message(sid, user("delegate"), RETENTION_MS)
    store.save_iteration(sid, 1, tool_use(*ids), RETENTION_MS)  # the think's write, without the aggregation
    for i in received:  # each stored with its count, in one transaction, as it was then
        store.client.put_item(**store._result_put(sid, 1, result(i, "then"), clock.now, RETENTION_MS))
    item = {"pk": f"S#{sid}", "sk": "TURN#000001", "expected": set(ids), "total_tools": len(ids)}
    item.update(received=len(received), status="waiting", deadline_ms=deadline_ms, created_at=clock.now)
    item.update(due_shard=fake_state_shard(sid), due_at=deadline_ms, ttl=clock.now // 1000 + 86_400)
    client.put_item(TableName=name, Item={k: SERIALIZER.serialize(v) for k, v in item.items()})
    return store


def fake_state_shard(sid):
    return f"open#{fake_state.deadline_shard(sid)}"


def test_a_waiting_turn_stored_as_a_turn_item_is_taken_over_by_its_callbacks(table, clock, sid):
    deadline = clock.now + 10_000
    store = legacy_turn(table, clock, sid, "a", "b", deadline_ms=deadline)
    assert overdue(store, sid, deadline) == [Overdue(sid, 1, "deadline", deadline)]
    assert store.get_session(sid).aggregation.status == "waiting"
    done = Completion("callback", 2, TOMBSTONE_MS)
    assert store.record_result(sid, 1, result("a"), RETENTION_MS, done) == (RecordOutcome.ACCEPTED, False)
    assert store.get_turn(sid, 1).received == 1
    assert overdue(store, sid, deadline) == [Overdue(sid, 1, "deadline", deadline)]  # listed once: META now
    assert store.record_result(sid, 1, result("b"), RETENTION_MS, done) == (RecordOutcome.ACCEPTED, True)
    assert store.get_session(sid).turn == 2 and store.owed_think(sid) == 2


def test_a_waiting_turn_stored_as_a_turn_item_expires_at_its_deadline(table, clock, sid):
    deadline = clock.now + 1_000
    store = legacy_turn(table, clock, sid, "a", "b", received=("a",), deadline_ms=deadline)
    clock.advance(1_000)
    assert store.complete_with_errors(sid, 1, timeout, "timer", TOMBSTONE_MS, RETENTION_MS, clock.now) == Expiry(
        True, ("b",), None
    )
    assert [(r.tool_use_id, r.source) for r in store.get_results(sid, 1)] == [
        ("a", ResultSource.CALLBACK),
        ("b", ResultSource.TIMEOUT),
    ]
    assert store.get_session(sid).turn == 2 and overdue(store, sid, deadline) == []


@pytest.mark.parametrize("size", [10, 4_000])
def test_a_new_sessions_small_first_message_rides_on_its_session_item(table, clock, sid, size):
    name, client = table
    store = StateStore(name, client=client, clock=clock.now_ms)
    store.take_message(sid, user("x" * size), RETENTION_MS)
    keys = [
        i["sk"]["S"]
        for i in client.query(
            TableName=name, KeyConditionExpression="pk = :pk", ExpressionAttributeValues={":pk": {"S": f"S#{sid}"}}
        )["Items"]
    ]
    assert keys == (["META"] if size < 400 else ["META", "MSG#000001#0"])  # one item fewer when small
    assert store.get_session(sid).messages == [user("x" * size)]
    store.save_iteration(sid, 1, final("done"), RETENTION_MS, ends_turn=True)
    store.take_message(sid, user("next"), RETENTION_MS)  # a later message keeps its own item
    assert store.get_session(sid).messages == [user("x" * size), final("done")["message"], user("next")]


def test_a_completed_turns_record_lives_for_its_tombstone_and_a_result_stays_late(state, clock, sid):
    delegated(state, clock, sid, "a")
    state.record_result(sid, 1, result("a"), RETENTION_MS, Completion("callback", 1, TOMBSTONE_MS))
    clock.advance(TOMBSTONE_MS + 1_000)
    assert state.get_turn(sid, 1) is None and state.get_session(sid).aggregation is None
    assert state.record_result(sid, 1, result("b"), RETENTION_MS) == (RecordOutcome.LATE, False)


def test_a_turn_is_seeded_once(state, clock, sid):
    state.take_message(sid, user("go"), RETENTION_MS)
    assert state.seed_turn(sid, 1, ["a", "b"], clock.now + 10, RETENTION_MS)
    assert not state.seed_turn(sid, 1, ["a"], clock.now + 99, RETENTION_MS)
    turn = state.get_turn(sid, 1)
    assert (turn.expected, turn.total, turn.deadline_ms, turn.status) == (frozenset("ab"), 2, clock.now + 10, "waiting")
    with pytest.raises(ValueError):
        state.seed_turn(sid, 2, ["a", "a"], clock.now, RETENTION_MS)


# --- reply routes (B side) -------------------------------------------------------------------------------
def test_a_delegations_route_is_answered_once_and_its_replay_changes_nothing(state, clock, sid):
    route = ("caller", "token-1", ROUTE_TTL_MS)
    assert state.take_message(sid, user("task"), RETENTION_MS, route=route, key="r1") == Intake("started", 1, 1)
    assert state.take_message(sid, user("task"), RETENTION_MS, route=route, key="r1") == Intake(
        "started", 1, 1, replayed=True
    )
    live = state.get_session(sid).route
    assert (live.callback_service, live.bearer_token, live.status, live.from_turn) == ("caller", "token-1", "active", 1)
    assert live.expires_at == (clock.now + ROUTE_TTL_MS) // 1000
    state.save_iteration(sid, 1, final("answer"), RETENTION_MS, ends_turn=True, retires_route=True)
    retired = state.get_session(sid).route
    assert (retired.status, retired.retired_turn) == ("retired", 1)
    assert not state.retire_route(sid, "token-1")  # once
    # The same caller's next delegation to the idle session puts a new route.
    state.take_message(sid, user("next"), RETENTION_MS, route=("caller", "token-2", ROUTE_TTL_MS))
    assert state.get_session(sid).route.bearer_token == "token-2"
    assert not state.retire_route(sid, "token-1") and state.retire_route(sid, "token-2")


def test_a_live_route_is_never_overwritten_by_a_message_that_starts_a_turn(state, sid):
    state.take_message(sid, user("task"), RETENTION_MS, route=("caller", "token-1", ROUTE_TTL_MS))
    state.finish_session_turn(sid, 1)  # idle, its route unanswered
    with pytest.raises(SessionBusyError):
        state.take_message(sid, user("other"), RETENTION_MS, route=("caller", "token-2", ROUTE_TTL_MS))


def test_a_queued_delegation_takes_the_route_over_in_the_write_that_answers_the_one_before(state, clock, sid):
    state.take_message(sid, user("first"), RETENTION_MS, route=("caller", "token-1", ROUTE_TTL_MS))
    state.take_message(sid, user("second"), RETENTION_MS, route=("caller", "token-2", ROUTE_TTL_MS), queue_limit=3)
    ended = state.save_iteration(
        sid, 1, final("one"), RETENTION_MS, ends_turn=True, retires_route=True, session=state.get_session(sid)
    )
    assert ended.next_input.route == ("caller", "token-2", (clock.now + ROUTE_TTL_MS) // 1000)
    route = state.get_session(sid).route
    assert (route.bearer_token, route.status, route.from_turn) == ("token-2", "active", 2)
    assert (route.answered.bearer_token, route.answered.status, route.answered.retired_turn) == (
        "token-1",
        "retired",
        1,
    )


# --- cancellation ------------------------------------------------------------------------------------------
def test_a_busy_session_is_canceled_then_closed_once(state, clock, sid):
    state.take_message(sid, user("task"), RETENTION_MS, owner="alice")
    assert state.cancel_session(sid, "alice") == ("canceled", 1)
    assert state.cancel_session(sid, "alice") == ("canceled", 1)  # not closed yet
    assert state.owed_think(sid) == 1  # the think that closes it, should the canceller die
    with pytest.raises(LookupError):  # a think under way can no longer store its reply
        state.save_iteration(sid, 1, final("late"), RETENTION_MS, ends_turn=True)
    closing = [(int(MessageSlot.CLOSING_TEXT), final("canceled")["message"])]
    assert state.close_canceled_session(sid, 1, closing, RETENTION_MS).ended
    assert not state.close_canceled_session(sid, 1, closing, RETENTION_MS).ended
    session = state.get_session(sid)
    assert session.status == "idle" and session.messages[-1] == final("canceled")["message"]
    assert state.owed_think(sid) is None
    assert state.cancel_session(sid, "alice") == ("idle", 1)


def test_closing_a_canceled_session_starts_the_turn_of_a_message_waiting_in_its_inbox(state, sid):
    state.take_message(sid, user("task"), RETENTION_MS, owner="alice")
    state.take_message(sid, user("follow-up"), RETENTION_MS, owner="alice", key="f" * 32, queue_limit=3)
    assert state.cancel_session(sid, "alice") == ("canceled", 1)
    closing = [(int(MessageSlot.CLOSING_TEXT), final("canceled")["message"])]
    end = state.close_canceled_session(sid, 1, closing, RETENTION_MS, state.get_session(sid))
    assert end.ended and end.next_input is not None and end.next_input.key == "f" * 32
    session = state.get_session(sid)
    assert (session.status, session.turn, session.queued) == ("busy", 2, ())
    assert session.inbox_accepted == session.inbox_consumed == 1
    assert state.owed_think(sid) == 2  # the started turn's think is owed by the same write
    assert session.messages[-2:] == [final("canceled")["message"], user("follow-up")]


def test_closing_a_canceled_session_retires_its_reply_route(state, sid):
    state.take_message(sid, user("task"), RETENTION_MS, route=("caller", "token-1", ROUTE_TTL_MS), owner="alice")
    state.cancel_session(sid, "alice")
    closing = [(int(MessageSlot.CLOSING_TEXT), final("canceled")["message"])]
    assert state.close_canceled_session(sid, 1, closing, RETENTION_MS, state.get_session(sid)).ended
    assert state.get_session(sid).route.status == "retired"
    # Its owner continues the session with a new route: taken, not refused as busy.
    intake = state.take_message(sid, user("next"), RETENTION_MS, route=("caller", "token-2", ROUTE_TTL_MS))
    assert (intake.status, intake.turn) == ("started", 2)


def test_a_session_past_its_retention_is_taken_over_by_a_new_one_until_ttl_deletes_it(state, clock, sid):
    state.take_message(sid, user("old task"), RETENTION_MS, owner="alice", key="k-old")
    state.take_message(sid, user("old follow-up"), RETENTION_MS, owner="alice", key="k-q", queue_limit=3)
    clock.advance(RETENTION_MS + 1_000)  # expired, still stored: TTL's deletion can take days
    assert state.get_session(sid) is None
    intake = state.take_message(sid, user("new task"), RETENTION_MS, owner="bob", key="k-old")
    assert (intake.status, intake.replayed) == ("started", False)  # the old message's id is no repeat now
    session = state.get_session(sid)
    assert (session.status, session.owner, session.queued) == ("busy", "bob", ())
    assert session.messages == [user("new task")] and session.user_messages == 1
    assert state.owed_think(sid) == session.turn  # its think is owed like any new session's
    with pytest.raises(SessionBusyError):  # and it is busy like any other: one turn at a time
        state.take_message(sid, user("more"), RETENTION_MS, owner="bob")


def asks(question):
    blocks = [{"toolUse": {"toolUseId": "q-1", "name": "ask_user", "input": {"question": question}}}]
    return {"stop_reason": "tool_use", "message": {"role": "assistant", "content": blocks}}


def test_a_question_is_closed_once_and_only_while_its_session_waits_for_the_answer(state, clock, sid):
    state.take_message(sid, user("task"), RETENTION_MS, owner="alice")
    state.save_iteration(sid, 1, asks("which?"), RETENTION_MS, ends_turn=True)  # idle, waiting for the answer
    canceled = {"role": "user", "content": [{"toolResult": {"toolUseId": "q-1", "content": [{"text": "x"}]}}]}
    closing = [
        (int(MessageSlot.CLOSING_RESULTS), canceled),
        (int(MessageSlot.CLOSING_TEXT), final("closed")["message"]),
    ]
    waiting = state.get_session(sid)
    assert not state.close_question(waiting, closing, RETENTION_MS, "bob")  # another's session: nothing
    later = dataclasses.replace(waiting, turn=2)
    assert not state.close_question(later, closing, RETENTION_MS, "alice")  # not the question's turn
    clock.advance(5)
    assert state.close_question(waiting, closing, RETENTION_MS, "alice")
    assert not state.close_question(waiting, closing, RETENTION_MS, "alice")  # closed already
    session = state.get_session(sid)
    assert session.status == "idle" and session.messages[-2:] == [canceled, final("closed")["message"]]
    assert session.updated_at == clock.now and state.owed_think(sid) is None
    # The next message starts a turn of its own.
    assert state.take_message(sid, user("next"), RETENTION_MS, owner="alice").turn == 2
    assert state.get_session(sid).messages[-1] == user("next")


def test_a_question_answered_first_is_not_closed(state, sid):
    state.take_message(sid, user("task"), RETENTION_MS, owner="alice")
    state.save_iteration(sid, 1, asks("which?"), RETENTION_MS, ends_turn=True)
    waiting = state.get_session(sid)
    state.take_message(sid, user("the answer"), RETENTION_MS, owner="alice")  # busy at turn 2
    closing = [(int(MessageSlot.CLOSING_TEXT), final("closed")["message"])]
    assert not state.close_question(waiting, closing, RETENTION_MS, "alice")
    assert state.get_session(sid).messages[-1] == user("the answer")


def test_a_canceled_session_takes_no_message_in(state, sid):
    state.take_message(sid, user("task"), RETENTION_MS)
    state.cancel_session(sid, None)
    with pytest.raises(SessionBusyError):
        state.take_message(sid, user("more"), RETENTION_MS, queue_limit=5)


# --- the deadline index and owed thinks --------------------------------------------------------------------
def test_a_stale_owed_mark_is_cleared_and_a_current_one_stays(state, clock, sid):
    delegated(state, clock, sid, "a")
    state.record_result(sid, 1, result("a"), RETENTION_MS, Completion("callback", 1, TOMBSTONE_MS))
    assert state.owed_think(sid) == 2  # the completion owes the next think
    state.clear_owed_think(sid, 1)
    assert state.owed_think(sid) == 2
    state.clear_owed_think(sid, 2)
    assert state.owed_think(sid) is None and overdue(state, sid, clock.now + GRACE_MS) == []


def test_an_owed_mark_is_deferred_only_while_it_is_that_turns_and_due(state, clock, sid):
    t0 = clock.now
    state.take_message(sid, user("hello"), RETENTION_MS)
    # A throttled think's retry waits 20 s: the mark is due a grace after that, not before.
    assert state.defer_owed_think(sid, 1, 20_000)
    assert overdue(state, sid, t0 + 20_000 + GRACE_MS - 1) == []
    assert overdue(state, sid, t0 + 20_000 + GRACE_MS) == [Overdue(sid, 1, "think", t0 + 20_000 + GRACE_MS)]
    # A re-send claims a mark that is due: the first moves it a grace on, a second finds it no longer due.
    clock.advance(20_000 + GRACE_MS)
    assert not state.defer_owed_think(sid, 1, due_by_ms=clock.now - 1)
    assert state.defer_owed_think(sid, 1, due_by_ms=clock.now)
    assert not state.defer_owed_think(sid, 1, due_by_ms=clock.now)
    assert overdue(state, sid, clock.now + GRACE_MS - 1) == [] and state.owed_think(sid) == 1
    # Another turn's mark, or none, is never moved (nor put back).
    assert not state.defer_owed_think(sid, 2, 5_000)
    state.save_iteration(sid, 1, final("hi"), RETENTION_MS, ends_turn=True)
    assert not state.defer_owed_think(sid, 1)
    assert state.owed_think(sid) is None and overdue(state, sid, clock.now + 10 * GRACE_MS) == []
    assert not state.defer_owed_think(f"{sid}-none", 1)


# --- think claims (issue 36, defect 8) ------------------------------------------------------------------------
def test_a_think_is_claimed_by_one_run_until_its_lease_ends(state, sid, clock):
    assert state.claim_think(sid, 1, "run-a", lease_ms=10_000)
    assert state.claim_think(sid, 1, "run-a", lease_ms=10_000)  # its own claim (a run re-reading the store)
    assert not state.claim_think(sid, 1, "run-b", lease_ms=10_000)  # a second run of that think stops
    assert state.claim_think(sid, 2, "run-c", lease_ms=10_000)  # the next turn's think is its own
    assert not state.claim_think(sid, 1, "run-b")  # and a run of an earlier turn's is stale
    clock.advance(10_001)  # the holder's invocation is over: it died, or it is done
    assert state.claim_think(sid, 2, "run-d")


def test_a_lease_is_never_longer_than_the_grace_a_resend_waits(state, sid, clock):
    assert state.claim_think(sid, 1, "run-a", lease_ms=10 * GRACE_MS)
    clock.advance(GRACE_MS + 1)
    assert state.claim_think(sid, 1, "run-b")


def test_a_claim_given_back_is_taken_at_once_and_only_its_holder_gives_it_back(state, sid):
    assert state.claim_think(sid, 1, "run-a", lease_ms=10_000)
    state.release_think(sid, 1, "run-b")  # not its holder: nothing changes
    assert not state.claim_think(sid, 1, "run-b", lease_ms=10_000)
    state.release_think(sid, 1, "run-a")
    assert state.claim_think(sid, 1, "run-b", lease_ms=10_000)
    state.release_think(f"{sid}-none", 1, "run-a")  # nothing to give back: no error


# --- dispatch claims ---------------------------------------------------------------------------------------
def test_a_dispatch_is_claimed_until_it_is_settled(state, sid):
    assert state.claim_dispatch(sid, 1, "a", RETENTION_MS)
    assert state.claim_dispatch(sid, 1, "a", RETENTION_MS)  # an attempt that did not finish may go again
    state.finish_dispatch(sid, 1, "a", "sent")
    assert not state.claim_dispatch(sid, 1, "a", RETENTION_MS)
    assert state.claim_dispatch(sid, 1, "b", RETENTION_MS)


def test_a_claim_under_another_status_is_final_at_once(state, sid):
    # A deferred MCP call's claim (flightdeck.domain.mcp_tools): the call is made by whoever took it, once.
    assert state.claim_dispatch(sid, 1, "c", RETENTION_MS, status="calling")
    assert not state.claim_dispatch(sid, 1, "c", RETENTION_MS, status="calling")
    assert not state.claim_dispatch(sid, 1, "c", RETENTION_MS)
    assert state.claim_dispatch(sid, 2, "c", RETENTION_MS, status="calling")  # another turn's call is its own


def test_what_is_stored_reads_back_as_it_was_given(state, sid):
    text = "naïve 🚀 " + json.dumps({"nested": [1, 2]})
    state.take_message(sid, user(text), RETENTION_MS, parent={"traceparent": "00-abc"})
    session = state.get_session(sid)
    assert session.messages == [user(text)] and session.parent == {"traceparent": "00-abc"}


# --- the caller's token, checked by the write that takes the message ------------------------------


def _register(state, peer_id: str, token: str) -> None:
    """The peer in the registry as each implementation keeps it (the store: the table's PEER item)."""
    if isinstance(state, MemoryState):
        state.peers[peer_id] = PeerRecord(peer_id, token_sha256(token), ACTIVE, created_at=1)
    else:
        PeerRegistry(state.table, client=state.client).add(peer_id, token, replace=True)


def test_a_proof_the_registry_accepts_is_checked_by_the_write_that_takes_the_message(state, clock, sid):
    token = new_token("alice")
    _register(state, "alice", token)
    proof = proof_of(token, clock.now_ms())
    intake = state.take_message(sid, user("hi"), RETENTION_MS, owner="alice", likely_new=True, key="k1", proof=proof)
    assert intake.status == "started" and intake.caller_verified
    # A repeat is answered from what is stored, not by a write: nothing vouched for the caller.
    again = state.take_message(sid, user("hi"), RETENTION_MS, owner="alice", key="k1", queue_limit=5, proof=proof)
    assert again.replayed and not again.caller_verified


@pytest.mark.parametrize("case", ["unknown", "wrong secret", "revoked"])
def test_a_proof_the_registry_refuses_fails_the_write_and_stores_nothing(state, clock, sid, case):
    token = new_token("bob")
    _register(state, "bob", token)
    presented = new_token("bob") if case == "wrong secret" else token
    if case == "unknown":
        presented = new_token("stranger")
    if case == "revoked":
        if isinstance(state, MemoryState):
            state.peers["bob"] = dataclasses.replace(state.peers["bob"], status="revoked")
        else:
            PeerRegistry(state.table, client=state.client).revoke("bob")
    proof = proof_of(presented, clock.now_ms())
    with pytest.raises(PeerRefusedError) as refused:
        state.take_message(sid, user("hi"), RETENTION_MS, owner=proof.peer_id, likely_new=True, proof=proof)
    assert refused.value.result.status.value == ("revoked" if case == "revoked" else "unknown")
    assert state.get_session(sid) is None


# --- the agent's load (max_concurrent_tasks) ------------------------------------------------------------------
@pytest.fixture(params=["memory", "dynamodb"])
def own_state(request, clock):
    """A state of its own (the agent's load is one counter per table: not shared with other tests)."""
    if request.param == "memory":
        return MemoryState(clock.now_ms)
    _, client = request.getfixturevalue("table")
    return StateStore(create_table(client, f"load-{uuid.uuid4().hex[:8]}"), client=client, clock=clock.now_ms)


def test_a_message_that_would_start_a_turn_past_the_agent_s_limit_is_refused_and_stores_nothing(own_state):
    state = own_state
    for n in (1, 2):
        assert state.take_message(f"s{n}", user(f"task {n}"), RETENTION_MS, max_busy=2).status == "started"
    assert state.busy_count() == 2 and state.get_session("s1").holds_load
    with pytest.raises(AgentBusyError) as refused:
        state.take_message("s3", user("task 3"), RETENTION_MS, max_busy=2, likely_new=True)
    assert refused.value.limit == 2 and state.get_session("s3") is None and state.busy_count() == 2
    # A message for a session already busy does not start a turn: it queues as ever.
    assert state.take_message("s1", user("more"), RETENTION_MS, max_busy=2, queue_limit=3).status == "queued"
    # The turn that ends idle gives its slot back in the same write; one that starts a queued message keeps it.
    assert state.finish_session_turn("s1", 1).next_input is not None
    assert state.busy_count() == 2
    assert state.save_iteration("s2", 1, final("done"), RETENTION_MS, ends_turn=True, session=state.get_session("s2"))
    assert state.busy_count() == 1 and not state.get_session("s2").holds_load
    assert state.take_message("s3", user("task 3"), RETENTION_MS, max_busy=2).status == "started"
    with pytest.raises(AgentBusyError):  # an idle session's next message starts a turn: it takes a slot too
        state.take_message("s2", user("again"), RETENTION_MS, max_busy=2)


def test_a_repeat_of_a_started_message_is_answered_at_the_limit(own_state):
    state = own_state
    state.take_message("s1", user("task"), RETENTION_MS, key="k1", max_busy=1)
    state.finish_session_turn("s1", 1)
    state.take_message("s2", user("other"), RETENTION_MS, max_busy=1)
    # s1 is idle, the agent full: the repeat of s1's first message is answered from what is stored.
    again = state.take_message("s1", user("task"), RETENTION_MS, key="k1", max_busy=1)
    assert (again.status, again.turn, again.replayed) == ("started", 1, True)


def test_a_canceled_session_gives_its_slot_back_when_it_is_closed(own_state):
    state = own_state
    state.take_message("s1", user("task"), RETENTION_MS, max_busy=1)
    assert state.cancel_session("s1", None) == ("canceled", 1)
    assert state.busy_count() == 1  # canceled, not closed: still under way
    closing = [(int(MessageSlot.CLOSING_TEXT), final("canceled")["message"])]
    assert state.close_canceled_session("s1", 1, closing, RETENTION_MS, state.get_session("s1")).ended
    assert state.busy_count() == 0
    assert state.take_message("s2", user("next"), RETENTION_MS, max_busy=1).status == "started"


def test_without_a_limit_nothing_is_counted(own_state):
    state = own_state
    state.take_message("s1", user("task"), RETENTION_MS)
    assert not state.get_session("s1").holds_load
    state.finish_session_turn("s1", 1)
    assert state.busy_count() == 0 and state.recount_load(0) is None  # no counter was ever written


def test_a_session_past_its_retention_taken_over_keeps_the_slot_it_held(own_state, clock):
    state = own_state
    state.take_message("s1", user("stuck"), RETENTION_MS, max_busy=1)
    clock.advance(RETENTION_MS + 1_000)  # busy past its retention (not deleted yet)
    assert state.take_message("s1", user("new"), RETENTION_MS, max_busy=1).status == "started"
    assert state.busy_count() == 1 and state.get_session("s1").holds_load
    state.finish_session_turn("s1", state.get_session("s1").turn)
    assert state.busy_count() == 0


def test_a_slot_leaked_by_a_deleted_busy_session_is_recounted_once_per_interval(own_state, clock):
    state = own_state
    state.take_message("s1", user("stuck"), RETENTION_MS, max_busy=1)
    # TTL deletes the busy session: its slot is never given back by a write.
    if isinstance(state, MemoryState):
        del state._partitions["s1"]
    else:
        state.client.delete_item(TableName=state.table, Key={"pk": {"S": "S#s1"}, "sk": {"S": "META"}})
    with pytest.raises(AgentBusyError):
        state.take_message("s2", user("next"), RETENTION_MS, max_busy=1)
    assert state.recount_load(3_600_000) == 0 and state.busy_count() == 0
    assert state.recount_load(3_600_000) is None  # once per interval
    assert state.take_message("s2", user("next"), RETENTION_MS, max_busy=1).status == "started"
    clock.advance(3_600_000)
    assert state.recount_load(3_600_000) == 1 and state.busy_count() == 1  # a right count stays right
