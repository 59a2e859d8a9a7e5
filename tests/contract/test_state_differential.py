"""The fake and the store side by side: random sequences of state operations (messages, thinks' replies,
results, completions, expiries, cancels, claims, time passing) go to the in-memory fake and to the
DynamoDB StateStore on moto with one clock; every answer (or error) and every read must be the same.

test_state_ports.py says what the transitions are; this says the fake has no others.
"""

from __future__ import annotations

import dataclasses
import uuid

import boto3
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from moto import mock_aws

from flightdeck.adapters.dynamo.store import StateStore
from flightdeck.domain.records import Completion, MessageSlot, ResultSource, Session, ToolResult, TurnSeed
from flightdeck.local.resources import create_table
from tests.conftest import MOTO_CONFIG
from tests.fakes.state import MemoryState
from tests.fakes.world import FakeClock

RETENTION_MS = 86_400_000
TOMBSTONE_MS = 5_000
IDS = ("a", "b", "c")
KEYS = ("k1", "k2", "k3")
SOURCES = (ResultSource.CALLBACK, ResultSource.TIMEOUT, ResultSource.DISPATCH_FAILED)


@pytest.fixture(scope="module")
def table():
    with mock_aws(config=MOTO_CONFIG):
        client = boto3.client("dynamodb", region_name="us-east-1")
        yield create_table(client, "differential"), client


def _user(n):
    return {"role": "user", "content": [{"text": f"message {n}"}]}


def _reply(tools):
    if not tools:
        return {"stop_reason": "end_turn", "message": {"role": "assistant", "content": [{"text": "the answer"}]}}
    blocks = [{"toolUse": {"toolUseId": i, "name": "ask_worker", "input": {"task": i}}} for i in tools]
    return {"stop_reason": "tool_use", "message": {"role": "assistant", "content": blocks}}


def _timeout(tool_use_id):
    return ToolResult(tool_use_id, "error", '{"reason": "timeout"}', ResultSource.TIMEOUT)


# One step: (operation, its arguments). `turn` is an offset from the session's turn (0: the current, -1: a
# stale one), so that most steps act on the turn that matters and some on one that moved on.
session_no = st.integers(0, 1)
turn_offset = st.sampled_from([0, 0, 0, -1, 1])
steps = st.one_of(
    st.tuples(
        st.just("take"),
        session_no,
        st.sampled_from([None, *KEYS]),
        st.sampled_from([None, "t1", "t2"]),
        st.sampled_from([0, 2]),
        st.sampled_from([None, None, "alice", "bob"]),
    ),
    st.tuples(st.just("think"), session_no, turn_offset, st.sampled_from([(), ("a",), ("a", "b"), ("a", "b", "c")])),
    st.tuples(st.just("answer"), session_no, turn_offset, st.booleans()),
    st.tuples(
        st.just("result"),
        session_no,
        turn_offset,
        st.sampled_from(IDS + ("x",)),
        st.sampled_from(SOURCES),
        st.sampled_from([None, 1, 2, 3]),
    ),
    st.tuples(st.just("complete"), session_no, turn_offset),
    st.tuples(st.just("expire"), session_no, turn_offset, st.booleans()),
    st.tuples(st.just("finish"), session_no, turn_offset),
    st.tuples(st.just("cancel"), session_no, st.sampled_from([None, "alice", "bob"])),
    st.tuples(st.just("close"), session_no, turn_offset),
    st.tuples(st.just("append"), session_no, turn_offset, st.sampled_from(list(MessageSlot))),
    st.tuples(st.just("retire"), session_no, st.sampled_from([None, "t1", "t2"])),
    st.tuples(st.just("claim"), session_no, turn_offset, st.sampled_from(IDS), st.booleans()),
    st.tuples(st.just("clear_owed"), session_no, turn_offset),
    st.tuples(st.just("defer_owed"), session_no, turn_offset, st.sampled_from([0, 20_000]), st.booleans()),
    st.tuples(st.just("time"), st.sampled_from([1_000, 4_000, 30_000, 3_600_000])),
)


def _apply(state, clock, sid, step):
    """Run one step on one implementation: its answer, or the kind of error it raised."""
    op, *args = step
    session = state.get_session(sid)
    turn = (session.turn if session else 1) + (args[1] if op not in ("take", "cancel", "retire") else 0)
    try:
        if op == "take":
            _, key, token, queue_limit, owner = args
            route = ("caller", token, 600_000) if token else None
            return state.take_message(
                sid, _user(key), RETENTION_MS, route=route, key=key, queue_limit=queue_limit, owner=owner
            )
        if op == "think":
            tools = args[2]
            seed = TurnSeed(tools, clock.now + 8_000, {t: clock.now + 2_000 * (n + 1) for n, t in enumerate(tools)})
            return state.save_iteration(
                sid, turn, _reply(tools), RETENTION_MS, seed=seed if tools else None, session=session
            )
        if op == "answer":
            return state.save_iteration(
                sid, turn, _reply(()), RETENTION_MS, ends_turn=True, retires_route=args[2], session=session
            )
        if op == "result":
            _, _, tool_use_id, source, total = args
            completion = Completion("test", total, TOMBSTONE_MS) if total else None
            result = ToolResult(tool_use_id, "success", f"{tool_use_id} by {source.value}", source)
            return state.record_result(sid, turn, result, RETENTION_MS, completion)
        if op == "complete":
            return state.complete_turn(sid, turn, "test", TOMBSTONE_MS)
        if op == "expire":
            due_by = clock.now if args[2] else None
            return state.complete_with_errors(sid, turn, _timeout, "test", TOMBSTONE_MS, RETENTION_MS, due_by)
        if op == "finish":
            return state.finish_session_turn(sid, turn, RETENTION_MS)
        if op == "cancel":
            return state.cancel_session(sid, args[1])
        if op == "close":
            closing = [(int(MessageSlot.CLOSING_TEXT), _reply(())["message"])]
            return state.close_canceled_session(sid, turn, closing, RETENTION_MS)
        if op == "append":
            return state.append_message(sid, _reply(())["message"], turn, RETENTION_MS, slot=args[2])
        if op == "retire":
            return state.retire_route(sid, args[1])
        if op == "claim":
            _, _, tool_use_id, settle = args
            claimed = state.claim_dispatch(sid, turn, tool_use_id, RETENTION_MS)
            if settle:
                state.finish_dispatch(sid, turn, tool_use_id, "sent")
            return claimed
        if op == "clear_owed":
            return state.clear_owed_think(sid, turn)
        if op == "defer_owed":
            return state.defer_owed_think(sid, turn, args[2], clock.now if args[3] else None)
    except Exception as exc:  # noqa: BLE001 - the kind of refusal is what is compared
        return type(exc).__name__
    raise AssertionError(f"unknown step {step}")


def _random_keys(session: Session | None) -> Session | None:
    """A queued message without a client key is stored under a random one: that one is not compared."""
    if session is None:
        return None

    def plain(q):
        return q if q is None or q.key in KEYS else dataclasses.replace(q, key="<random>")

    return dataclasses.replace(session, queued=tuple(map(plain, session.queued)), input=plain(session.input))


def _reads(state, clock, sids):
    out = []
    for sid in sids:
        session = state.get_session(sid)
        turns = [state.get_turn(sid, t) for t in range(1, (session.turn if session else 1) + 2)]
        results = [state.get_results(sid, t) for t in range(1, (session.turn if session else 1) + 1)]
        out.append((_random_keys(session), turns, results, state.owed_think(sid)))
    overdue = sorted(
        (o.session_id, o.turn, o.kind, o.due_ms) for o in state.list_overdue(clock.now + 10_000) if o.session_id in sids
    )
    return out, overdue


@settings(max_examples=30, deadline=None, suppress_health_check=list(HealthCheck))
@given(script=st.lists(steps, min_size=1, max_size=14))
# A think that opens a turn whose earliest deadline comes before the owed think's listing: the store keeps the
# session listed where it was (no index write), so neither lists it before then, and both at that deadline after.
@example(script=[("take", 1, None, None, 0, None), ("think", 1, 0, ("a",))])
@example(script=[("take", 0, None, None, 0, None), ("think", 0, 0, ("a", "b")), ("time", 30_000), ("time", 30_000)])
def test_the_fake_answers_every_sequence_as_the_store_does(table, script):
    name, client = table
    clock = FakeClock()
    fake, store = MemoryState(clock.now_ms), StateStore(name, client=client, clock=clock.now_ms)
    sids = [f"d-{uuid.uuid4().hex[:10]}" for _ in range(2)]
    for step in script:
        if step[0] == "time":
            clock.advance(step[1])
            continue
        sid = sids[step[1]]
        expected = _apply(store, clock, sid, step)
        got = _apply(fake, clock, sid, step)
        assert got == expected, step
        assert _reads(fake, clock, sids) == _reads(store, clock, sids), step
