"""Local event source mappings and schedule against moto in-process, and the resources they poll."""

from __future__ import annotations

import base64
import json
import sys
import threading
import time
import types
from collections.abc import Callable
from typing import Any

import boto3
import pytest

from flightdeck import topology
from flightdeck.local.invocation import InProcessFunction
from flightdeck.local.pollers import (
    InvalidBatchResponse,
    ScheduleTimer,
    SqsPoller,
    failed_message_ids,
)
from flightdeck.local.resources import create_agent_resources, dlq_url_variable, queue_url_variable
from flightdeck.settings import Settings

REGION = "us-east-1"


@pytest.fixture
def clients(aws):
    return boto3.client("dynamodb", region_name=REGION), boto3.client("sqs", region_name=REGION)


@pytest.fixture
def resources(clients):
    dynamodb, sqs = clients
    return create_agent_resources("tester", dynamodb=dynamodb, sqs=sqs)


@pytest.fixture
def fake_handler(monkeypatch) -> Callable[[Callable[[dict[str, Any], Any], Any]], InProcessFunction]:
    """An InProcessFunction whose handler is the given callable."""

    def make(handler: Callable[[dict[str, Any], Any], Any]) -> InProcessFunction:
        module = types.ModuleType("fake_poller_handler")
        module.handler = handler  # type: ignore[attr-defined]
        monkeypatch.setitem(sys.modules, "fake_poller_handler", module)
        return InProcessFunction("fake_poller_handler", "tester-fn")

    return make


def _poller(sqs: Any, url: str, key: str, function: InProcessFunction) -> SqsPoller:
    return SqsPoller(
        sqs=sqs,
        queue_url=url,
        spec=topology.QUEUES_BY_KEY[key],
        function=function,
        stop=threading.Event(),
        wait_time_s=0,
    )


def _depth(sqs: Any, url: str) -> tuple[int, int]:
    attrs = sqs.get_queue_attributes(
        QueueUrl=url, AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"]
    )["Attributes"]
    return int(attrs["ApproximateNumberOfMessages"]), int(attrs["ApproximateNumberOfMessagesNotVisible"])


# --- resources ----------------------------------------------------------------------------------


def test_table_has_the_topology_keys_index_and_ttl(clients, resources):
    dynamodb, _ = clients
    table = dynamodb.describe_table(TableName=resources.table_name)["Table"]
    assert resources.table_name == topology.table_name("tester")
    assert {k["AttributeName"]: k["KeyType"] for k in table["KeySchema"]} == {
        topology.PARTITION_KEY: "HASH",
        topology.SORT_KEY: "RANGE",
    }
    assert table["BillingModeSummary"]["BillingMode"] == "PAY_PER_REQUEST"
    indexes = {i["IndexName"]: i for i in table["GlobalSecondaryIndexes"]}
    assert set(indexes) == {i.name for i in topology.INDEXES}
    index = indexes[topology.DEADLINE_INDEX]
    assert {k["AttributeName"]: k["KeyType"] for k in index["KeySchema"]} == {
        topology.DEADLINE_SHARD_ATTRIBUTE: "HASH",
        topology.DEADLINE_AT_ATTRIBUTE: "RANGE",
    }
    types_ = {a["AttributeName"]: a["AttributeType"] for a in table["AttributeDefinitions"]}
    assert types_[topology.DEADLINE_SHARD_ATTRIBUTE] == "S" and types_[topology.DEADLINE_AT_ATTRIBUTE] == "N"
    ttl = dynamodb.describe_time_to_live(TableName=resources.table_name)["TimeToLiveDescription"]
    assert ttl == {"TimeToLiveStatus": "ENABLED", "AttributeName": topology.TTL_ATTRIBUTE}


def test_every_queue_has_its_dlq_redrive_fifo_and_visibility(clients, resources):
    _, sqs = clients
    for spec in topology.QUEUES:
        url = resources.queue_urls[spec.key]
        assert url.endswith("/" + spec.name("tester"))
        assert resources.dlq_urls[spec.key].endswith("/" + spec.dlq_name("tester"))
        attrs = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
        dlq_arn = sqs.get_queue_attributes(QueueUrl=resources.dlq_urls[spec.key], AttributeNames=["QueueArn"])[
            "Attributes"
        ]["QueueArn"]
        redrive = json.loads(attrs["RedrivePolicy"])
        assert redrive["deadLetterTargetArn"] == dlq_arn
        assert int(redrive["maxReceiveCount"]) == spec.max_receive_count
        assert int(attrs["VisibilityTimeout"]) == spec.visibility_timeout_s
        assert (attrs.get("FifoQueue") == "true") == spec.fifo


def test_resources_are_created_idempotently(clients, resources):
    dynamodb, sqs = clients
    again = create_agent_resources("tester", dynamodb=dynamodb, sqs=sqs)
    assert again == resources


def test_environment_names_are_the_settings_variables(resources):
    aliases = {field.alias for field in Settings.model_fields.values()}
    env = resources.environment()
    assert env["STATE_TABLE"] == resources.table_name
    for spec in topology.QUEUES:
        assert queue_url_variable(spec) in aliases
        assert env[queue_url_variable(spec)] == resources.queue_urls[spec.key]
        assert env[dlq_url_variable(spec)] == resources.dlq_urls[spec.key]
    assert "DELIVERY_DLQ_URL" in aliases


# --- batchItemFailures, as Lambda reads them ---------------------------------------------------------


@pytest.mark.parametrize("result", [None, {}, "", {"batchItemFailures": []}, {"batchItemFailures": None}, {"other": 1}])
def test_responses_meaning_every_message_succeeded(result):
    assert failed_message_ids(result, ["a", "b"]) == set()


def test_listed_messages_failed():
    assert failed_message_ids({"batchItemFailures": [{"itemIdentifier": "b"}]}, ["a", "b"]) == {"b"}


@pytest.mark.parametrize(
    "result",
    [
        {"batchItemFailures": [{"itemIdentifier": "zzz"}]},
        {"batchItemFailures": [{"itemIdentifier": ""}]},
        {"batchItemFailures": [{"itemIdentifier": None}]},
        {"batchItemFailures": [{"id": "a"}]},
        {"batchItemFailures": "a"},
        ["a"],
    ],
)
def test_invalid_responses_fail_the_whole_batch(result):
    with pytest.raises(InvalidBatchResponse):
        failed_message_ids(result, ["a", "b"])


# --- the poller -----------------------------------------------------------------------------------


def test_poller_deletes_what_succeeded_and_leaves_what_was_reported(clients, resources, fake_handler):
    _, sqs = clients
    url = resources.queue_urls["dispatch"]
    for body in ("ok-1", "fail-2", "ok-3"):
        sqs.send_message(QueueUrl=url, MessageBody=body)
    seen: list[dict[str, Any]] = []

    def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
        seen.extend(event["Records"])
        failed = [r for r in event["Records"] if r["body"].startswith("fail")]
        for record in failed:  # backoff as the real workers do: hide it again for a while
            sqs.change_message_visibility(QueueUrl=url, ReceiptHandle=record["receiptHandle"], VisibilityTimeout=0)
        return {"batchItemFailures": [{"itemIdentifier": r["messageId"]} for r in failed]}

    poller = _poller(sqs, url, "dispatch", fake_handler(handler))
    assert poller.poll_once() == 3
    assert sorted(r["body"] for r in seen) == ["fail-2", "ok-1", "ok-3"]
    remaining = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10)["Messages"]
    assert [m["Body"] for m in remaining] == ["fail-2"]


def test_poller_deletes_nothing_when_the_handler_raises(clients, resources, fake_handler):
    _, sqs = clients
    url = resources.queue_urls["delivery"]
    sqs.send_message(QueueUrl=url, MessageBody="one")
    sqs.send_message(QueueUrl=url, MessageBody="two")

    def handler(event: dict[str, Any], context: Any) -> None:
        raise RuntimeError("boom")

    assert _poller(sqs, url, "delivery", fake_handler(handler)).poll_once() == 2
    assert _depth(sqs, url) == (0, 2)  # both in flight, to be redelivered after the visibility timeout


def test_poller_deletes_nothing_on_an_invalid_batch_response(clients, resources, fake_handler):
    _, sqs = clients
    url = resources.queue_urls["timers"]
    sqs.send_message(QueueUrl=url, MessageBody="one")

    def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
        return {"batchItemFailures": [{"itemIdentifier": "not-in-this-batch"}]}

    _poller(sqs, url, "timers", fake_handler(handler)).poll_once()
    assert _depth(sqs, url) == (0, 1)


def test_poller_deletes_everything_on_success(clients, resources, fake_handler):
    _, sqs = clients
    url = resources.queue_urls["dispatch"]
    for i in range(12):
        sqs.send_message(QueueUrl=url, MessageBody=f"m{i}")
    poller = _poller(sqs, url, "dispatch", fake_handler(lambda event, context: None))
    assert poller.poll_once() == 10  # the spec's batch size
    assert poller.poll_once() == 2
    assert _depth(sqs, url) == (0, 0)


def test_sqs_event_has_lambda_shape_for_a_fifo_queue(clients, resources, fake_handler):
    _, sqs = clients
    url = resources.queue_urls["turns"]
    sqs.send_message(
        QueueUrl=url,
        MessageBody='{"turn": 1}',
        MessageGroupId="s-1",
        MessageDeduplicationId="s-1:1",
        MessageAttributes={
            "kind": {"DataType": "String", "StringValue": "think"},
            "blob": {"DataType": "Binary", "BinaryValue": b"\x00\x01"},
        },
    )
    events: list[dict[str, Any]] = []
    _poller(sqs, url, "turns", fake_handler(lambda event, context: events.append(event))).poll_once()
    (record,) = events[0]["Records"]
    queue_arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    assert record["eventSource"] == "aws:sqs"
    assert record["eventSourceARN"] == queue_arn
    assert record["awsRegion"] == REGION
    assert record["body"] == '{"turn": 1}'
    assert record["messageId"] and record["receiptHandle"] and record["md5OfBody"]
    attributes = record["attributes"]
    assert attributes["ApproximateReceiveCount"] == "1"
    assert attributes["MessageGroupId"] == "s-1"
    assert attributes["MessageDeduplicationId"] == "s-1:1"
    for name in ("SentTimestamp", "SenderId", "ApproximateFirstReceiveTimestamp", "SequenceNumber"):
        assert name in attributes
    assert record["messageAttributes"]["kind"] == {
        "stringValue": "think",
        "stringListValues": [],
        "binaryListValues": [],
        "dataType": "String",
    }
    assert base64.b64decode(record["messageAttributes"]["blob"]["binaryValue"]) == b"\x00\x01"
    assert record["messageAttributes"]["blob"]["dataType"] == "Binary"


def test_poller_thread_processes_messages_and_stops_on_the_event(clients, resources, fake_handler):
    _, sqs = clients
    url = resources.queue_urls["delivery"]
    got = threading.Event()
    stop = threading.Event()
    poller = SqsPoller(
        sqs=sqs,
        queue_url=url,
        spec=topology.QUEUES_BY_KEY["delivery"],
        function=fake_handler(lambda event, context: got.set()),
        stop=stop,
        wait_time_s=0,
    )
    poller.start()
    sqs.send_message(QueueUrl=url, MessageBody="hello")
    assert got.wait(5)
    stop.set()
    poller.join(5)
    assert not poller.is_alive()


# --- the schedule ---------------------------------------------------------------------------------


def test_schedule_fires_scheduled_events_at_its_rate_and_stops(fake_handler):
    fired: list[tuple[float, dict[str, Any]]] = []
    stop = threading.Event()
    timer = ScheduleTimer(
        function=fake_handler(lambda event, context: fired.append((time.monotonic(), event))),
        interval_s=0.1,
        rule_name="tester-sweep",
        stop=stop,
    )
    started = time.monotonic()
    timer.start()
    time.sleep(0.55)
    stop.set()
    timer.join(2)
    assert not timer.is_alive()
    assert 3 <= len(fired) <= 6
    assert fired[0][0] - started >= 0.09  # the first firing comes one interval after start
    event = fired[0][1]
    assert event["detail-type"] == "Scheduled Event"
    assert event["source"] == "aws.events"
    assert event["resources"] == ["arn:aws:events:us-east-1:123456789012:rule/tester-sweep"]
    assert event["detail"] == {} and event["account"] == "123456789012" and event["region"] == REGION
    assert event["time"].endswith("Z") and event["id"]


def test_a_batching_window_gathers_the_messages_that_arrive_within_it(clients, resources, fake_handler):
    """As Lambda's MaximumBatchingWindowInSeconds: the batch is handed over full, or when the window ends."""
    import dataclasses

    _, sqs = clients
    url = resources.queue_urls["thinks"]
    batches: list[int] = []
    spec = dataclasses.replace(topology.QUEUES_BY_KEY["thinks"], batching_window_s=600)  # full long before
    poller = SqsPoller(
        sqs=sqs,
        queue_url=url,
        spec=spec,
        function=fake_handler(lambda event, context: batches.append(len(event["Records"]))),
        stop=threading.Event(),
        wait_time_s=0,
    )
    sqs.send_message(QueueUrl=url, MessageBody="first")
    polling = threading.Thread(target=poller.poll_once)
    polling.start()
    for i in range(spec.batch_size - 1):  # arriving while the poller gathers
        sqs.send_message(QueueUrl=url, MessageBody=f"more {i}")
    polling.join()
    assert batches == [spec.batch_size] and _depth(sqs, url) == (0, 0)


def test_a_poller_with_concurrency_runs_its_batches_side_by_side(clients, resources, fake_handler):
    """As a mapping scales out: a second batch starts while the first still runs (each waits for the other)."""
    _, sqs = clients
    url = resources.queue_urls["dispatch"]
    both = threading.Barrier(2, timeout=120)
    done = threading.Semaphore(0)

    def handler(event: dict[str, Any], context: Any) -> None:
        both.wait()  # broken (and the batch failed) unless the two batches run at once
        done.release()

    poller = SqsPoller(
        sqs=sqs,
        queue_url=url,
        spec=topology.QUEUES_BY_KEY["dispatch"],
        function=fake_handler(handler),
        stop=threading.Event(),
        wait_time_s=0,
        concurrency=2,
    )
    poller.function._lock = threading.Semaphore(2)  # type: ignore[attr-defined] - two environments, not one
    for body in ("one", "two"):
        sqs.send_message(QueueUrl=url, MessageBody=body)
        assert poller.poll_once() == 1
    assert done.acquire(timeout=120) and done.acquire(timeout=120)
    assert not both.broken
