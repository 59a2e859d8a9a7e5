"""THINK_GATHERING = "shared": thinks gathered on the thinks queue, a batch of them run concurrently by the turn worker.

On the moto server (truly concurrent requests): the thinks of a batch are all inside the model at once (a
barrier that only a concurrent batch passes), each ends its own session's turn with its own answer and its
own callback tokens; a think that fails fails its record alone, and comes back a minute on; a throttled one
hands its retry to the turns queue as an invoked think does. The lone-think rule and the writers' choice
between an invoke and the queue are tested on in-process moto.
"""

from __future__ import annotations

import json
import threading

import pytest

from flightdeck import wiring
from flightdeck.adapters import model_choice
from flightdeck.adapters.think_starts import ThinkStarts
from flightdeck.domain.model import ModelError
from flightdeck.local.invocation import LocalLambdaContext
from tests.support.harness import new_session_id
from tests.support.invokes import RECORDER

BATCH = 5
# A bound on a wait for the others (never reached when the batch runs concurrently); past it the think fails.
BARRIER_TIMEOUT_S = 120


def _shared(monkeypatch, agent, lone_window_ms: int = 0) -> None:
    """The agent's thinks gathered on the thinks queue (lone window 0: every think goes there)."""
    for key, value in {"THINK_GATHERING": "shared", "THINK_LONE_WINDOW_MS": str(lone_window_ms)}.items():
        monkeypatch.setenv(key, value)
        agent.env[key] = value
    wiring.reset()


class _Together:
    """The agent's model, each ask waiting for BATCH asks to be in it at once; `fail` (a marker of the user's
    text) raises that error instead, after the wait."""

    def __init__(self, real, parties: int, fail: dict[str, Exception] | None = None):
        self.real, self.fail = real, fail or {}
        self.barrier = threading.Barrier(parties, timeout=BARRIER_TIMEOUT_S)
        self.inside: list[str] = []

    def converse(self, **ask):
        text = repr(ask["messages"])
        self.barrier.wait()
        self.inside.append(text)
        for marker, error in self.fail.items():
            if marker in text:
                raise error
        return self.real.converse(**ask)


def _model(monkeypatch, **kwargs) -> _Together:
    made: list[_Together] = []
    real_build = model_choice.build_model

    def build(agent):
        made.append(_Together(real_build(agent), **kwargs))
        return made[-1]

    monkeypatch.setattr(model_choice, "build_model", build)
    wiring.deps().model()
    return made[0]


def _sessions(agent, texts: list[str]) -> list[str]:
    sids = []
    for text in texts:
        sid = new_session_id()
        assert agent.api("chat_post", body={"session_id": sid, "content": text})[0] == 202
        sids.append(sid)
    assert RECORDER.take(agent.turn_worker_function) == []  # none invoked: all on the thinks queue
    return sids


def _batch(agent) -> list[dict]:
    messages = []
    while len(messages) < BATCH:
        got = agent.receive("thinks")
        assert got, "the thinks queue holds every think the writers started"
        messages += got
    return messages


def _session(agent, sid):
    return agent.api("session_get", SESSION_ID=sid)[2]


def test_a_batch_of_thinks_runs_concurrently_each_with_its_own_writes_and_outcome(orchestrator_on_server, monkeypatch):
    agent = orchestrator_on_server
    _shared(monkeypatch, agent)
    model = _model(monkeypatch, parties=BATCH)
    texts = [f"@worker look up tide table {i}" for i in range(BATCH)]
    sids = _sessions(agent, texts)
    assert agent.run_queue("thinks", _batch(agent)) == {"batchItemFailures": []}
    assert len(model.inside) == BATCH  # every think passed the barrier: all were in the model at once
    # Each think delegated its own session's task, with a callback token of its own session's turn.
    dispatches = agent.bodies("dispatch")
    assert len(dispatches) == BATCH
    for sid, text in zip(sids, texts, strict=True):
        [mine] = [d for d in dispatches if d["session_id"] == sid]
        assert text.removeprefix("@worker ") in json.dumps(mine)
        assert all(sid not in json.dumps(d) for d in dispatches if d is not mine)
        session = _session(agent, sid)
        assert (session["status"], session["turn"]) == ("busy", 1)  # waiting on its delegation
        assert agent.turn_item(sid, 1)["total_tools"] == 1


def test_a_failed_think_fails_its_record_alone_and_comes_back_a_minute_on(orchestrator_on_server, monkeypatch):
    agent = orchestrator_on_server
    _shared(monkeypatch, agent)
    _model(monkeypatch, parties=BATCH, fail={"marker-fails": RuntimeError("the think's process broke")})
    texts = [f"just answer {i}" for i in range(BATCH - 1)] + ["just answer marker-fails"]
    sids = _sessions(agent, texts)
    visibility = []
    wiring.deps().queues.client.meta.events.register(
        "before-parameter-build.sqs.ChangeMessageVisibility", lambda params, **_: visibility.append(dict(params))
    )
    messages = _batch(agent)
    failing = next(m for m in messages if json.loads(m["Body"])["session_id"] == sids[-1])
    resp = agent.run_queue("thinks", messages)
    assert resp == {"batchItemFailures": [{"itemIdentifier": failing["MessageId"]}]}
    assert [(v["ReceiptHandle"], v["VisibilityTimeout"]) for v in visibility] == [(failing["ReceiptHandle"], 60)]
    for sid in sids[:-1]:
        assert _session(agent, sid)["status"] == "idle"  # answered, whatever its neighbour did
    assert _session(agent, sids[-1])["status"] == "busy"  # still owed: its record comes back, or the sweep's


def test_a_throttled_think_of_a_batch_waits_on_the_turns_queue_and_the_others_answer(
    orchestrator_on_server, monkeypatch
):
    from flightdeck.domain import turn_loop

    agent = orchestrator_on_server
    _shared(monkeypatch, agent)
    monkeypatch.setattr(turn_loop, "backoff_s", lambda attempt: 0)  # the retry receivable at once
    throttled = ModelError("throttled (injected)")
    throttled.retryable = True
    _model(monkeypatch, parties=BATCH, fail={"marker-throttled": throttled})
    sids = _sessions(agent, [f"just answer {i}" for i in range(BATCH - 1)] + ["just answer marker-throttled"])
    assert agent.run_queue("thinks", _batch(agent)) == {"batchItemFailures": []}
    [retry] = agent.bodies("turns")
    assert retry == {"session_id": sids[-1], "turn": 1, "traceparent": "", "attempt": 2}
    assert [_session(agent, sid)["status"] for sid in sids] == ["idle"] * (BATCH - 1) + ["busy"]


class _Hangs:
    """The agent's model; an ask with `marker` in it waits until released (or a bound: then it answers)."""

    def __init__(self, real, marker: str):
        self.real, self.marker = real, marker
        self.release, self.inside = threading.Event(), threading.Event()

    def converse(self, **ask):
        if self.marker in repr(ask["messages"]):
            self.inside.set()
            self.release.wait(BARRIER_TIMEOUT_S)
        return self.real.converse(**ask)


class _Deadline(LocalLambdaContext):
    """An invocation's context whose time runs out when `passed` is set."""

    def __init__(self, function_name: str):
        super().__init__(function_name=function_name)
        self.passed = threading.Event()

    def get_remaining_time_in_millis(self) -> int:
        return 0 if self.passed.is_set() else 60_000


def test_a_think_still_running_at_the_batch_s_deadline_comes_back_alone_and_the_others_are_reported_done(
    orchestrator_on_server, monkeypatch
):
    """A batch lasts as long as its slowest think: Lambda ending it at its timeout would fail every record,
    the answered ones too, and give the others back only after the visibility timeout (past a delegation's
    deadline). The batch reports before its deadline instead; the think still running comes back alone."""
    from flightdeck.handlers import turn_worker

    agent = orchestrator_on_server
    _shared(monkeypatch, agent)
    real_build = model_choice.build_model
    made: list[_Hangs] = []
    monkeypatch.setattr(
        model_choice, "build_model", lambda a: made.append(_Hangs(real_build(a), "marker-hangs")) or made[-1]
    )
    wiring.deps().model()
    model = made[0]
    sids = _sessions(agent, [f"just answer {i}" for i in range(BATCH - 1)] + ["just answer marker-hangs"])
    context = _Deadline(agent.turn_worker_function)
    real_record, done, hung_ended = turn_worker.think_record, [], threading.Event()

    def think_record(record, budget):
        try:
            return real_record(record, budget)
        finally:
            done.append(json.loads(record.body)["session_id"])
            if done[-1] == sids[-1]:
                hung_ended.set()
            elif len(done) == BATCH - 1:
                context.passed.set()  # the others have answered: now the batch's time is up

    monkeypatch.setattr(turn_worker, "think_record", think_record)
    visibility = []
    wiring.deps().queues.client.meta.events.register(
        "before-parameter-build.sqs.ChangeMessageVisibilityBatch",
        lambda params, **_: visibility.extend(params["Entries"]),
    )
    messages = _batch(agent)
    hung = next(m for m in messages if json.loads(m["Body"])["session_id"] == sids[-1])
    try:
        resp = turn_worker.handler(agent.sqs_event("thinks", messages), context)
        assert model.inside.is_set() and not model.release.is_set()  # it reported while that think still ran
        assert resp == {"batchItemFailures": [{"itemIdentifier": hung["MessageId"]}]}
        # Visible again soon (its claim lapses with the invocation), not after the visibility timeout.
        assert [(v["ReceiptHandle"], v["VisibilityTimeout"]) for v in visibility] == [(hung["ReceiptHandle"], 1)]
        assert [_session(agent, sid)["status"] for sid in sids[:-1]] == ["idle"] * (BATCH - 1)
    finally:
        model.release.set()
    # The think left running ends on its own, its reply stored once (a second run finds it).
    assert hung_ended.wait(BARRIER_TIMEOUT_S)
    assert _session(agent, sids[-1])["status"] == "idle"


def test_with_the_old_mode_every_think_is_an_invoke(orchestrator):
    sid = new_session_id()
    assert orchestrator.api("chat_post", body={"session_id": sid, "content": "just answer"})[0] == 202
    [invocation] = RECORDER.take(orchestrator.turn_worker_function)
    assert invocation.event["session_id"] == sid and orchestrator.receive("thinks") == []


def test_a_lone_think_is_invoked_and_one_close_behind_it_goes_to_the_thinks_queue(orchestrator, monkeypatch):
    _shared(monkeypatch, orchestrator, lone_window_ms=60_000)
    wiring.deps().thinks.lone.clock = lambda: 1_800_000_000.0  # both starts in one window
    first, second = new_session_id(), new_session_id()
    for sid in (first, second):
        assert orchestrator.api("chat_post", body={"session_id": sid, "content": "just answer"})[0] == 202
    [invoked] = RECORDER.take(orchestrator.turn_worker_function)
    [queued] = orchestrator.bodies("thinks")
    assert (invoked.event["session_id"], queued["session_id"]) == (first, second)


@pytest.mark.parametrize(
    ("window_ms", "starts", "lone"),
    [
        (1000, [0.0], [True]),  # the agent's first start
        (1000, [0.0, 0.5, 0.9], [True, False, False]),  # in the same window as the first
        (1000, [0.0, 2.0, 4.5], [True, True, True]),  # each a window of its own, the one before empty
        (1000, [0.0, 1.2, 2.1, 4.0], [True, False, False, True]),  # traffic in the window before: not lone
        (0, [0.0, 5.0], [False, False]),  # window 0: the queue for every think
    ],
)
def test_a_think_is_lone_when_it_is_the_agent_s_first_start_in_its_window(orchestrator, window_ms, starts, lone):
    store = wiring.state_store()
    now = [1_800_000_000.0]
    rule = ThinkStarts(store.table, lambda: store.client, window_ms, clock=lambda: now[0])
    seen = []
    for at in starts:
        now[0] = 1_800_000_000.0 + at
        seen.append(rule.lone())
    assert seen == lone


def test_a_start_that_cannot_be_counted_goes_to_the_queue(orchestrator):
    rule = ThinkStarts("no-such-table", lambda: wiring.state_store().client, 1000)
    assert rule.lone() is False
