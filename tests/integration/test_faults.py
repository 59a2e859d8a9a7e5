"""Faults at the AWS edge: throttling is retried and loses nothing; an outage answers 503 and a retry succeeds
(write collisions, which the SDK does not retry: test_transaction_conflicts.py)."""

import contextlib

import boto3
from botocore.config import Config

from flightdeck import wiring
from tests.integration.test_api_callbacks import post, result_items, start_turn
from tests.support.collisions import RawBody


def _throttle(times: int):
    """A botocore `before-send` hook: the first `times` requests get DynamoDB's throttling answer.

    before-send sits inside the SDK's retry loop, so the retries are the SDK's own.
    """
    from botocore.awsrequest import AWSResponse

    remaining = {"n": times}
    body = b'{"__type":"com.amazonaws.dynamodb.v20120810#ProvisionedThroughputExceededException","message":"injected"}'

    def hook(request, **kwargs):
        if remaining["n"] > 0:
            remaining["n"] -= 1
            return AWSResponse(request.url, 400, {"Content-Type": "application/x-amz-json-1.0"}, RawBody(body))
        return None

    return hook, remaining


def test_dynamodb_throttling_is_retried_and_nothing_is_lost(orchestrator_on_server):
    # Over HTTP to the moto server: in-process moto answers inside botocore's send hooks too.
    orchestrator = orchestrator_on_server
    sid, turn, [tid] = start_turn(orchestrator)
    client = wiring.state_store().client
    # The callback's two writes (the result's put, then its count on the session item), each throttled once.
    hooks = {op: _throttle(1) for op in ("PutItem", "UpdateItem")}
    for op, (hook, _) in hooks.items():
        client.meta.events.register(f"before-send.dynamodb.{op}", hook)
    try:
        status, _, body = post(orchestrator, orchestrator.token(sid, turn, tid), "after throttling")
    finally:
        for op, (hook, _) in hooks.items():
            client.meta.events.unregister(f"before-send.dynamodb.{op}", hook)
    assert [left["n"] for _, left in hooks.values()] == [0, 0]  # both throttles were hit and retried by the SDK
    assert (status, body["status"]) == (202, "accepted")
    assert [i["text"]["S"] for i in result_items(orchestrator, sid)] == ["after throttling"]
    assert len(orchestrator.bodies("turns")) == 1


@contextlib.contextmanager
def _outage(adapter, service: str):
    """Point an adapter's client at a closed port for the duration: the AWS service is down."""
    healthy = adapter.client
    adapter._client = boto3.client(
        service,
        endpoint_url="http://127.0.0.1:9",
        region_name="us-east-1",
        config=Config(retries={"max_attempts": 1}, connect_timeout=1),
    )
    try:
        yield
    finally:
        adapter._client = healthy


def test_dynamodb_outage_during_a_callback_is_503_and_a_retry_succeeds(orchestrator):
    sid, turn, [tid] = start_turn(orchestrator)
    token = orchestrator.token(sid, turn, tid)
    with _outage(wiring.state_store(), "dynamodb"):
        status, headers, body = post(orchestrator, token, "during outage")
    assert status == 503 and body["error"]["code"] == "service_unavailable" and headers["retry-after"] == "1"
    assert result_items(orchestrator, sid) == []
    status, _, body = post(orchestrator, token, "during outage")
    assert (status, body["status"]) == (202, "accepted")


def test_lambda_outage_after_the_result_is_recorded_is_503_and_the_next_think_is_started_once(orchestrator):
    from flightdeck.adapters.dynamo.table import OWED_THINK_GRACE_MS
    from tests.integration.test_liveness import listed_in, run_sweep, shift_clock

    sid, turn, [tid] = start_turn(orchestrator)
    token = orchestrator.token(sid, turn, tid)
    with _outage(wiring.deps().thinks, "lambda"):
        status, _, _ = post(orchestrator, token, "recorded, but the next think was not started")
    assert status == 503
    assert len(result_items(orchestrator, sid)) == 1  # the result is in and the turn completed...
    assert orchestrator.bodies("turns") == []  # ...but no next think was started
    status, _, body = post(orchestrator, token, "recorded, but the next think was not started")
    assert (status, body["status"]) == (200, "duplicate")  # the retry is a duplicate, which starts nothing:
    assert orchestrator.bodies("turns") == []  # it cannot tell a failed start from a think under way
    shift_clock(listed_in(orchestrator, sid) + OWED_THINK_GRACE_MS + 1_000)
    run_sweep(orchestrator)  # the completion left the next think owed: its owner starts it
    assert [t["turn"] for t in orchestrator.bodies("turns")] == [turn + 1]
