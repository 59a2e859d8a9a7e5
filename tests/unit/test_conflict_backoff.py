"""adapters/dynamo/conflicts: which errors are collisions, and the backoff that retries them (a fake clock)."""

from __future__ import annotations

import boto3
import pytest
from botocore.exceptions import ClientError

from flightdeck.adapters.dynamo import conflicts
from flightdeck.adapters.dynamo.conflicts import ConflictBackoff, ConflictRetryingClient
from flightdeck.domain.time_budget import TimeBudget
from flightdeck.local.resources import create_table
from tests.support.collisions import colliding

TABLE = "conflicts-state"
KEY = {"pk": {"S": "S#1"}, "sk": {"S": "META"}}
CANCELED = "com.amazonaws.dynamodb.v20120810#TransactionCanceledException"


class FakeClock:
    def __init__(self):
        self.now_s = 0.0
        self.sleeps: list[float] = []

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now_s += seconds


@pytest.fixture
def ddb(aws):
    client = boto3.client("dynamodb", region_name="us-east-1")
    create_table(client, "conflicts")
    return client


def retrying(ddb, clock: FakeClock) -> ConflictRetryingClient:
    return ConflictRetryingClient(ddb, ConflictBackoff(sleep=clock.sleep, monotonic=lambda: clock.now_s))


def put(client) -> None:
    client.put_item(TableName=TABLE, Item={**KEY, "v": {"N": "1"}}, ConditionExpression="attribute_not_exists(pk)")


def test_a_collision_is_retried_with_full_jitter_until_it_clears(ddb, monkeypatch):
    bounds: list[float] = []
    monkeypatch.setattr(conflicts.random, "uniform", lambda low, high: bounds.append(high) or high)
    clock = FakeClock()
    with colliding(ddb, lambda n, _op, _params: n <= 6) as hook:
        put(retrying(ddb, clock))
    assert hook.calls == ["PutItem"] * 7 and hook.injected == [1, 2, 3, 4, 5, 6]
    # Each wait is drawn from [0, min(cap, base * 2^attempt)] (full jitter): the bounds double up to the cap.
    assert bounds == [20, 40, 80, 160, 320, 400] and clock.sleeps == [b / 1000 for b in bounds]
    assert ddb.get_item(TableName=TABLE, Key=KEY)["Item"]["v"] == {"N": "1"}


def test_a_collision_that_outlasts_the_budget_raises_it_and_writes_nothing(ddb):
    clock = FakeClock()
    with colliding(ddb, lambda *_: True) as hook, pytest.raises(ClientError) as raised:
        put(retrying(ddb, clock))
    assert raised.value.response["Error"]["Code"] == "TransactionConflictException"
    assert len(hook.calls) > 2 and sum(clock.sleeps) * 1000 <= conflicts.CONFLICT_BUDGET_MS
    assert "Item" not in ddb.get_item(TableName=TABLE, Key=KEY)


def _canceled(*codes: str):
    def body(_op, _params):
        return {"__type": CANCELED, "CancellationReasons": [{"Code": c} for c in codes], "Message": "cancelled"}

    return body


@pytest.mark.parametrize(
    "body,retried",
    [
        (_canceled("None", "TransactionConflict"), True),
        (_canceled("ThrottlingError", "None"), True),
        (_canceled("ConditionalCheckFailed", "TransactionConflict"), False),  # a real answer beside a collision
        (_canceled("ValidationError"), False),
        (_canceled("None", "None"), False),
    ],
    ids=["conflict", "throttled", "condition-and-conflict", "validation", "no-reason"],
)
def test_only_a_transaction_canceled_for_collisions_alone_is_retried(ddb, body, retried):
    clock = FakeClock()
    check = {"TableName": TABLE, "Key": KEY, "ConditionExpression": "attribute_not_exists(pk)"}
    with colliding(ddb, lambda n, _op, _params: n == 1, body=body) as hook:
        try:
            retrying(ddb, clock).transact_write_items(
                TransactItems=[
                    {"ConditionCheck": check},
                    {"Put": {"TableName": TABLE, "Item": {**KEY, "sk": {"S": "X"}}}},
                ]
            )
        except ClientError as exc:
            assert not retried and exc.response["Error"]["Code"] == "TransactionCanceledException"
    assert len(hook.calls) == (2 if retried else 1)


def test_a_failed_condition_on_a_single_write_is_never_retried(ddb):
    clock = FakeClock()
    client = retrying(ddb, clock)
    put(client)
    with colliding(ddb) as hook, pytest.raises(ClientError) as raised:
        put(client)
    assert raised.value.response["Error"]["Code"] == "ConditionalCheckFailedException"
    assert hook.calls == ["PutItem"] and clock.sleeps == []


def test_a_collision_near_the_end_of_an_invocation_retries_only_within_what_is_left(ddb, monkeypatch):
    """Issue 36: the 2 s budget is cut to the invocation's time left before its reserve (a TimeBudget)."""
    monkeypatch.setattr(conflicts.random, "uniform", lambda low, high: high)
    clock = FakeClock()
    left_ms = TimeBudget(lambda: 0).reserve_ms + 150  # 150 ms before the reserve
    bounded = ConflictBackoff(sleep=clock.sleep, monotonic=lambda: clock.now_s).within(
        TimeBudget(lambda: left_ms - int(clock.now_s * 1000))
    )
    with colliding(ddb, lambda *_: True) as hook, pytest.raises(ClientError) as raised:
        put(ConflictRetryingClient(ddb, bounded))
    assert raised.value.response["Error"]["Code"] == "TransactionConflictException"
    assert clock.sleeps == [0.02, 0.04, 0.08] and len(hook.calls) == 4  # the next wait (160 ms) would pass it
    # With its whole time left, the same collision keeps to the write's own budget.
    clock, roomy = FakeClock(), TimeBudget(lambda: 30_000)
    with colliding(ddb, lambda *_: True), pytest.raises(ClientError):
        put(
            ConflictRetryingClient(ddb, ConflictBackoff(sleep=clock.sleep, monotonic=lambda: clock.now_s).within(roomy))
        )
    assert sum(clock.sleeps) * 1000 > 150 and sum(clock.sleeps) * 1000 <= conflicts.CONFLICT_BUDGET_MS
    assert "Item" not in ddb.get_item(TableName=TABLE, Key=KEY)


def test_a_worker_s_state_writes_retry_within_its_invocation(aws, monkeypatch):
    from flightdeck import wiring
    from tests.support.harness import make_agent

    make_agent(monkeypatch)
    budget = TimeBudget(lambda: 9_000)
    d = wiring.deps_within(budget)
    assert d.sessions is d.iterations is d.turns is d.liveness is d.dispatches
    assert d.sessions.conflicts.time_budget is budget and wiring.state_store().conflicts.time_budget is None
