"""The in-process counter: what it records about AWS calls and invocations (moto in-process, no stack)."""

from __future__ import annotations

import json
import os

import boto3
import pytest

from flightdeck.bench import counter
from flightdeck.bench.accounting import Tally, load_records
from flightdeck.local.resources import create_table


@pytest.fixture
def ddb(aws):
    client = boto3.client("dynamodb", region_name="us-east-1")
    create_table(client, "count")
    return client


def test_dynamodb_calls_are_recorded_with_what_request_units_need(ddb):
    sink = counter.ListSink("a")
    counter.attach(ddb, sink)
    item = {"pk": {"S": "S#1"}, "sk": {"S": "TURN#000001"}, "due_at": {"N": "5"}, "due_shard": {"S": "open#0"}}
    ddb.put_item(TableName="count-state", Item=item)
    ddb.update_item(
        TableName="count-state",
        Key={"pk": {"S": "S#1"}, "sk": {"S": "TURN#000001"}},
        UpdateExpression="SET x = :x REMOVE due_shard, due_at",
        ExpressionAttributeValues={":x": {"N": "1"}},
    )
    ddb.get_item(TableName="count-state", Key={"pk": {"S": "S#1"}, "sk": {"S": "TURN#000001"}}, ConsistentRead=True)
    ddb.query(TableName="count-state", KeyConditionExpression="pk = :p", ExpressionAttributeValues={":p": {"S": "S#1"}})
    with pytest.raises(ddb.exceptions.TransactionCanceledException):
        ddb.transact_write_items(
            TransactItems=[
                {"Put": {"TableName": "count-state", "Item": {"pk": {"S": "S#1"}, "sk": {"S": "RESULT#1"}}}},
                {
                    "Update": {
                        "TableName": "count-state",
                        "Key": {"pk": {"S": "S#1"}, "sk": {"S": "TURN#000001"}},
                        "UpdateExpression": "ADD received :one",
                        "ConditionExpression": "#s = :waiting",
                        "ExpressionAttributeNames": {"#s": "status"},
                        "ExpressionAttributeValues": {":one": {"N": "1"}, ":waiting": {"S": "waiting"}},
                    }
                },
            ]
        )
    put, update, get, query, txn = sink.records
    assert (put["svc"], put["op"], put["fn"], put["status"]) == ("dynamodb", "PutItem", None, 200)
    assert put["writes"] == [
        {
            "op": "Put",
            "table": "count-state",
            "pk": "S#1",
            "sk": "TURN#000001",
            "kind": "TURN",
            "txn": False,
            "size": counter.item_size(item),
        }
    ]
    assert "size" not in update["writes"][0]  # an update's size is read back afterwards
    assert get["consistent"] is True and get["bytes"] > 0
    assert query["count"] == 1 and query["scanned"] == 1 and query["bytes"] == get["bytes"]
    assert txn["err"] == "TransactionCanceledException" and txn["status"] == 400
    assert [w["txn"] for w in txn["writes"]] == [True, True]
    assert txn["reasons"][1] == "ConditionalCheckFailed"
    assert all(r["ms"] >= 0 for r in sink.records)


def test_sqs_calls_name_their_queue_and_how_many_messages_came_back(aws):
    sqs = counter.attach(boto3.client("sqs", region_name="us-east-1"), sink := counter.ListSink("a"))
    url = sqs.create_queue(QueueName="a-turns.fifo", Attributes={"FifoQueue": "true"})["QueueUrl"]
    sqs.send_message(QueueUrl=url, MessageBody="x" * 100, MessageGroupId="g", MessageDeduplicationId="d")
    sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10)
    sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10)
    _, send, got, empty = sink.records
    assert send["queue"] == "a-turns.fifo" and send["bytes"] == 100
    assert got["n"] == 1 and empty["n"] == 0


def test_invocations_are_timed_attributed_and_classified():
    sink = counter.ListSink("agent")

    http = {"httpMethod": "POST", "resource": "/api/tools/response"}
    assert counter.observe_invocation(sink, "callback", http, lambda: {"statusCode": 202}) == {"statusCode": 202}
    timers = {
        "Records": [
            {
                "eventSource": "aws:sqs",
                "eventSourceARN": "arn:aws:sqs:us-east-1:1:a-timers",
                "body": json.dumps({"session_id": "s", "turn": 1, "deadline_ms": 10}),
                "attributes": {"SentTimestamp": "5", "ApproximateFirstReceiveTimestamp": "12"},
            }
        ]
    }
    with pytest.raises(KeyError):
        counter.observe_invocation(sink, "deadline_timer", timers, lambda: {}["boom"])
    first, second = sink.records
    assert (first["fn"], second["fn"]) == ("callback", "deadline_timer")
    assert (first["src"], first["route"], first["status"], first["ok"]) == (
        "http",
        "POST /api/tools/response",
        202,
        True,
    )
    assert (second["src"], second["n"], second["ok"]) == ("sqs", 1, False)
    assert second["timers"] == [
        {"session_id": "s", "turn": 1, "deadline_ms": 10, "sent_ms": 5, "first_received_ms": 12}
    ]
    assert counter.event_source({"source": "aws.events"})[0] == "schedule"


def test_install_writes_one_file_per_process_and_names_the_sandboxs_function(tmp_path, aws, monkeypatch):
    import botocore.session

    monkeypatch.setattr(botocore.session.Session, "create_client", botocore.session.Session.create_client)
    monkeypatch.setattr(counter, "_function", None)
    sink = counter.install(tmp_path, "agent-x", function="callback")
    boto3.client("sqs", region_name="us-east-1").list_queues()
    event = {"httpMethod": "GET", "resource": "/x"}
    assert counter.observe_invocation(sink, "callback", event, lambda: {"ok": True}) == {"ok": True}
    records = load_records(tmp_path)
    assert [(r["k"], r["fn"]) for r in records] == [("aws", "callback"), ("inv", "callback")]
    assert all(r["agent"] == "agent-x" for r in records)
    assert Tally.of(records).total_gateway == 1


def test_each_sandbox_of_the_counting_host_counts_its_functions_requests_into_its_own_file(tmp_path, moto_server):
    """The counting host's sandbox initializer: a sandbox's AWS calls and invocations, named after its function."""
    from flightdeck.local.sandbox import Sandboxes, SandboxPolicy

    policy = SandboxPolicy(initializer="flightdeck.bench.counting_host:count_in_sandbox")
    environment = {**os.environ, counter.ENV: str(tmp_path), "AGENT_NAME": "agent-x"}
    function = Sandboxes(policy, environment=environment).function("tests.sandbox_handlers.aws_caller", "agent-x-aws")
    try:
        assert function.invoke({"endpoint": moto_server}) == {"ok": True}
        [pid] = function.pids()
    finally:
        function.close()
    assert [path.name for path in tmp_path.glob("*.jsonl")] == [f"agent-x-{pid}.jsonl"]
    records = load_records(tmp_path)
    assert [(r["k"], r["fn"], r.get("op")) for r in records] == [
        ("aws", "aws_caller", "ListQueues"),
        ("inv", "aws_caller", None),
    ]
    assert all(r["agent"] == "agent-x" for r in records)
