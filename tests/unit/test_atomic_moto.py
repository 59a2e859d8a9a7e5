"""tests.support.atomic_moto: in-process moto lets one request in at a time, SQS receives excepted."""

from __future__ import annotations

import threading

import boto3

from tests.support import atomic_moto


def _in_thread(call):
    done = threading.Event()

    def run():
        call()
        done.set()

    threading.Thread(target=run, daemon=True).start()
    return done


def test_a_request_waits_for_the_one_in_moto_and_a_receive_does_not(aws):
    ddb = boto3.client("dynamodb")
    ddb.create_table(
        TableName="t",
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
        BillingMode="PAY_PER_REQUEST",
    )
    sqs = boto3.client("sqs")
    queue = sqs.create_queue(QueueName="q")["QueueUrl"]
    with atomic_moto._LOCK:  # a request of another thread is inside moto
        put = _in_thread(lambda: ddb.put_item(TableName="t", Item={"pk": {"S": "a"}}))
        receive = _in_thread(lambda: sqs.receive_message(QueueUrl=queue, WaitTimeSeconds=0))
        assert receive.wait(10)
        assert not put.wait(0.3)
    assert put.wait(10)
    assert ddb.get_item(TableName="t", Key={"pk": {"S": "a"}})["Item"]["pk"]["S"] == "a"
