"""What the official A2A TCK 1.0 (a2aproject/a2a-tck, branch 1.0-dev) found (issue 39), through the real handlers
on moto and over loopback HTTP (the local gateway): the endpoint with a trailing slash, every answer of the
JSON-RPC path in JSON-RPC, SubscribeToTask on a finished task, ProtoJSON's two spellings of a field name, the
card per A2A-Version with its cache headers, and v0.3's "default" push config."""

from __future__ import annotations

import json
import subprocess

import pytest
import requests
from a2a import types as sdk

from flightdeck.local.function_url import build_function_url_event
from tests.integration.test_a2a_server import rpc
from tests.integration.test_a2a_v1 import V1, call, err, ok, send
from tests.support import a2a1
from tests.support.harness import load_event, make_agent
from tests.support.inprocess import gateway, pumping


@pytest.fixture(scope="module")
def sdk1_python():
    return a2a1.python()


GET_TASK = {"jsonrpc": "2.0", "id": "r1", "method": "GetTask", "params": {"id": "a~b"}}


def _rpc_error(resp: requests.Response) -> dict:
    assert resp.headers["content-type"].startswith("application/json"), resp.headers
    body = resp.json()
    assert body["jsonrpc"] == "2.0" and "result" not in body, body
    return body["error"]


def test_the_endpoint_answers_json_rpc_with_and_without_a_trailing_slash(orchestrator):
    auth = {**orchestrator.auth_headers(), **V1}
    with gateway("orchestrator") as url:
        for path in ("/a2a", "/a2a/"):
            resp = requests.post(f"{url}{path}", json=GET_TASK, headers=auth, timeout=30)
            assert resp.status_code == 200 and _rpc_error(resp)["code"] == -32001, (path, resp.text)
            # The slash opens nothing: the token is checked there as well.
            assert requests.post(f"{url}{path}", json=GET_TASK, headers=V1, timeout=30).status_code == 401
            # Every refusal of the path is JSON-RPC: a GET, a body that is not JSON-typed, broken JSON.
            get = requests.get(f"{url}{path}", timeout=30)
            assert get.status_code == 405 and get.headers["allow"] == "POST"
            assert _rpc_error(get)["code"] == -32600
            typed = requests.post(f"{url}{path}", data="x", headers={**auth, "content-type": "text/plain"}, timeout=30)
            assert typed.status_code == 200 and _rpc_error(typed)["code"] == -32600
            broken = requests.post(f"{url}{path}", data="{", headers={**auth, "content-type": "application/json"})
            assert broken.status_code == 200 and _rpc_error(broken)["code"] == -32700


def _function_url_event(method: str, path: str, body: str, headers: dict[str, str]) -> dict:
    return build_function_url_event(
        method=method,
        raw_path=path,
        query_string="",
        headers=list(headers.items()),
        body=body.encode(),
        source_ip="127.0.0.1",
        url_id="test",
    )


def test_a_function_url_serves_the_slash_and_answers_other_paths_in_json_rpc(orchestrator):
    # The lean front door: the a2a function's own URL passes any path as sent.
    headers = {"content-type": "application/json", **orchestrator.auth_headers(), **V1}
    status, _, body = orchestrator.call(_function_url_event("POST", "/a2a/", json.dumps(GET_TASK), headers), "a2a")
    assert status == 200 and body["error"]["code"] == -32001, body
    status, _, body = orchestrator.call(_function_url_event("POST", "/a2a/", json.dumps(GET_TASK), V1), "a2a")
    assert status == 401, body
    status, _, body = orchestrator.call(_function_url_event("GET", "/a2a/", "", {}), "a2a")
    assert status == 405 and body["jsonrpc"] == "2.0" and body["error"]["code"] == -32600, body
    status, _, body = orchestrator.call(_function_url_event("POST", "/a2a/x", json.dumps(GET_TASK), headers), "a2a")
    assert status == 404 and body["jsonrpc"] == "2.0" and body["error"]["code"] == -32600, body


def test_proto_field_names_are_read_as_their_camel_case_and_an_unknown_field_is_refused(orchestrator):
    # ProtoJSON: a parser takes the proto name (task_id) and the lowerCamelCase one (taskId) alike.
    task = send(orchestrator, "a task")
    assert "history" in ok(call(orchestrator, "GetTask", {"id": task["id"]}))
    assert "history" not in ok(call(orchestrator, "GetTask", {"id": task["id"], "history_length": 0}))
    hook = "http://127.0.0.1:9/hook"  # under the allowlist's worker entry
    for n in (1, 2):
        created = ok(
            call(orchestrator, "CreateTaskPushNotificationConfig", {"task_id": task["id"], "id": f"c{n}", "url": hook})
        )
        assert created == {"taskId": task["id"], "id": f"c{n}", "url": hook}
    assert ok(call(orchestrator, "GetTaskPushNotificationConfig", {"task_id": task["id"], "id": "c1"}))["id"] == "c1"
    page = ok(call(orchestrator, "ListTaskPushNotificationConfigs", {"task_id": task["id"], "page_size": 1}))
    assert len(page["configs"]) == 1 and page["nextPageToken"]
    listed = ok(call(orchestrator, "ListTasks", {"page_size": 1, "include_artifacts": False}))
    assert len(listed["tasks"]) == 1
    sent = {
        "message": {"message_id": "m-snake", "role": "ROLE_USER", "parts": [{"text": "hi"}]},
        "configuration": {"return_immediately": True},
    }
    started = ok(call(orchestrator, "SendMessage", sent))["task"]  # returned at once, as return_immediately asks
    assert started["status"]["state"] != "TASK_STATE_COMPLETED" and started["history"][0]["messageId"] == "m-snake"
    # A field the request does not define is refused, naming it, not dropped with what it asked for.
    unknown = err(call(orchestrator, "GetTask", {"id": task["id"], "historyLen": 1}), -32602, "INVALID_PARAMS")
    assert "historyLen" in unknown["message"]
    nested = {"message": {**sent["message"], "message_id": "m-2", "kind": "message"}}
    assert "kind" in err(call(orchestrator, "SendMessage", nested), -32602, "INVALID_PARAMS")["message"]
    # One field under both of its names is ambiguous.
    both = {"id": task["id"], "historyLength": 1, "history_length": 2}
    assert "history_length" in err(call(orchestrator, "GetTask", both), -32602, "INVALID_PARAMS")["message"]


STREAMING = {"STREAMING": "on", "STREAM_POLL_INTERVAL_MS": "100", "STREAM_KEEPALIVE_MS": "1000"}


def _rpc(method: str, params: dict) -> dict:
    return {"jsonrpc": "2.0", "id": "s1", "method": method, "params": params}


def _sse_results(resp: requests.Response) -> list[dict]:
    assert resp.headers["content-type"].startswith("text/event-stream"), resp.headers
    return [json.loads(line[5:]) for line in resp.text.splitlines() if line.startswith("data:")]


def test_subscribing_to_a_finished_task_is_unsupported_in_v1_and_replays_it_in_v03(aws, monkeypatch):
    agent = make_agent(monkeypatch, extra_env=STREAMING)
    headers = {**agent.auth_headers(), "Accept": "text/event-stream"}
    with gateway("orchestrator") as url, pumping(agent, "turns"):
        sent = {"message": {"messageId": "m-done", "role": "ROLE_USER", "parts": [{"text": "name a river"}]}}
        done = requests.post(f"{url}/a2a", json=_rpc("SendMessage", sent), headers={**headers, **V1}, timeout=60)
        task = done.json()["result"]["task"]
        assert task["status"]["state"] == "TASK_STATE_COMPLETED", task
        subscribed = requests.post(
            f"{url}/a2a", json=_rpc("SubscribeToTask", {"id": task["id"]}), headers={**headers, **V1}, timeout=30
        )
        # Refused before any stream opens: one JSON-RPC response, as a2a-sdk 1.x's server answers it.
        assert subscribed.headers["content-type"].startswith("application/json")
        refused = subscribed.json()
        assert refused["error"]["code"] == -32004 and "completed" in refused["error"]["message"], refused
        assert refused["error"]["data"][0]["reason"] == "UNSUPPORTED_OPERATION"
        # v0.3's tasks/resubscribe is as it was: the task, then its final status.
        replay = requests.post(f"{url}/a2a", json=_rpc("tasks/resubscribe", {"id": task["id"]}), headers=headers)
        first, last = _sse_results(replay)
        assert first["result"]["kind"] == "task" and last["result"]["final"] is True


# Run in a2a-sdk 1.x's venv: the strict card through protobuf's ParseDict (an unknown field is an error), the
# merged one through the SDK's own card parser (which reads v0.3's members).
PARSE_CARDS = """
import json, sys
from google.protobuf import json_format
from a2a.client.card_resolver import parse_agent_card
from a2a.types import a2a_pb2 as pb
cards = json.load(sys.stdin)
strict = json_format.ParseDict(cards["v1"], pb.AgentCard())
merged = parse_agent_card(cards["merged"])
print(json.dumps([[(i.protocol_binding, i.protocol_version) for i in c.supported_interfaces] for c in (strict, merged)]))
"""


def test_the_card_is_v1s_exact_agent_card_when_asked_for_and_the_merged_one_otherwise(orchestrator, sdk1_python):
    def card(headers=None, query=None, status=200):
        event = load_event("api/agent_card_get.json")
        event["headers"] = {**event["headers"], **(headers or {})}
        event["queryStringParameters"] = query
        got, response_headers, body = orchestrator.call(event)
        assert got == status, body
        return response_headers, body

    _, merged = card()
    v1_headers, v1_card = card(V1)
    assert card({"a2a-version": "1.0"})[1] == v1_card and card(query={"A2A-Version": "1.0"})[1] == v1_card
    # Without A2A-Version a client is a v0.3 one (A2A v1.0, 3.2.6): the a2a-sdk 0.3 parses the merged card.
    sdk.AgentCard.model_validate(merged)
    assert merged["url"] == v1_card["supportedInterfaces"][0]["url"] and merged["protocolVersion"] == "0.3.0"
    # v1.0's card holds a2a.proto's AgentCard fields and nothing else, at every depth.
    assert not {"url", "preferredTransport", "protocolVersion", "security"} & set(v1_card)
    assert "stateTransitionHistory" not in v1_card["capabilities"]
    assert all(set(s) == {"httpAuthSecurityScheme"} for s in v1_card["securitySchemes"].values())
    parsed = subprocess.run(
        [sdk1_python, "-c", PARSE_CARDS],
        input=json.dumps({"v1": v1_card, "merged": merged}),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert parsed.returncode == 0, parsed.stderr[-3000:]
    strict, lenient = json.loads(parsed.stdout)
    assert strict == lenient and ["JSONRPC", "1.0"] in strict and ["JSONRPC", "0.3.0"] in strict
    # Cache headers (A2A v1.0, 8.6): one ETag per card, 304 for the one a client holds.
    assert v1_headers["cache-control"] == "public, max-age=300" and v1_headers["vary"] == "A2A-Version"
    merged_etag = card()[0]["etag"]
    assert merged_etag != v1_headers["etag"] and card(V1)[0]["etag"] == v1_headers["etag"]
    headers, body = card({**V1, "If-None-Match": f'W/{v1_headers["etag"]}, "other"'}, status=304)
    assert not body and headers["etag"] == v1_headers["etag"]
    card({"If-None-Match": v1_headers["etag"]}, status=200)  # the merged card is another card than the one held


def test_v03_push_config_default_is_the_tasks_config_set_without_an_id(orchestrator):
    task = ok(
        rpc(
            orchestrator,
            "message/send",
            {
                "message": {
                    "kind": "message",
                    "role": "user",
                    "messageId": "m-d",
                    "parts": [{"kind": "text", "text": "x"}],
                }
            },
        )
    )
    config = {"url": "http://127.0.0.1:9/hook"}
    ok(rpc(orchestrator, "tasks/pushNotificationConfig/set", {"taskId": task["id"], "pushNotificationConfig": config}))
    got = ok(
        rpc(orchestrator, "tasks/pushNotificationConfig/get", {"id": task["id"], "pushNotificationConfigId": "default"})
    )
    assert got == {"taskId": task["id"], "pushNotificationConfig": {**config, "id": task["id"]}}
    # Any other id names that config only.
    missing = rpc(orchestrator, "tasks/pushNotificationConfig/get", {"id": task["id"], "pushNotificationConfigId": "x"})
    assert missing["error"]["code"] == -32602
