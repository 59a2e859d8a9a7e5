"""The streaming functions' web server (flightdeck.handlers.web) as the Lambda Web Adapter drives it on AWS:
uvicorn on loopback, each request as the adapter forwards an invocation (the API Gateway request
context in x-amzn-request-context, the deadline in x-amzn-lambda-context), the real handlers on moto.
"""

from __future__ import annotations

import json
import socket
import threading
import time
import uuid
from contextlib import contextmanager

import httpx
import pytest
import uvicorn

from tests.support.harness import make_agent, new_session_id

STREAMING = {"STREAMING": "on", "STREAM_POLL_INTERVAL_MS": "100"}


@contextmanager
def web_server():
    from flightdeck.handlers.web import app

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    # Waited for, not given a fixed time: on a busy machine the server takes longer to start.
    started_by = time.monotonic() + 60
    while not server.started:
        assert thread.is_alive() and time.monotonic() < started_by, "the server did not start"
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(5)


def _adapter_headers(agent, resource: str) -> dict[str, str]:
    context = {
        "resourcePath": resource,
        "stage": "prod",
        "requestId": str(uuid.uuid4()),
        "apiId": "abc123",
        "identity": {"sourceIp": "127.0.0.1"},
        "authorizer": {"principalId": "tester"},
    }
    lambda_context = {
        "request_id": str(uuid.uuid4()),
        "deadline": int(time.time() * 1000) + 60_000,
        "invoked_function_arn": "arn:aws:lambda:us-east-1:123456789012:function:orchestrator-a2a",
    }
    return {
        **agent.auth_headers(),
        "x-amzn-request-context": json.dumps(context),
        "x-amzn-lambda-context": json.dumps(lambda_context),
    }


def _data_lines(text: str) -> list[dict]:
    return [json.loads(line[5:]) for line in text.splitlines() if line.startswith("data:")]


@pytest.fixture
def served(aws, monkeypatch):
    agent = make_agent(monkeypatch, extra_env=STREAMING)
    with web_server() as url:
        yield agent, url


def test_message_stream_through_the_web_server_as_the_adapter_forwards_it(served):
    agent, url = served
    message = {"kind": "message", "role": "user", "messageId": "m1", "parts": [{"kind": "text", "text": "hello moon"}]}
    body = {"jsonrpc": "2.0", "id": 7, "method": "message/stream", "params": {"message": message}}
    stop = threading.Event()

    def pump():
        while not stop.is_set():
            agent.run_queue("turns")
            time.sleep(0.05)

    threading.Thread(target=pump, daemon=True).start()
    try:
        with httpx.Client(timeout=30) as http:
            with http.stream("POST", f"{url}/a2a", json=body, headers=_adapter_headers(agent, "/a2a")) as response:
                assert response.status_code == 200
                assert response.headers["content-type"].startswith("text/event-stream")
                events = _data_lines(response.read().decode())
    finally:
        stop.set()
    assert all(e["jsonrpc"] == "2.0" and e["id"] == 7 for e in events)
    results = [e["result"] for e in events]
    assert results[0]["kind"] == "task" and results[-1]["kind"] == "status-update" and results[-1]["final"]
    assert results[-1]["status"]["state"] == "completed"
    answer = "".join(r["artifact"]["parts"][0]["text"] for r in results if r["kind"] == "artifact-update")
    assert "hello moon" in answer


def test_one_json_answer_for_the_other_methods_and_the_adapter_s_readiness_check(served):
    agent, url = served
    got = httpx.post(
        f"{url}/a2a",
        headers=_adapter_headers(agent, "/a2a"),
        json={"jsonrpc": "2.0", "id": 1, "method": "tasks/get", "params": {"id": "nope~abc"}},
    )
    assert got.headers["content-type"].startswith("application/json")
    assert got.json()["error"]["code"] == -32001
    refused = httpx.post(
        f"{url}/a2a",
        headers={k: v for k, v in _adapter_headers(agent, "/a2a").items() if k != "Authorization"},
        json={},
    )
    assert refused.status_code == 401 and "Bearer" in refused.headers["www-authenticate"]
    assert httpx.get(f"{url}/").status_code == 404  # healthy for the adapter (100-499), serves nothing


def test_session_events_through_the_web_server(served):
    agent, url = served
    sid = new_session_id()
    agent.api("chat_post", body={"session_id": sid, "content": "good morning"})
    agent.run_queue("turns")
    got = httpx.get(
        f"{url}/api/sessions/{sid}/events", headers=_adapter_headers(agent, "/api/sessions/{session_id}/events")
    )
    assert got.status_code == 200 and got.headers["content-type"].startswith("text/event-stream")
    assert [e["kind"] for e in _data_lines(got.text)] == ["message", "thinking", "answer", "idle"]
    missing = httpx.get(
        f"{url}/api/sessions/nobody/events", headers=_adapter_headers(agent, "/api/sessions/{session_id}/events")
    )
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "session_not_found"
