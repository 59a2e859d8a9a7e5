"""The local runtime's Lambda Invoke API: what boto3 gets back, and how asynchronous invocations run."""

from __future__ import annotations

import json
import threading
import time

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError

from flightdeck import topology
from flightdeck.adapters.lambda_thinks import LambdaThinks
from flightdeck.local.invocation import FunctionRegistry
from flightdeck.local.lambda_api import AsyncInvoker, LambdaApi, LambdaApiServer, async_configs
from flightdeck.local.net import base_url, listen
from tests.local_fake_handlers import turn_worker as fake_turn_worker

FAKES = "tests.local_fake_handlers"
DLQ_URL = "http://sqs.local/a-turns-dlq"


class Sent:
    """The on-failure destination: what would be sent to which queue."""

    def __init__(self) -> None:
        self.messages: list[tuple[str, dict]] = []
        self.arrived = threading.Event()

    def __call__(self, url: str, body: str) -> None:
        self.messages.append((url, json.loads(body)))
        self.arrived.set()


@pytest.fixture
def lambda_api():
    fake_turn_worker.INVOKED.clear()
    registry = FunctionRegistry("a", package=FAKES)
    sent = Sent()
    invoker = AsyncInvoker(sent, workers=2, retry_delays_s=(0.0, 0.0))
    api = LambdaApi(registry, invoker, async_configs(registry, lambda spec: DLQ_URL))
    server = LambdaApiServer(api, listen("127.0.0.1", 0, "the test"))
    server.start_background()
    client = boto3.client(
        "lambda",
        endpoint_url=base_url("127.0.0.1", server.port),
        region_name="us-east-1",
        aws_access_key_id="x",
        aws_secret_access_key="x",
        config=Config(retries={"max_attempts": 1}),
    )
    yield client, invoker, sent, server
    server.shutdown()
    server.server_close()
    invoker.stop(1.0)


def wait_for(condition, timeout_s: float = 5.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "not reached in time"
        time.sleep(0.01)


def wait_idle(invoker: AsyncInvoker) -> None:
    wait_for(invoker.idle)


def test_an_event_invoke_is_accepted_at_once_and_runs_the_named_function(lambda_api):
    client, invoker, sent, _ = lambda_api
    answer = client.invoke(
        FunctionName="a-turn-worker", InvocationType="Event", Payload=b'{"session_id": "s", "turn": 1}'
    )
    assert answer["StatusCode"] == 202 and answer["Payload"].read() == b""
    wait_idle(invoker)
    assert fake_turn_worker.INVOKED == [{"session_id": "s", "turn": 1}] and sent.messages == []


def test_a_failed_invocation_is_run_twice_more_then_its_record_goes_to_the_on_failure_queue(lambda_api):
    client, invoker, sent, _ = lambda_api
    client.invoke(FunctionName="a-turn-worker", InvocationType="Event", Payload=b'{"raise": true, "n": 7}')
    assert sent.arrived.wait(5.0)
    wait_idle(invoker)
    assert fake_turn_worker.INVOKED == [{"raise": True, "n": 7}] * 3  # the first run and Lambda's two retries
    [(url, record)] = sent.messages
    assert url == DLQ_URL
    assert record["requestPayload"] == {"raise": True, "n": 7}
    assert record["requestContext"]["condition"] == "RetriesExhausted"
    assert record["requestContext"]["approximateInvokeCount"] == 3
    assert record["requestContext"]["functionArn"].endswith(":function:a-turn-worker:$LATEST")
    assert record["responseContext"]["functionError"] == "Unhandled"
    assert record["responsePayload"]["errorType"] == "RuntimeError"


def test_a_retry_waits_its_delay_without_holding_a_worker():
    fake_turn_worker.INVOKED.clear()
    registry = FunctionRegistry("a", package=FAKES)
    config = async_configs(registry, lambda spec: DLQ_URL)["a-turn-worker"]
    function = registry.by_name("a-turn-worker")
    now = [100.0]
    sent = Sent()
    invoker = AsyncInvoker(sent, workers=1, retry_delays_s=(60.0, 120.0), clock=lambda: now[0])
    try:
        invoker.submit(function, {"raise": True}, config)
        wait_for(lambda: fake_turn_worker.INVOKED == [{"raise": True}])
        invoker.submit(function, {"other": 1}, config)  # runs now, while the retry waits its minute
        wait_for(lambda: fake_turn_worker.INVOKED == [{"raise": True}, {"other": 1}])
        assert not invoker.idle()  # the retry is queued
        now[0] += 60.0
        invoker.submit(function, {"wake": 1}, config)
        wait_for(
            lambda: fake_turn_worker.INVOKED.count({"raise": True}) == 2 and {"wake": 1} in fake_turn_worker.INVOKED
        )
        assert sent.messages == []  # one retry left, due in two minutes
    finally:
        invoker.stop(1.0)


def test_an_event_older_than_its_maximum_age_is_not_run():
    fake_turn_worker.INVOKED.clear()
    registry = FunctionRegistry("a", package=FAKES)
    config = async_configs(registry, lambda spec: DLQ_URL)["a-turn-worker"]
    assert config.max_event_age_s == topology.ASYNC_INVOKES_BY_HANDLER["turn_worker"].max_event_age_s
    times = iter([0.0])  # queued at 0; whenever a worker looks again, it is past the event's age
    sent = Sent()
    invoker = AsyncInvoker(sent, workers=1, clock=lambda: next(times, config.max_event_age_s + 1.0))
    try:
        invoker.submit(registry.by_name("a-turn-worker"), {"late": True}, config)
        assert sent.arrived.wait(5.0)
        [(url, record)] = sent.messages
        assert url == DLQ_URL and record["requestPayload"] == {"late": True}
        assert record["requestContext"]["condition"] == "EventAgeExceeded" and "responsePayload" not in record
        assert fake_turn_worker.INVOKED == []
    finally:
        invoker.stop(1.0)


def test_request_response_answers_the_result_or_the_function_error(lambda_api):
    client, *_ = lambda_api
    answer = client.invoke(FunctionName="a-turn-worker", Payload=b'{"session_id": "s"}')
    assert answer["StatusCode"] == 200 and json.loads(answer["Payload"].read()) == {"echo": {"session_id": "s"}}
    failed = client.invoke(FunctionName="a-turn-worker", Payload=b'{"raise": true}')
    assert failed["FunctionError"] == "Unhandled"
    assert json.loads(failed["Payload"].read())["errorMessage"] == "asked to fail"
    assert client.invoke(FunctionName="a-turn-worker", InvocationType="DryRun")["StatusCode"] == 204


def test_an_arn_names_the_function_too(lambda_api):
    client, invoker, _, _ = lambda_api
    arn = "arn:aws:lambda:us-east-1:123456789012:function:a-turn-worker"
    assert client.invoke(FunctionName=arn, InvocationType="Event", Payload=b"{}")["StatusCode"] == 202
    wait_idle(invoker)
    assert fake_turn_worker.INVOKED == [{}]


@pytest.mark.parametrize(
    "name, payload, code",
    [
        ("nope", b"{}", "ResourceNotFoundException"),
        ("a-turn-worker", b"{not json", "InvalidRequestContentException"),
    ],
)
def test_bad_requests_get_lambda_s_errors_and_run_nothing(lambda_api, name, payload, code):
    client, invoker, _, _ = lambda_api
    with pytest.raises(ClientError) as info:
        client.invoke(FunctionName=name, InvocationType="Event", Payload=payload)
    assert info.value.response["Error"]["Code"] == code
    assert info.value.response["ResponseMetadata"]["HTTPStatusCode"] in (400, 404)
    wait_idle(invoker)
    assert fake_turn_worker.INVOKED == []


def test_the_production_adapter_reaches_it_through_the_standard_endpoint_variable(lambda_api, monkeypatch):
    _, invoker, _, server = lambda_api
    monkeypatch.setenv("AWS_ENDPOINT_URL_LAMBDA", base_url("127.0.0.1", server.port))
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    LambdaThinks(function_name="a-turn-worker", retry_queue_url="unused").start("s-1", 3, "00-abc-def-01")
    wait_idle(invoker)
    assert fake_turn_worker.INVOKED == [
        {"session_id": "s-1", "turn": 3, "traceparent": "00-abc-def-01", "first_start": True}
    ]
