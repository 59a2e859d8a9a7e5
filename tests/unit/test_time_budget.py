from flightdeck.domain.time_budget import MIN_CALL_MS, RESERVE_MS, TimeBudget
from flightdeck.local.invocation import LocalLambdaContext


def test_a_call_is_started_only_with_time_for_it_after_the_reserve():
    left = {"ms": RESERVE_MS + MIN_CALL_MS}
    budget = TimeBudget(lambda: left["ms"])
    assert budget.allows_a_call() and budget.call_timeout_s(10.0) == MIN_CALL_MS / 1000
    left["ms"] -= 1
    assert not budget.allows_a_call()
    left["ms"] = RESERVE_MS + 60_000
    assert budget.call_timeout_s(10.0) == 10.0  # never longer than the peer timeout
    left["ms"] = RESERVE_MS - 5
    assert budget.call_timeout_s(10.0) == 0.0


def test_the_budget_of_a_lambda_context_and_of_none():
    context = LocalLambdaContext(function_name="f", timeout_s=30)
    budget = TimeBudget.of(context)
    assert budget is not None and 29_000 < budget.remaining_ms() <= 30_000
    assert TimeBudget.of(None) is None
