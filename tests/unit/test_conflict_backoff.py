"""adapters/dynamo/conflicts: which errors are collisions, and the backoff that retries them (a fake clock)."""

from __future__ import annotations

import boto3
import pytest
from botocore.exceptions import ClientError

from flightdeck.adapters.dynamo import conflicts
from flightdeck.adapters.dynamo.conflicts import ConflictBackoff, ConflictRetryingClient
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
