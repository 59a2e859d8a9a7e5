"""A2A v1.0 beside v0.3 on POST /a2a (issue 27), through the real handlers on moto: routing by method name
and A2A-Version, v1.0 shapes (no kind, enum names, flat parts and push configs, {"task": ...}), errors with
typed data, ListTasks (own tasks, paged, latest first), push bodies in v1.0's wrapper with their credentials,
and the merged card. The strict a2a-sdk 1.x client: tests/integration/test_a2a_v1_interop.py."""

from __future__ import annotations

import base64
import json
import time

import pytest

from tests.integration.test_a2a_server import Webhook, rpc
from tests.support.harness import make_agent

V1 = {"A2A-Version": "1.0"}


def call(agent, method: str, params=None, *, headers=V1, raw=None, request_id="r1"):
    body = raw if raw is not None else {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params or {}}
    status, response_headers, resp = agent.api("a2a_message_send", body=body, headers=dict(headers))
    assert status == 200, (status, resp)
    assert response_headers["content-type"].startswith("application/json")
    return resp


def ok(resp):
    assert "error" not in resp, resp
    return resp["result"]


def err(resp, code: int, reason: str):
    assert "result" not in resp and resp["error"]["code"] == code, resp
    info = resp["error"]["data"][0]
    assert info["@type"] == "type.googleapis.com/google.rpc.ErrorInfo"
    assert (info["reason"], info["domain"]) == (reason, "a2a-protocol.org")
    assert all(isinstance(v, str) for v in info["metadata"].values())
    return resp["error"]


def msg(text: str, **extra):
    return {"messageId": f"m-{time.monotonic_ns()}", "role": "ROLE_USER", "parts": [{"text": text}], **extra}


def send(agent, text: str, *, immediately=True, **extra):
    params = {"message": msg(text, **extra), "configuration": {"returnImmediately": immediately}}
    result = ok(call(agent, "SendMessage", params))
    assert set(result) == {"task"}
    return result["task"]


def _no_kind(value) -> None:
    if isinstance(value, dict):
        assert "kind" not in value and "final" not in value, value
        for v in value.values():
            _no_kind(v)
    elif isinstance(value, list):
        for v in value:
            _no_kind(v)


def test_send_get_cancel_in_v1_shapes(orchestrator):
    task = send(orchestrator, "@worker a long job")
    _no_kind(task)
    assert task["status"]["state"] == "TASK_STATE_WORKING"
    assert task["history"][0]["role"] == "ROLE_USER" and task["history"][0]["parts"] == [{"text": "@worker a long job"}]
    orchestrator.run_queue("turns")  # delegated; the worker is never reached
    got = ok(call(orchestrator, "GetTask", {"id": task["id"], "historyLength": 1}))
    assert got["id"] == task["id"] and len(got.get("history", [])) <= 1
    canceled = ok(call(orchestrator, "CancelTask", {"id": task["id"]}))
    assert canceled["status"]["state"] == "TASK_STATE_CANCELED"
    again = err(call(orchestrator, "CancelTask", {"id": task["id"]}), -32002, "TASK_NOT_CANCELABLE")
    assert again["data"][0]["metadata"]["state"] == "canceled"
    err(call(orchestrator, "GetTask", {"id": "nope~abc"}), -32001, "TASK_NOT_FOUND")


def test_a_v1_send_waits_for_the_end_by_default_and_answers_with_the_artifact(orchestrator):
    from tests.support.inprocess import pumping

    with pumping(orchestrator, "turns"):
        task = send(orchestrator, "how far is the moon", immediately=False)
    assert task["status"]["state"] == "TASK_STATE_COMPLETED"
    [artifact] = task["artifacts"]
    assert "how far is the moon" in artifact["parts"][0]["text"]
    assert task["status"]["message"]["role"] == "ROLE_AGENT"


def test_v1_parts_data_raw_and_url(orchestrator):
    import base64

    data = send(orchestrator, "x", parts=[{"data": {"pages": 3}}, {"data": [1, 2]}])
    assert data["history"][0]["parts"][0] == {"data": {"pages": 3}}
    raw = base64.b64encode(b"hello file").decode()
    filed = send(orchestrator, "x", parts=[{"raw": raw, "mediaType": "text/plain", "filename": "a.txt"}])
    assert filed["history"][0]["parts"] == [{"raw": raw, "mediaType": "text/plain", "filename": "a.txt"}]
    by_url = {"message": msg("x", parts=[{"url": "https://example.com/a.pdf", "mediaType": "application/pdf"}])}
    err(call(orchestrator, "SendMessage", by_url), -32005, "CONTENT_TYPE_NOT_SUPPORTED")
    two = {"message": msg("x", parts=[{"text": "a", "data": {"b": 1}}])}
    err(call(orchestrator, "SendMessage", two), -32602, "INVALID_PARAMS")


def test_versions_route_by_method_name_and_header(orchestrator):
    v03 = {
        "message": {"kind": "message", "role": "user", "messageId": "m-1", "parts": [{"kind": "text", "text": "hi"}]}
    }
    # v0.3 names under A2A-Version 1.0: the version is the mismatch.
    error = err(call(orchestrator, "message/send", v03), -32009, "VERSION_NOT_SUPPORTED")
    assert error["data"][0]["metadata"]["method"] == "message/send"
    # v1.0 names under an explicit 0.3 likewise; an unknown version for any method.
    err(call(orchestrator, "GetTask", {"id": "a~b"}, headers={"A2A-Version": "0.3"}), -32009, "VERSION_NOT_SUPPORTED")
    err(call(orchestrator, "GetTask", {"id": "a~b"}, headers={"A2A-Version": "2.0"}), -32009, "VERSION_NOT_SUPPORTED")
    err(call(orchestrator, "tasks/get", {"id": "a~b"}, headers={"A2A-Version": "abc"}), -32009, "VERSION_NOT_SUPPORTED")
    # No header: v0.3 names are v0.3 (errors without typed data), v1.0 names are v1.0.
    plain = call(orchestrator, "tasks/get", {"id": "a~b"}, headers={})
    assert plain["error"]["code"] == -32001 and not isinstance(plain["error"].get("data"), list)
    err(call(orchestrator, "GetTask", {"id": "a~b"}, headers={}), -32001, "TASK_NOT_FOUND")
    assert ok(call(orchestrator, "message/send", v03, headers={"A2A-Version": "0.3"}))["kind"] == "task"
    # Header names are case-insensitive; a patch release is the same version.
    err(call(orchestrator, "GetTask", {"id": "a~b"}, headers={"a2a-version": "1.0.2"}), -32001, "TASK_NOT_FOUND")
    err(call(orchestrator, "NoSuchMethod", {}), -32601, "METHOD_NOT_FOUND")


@pytest.mark.parametrize(
    "raw,code",
    [
        ("{", -32700),
        ('{"a": ' * 40 + "1" + "}" * 40, -32700),
        ("[]", -32600),
        ({"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": []}, -32602),
        ({"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": {"role": "ROLE_USER"}}}, -32602),
        ({"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": msg("x", role="user")}}, -32602),
        ({"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": "x", "historyLength": -1}}, -32602),
        ({"jsonrpc": "2.0", "id": 1, "method": "ListTasks", "params": {"pageSize": 0}}, -32602),
        ({"jsonrpc": "2.0", "id": 1, "method": "ListTasks", "params": {"pageToken": "garbage!"}}, -32602),
        ({"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": "\ud800"}}, -32602),
        ({"jsonrpc": "2.0", "method": "GetTask", "params": {"id": "a~b"}}, -32600),
        ({"jsonrpc": "2.0", "id": 1, "method": "GetExtendedAgentCard", "params": {}}, -32007),
    ],
)
def test_hostile_and_wrong_v1_bodies_get_json_rpc_errors_and_change_nothing(orchestrator, raw, code):
    body = raw if isinstance(raw, str) else json.dumps(raw)
    resp = call(orchestrator, "", raw=body)
    assert resp["error"]["code"] == code, resp
    assert isinstance(resp["error"]["data"], list) and resp["error"]["data"][0]["domain"] == "a2a-protocol.org"


def test_list_tasks_pages_the_callers_own_tasks_latest_first(orchestrator, monkeypatch):
    ids = [send(orchestrator, f"task {i}")["id"] for i in range(5)]
    first = ok(call(orchestrator, "ListTasks", {"pageSize": 2}))
    assert [t["id"] for t in first["tasks"]] == ids[::-1][:2]
    assert first["totalSize"] == 5 and first["pageSize"] == 2 and first["nextPageToken"]
    assert all("history" not in t and "artifacts" not in t for t in first["tasks"])
    seen = [t["id"] for t in first["tasks"]]
    token = first["nextPageToken"]
    while token:
        page = ok(call(orchestrator, "ListTasks", {"pageSize": 2, "pageToken": token}))
        seen += [t["id"] for t in page["tasks"]]
        token = page["nextPageToken"]
    assert seen == ids[::-1]
    # A task that moves is listed first again.
    ok(call(orchestrator, "CancelTask", {"id": ids[1]}))
    assert ok(call(orchestrator, "ListTasks", {"pageSize": 1}))["tasks"][0]["id"] == ids[1]
    canceled = ok(call(orchestrator, "ListTasks", {"status": "TASK_STATE_CANCELED"}))
    assert [t["id"] for t in canceled["tasks"]] == [ids[1]]
    with_history = ok(call(orchestrator, "ListTasks", {"pageSize": 1, "historyLength": 1}))
    assert len(with_history["tasks"][0]["history"]) == 1
    # One context's tasks; another peer sees none of them, and cannot use this caller's token.
    context = ok(call(orchestrator, "GetTask", {"id": ids[0]}))["contextId"]
    assert [t["id"] for t in ok(call(orchestrator, "ListTasks", {"contextId": context}))["tasks"]] == [ids[0]]
    other = orchestrator.add_peer("other-peer")
    theirs = call(orchestrator, "ListTasks", {}, headers={**V1, "Authorization": f"Bearer {other}"})
    assert ok(theirs)["tasks"] == [] and ok(theirs)["totalSize"] == 0
    forged = call(
        orchestrator,
        "ListTasks",
        {"pageToken": token or first["nextPageToken"]},
        headers={**V1, "Authorization": f"Bearer {other}"},
    )
    err(forged, -32602, "INVALID_PARAMS")


def test_push_configs_in_v1_shape_and_pushes_in_v1_wrapper_with_their_credentials(aws, monkeypatch):
    hook = Webhook()
    try:
        agent = make_agent(monkeypatch, allow=f"worker:http://127.0.0.1:9,hooks:{hook.url}")
        task = send(agent, "@worker a long job")
        agent.run_queue("turns")
        config = {
            "taskId": task["id"],
            "id": "cfg-1",
            "url": f"{hook.url}/a2a",
            "token": "tok-1",
            "authentication": {"scheme": "Bearer", "credentials": "secret-1"},
        }
        created = ok(call(agent, "CreateTaskPushNotificationConfig", config))
        assert created == config
        assert ok(call(agent, "GetTaskPushNotificationConfig", {"taskId": task["id"], "id": "cfg-1"})) == config
        listed = ok(call(agent, "ListTaskPushNotificationConfigs", {"taskId": task["id"]}))
        assert listed == {"configs": [config], "nextPageToken": ""}
        # v0.3's view of the same config: its shape, no v1.0 marker.
        v03 = rpc(agent, "tasks/pushNotificationConfig/get", {"id": task["id"]})["result"]
        assert v03["pushNotificationConfig"] == {
            "url": f"{hook.url}/a2a",
            "id": "cfg-1",
            "token": "tok-1",
            "authentication": {"schemes": ["Bearer"], "credentials": "secret-1"},
        }
        ok(call(agent, "CancelTask", {"id": task["id"]}))
        agent.run_queue("delivery")
        [request] = hook.requests
        headers = {k.lower(): v for k, v in request["headers"].items()}
        body = request["body"]
        assert headers["authorization"] == "Bearer secret-1" and headers["x-a2a-notification-token"] == "tok-1"
        assert set(body) == {"task"} and body["task"]["status"]["state"] == "TASK_STATE_CANCELED"
        _no_kind(body)
        assert ok(call(agent, "DeleteTaskPushNotificationConfig", {"taskId": task["id"], "id": "cfg-1"})) == {}
        assert ok(call(agent, "ListTaskPushNotificationConfigs", {"taskId": task["id"]}))["configs"] == []
    finally:
        hook.close()


def test_the_card_lists_both_versions_on_one_url_with_security_in_both_shapes(orchestrator):
    status, _, card = orchestrator.api("agent_card_get", token=None)
    assert status == 200
    url = card["url"]
    assert card["supportedInterfaces"] == [
        {"url": url, "protocolBinding": "JSONRPC", "protocolVersion": "1.0"},
        {"url": url, "protocolBinding": "JSONRPC", "protocolVersion": "0.3.0"},
    ]
    assert card["protocolVersion"] == "0.3.0" and card["preferredTransport"] == "JSONRPC"
    assert card["security"] == [{"peerToken": []}]
    assert card["securityRequirements"] == [{"schemes": {"peerToken": {"list": []}}}]
    scheme = card["securitySchemes"]["peerToken"]
    assert scheme["type"] == "http" and scheme["httpAuthSecurityScheme"]["scheme"] == "bearer"


def test_v03_push_config_get_with_the_task_id_alone_answers_its_one_config_under_its_own_id(orchestrator):
    orchestrator_url = "http://127.0.0.1:9"  # the allowlist's worker entry: a URL the agent may call
    task = ok(
        rpc(
            orchestrator,
            "message/send",
            {
                "message": {
                    "kind": "message",
                    "role": "user",
                    "messageId": "m-p",
                    "parts": [{"kind": "text", "text": "x"}],
                }
            },
        )
    )
    config = {
        "url": f"{orchestrator_url}/hook",
        "id": "mine",
        "authentication": {"schemes": ["Bearer"], "credentials": "c"},
    }
    ok(rpc(orchestrator, "tasks/pushNotificationConfig/set", {"taskId": task["id"], "pushNotificationConfig": config}))
    got = ok(rpc(orchestrator, "tasks/pushNotificationConfig/get", {"id": task["id"]}))
    assert got == {"taskId": task["id"], "pushNotificationConfig": config}


# Issue 36, defect 4: where a number is meant, text that str.isdigit() passes ("²": int() fails, a -32603;
# "٣": int() reads 3; 5,000 nines: int() refuses) or int() takes (" 1", "-1") is no number this server wrote.
FORGED_NUMBERS = ["²", "٣", "-1", " 1", "1e3", "1_0", "9" * 5000]


@pytest.mark.parametrize("token", FORGED_NUMBERS)
def test_a_push_config_page_token_that_is_not_ascii_digits_is_invalid_params(orchestrator, token):
    task = send(orchestrator, "hello")
    listed = call(orchestrator, "ListTaskPushNotificationConfigs", {"taskId": task["id"], "pageToken": token})
    err(listed, -32602, "INVALID_PARAMS")


@pytest.mark.parametrize("offset", FORGED_NUMBERS)
def test_a_context_listing_page_token_that_is_not_ascii_digits_is_invalid_params(orchestrator, offset):
    context = send(orchestrator, "hello")["contextId"]
    token = base64.urlsafe_b64encode(f"ctx:{offset}".encode()).rstrip(b"=").decode()
    err(call(orchestrator, "ListTasks", {"contextId": context, "pageToken": token}), -32602, "INVALID_PARAMS")


@pytest.mark.parametrize("version", ["².0", "1.²", "٣.0", "1e3", "-1.0", " 1.0x", "9" * 5000 + ".0"])
def test_an_a2a_version_that_is_not_ascii_digits_is_not_supported(orchestrator, version):
    # "².0" passed isdigit() and failed int(): the REST shape's HTTP 500, not a JSON-RPC answer.
    err(call(orchestrator, "GetTask", {"id": "a~b"}, headers={"A2A-Version": version}), -32009, "VERSION_NOT_SUPPORTED")
