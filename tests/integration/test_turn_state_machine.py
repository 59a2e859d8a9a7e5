"""Random interleavings of callbacks, duplicates, the timer, the sweep, redeliveries and crashes keep the invariants.

Hypothesis drives one turn of N delegations through the real domain code and the
DynamoDB adapter on moto, with a controllable clock. A crash can be armed between any
committed write and its follow-up step (the next think's start after a completion, the
completion check after a recorded result): at the end of every run, once time passes the
liveness bound (deadline + sweep + grace), the session must be idle with its answer.
"""

import json
import uuid

import boto3
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule
from moto import mock_aws

from flightdeck import topology
from flightdeck.adapters.dynamo.store import StateStore
from flightdeck.adapters.dynamo.table import OWED_THINK_GRACE_MS
from flightdeck.adapters.lambda_thinks import LambdaThinks
from flightdeck.adapters.sqs_queues import Queues
from flightdeck.domain.aggregation import expire_turn, record_and_advance
from flightdeck.domain.deadlines import sweep
from flightdeck.domain.ports import Deps, state_ports
from flightdeck.domain.records import RecordOutcome, ResultSource, ToolResult
from flightdeck.domain.turn_loop import run_turn
from flightdeck.local.resources import create_agent_resources
from flightdeck.settings import Settings
from tests.conftest import MOTO_CONFIG
from tests.support.harness import hand_outbound_to_queues
from tests.support.invokes import RECORDER

TIMEOUT_MS = 10_000


class Clock:
    def __init__(self):
        self.now = 1_800_000_000_000

    def __call__(self):
        return self.now


@pytest.fixture(scope="module")
def world():
    with mock_aws(config=MOTO_CONFIG):
        res = create_agent_resources(
            "sm",
            dynamodb=boto3.client("dynamodb", region_name="us-east-1"),
            sqs=boto3.client("sqs", region_name="us-east-1"),
        )
        yield res


class Crash(Exception):
    """The function died right after a committed write."""


class CrashingThinks(LambdaThinks):
    """The real adapter (an asynchronous invoke, on moto), whose next think start can be made to fail
    (the process dies first)."""

    crash_next_send = False
    by = ""  # who is starting thinks now ("sweep" while the sweep runs)

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.starts: list[tuple[str, str, int]] = []  # (by, session, turn) of every think started

    def start(self, session_id, turn, traceparent="", snapshot=""):
        if self.crash_next_send:
            self.crash_next_send = False
            raise Crash("died before starting the next think")
        super().start(session_id, turn, traceparent, snapshot)
        self.starts.append((self.by, session_id, turn))

    def resend(self, session_id, turn, traceparent=""):
        super().resend(session_id, turn, traceparent)
        self.starts.append((self.by, session_id, turn))


class TurnMachine(RuleBasedStateMachine):
    res = None

    @initialize(n=st.integers(min_value=1, max_value=5))
    def start(self, n):
        self.clock = Clock()
        env = {
            "AGENT_NAME": "sm",
            "STATE_TABLE": self.res.table_name,
            "TOOL_CALLBACK_SECRET": "s" * 40,
            "ASYNC_TOOL_TIMEOUT_MS": str(TIMEOUT_MS),
            **self.res.environment(),
            "AGENT_CONFIG": json.dumps({"name": "sm", "delegates": [{"agent": "worker"}]}),
        }
        s = Settings.from_env(env)
        self.store = StateStore(s.state_table, clock=self.clock)
        self.queues = Queues(
            dispatch_url=s.dispatch_queue_url, delivery_url=s.delivery_queue_url, timers_url=s.timers_queue_url
        )
        self.thinks = CrashingThinks(function_name=s.turn_worker_function, retry_queue_url=s.turns_queue_url)
        self.deps = Deps(
            settings=s.for_domain(),
            **state_ports(self.store),
            queues=self.queues,
            thinks=self.thinks,
            peers=None,
            keys=lambda: [],
            model=lambda: __import__("flightdeck.adapters.model_choice", fromlist=["build_model"]).build_model(s.agent),
        )
        self.next_thinks = 0
        self.pending_thinks = 0  # next thinks started (asynchronous invokes), not yet run
        self.next_think_runs = 0
        self.sid = f"sm-{uuid.uuid4()}"
        self.store.start_turn_with_message(
            self.sid, {"role": "user", "content": [{"text": " ".join(f"@worker task {i}" for i in range(n))}]}, 10**9
        )
        assert run_turn(self.deps, self.sid, 1) == "tool_use"
        self.ids = sorted(self.store.get_turn(self.sid, 1).expected)
        self.first_value = {}  # tool_use_id -> the result text that must stay
        self.completions = 0
        self.accepted_after_complete = 0

    def complete(self):
        agg = self.store.get_turn(self.sid, 1)
        return agg is None or agg.status == "complete"  # None: its tombstone expired after completing

    def _completing(self, step):
        """Run a step that may complete the turn (and may crash after its commit); count a completion."""
        was_complete = self.complete()
        try:
            out = step()
        except Crash:
            out = None
        self.completions += (not was_complete) and self.complete()
        return out

    @rule()
    def crash_after_the_next_commit(self):
        self.thinks.crash_next_send = True

    @rule(i=st.integers(min_value=0, max_value=4))
    def crash_between_recording_a_result_and_completing(self, i):
        """The result is written; the function dies before it checks whether the turn is complete."""
        tid = self.ids[i % len(self.ids)]
        outcome, _ = self.store.record_result(
            self.sid, 1, ToolResult(tid, "success", "c", ResultSource.CALLBACK), 10**9
        )
        if outcome is RecordOutcome.ACCEPTED:
            self.first_value.setdefault(tid, "c")

    @rule(i=st.integers(min_value=0, max_value=4), text=st.sampled_from(["a", "b"]), sized=st.booleans())
    def callback(self, i, text, sized):
        """sized: the caller knows the turn's size (a token's claims), so the last result completes
        the turn in the write that records it; else recording and completing are two writes."""
        tid = self.ids[i % len(self.ids)]
        was_complete = self.complete()
        before = self.store.get_results(self.sid, 1)
        adv = self._completing(
            lambda: record_and_advance(
                self.deps,
                self.sid,
                1,
                ToolResult(tid, "success", text, ResultSource.CALLBACK),
                by="callback",
                total=len(self.ids) if sized else None,
            )
        )
        if adv is None:  # crashed after its commit: what was written stays
            if any(
                r.tool_use_id == tid and r.source is ResultSource.CALLBACK for r in self.store.get_results(self.sid, 1)
            ):
                self.first_value.setdefault(tid, text)
            return
        if adv.outcome is RecordOutcome.ACCEPTED:
            assert not was_complete
            self.first_value.setdefault(tid, text)
        else:
            assert self.store.get_results(self.sid, 1) == before  # refused: nothing changed

    @rule(i=st.integers(min_value=0, max_value=4))
    def unexpected_callback(self, i):
        before = self.store.get_results(self.sid, 1)
        adv = self._completing(
            lambda: record_and_advance(
                self.deps, self.sid, 1, ToolResult(f"nope-{i}", "success", "x", ResultSource.CALLBACK), by="callback"
            )
        )
        assert adv is None or adv.outcome is RecordOutcome.LATE
        assert self.store.get_results(self.sid, 1) == before

    @rule(ms=st.integers(min_value=0, max_value=TIMEOUT_MS))
    def time_passes(self, ms):
        self.clock.now += ms

    @rule()
    def timer_fires(self):
        agg = self.store.get_turn(self.sid, 1)
        if agg is not None and self.clock.now >= agg.deadline_ms:
            self._completing(lambda: expire_turn(self.deps, self.sid, 1, by="timer"))

    @rule()
    def sweep_runs(self):
        self._sweep()

    def _sweep(self):
        self.thinks.by = "sweep"
        try:
            self._completing(lambda: sweep(self.deps))
        finally:
            self.thinks.by = ""

    @rule()
    def turn_message_redelivered(self):
        # While the turn waits, a redelivery re-runs its (idempotent) effects; after, it is skipped.
        before = self.store.get_results(self.sid, 1)
        outcome = run_turn(self.deps, self.sid, 1)
        assert outcome == ("tool_use" if self.store.get_session(self.sid).turn == 1 else "skipped")
        assert self.store.get_results(self.sid, 1) == before

    @precondition(lambda self: self.pending_thinks > 0)
    @rule()
    def next_think_delivered(self):
        self.pending_thinks -= 1
        outcome = run_turn(self.deps, self.sid, 2)
        self.next_think_runs += outcome != "skipped"
        assert self.next_think_runs == 1  # the first delivery thinks, every later one is a no-op

    def teardown(self):
        """Liveness: with faults over and time past the bound, the sweep and timer release the session."""
        try:
            self._liveness()
        finally:
            self._empty_the_table()

    def _empty_the_table(self):
        # Each example starts on an empty table, as its one session would: moto copies the whole table for
        # every transaction and sorts it for every index query, so the examples' leftovers made each run
        # slower than the last (30 examples: 78 s, mostly that).
        client = boto3.client("dynamodb", region_name="us-east-1")
        keys = [
            {k: item[k] for k in (topology.PARTITION_KEY, topology.SORT_KEY)}
            for page in client.get_paginator("scan").paginate(TableName=self.res.table_name)
            for item in page["Items"]
        ]
        for i in range(0, len(keys), 25):
            client.batch_write_item(
                RequestItems={self.res.table_name: [{"DeleteRequest": {"Key": key}} for key in keys[i : i + 25]]}
            )

    def _liveness(self):
        self.thinks.crash_next_send = False
        self.clock.now += TIMEOUT_MS + OWED_THINK_GRACE_MS + 60_000
        for _ in range(2):  # the first round may only re-send; the second finds nothing owed
            self._completing(lambda: expire_turn(self.deps, self.sid, 1, by="timer"))
            self._sweep()
            self.one_next_think_per_completion()
            while self.pending_thinks:
                self.next_think_delivered()
            self.clock.now += OWED_THINK_GRACE_MS + 1_000
        session = self.store.get_session(self.sid)
        assert self.completions == 1 and session.status == "idle", (self.completions, session.status)
        assert session.messages[-1]["role"] == "assistant"

    @invariant()
    def at_most_one_completion(self):
        assert self.completions <= 1
        assert self.complete() == (self.completions == 1)

    @invariant()
    def results_are_written_once_and_first_wins(self):
        results = self.store.get_results(self.sid, 1)
        assert len({r.tool_use_id for r in results}) == len(results)
        for r in results:
            if r.source is ResultSource.CALLBACK:
                assert r.text == self.first_value[r.tool_use_id]
        if self.complete():
            assert {r.tool_use_id for r in results} == set(self.ids)

    @invariant()
    def one_next_think_per_completion(self):
        for invocation in RECORDER.take(self.thinks.function_name):
            if invocation.event["session_id"] == self.sid and invocation.event["turn"] == 2:
                self.next_thinks += 1
                self.pending_thinks += 1
        # Only the completion starts the next think; a crash right after it leaves none until the
        # sweep, its owner, starts it once the owed grace has passed. A duplicate callback or a late
        # timer never starts one (a start is not deduplicated).
        assert self.next_thinks == 0 or self.completions == 1
        outside_the_sweep = [s for s in self.thinks.starts if s[1:] == (self.sid, 2) and s[0] != "sweep"]
        assert len(outside_the_sweep) <= 1, outside_the_sweep


def test_turn_state_machine(world, monkeypatch):
    # The delegations are in flight (their results come from the rules): dispatches go to the queue.
    hand_outbound_to_queues(monkeypatch)
    TurnMachine.res = world
    machine = TurnMachine.TestCase
    machine.settings = settings(
        max_examples=30, stateful_step_count=12, deadline=None, suppress_health_check=list(HealthCheck)
    )
    machine().runTest()
