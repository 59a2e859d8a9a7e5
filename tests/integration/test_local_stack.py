"""LocalStack's own mechanics, with stand-in handlers (tests/local_fake_handlers):
processes, environment, log listeners, queue polling, the sweep, restarts and clean stops."""

from __future__ import annotations

import contextlib
import io
import json
import os
import socket
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from flightdeck import config_file, topology
from flightdeck.local.resources import local_client
from flightdeck.local.stack import LocalStack, PortInUseError

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
FAKES = "tests.local_fake_handlers"
_direct = urllib.request.build_opener(urllib.request.ProxyHandler({}))


class Records:
    """Collects the JSON log records the stack offers its listeners."""

    def __init__(self) -> None:
        self.items: list[tuple[str, dict[str, Any]]] = []
        self._changed = threading.Condition()

    def __call__(self, agent: str, record: dict[str, Any]) -> None:
        with self._changed:
            self.items.append((agent, record))
            self._changed.notify_all()

    def wait_for(self, predicate, timeout_s: float = 10.0) -> tuple[str, dict[str, Any]]:
        deadline = time.monotonic() + timeout_s
        with self._changed:
            while True:
                for item in self.items:
                    if predicate(*item):
                        return item
                remaining = deadline - time.monotonic()
                assert remaining > 0, f"no matching record among {self.items}"
                self._changed.wait(remaining)


def _get(url: str) -> tuple[int, Any]:
    with _direct.open(url, timeout=10) as response:
        return response.status, json.loads(response.read())


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"


@contextlib.contextmanager
def fakes_importable() -> Iterator[None]:
    """Children inherit PYTHONPATH: let them import the stand-in handlers from the repository root."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
        yield


@pytest.fixture(scope="module")
def stack() -> Iterator[LocalStack]:
    relay = io.StringIO()
    with (
        fakes_importable(),
        LocalStack(
            handlers_package=FAKES, relay=relay, url_overrides={"worker": "http://127.0.0.1:9/proxy"}
        ) as running,
    ):
        running.test_relay = relay  # type: ignore[attr-defined]
        yield running


def test_every_agent_answers_on_its_url(stack):
    for name, url in stack.urls.items():
        status, echo = _get(url + "/.well-known/agent-card.json")
        assert status == 200
        assert echo["context"]["function_name"] == f"{name}-agent-card"
        assert echo["event"]["resource"] == "/.well-known/agent-card.json"


def test_environment_is_composed_from_the_config_topology_and_overrides(stack):
    deployment = config_file.load(config_file.DEFAULT_CONFIG)
    env = stack.env("orchestrator")
    assert env["AGENT_NAME"] == "orchestrator"
    assert env["PUBLIC_BASE_URL"] == stack.urls["orchestrator"]
    assert env["STATE_TABLE"] == topology.table_name("orchestrator")
    for spec in topology.QUEUES:
        assert env[f"{spec.key.upper()}_QUEUE_URL"].endswith("/" + spec.name("orchestrator"))
    assert env["TOOL_CALLBACK_SECRET"] == deployment.agents["orchestrator"].callback_secret
    assert json.loads(env["AGENT_CONFIG"])["delegates"][0]["agent"] == "worker"
    # Peers reach the worker through the override; the worker itself keeps its real URL.
    assert env["ALLOWED_HOST_MAPPING"] == "worker:http://127.0.0.1:9/proxy"
    assert stack.env("worker")["ALLOWED_HOST_MAPPING"] == f"orchestrator:{stack.urls['orchestrator']}"
    assert stack.env("worker")["PUBLIC_BASE_URL"] == stack.urls["worker"]
    assert env["ASYNC_TOOL_TIMEOUT_MS"] == deployment.defaults["ASYNC_TOOL_TIMEOUT_MS"]
    assert env["AWS_ENDPOINT_URL"] == stack.moto_endpoint
    # Lambda's Invoke API is each agent's own (flightdeck.local.lambda_api), on loopback.
    lambda_urls = {stack.env(name)["AWS_ENDPOINT_URL_LAMBDA"] for name in stack.agents}
    assert len(lambda_urls) == len(stack.agents) and all(u.startswith("http://127.0.0.1:") for u in lambda_urls)
    assert env["TURN_WORKER_FUNCTION"] == "orchestrator-turn-worker"
    assert env["POWERTOOLS_SERVICE_NAME"] == "orchestrator"
    assert env["POWERTOOLS_METRICS_NAMESPACE"] == "Flightdeck"


def test_queue_messages_reach_the_agents_handler_and_its_logs_reach_listeners(stack):
    records = Records()
    stack.add_listener(records)
    try:
        sqs = local_client("sqs", stack.moto_endpoint)
        sqs.send_message(QueueUrl=stack.resources["worker"].queue_urls["delivery"], MessageBody="deliver-me")
        agent, record = records.wait_for(lambda a, r: "deliver-me" in r.get("bodies", []))
        assert agent == "worker" and record["function"] == "worker-delivery-worker"
        # Handled without failure: deleted.
        deadline = time.monotonic() + 30  # a bound on the wait, generous for a busy machine
        while time.monotonic() < deadline:
            attrs = sqs.get_queue_attributes(
                QueueUrl=stack.resources["worker"].queue_urls["delivery"],
                AttributeNames=["ApproximateNumberOfMessagesNotVisible"],
            )
            if attrs["Attributes"]["ApproximateNumberOfMessagesNotVisible"] == "0":
                break
            time.sleep(0.1)
        else:
            pytest.fail("the handled message was not deleted")
    finally:
        stack.remove_listener(records)
    assert "worker" in stack.test_relay.getvalue()  # type: ignore[attr-defined]


def invoke_async(stack, agent: str, event: dict[str, Any]) -> dict[str, Any]:
    lam = local_client("lambda", stack.env(agent)["AWS_ENDPOINT_URL_LAMBDA"])
    return lam.invoke(FunctionName=f"{agent}-turn-worker", InvocationType="Event", Payload=json.dumps(event))


def test_an_asynchronous_invoke_through_the_agent_s_lambda_api_runs_its_function(stack):
    records = Records()
    stack.add_listener(records)
    try:
        answer = invoke_async(stack, "worker", {"session_id": "s-local", "turn": 1})
        assert answer["StatusCode"] == 202
        agent, record = records.wait_for(
            lambda a, r: r.get("timeline") == "fake_invoke" and r["event"].get("session_id") == "s-local"
        )
        assert agent == "worker" and record["function"] == "worker-turn-worker"
    finally:
        stack.remove_listener(records)


def test_the_sweep_fires_on_schedule_for_every_agent(stack):
    records = Records()
    stack.add_listener(records)
    try:
        for name in stack.agents:  # TOOL_AGG_PUNCTUATE_INTERVAL_MS is 1000 in the example
            _, record = records.wait_for(lambda a, r, name=name: a == name and r.get("timeline") == "fake_sweep")
            assert record["resources"] == [f"arn:aws:events:us-east-1:123456789012:rule/{name}-sweep"]
    finally:
        stack.remove_listener(records)


def test_a_port_in_use_is_reported_before_anything_starts(stack):
    port = int(stack.urls["worker"].rsplit(":", 1)[1])
    with pytest.raises(PortInUseError) as info:
        LocalStack(port=port - 1, relay=None).start()  # the second agent would need the worker's port
    assert info.value.port in (port - 1, port)


def test_an_agent_can_be_stopped_and_started_again_on_its_port(stack):
    url = stack.urls["worker"]
    pid = stack.pids()["worker"]
    stack.stop_agent("worker")
    assert not _alive(pid)
    assert not stack.is_running("worker")
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", int(url.rsplit(":", 1)[1])), timeout=1).close()
    stack.start_agent("worker")
    assert stack.urls["worker"] == url
    assert _get(url + "/.well-known/agent-card.json")[0] == 200
    assert invoke_async(stack, "worker", {"session_id": "s-restarted", "turn": 1})["StatusCode"] == 202  # same port


def test_stop_ends_every_process():
    with fakes_importable():
        local = LocalStack(handlers_package=FAKES, relay=None).start()
    pids = local.pids()
    assert set(pids) == {"moto", "orchestrator", "worker"}
    local.stop()
    local.stop()  # idempotent
    assert [name for name, pid in pids.items() if _alive(pid)] == []
