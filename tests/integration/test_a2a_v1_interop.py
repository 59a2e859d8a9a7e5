"""Interop with the strict a2a-sdk 1.x (issue 27): its client, in its own venv (tests/support/a2a1.py), against
our agent served over loopback HTTP (flightdeck.local.gateway, moto in-process, streaming on). The client
reads our card, picks JSONRPC 1.0, and goes through send (blocking by default), get, returnImmediately, push
configs with authentication (and the push itself, in v1.0's wrapper with its header), ListTasks, cancel, a
stream to its end, subscribe (refused on a finished task), a continuation by task id, input-required and its answer, and a typed error."""

from __future__ import annotations

import json
import subprocess
import threading
import time
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.integration.test_a2a_server import Webhook
from tests.support import a2a1
from tests.support.harness import make_agent
from tests.support.inprocess import gateway

STREAMING = {"STREAMING": "on", "STREAM_POLL_INTERVAL_MS": "100", "STREAM_KEEPALIVE_MS": "1000"}
CLIENT = Path(__file__).resolve().parents[1] / "support" / "a2a1_client.py"


@pytest.fixture(scope="module")
def sdk1_python():
    return a2a1.python()


@contextmanager
def pumping_unless(agent, hold: Path, *queues: str):
    """Run these queues' handlers in the background, except while `hold` exists."""
    stop = threading.Event()

    def loop():
        while not stop.is_set():
            if not hold.exists():
                for key in queues:
                    agent.run_queue(key)
            time.sleep(0.05)

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


def test_the_a2a_sdk_1x_client_against_our_agent(aws, monkeypatch, sdk1_python, tmp_path):
    hook = Webhook()
    try:
        with gateway("orchestrator") as url:
            agent = make_agent(monkeypatch, allow=f"worker:http://127.0.0.1:9,hooks:{hook.url}", extra_env=STREAMING)
            hold = tmp_path / "hold"
            with pumping_unless(agent, hold, "turns", "delivery"):
                run = subprocess.run(
                    [sdk1_python, str(CLIENT), url, agent.peer_token, hook.url, str(hold)],
                    capture_output=True,
                    text=True,
                    timeout=240,
                )
            assert run.returncode == 0, run.stderr[-4000:]
            seen = json.loads(run.stdout.strip().splitlines()[-1])
    finally:
        hook.close()
    assert ["JSONRPC", "1.0"] in seen["interfaces"] and seen["version_header"] == "1.0"
    assert seen["send"][0] == "TASK_STATE_COMPLETED" and "how far is the moon" in seen["send"][1]
    assert seen["get"] == ["TASK_STATE_COMPLETED", 1]
    assert seen["immediately"] == "TASK_STATE_WORKING"
    assert seen["push_created"] and seen["push_get"] and seen["push_list"] == ["cfg-1"]
    assert seen["list"][1] and seen["list"][2] >= 2 and seen["list_first_is_latest"]
    assert seen["cancel"] == "TASK_STATE_CANCELED" and seen["push_after_delete"] == 0
    assert seen["stream"][0] == "task" and seen["stream"][-1] == "status_update"
    assert seen["stream_end"] == "TASK_STATE_COMPLETED" and "name two rivers" in seen["stream_text"]
    assert seen["subscribe"][0] == "task" and seen["subscribe_finished"] == "UnsupportedOperationError"
    assert seen["continued_same_task"] and seen["continued"] == ["ROLE_USER", "ROLE_AGENT", "ROLE_USER", "ROLE_AGENT"]
    assert seen["asked"] == ["TASK_STATE_INPUT_REQUIRED", "which year?"]
    assert seen["answered"][0] == "TASK_STATE_COMPLETED" and "2024" in seen["answered"][1]
    assert seen["not_found"]
    # The cancel's push: v1.0's wrapper, the configured credentials as the header.
    [push] = [r for r in hook.requests if r["path"] == "/a2a"]
    headers = {k.lower(): v for k, v in push["headers"].items()}
    assert headers["authorization"] == "Bearer secret-1" and headers["x-a2a-notification-token"] == "tok-1"
    assert push["body"]["task"]["status"]["state"] == "TASK_STATE_CANCELED"
