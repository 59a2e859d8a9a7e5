"""Two runs of one think ask the model once (issue 36, defect 8), and the run alone costs no request for it.

The start the write that owed a think made, run while its whole invocation fits before the sweep may re-send
it, is alone: it asks without a claim. Any other run (a start held past that window, a re-send, two re-sends)
claims its think in a conditional write before it asks, and a run that finds the claim held stops, having asked
nothing and written nothing. Residual (ARCHITECTURE §6): two deliveries of one first start inside its window.

Runs through the real turn worker and sweeper on moto, on a clock the test sets (the window is read against
it, not against how fast this machine runs). "At once" is made exact, not timed: the first run is held inside
its model call (an Event) while the second runs.
"""

from __future__ import annotations

import importlib
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from flightdeck import topology, wiring
from flightdeck.adapters.dynamo.table import OWED_THINK_GRACE_MS
from flightdeck.domain.think_claim import CLOCK_MARGIN_MS
from flightdeck.local.invocation import LocalLambdaContext
from tests.integration.test_liveness import run_sweep, session
from tests.support.harness import new_session_id

WAIT_S = 60  # a bound on waiting for a condition, never expected to be reached
T0 = 1_900_000_000_000  # the agent's clock when the test's message is stored (its think's owed mark)
# A first start that runs this late cannot know it ends before the sweep may re-send it: it claims.
LATE_MS = OWED_THINK_GRACE_MS - topology.WORKER_TIMEOUT_S * 1000 - CLOCK_MARGIN_MS + 1


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


class JustInvoked(LocalLambdaContext):
    """A turn worker's invocation that has just begun: its whole timeout is left, whenever the test runs it."""

    def get_remaining_time_in_millis(self) -> int:
        return topology.WORKER_TIMEOUT_S * 1000


def run(event: dict) -> dict:
    handler = importlib.import_module("flightdeck.handlers.turn_worker").handler
    return handler(event, JustInvoked(function_name="orchestrator-turn-worker"))


def set_clock(at_ms: int) -> None:
    """The agent's clock stands at at_ms (the store's: owed marks, claims, and the run's window read it)."""
    wiring.state_store()._clock = lambda: at_ms


def _writes() -> list[str]:
    """Every DynamoDB write the store's client makes from now on."""
    calls: list[str] = []
    wiring.state_store().client.meta.events.register(
        "before-call.dynamodb", lambda model, **_: calls.append(model.name) if "Item" in model.name else None
    )
    return calls


def _chat(orchestrator) -> tuple[str, dict]:
    set_clock(T0)
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


def test_the_first_start_alone_in_its_window_asks_the_model_without_a_claim_write(orchestrator, model):
    sid, event = _chat(orchestrator)
    model.answer.set()
    writes = _writes()
    assert run(event) == {"outcome": "end_turn"}
    assert writes == ["TransactWriteItems"]  # the reply and the turn's end; no claim
    assert model.asks == 1
    _answered_once(orchestrator, sid)


def test_a_first_start_held_past_its_window_claims_and_a_second_run_beside_it_stops(orchestrator, model):
    sid, event = _chat(orchestrator)
    set_clock(T0 + LATE_MS)  # Lambda's queue held the start: its invocation may outlive the re-send's time
    writes = _writes()
    first, second = _while_held(model, event, dict(event))  # and delivered it twice
    assert (first, second) == ({"outcome": "end_turn"}, {"outcome": "fenced"})
    assert writes.count("PutItem") == 2 and model.asks == 1  # each run's claim; one asked
    _answered_once(orchestrator, sid)


def test_two_deliveries_of_one_first_start_inside_its_window_both_ask_and_one_reply_is_stored(orchestrator, model):
    """The fence's residual (ARCHITECTURE §6): Lambda's or SQS's rare duplicate of one event, both copies inside
    the window, is not fenced; the reply's conditional write still stores one reply, and the turn ends once."""
    sid, event = _chat(orchestrator)
    first, second = _while_held(model, event, dict(event))
    assert second == {"outcome": "end_turn"} and first["outcome"] != "fenced"
    assert model.asks == 2
    _answered_once(orchestrator, sid)


def test_a_resend_racing_a_held_run_asks_the_model_once(orchestrator, model):
    sid, held = _chat(orchestrator)  # Lambda holds this start longer than the grace
    set_clock(T0 + OWED_THINK_GRACE_MS + 1_000)
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
    set_clock(T0 + LATE_MS)  # a start held past its window: it claims
    dying.answer.set()
    with pytest.raises(Died):
        run(event)  # it claimed the think, asked the model, and died: its claim holds to its lease's end
    assert run(dict(event)) == {"outcome": "fenced"}  # a second start meanwhile asks nothing
    assert dying.asks == 1 and session(orchestrator, sid)["status"] == "busy"
    # The mark still says the think is owed: after the grace (longer than any lease), the sweep re-sends it.
    set_clock(T0 + OWED_THINK_GRACE_MS + 1_000)
    run_sweep(orchestrator)
    [resent] = orchestrator.receive("turns")
    assert run(resent["Invocation"].event) == {"outcome": "end_turn"}
    assert dying.asks == 2
    _answered_once(orchestrator, sid)


def test_a_first_start_that_dies_alone_leaves_its_think_owed_and_the_sweep_resends_it(orchestrator, monkeypatch):
    deps = wiring.deps()
    dying = HeldModel(deps.model(), die=True)
    monkeypatch.setattr(deps, "model", lambda: dying)
    sid, event = _chat(orchestrator)
    dying.answer.set()
    writes = _writes()
    with pytest.raises(Died):
        run(event)  # alone: it asked without a claim, and died
    assert writes == [] and session(orchestrator, sid)["status"] == "busy"
    set_clock(T0 + OWED_THINK_GRACE_MS + 1_000)
    run_sweep(orchestrator)
    [resent] = orchestrator.receive("turns")
    assert "first_start" not in resent["Invocation"].event  # a re-send: it claims
    assert run(resent["Invocation"].event) == {"outcome": "end_turn"}
    assert dying.asks == 2
    _answered_once(orchestrator, sid)


def test_two_resends_of_one_think_ask_the_model_once(orchestrator, model):
    sid, _ = _chat(orchestrator)  # its start lost
    set_clock(T0 + OWED_THINK_GRACE_MS + 1_000)
    run_sweep(orchestrator)
    [resent] = orchestrator.receive("turns")
    writes = _writes()
    first, second = _while_held(model, resent["Invocation"].event, dict(resent["Invocation"].event))
    assert (first, second) == ({"outcome": "end_turn"}, {"outcome": "fenced"})
    assert writes.count("PutItem") == 2 and model.asks == 1
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
    set_clock(T0 + LATE_MS)  # a start held past its window: it claims
    with pytest.raises(RuntimeError):
        run(event)
    assert run(event) == {"outcome": "end_turn"}  # Lambda's retry: the claim was given back
    assert len(calls) == 2
    _answered_once(orchestrator, sid)
