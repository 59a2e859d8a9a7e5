"""Our client side in A2A v1.0 (issue 27): a delegation to an A2A peer reads its card, speaks v1.0 when the card
offers JSONRPC 1.0 (A2A-Version: 1.0, SendMessage / GetTask / CancelTask, v1.0 shapes) and v0.3 otherwise.
Against a strict a2a-sdk 1.x agent (v1.0 only, run from its own venv: tests/support/a2a1.py), polled and
pushing; against our own agent in both versions (two agents in one process, each behind its relay)."""

from __future__ import annotations

import json
import subprocess
import time
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.support import a2a1
from tests.support.harness import make_agent, new_session_id
from tests.support.inprocess import gateway
from tests.support.relay import AgentRelay

SERVER = Path(__file__).resolve().parents[1] / "support" / "a2a1_server.py"


@pytest.fixture(scope="module")
def sdk1_python():
    return a2a1.python()


@contextmanager
def sdk1_agent(python: str, push: bool):
    proc = subprocess.Popen([python, str(SERVER), "1" if push else "0"], stdout=subprocess.PIPE, text=True)
    try:
        url = proc.stdout.readline().strip()
        assert url.startswith("http://"), "the a2a-sdk 1.x agent did not start"
        yield url
    finally:
        proc.kill()
        proc.wait(5)


def _wait_for(predicate, timeout_s: float = 15.0):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError("timed out waiting")


def _orchestrator(monkeypatch, peer: str, card_url: str, allow: str, **env: str):
    config = {
        "name": "orchestrator",
        "model": {"provider": "local"},
        "delegates": [{"agent": peer, "protocol": "a2a", "card_url": card_url}],
    }
    return make_agent(
        monkeypatch,
        delegates=[],
        allow=allow,
        extra_env={"AGENT_CONFIG": json.dumps(config), "ASYNC_TOOL_TIMEOUT_MS": "20000", **env},
    )


def _result(agent, sid: str) -> dict:
    s = agent.api("session_get", SESSION_ID=sid)[2]
    assert s["status"] == "idle", s
    return s["messages"][2]["content"][0]["toolResult"]


@pytest.mark.parametrize("push", [False, True], ids=["polled", "pushing"])
def test_delegate_to_a_strict_a2a_sdk_1x_agent(aws, monkeypatch, sdk1_python, push):
    from flightdeck.domain.a2a.client import clear_card_cache

    clear_card_cache()
    with sdk1_agent(sdk1_python, push) as peer_url, gateway("orchestrator") as gateway_url:
        agent = _orchestrator(
            monkeypatch,
            "echo",
            f"{peer_url}/.well-known/agent-card.json",
            f"echo:{peer_url},orchestrator:{gateway_url}",
        )
        sid = new_session_id()
        assert agent.api("chat_post", body={"session_id": sid, "content": "@echo hello there"})[0] == 202
        agent.run_queue("turns")
        assert agent.run_queue("dispatch") == {"batchItemFailures": []}
        [remote] = [i for i in agent.table_items() if i["sk"]["S"].startswith("A2A#REMOTE#")]
        assert json.loads(remote["extra"]["S"]) == {"a2a": "1.0"}
        if push:
            # a2a-sdk 1.x pushes each event as a StreamResponse; the terminal status update has no artifacts,
            # so the receiver reads the task (GetTask) for its answer.
            turns = _wait_for(lambda: agent.receive("turns"))
        else:

            def polled():
                polls = agent.receive("timers")
                if polls:
                    agent.run_queue("timers", polls)
                return agent.receive("turns")

            turns = _wait_for(polled)
        agent.run_queue("turns", turns)
    result = _result(agent, sid)
    assert result["status"] == "success" and result["content"][0]["text"] == "echo: hello there"


@pytest.fixture
def relays():
    to_orchestrator, to_worker = AgentRelay(), AgentRelay()
    yield to_orchestrator, to_worker
    to_orchestrator.close()
    to_worker.close()


@pytest.mark.parametrize("version", ["1.0", "0.3"])
def test_delegate_to_our_own_agent_in_both_versions(aws, monkeypatch, relays, version):
    from flightdeck.domain.a2a import wire_v1
    from flightdeck.domain.a2a.client import clear_card_cache

    clear_card_cache()
    if version == "0.3":  # a card without the 1.0 interface: the client falls back to v0.3
        monkeypatch.setattr(wire_v1, "offers_v1", lambda card: None)
    to_orchestrator, to_worker = relays
    allow = f"worker:{to_worker.url},orchestrator:{to_orchestrator.url}"
    worker = make_agent(monkeypatch, "worker", delegates=[], allow=allow, extra_env={"PUBLIC_BASE_URL": to_worker.url})
    token = worker.add_peer("orchestrator")
    orchestrator = _orchestrator(
        monkeypatch,
        "worker",
        f"{to_worker.url}/.well-known/agent-card.json",
        allow,
        PEER_TOKENS=json.dumps({"worker": token}),
        PUBLIC_BASE_URL=to_orchestrator.url,
    )
    to_orchestrator.agent, to_worker.agent = orchestrator, worker
    sid = new_session_id()
    assert orchestrator.api("chat_post", body={"session_id": sid, "content": "@worker hello"})[0] == 202
    orchestrator.run_queue("turns")
    orchestrator.run_queue("dispatch")
    [send] = [json.loads(e.body) for e in to_worker.exchanges if e.path == "/a2a"]
    if version == "1.0":
        assert send["method"] == "SendMessage"
        assert send["params"]["message"]["role"] == "ROLE_USER" and "kind" not in send["params"]["message"]
        assert send["params"]["configuration"]["returnImmediately"] is True
        assert send["params"]["configuration"]["taskPushNotificationConfig"]["url"].endswith("/api/a2a/push")
    else:
        assert send["method"] == "message/send" and send["params"]["message"]["kind"] == "message"
    pushes_before = len(to_orchestrator.exchanges)
    with worker.acting():
        worker.run_queue("turns")  # the worker answers; its push goes out on the delivery queue
        worker.run_queue("delivery")
    [push] = [json.loads(e.body) for e in to_orchestrator.exchanges[pushes_before:] if e.path == "/api/a2a/push"]
    # A config sent in SendMessage is a v1.0 config: its pushes are v1.0's wrapper.
    assert ("task" in push and push["task"]["status"]["state"] == "TASK_STATE_COMPLETED") == (version == "1.0")
    orchestrator.activate()
    orchestrator.run_queue("turns")
    result = _result(orchestrator, sid)
    assert result["status"] == "success" and result["content"][0]["text"], result
    assert orchestrator.turn_item(sid, 1)["completed_by"] == "callback"  # the push receiver


def test_a_canceled_session_cancels_its_delegation_at_a_strict_a2a_sdk_1x_agent(aws, monkeypatch, sdk1_python):
    """Our CancelTask reaches the 1.x delegate: the session is canceled while the delegate works, and the
    delegate's own task ends TASK_STATE_CANCELED (read back from it with its v1.0 GetTask)."""
    import httpx

    from flightdeck.domain.a2a.client import clear_card_cache

    clear_card_cache()
    with sdk1_agent(sdk1_python, False) as peer_url, gateway("orchestrator") as gateway_url:
        agent = _orchestrator(
            monkeypatch,
            "echo",
            f"{peer_url}/.well-known/agent-card.json",
            f"echo:{peer_url},orchestrator:{gateway_url}",
        )
        sid = new_session_id()
        assert agent.api("chat_post", body={"session_id": sid, "content": "@echo a slow job"})[0] == 202
        agent.run_queue("turns")
        assert agent.run_queue("dispatch") == {"batchItemFailures": []}
        [remote] = [i for i in agent.table_items() if i["sk"]["S"].startswith("A2A#REMOTE#")]
        task_id = remote["remote_task_id"]["S"]

        def peer_state() -> str:
            body = {"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": task_id}}
            answer = httpx.post(f"{peer_url}/a2a", json=body, headers={"A2A-Version": "1.0"}, timeout=10).json()
            return str(answer["result"]["status"]["state"])

        assert peer_state() == "TASK_STATE_WORKING"
        assert agent.api("session_cancel", SESSION_ID=sid)[0] == 200
        agent.run_queue("dispatch")  # a cancel not made inline is retried from the dispatch queue
        assert _wait_for(lambda: peer_state() == "TASK_STATE_CANCELED")
    session = agent.api("session_get", SESSION_ID=sid)[2]
    result = session["messages"][2]["content"][0]["toolResult"]
    assert session["status"] == "idle" and json.loads(result["content"][0]["text"])["reason"] == "canceled"
