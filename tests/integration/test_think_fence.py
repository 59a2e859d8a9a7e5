"""Two runs of one think ask the model once (issue 36, defect 8): each run claims its think in a conditional
write before it asks, and a run that finds the claim held stops, having asked nothing and written nothing.

Runs through the real turn worker and sweeper on moto. "At once" is made exact, not timed: the first run is
held inside its model call (an Event) while the second runs.
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from flightdeck import wiring
from flightdeck.adapters.dynamo.table import OWED_THINK_GRACE_MS
from tests.integration.test_liveness import run_sweep, session, shift_clock
from tests.integration.test_thinks import run
from tests.support.harness import new_session_id

WAIT_S = 60  # a bound on waiting for a condition, never expected to be reached


class Died(BaseException):
    """The run's process dies in the model call: no handler of the run gets to act on it."""


class HeldModel:
    """The agent's model, counting its asks; the first ask waits until the test lets it answer (or die)."""

    def __init__(self, real, die: bool = False):
        self.real, self.die = real, die
        self.asks = 0
        self.asked, self.answer = threading.Event(), threading.Event()

    def converse(self, **ask):
        self.asks += 1
        if self.asks == 1:
            self.asked.set()
            assert self.answer.wait(WAIT_S), "the test never let the model answer"
            if self.die:
                raise Died()
        return self.real.converse(**ask)


@pytest.fixture
def model(orchestrator, monkeypatch):
    deps = wiring.deps()
    held = HeldModel(deps.model())
    monkeypatch.setattr(deps, "model", lambda: held)
    return held


def _chat(orchestrator) -> tuple[str, dict]:
    sid = new_session_id()
    assert orchestrator.api("chat_post", body={"session_id": sid, "content": "count the moons"})[0] == 202
    [think] = orchestrator.receive("turns")
    return sid, think["Invocation"].event


def _answered_once(orchestrator, sid: str) -> None:
    body = session(orchestrator, sid)
    assert body["status"] == "idle" and [m["role"] for m in body["messages"]] == ["user", "assistant"]


def _while_held(model: HeldModel, first: dict, second: dict) -> tuple[dict, dict]:
    """Run `first` until it asks the model, then `second` to its end, then let `first` finish."""
    with ThreadPoolExecutor(1) as pool:
        running = pool.submit(run, first)
        assert model.asked.wait(WAIT_S), "the first run never asked the model"
        try:
            outcome = run(second)
        finally:
            model.answer.set()
        return running.result(timeout=WAIT_S), outcome


def test_two_runs_of_one_think_started_together_ask_the_model_once(orchestrator, model):
    sid, event = _chat(orchestrator)
    first, second = _while_held(model, event, dict(event))  # the same think, started twice
    assert (first, second) == ({"outcome": "end_turn"}, {"outcome": "fenced"})
    assert model.asks == 1
    _answered_once(orchestrator, sid)


def test_a_resend_racing_a_held_run_asks_the_model_once(orchestrator, model):
    sid, held = _chat(orchestrator)  # Lambda holds this start longer than the grace
    shift_clock(OWED_THINK_GRACE_MS + 1_000)
    run_sweep(orchestrator)
    [resent] = orchestrator.receive("turns")
    assert resent["Invocation"].event["session_id"] == sid
    first, second = _while_held(model, resent["Invocation"].event, held)  # the held run starts meanwhile
    assert (first, second) == ({"outcome": "end_turn"}, {"outcome": "fenced"})
    assert model.asks == 1
    _answered_once(orchestrator, sid)


def test_a_winner_that_dies_leaves_its_think_owed_and_the_sweep_resends_it_after_the_grace(orchestrator, monkeypatch):
    deps = wiring.deps()
    dying = HeldModel(deps.model(), die=True)
    monkeypatch.setattr(deps, "model", lambda: dying)
    sid, event = _chat(orchestrator)
    dying.answer.set()
    with pytest.raises(Died):
        run(event)  # it claimed the think, asked the model, and died: its claim holds to its lease's end
    assert run(dict(event)) == {"outcome": "fenced"}  # a second start meanwhile asks nothing
    assert dying.asks == 1 and session(orchestrator, sid)["status"] == "busy"
    # The mark still says the think is owed: after the grace (longer than any lease), the sweep re-sends it.
    shift_clock(OWED_THINK_GRACE_MS + 1_000)
    run_sweep(orchestrator)
    [resent] = orchestrator.receive("turns")
    assert run(resent["Invocation"].event) == {"outcome": "end_turn"}
    assert dying.asks == 2
    _answered_once(orchestrator, sid)


def test_a_run_that_fails_gives_its_claim_back_and_lambdas_retry_thinks_at_once(orchestrator, monkeypatch):
    deps = wiring.deps()
    real = deps.model()
    calls = []

    class FailsOnce:
        def converse(self, **ask):
            calls.append(1)
            if len(calls) == 1:
                raise RuntimeError("the model's client broke")
            return real.converse(**ask)

    monkeypatch.setattr(deps, "model", lambda: FailsOnce())
    sid, event = _chat(orchestrator)
    with pytest.raises(RuntimeError):
        run(event)
    assert run(event) == {"outcome": "end_turn"}  # Lambda's retry: the claim was given back
    assert len(calls) == 2
    _answered_once(orchestrator, sid)
