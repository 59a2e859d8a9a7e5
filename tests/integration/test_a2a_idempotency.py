"""The reliable-delivery extension's idempotent send (issue 39, ahead of A2A v1.1; flightdeck.domain.a2a.reliable):
a send retried with the same Idempotency-Key (header, or the extension's metadata) starts nothing new and is
answered with the same task, whatever its messageId; v0.3 and v1.0; racing retries too (the store's create
condition decides, not a read). Without a key nothing changes. Through the real handlers on moto."""

from __future__ import annotations

import json
import threading
import uuid

import pytest

from flightdeck.domain.a2a.reliable import RELIABLE_DELIVERY_URI

V1 = {"A2A-Version": "1.0"}


def _rpc(agent, method: str, params: dict, headers: dict | None = None) -> dict:
    body = {"jsonrpc": "2.0", "id": "1", "method": method, "params": params}
    status, _, resp = agent.api("a2a_message_send", body=body, headers=headers)
    assert status == 200, resp
    return resp


def _send(agent, version: str, text: str, headers: dict | None = None, metadata: dict | None = None) -> dict:
    """A send with a fresh messageId (as a client's retry mints), non-blocking; its JSON-RPC response."""
    if version == "0.3":
        message = {
            "kind": "message",
            "role": "user",
            "messageId": str(uuid.uuid4()),
            "parts": [{"kind": "text", "text": text}],
        }
        params = {"message": message, "configuration": {"blocking": False}}
        method, extra = "message/send", {}
    else:
        message = {"role": "ROLE_USER", "messageId": str(uuid.uuid4()), "parts": [{"text": text}]}
        params = {"message": message, "configuration": {"returnImmediately": True}}
        method, extra = "SendMessage", V1
    if metadata is not None:
        params["metadata"] = metadata
    return _rpc(agent, method, params, {**extra, **(headers or {})})


def _task_id(resp: dict, version: str) -> str:
    assert "error" not in resp, resp
    return resp["result"]["id"] if version == "0.3" else resp["result"]["task"]["id"]


def _tasks(agent) -> list[dict]:
    return [i for i in agent.table_items() if i["sk"]["S"].startswith("A2A#TASK#")]


@pytest.mark.parametrize("version", ["0.3", "1.0"])
@pytest.mark.parametrize("how", ["header", "metadata"])
def test_a_retried_send_with_the_same_key_answers_the_same_task(orchestrator, version, how):
    def retry(key: str) -> dict:
        if how == "header":
            return _send(orchestrator, version, "how far is the moon", headers={"Idempotency-Key": key})
        return _send(
            orchestrator, version, "how far is the moon", metadata={RELIABLE_DELIVERY_URI: {"idempotencyKey": key}}
        )

    first = _task_id(retry("k-1"), version)
    assert _task_id(retry("k-1"), version) == first  # while it works
    orchestrator.run_queue("turns")
    again = retry("k-1")  # and once it completed: the same task, as it stands
    assert _task_id(again, version) == first
    state = again["result"]["status"]["state"] if version == "0.3" else again["result"]["task"]["status"]["state"]
    assert state in ("completed", "TASK_STATE_COMPLETED")
    assert _task_id(retry("k-2"), version) != first  # another key: another task
    assert len(_tasks(orchestrator)) == 2
    assert len(orchestrator.receive("turns")) == 1  # k-2's turn; k-1's retries queued none


def test_without_a_key_each_new_message_id_is_a_new_task(orchestrator):
    first = _task_id(_send(orchestrator, "0.3", "one"), "0.3")
    orchestrator.run_queue("turns")
    assert _task_id(_send(orchestrator, "0.3", "one"), "0.3") != first


def test_racing_retries_with_one_key_make_one_task(orchestrator):
    ids: list[str] = []
    start = threading.Barrier(4)

    def run():
        start.wait()
        ids.append(_task_id(_send(orchestrator, "0.3", "race", headers={"Idempotency-Key": "race-1"}), "0.3"))

    threads = [threading.Thread(target=run) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(set(ids)) == 1 and len(ids) == 4
    assert len(_tasks(orchestrator)) == 1


@pytest.mark.parametrize("key", ["", "has space", "x" * 256, 7])
def test_a_bad_key_is_invalid_params(orchestrator, key):
    resp = _send(orchestrator, "0.3", "bad", metadata={RELIABLE_DELIVERY_URI: {"idempotencyKey": key}})
    assert resp["error"]["code"] == -32602 and "idempotencyKey" in resp["error"]["message"]
    assert _tasks(orchestrator) == []


def test_the_card_declares_the_extension_as_optional(orchestrator):
    status, _, card = orchestrator.api("agent_card_get", headers=V1)
    assert status == 200
    [ext] = [e for e in card["capabilities"]["extensions"] if e["uri"] == RELIABLE_DELIVERY_URI]
    assert ext["required"] is False and ext["params"]["idempotencyHeader"] == "Idempotency-Key"
    assert json.dumps(ext["params"]["follows"]).count("A2A#1987") == 1
