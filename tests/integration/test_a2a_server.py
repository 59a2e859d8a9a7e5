"""This agent as an A2A v0.3 server (POST /a2a), through the real handlers on moto.

Shapes are checked against the a2a-sdk's own pydantic types (a2a.types).
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from a2a import types as sdk

from tests.support.harness import make_agent, new_session_id


def rpc(agent, method: str, params=None, *, raw=None, request_id="req-1"):
    body = raw if raw is not None else {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params or {}}
    status, headers, resp = agent.api("a2a_message_send", body=body)
    assert status == 200, (status, resp)  # JSON-RPC: HTTP 200, errors included
    assert headers["content-type"].startswith("application/json")
    return resp


def ok(resp):
    assert "error" not in resp, resp
    return resp["result"]


def err(resp, code: int):
    assert "result" not in resp and resp["error"]["code"] == code, resp
    sdk.JSONRPCErrorResponse.model_validate(resp)
    return resp["error"]


def message(text: str, **extra):
    return {
        "kind": "message",
        "role": "user",
        "messageId": f"m-{time.monotonic_ns()}",
        "parts": [{"kind": "text", "text": text}],
        **extra,
    }


def send(agent, text: str, configuration=None, **extra) -> dict:
    params = {"message": message(text, **extra)}
    if configuration is not None:
        params["configuration"] = configuration
    task = ok(rpc(agent, "message/send", params))
    sdk.Task.model_validate(task)
    return task


def get(agent, task_id: str, **params) -> dict:
    task = ok(rpc(agent, "tasks/get", {"id": task_id, **params}))
    sdk.Task.model_validate(task)
    return task


# --- the card --------------------------------------------------------------------------------


def test_agent_card_validates_against_the_a2a_v03_schema_and_tells_the_truth(orchestrator):
    status, _, card = orchestrator.api("agent_card_get")
    assert status == 200
    parsed = sdk.AgentCard.model_validate(card)
    assert parsed.protocol_version == "0.3.0" and parsed.preferred_transport == "JSONRPC"
    assert card["url"].endswith("/prod/a2a")
    capabilities = dict(card["capabilities"])
    # Skill contracts (docs/SKILLS.md): responseSchema is served; reliable delivery (docs/A2A.md), optional.
    [extension, reliable] = capabilities.pop("extensions")
    assert reliable["uri"] == "urn:flightdeck:a2a:ext:reliable-delivery:v1" and reliable["required"] is False
    assert extension["uri"] == "urn:flightdeck:a2a:ext:skill-contracts:v1" and extension["params"]["skills"] == {}
    assert capabilities == {
        "streaming": False,
        "pushNotifications": True,
        "stateTransitionHistory": False,
        "extendedAgentCard": False,  # v1.0's name, merged in
    }


def test_with_inbound_auth_the_public_card_declares_and_requires_the_peer_bearer_scheme(orchestrator):
    status, _, card = orchestrator.api("agent_card_get", token=None)  # the card itself needs no token
    assert status == 200
    parsed = sdk.AgentCard.model_validate(card)
    scheme = parsed.security_schemes["peerToken"].root
    assert (scheme.type, scheme.scheme) == ("http", "bearer")
    assert parsed.security == [{"peerToken": []}]
    # What the card requires is what /a2a enforces.
    assert orchestrator.api("a2a_message_send", token=None)[0] == 401


def test_without_inbound_auth_the_card_requires_nothing(aws, monkeypatch):
    agent = make_agent(monkeypatch, extra_env={"INBOUND_AUTH": "off"})
    _, _, card = agent.api("agent_card_get")
    assert "peerToken" not in card["securitySchemes"] and card["security"] == []
    sdk.AgentCard.model_validate(card)


# --- message/send, tasks/get ----------------------------------------------------------------------


def test_message_send_returns_a_working_task_and_the_turn_pipeline_completes_it(orchestrator):
    task = send(orchestrator, "count the moons of mars")
    assert task["status"]["state"] == "working" and task["kind"] == "task"
    assert task["history"][0]["parts"][0]["text"] == "count the moons of mars"
    assert task["history"][0]["taskId"] == task["id"] and task["history"][0]["contextId"] == task["contextId"]
    # The same turn pipeline as POST /api/chat: the task's context is our session.
    session = orchestrator.api("session_get", SESSION_ID=task["contextId"])[2]
    assert session["status"] == "busy" and session["messages"][0]["content"][0]["text"] == "count the moons of mars"
    assert orchestrator.run_queue("turns") == {"batchItemFailures": []}
    done = get(orchestrator, task["id"])
    assert done["status"]["state"] == "completed"
    answer = done["artifacts"][0]["parts"][0]["text"]
    assert answer.startswith('[orchestrator] Task: "count the moons of mars"')
    assert done["status"]["message"]["role"] == "agent" and done["status"]["message"]["parts"][0]["text"] == answer
    assert [m["role"] for m in done["history"]] == ["user", "agent"]
    assert [m["role"] for m in get(orchestrator, task["id"], historyLength=1)["history"]] == ["agent"]
    assert get(orchestrator, task["id"], historyLength=0)["history"] == []


def test_context_id_continues_the_conversation_with_a_new_task(orchestrator):
    first = send(orchestrator, "first question")
    orchestrator.run_queue("turns")
    second = send(orchestrator, "second question", contextId=first["contextId"])
    assert second["contextId"] == first["contextId"] and second["id"] != first["id"]
    orchestrator.run_queue("turns")
    done = get(orchestrator, second["id"])
    assert done["status"]["state"] == "completed" and "second question" in done["artifacts"][0]["parts"][0]["text"]
    # History holds this task's messages only; the session holds both.
    assert [m["parts"][0]["text"] for m in done["history"]][0] == "second question"
    assert len(done["history"]) == 2
    assert get(orchestrator, first["id"])["status"]["state"] == "completed"
    assert len(orchestrator.api("session_get", SESSION_ID=first["contextId"])[2]["messages"]) == 4


def test_a_message_to_a_task_in_a_terminal_state_is_an_error(orchestrator):
    task = send(orchestrator, "hello")
    orchestrator.run_queue("turns")
    before = orchestrator.table_items()
    error = err(rpc(orchestrator, "message/send", {"message": message("more", taskId=task["id"])}), -32602)
    assert "terminal state: completed" in error["message"] and error["data"]["state"] == "completed"
    assert orchestrator.table_items() == before


def test_a_busy_context_takes_no_second_task(orchestrator):
    task = send(orchestrator, "@worker long job")
    error = err(rpc(orchestrator, "message/send", {"message": message("again", contextId=task["contextId"])}), -32602)
    assert error["data"]["taskId"] == task["id"]


def test_blocking_send_waits_for_the_answer(orchestrator):
    stop = threading.Event()

    def pump():
        while not stop.is_set():
            orchestrator.run_queue("turns")
            time.sleep(0.05)

    worker = threading.Thread(target=pump, daemon=True)
    worker.start()
    try:
        task = send(orchestrator, "blocking please", configuration={"blocking": True})
    finally:
        stop.set()
        worker.join()
    assert task["status"]["state"] == "completed"
    assert "blocking please" in task["artifacts"][0]["parts"][0]["text"]


def test_blocking_send_answers_the_task_as_it_stands_after_its_bound(orchestrator, monkeypatch):
    from flightdeck.domain.a2a import tasks as a2a

    monkeypatch.setattr(a2a, "BLOCKING_WAIT_MAX_S", 0.3)
    started = time.monotonic()
    task = send(orchestrator, "nobody runs the turns", configuration={"blocking": True})
    assert task["status"]["state"] == "working" and 0.3 <= time.monotonic() - started < 5


# --- tasks/cancel -------------------------------------------------------------------------------


def test_cancel_stops_outstanding_delegations_and_the_session_thinks_no_more(orchestrator):
    task = send(orchestrator, "@worker one @worker two")
    orchestrator.run_queue("turns")  # delegates: the turn waits on two results
    sid = task["contextId"]
    assert orchestrator.turn_item(sid, 1)["status"] == "waiting"
    canceled = ok(rpc(orchestrator, "tasks/cancel", {"id": task["id"]}))
    sdk.Task.model_validate(canceled)
    assert canceled["status"]["state"] == "canceled"
    # The waiting turn completed through the same conditional transition, with canceled results...
    agg = orchestrator.turn_item(sid, 1)
    assert agg["status"] == "complete" and agg["completed_by"] == "a2a_cancel"
    results = [i for i in orchestrator.table_items() if i["sk"]["S"].startswith("RESULT#000001#")]
    assert len(results) == 2
    assert all(json.loads(r["text"]["S"])["reason"] == "canceled" for r in results)
    # ...and no next think: the session is idle, closed with the tool results and a closing line.
    assert orchestrator.receive("turns") == []
    session = orchestrator.api("session_get", SESSION_ID=sid)[2]
    assert session["status"] == "idle"
    assert "toolResult" in session["messages"][-2]["content"][0]
    assert "canceled" in session["messages"][-1]["content"][0]["text"]
    # A worker answering now is late; the dispatches still queued are not sent again once they
    # failed (a first attempt reads nothing: the peer would be told "late" when it answers).
    token = orchestrator.token(sid, 1, results[0]["tool_use_id"]["S"], total=2)
    assert orchestrator.api("tool_response", TOKEN=token, RESULT="too late")[0] == 410
    from flightdeck.domain.dispatch import DispatchMessage, dispatch_delegation
    from flightdeck.wiring import deps

    queued = orchestrator.bodies("dispatch")
    # The workers were told to stop too: unreachable here, so each cancel waits on the queue for a retry.
    cancels = [b for b in queued if b.get("kind") == "cancel"]
    assert sorted(c["tool_use_id"] for c in cancels) == sorted(r["tool_use_id"]["S"] for r in results)
    outcomes = [dispatch_delegation(deps(), DispatchMessage.model_validate(b), 2) for b in queued if b not in cancels]
    assert [o.status.value for o in outcomes] == ["skipped", "skipped"]
    # The context takes a new task afterwards.
    assert send(orchestrator, "next", contextId=sid)["status"]["state"] == "working"


def test_cancel_while_thinking_stops_before_the_next_step(orchestrator):
    task = send(orchestrator, "@worker one")
    assert ok(rpc(orchestrator, "tasks/cancel", {"id": task["id"]}))["status"]["state"] == "canceled"
    orchestrator.run_queue("turns")  # the turn message was already queued
    assert orchestrator.bodies("dispatch") == []  # the model was not even asked
    session = orchestrator.api("session_get", SESSION_ID=task["contextId"])[2]
    assert session["status"] == "idle" and "canceled" in session["messages"][-1]["content"][0]["text"]


def test_cancel_after_a_result_raced_in_stops_the_next_think(orchestrator):
    task = send(orchestrator, "@worker one")
    orchestrator.run_queue("turns")
    sid = task["contextId"]
    [dispatch] = orchestrator.bodies("dispatch")
    token = orchestrator.token(sid, 1, dispatch["tool_use_id"])
    assert orchestrator.api("tool_response", TOKEN=token, RESULT="the answer")[0] == 202  # turn 2 is queued
    assert ok(rpc(orchestrator, "tasks/cancel", {"id": task["id"]}))["status"]["state"] == "canceled"
    orchestrator.run_queue("turns")
    session = orchestrator.api("session_get", SESSION_ID=sid)[2]
    assert session["status"] == "idle" and session["iteration"] == 2 and session["turn"] == 1
    assert "canceled" in session["messages"][-1]["content"][0]["text"]
    assert get(orchestrator, task["id"])["status"]["state"] == "canceled"


def test_cancelling_a_terminal_task_is_not_cancelable(orchestrator):
    task = send(orchestrator, "quick")
    orchestrator.run_queue("turns")
    error = err(rpc(orchestrator, "tasks/cancel", {"id": task["id"]}), -32002)
    assert error["data"]["state"] == "completed"
    other = send(orchestrator, "@worker x")
    ok(rpc(orchestrator, "tasks/cancel", {"id": other["id"]}))
    err(rpc(orchestrator, "tasks/cancel", {"id": other["id"]}), -32002)


NOT_FOUND_CASES = [
    ("tasks/get", {"id": "no-such-context~0123abcd"}),
    ("tasks/get", {"id": "not-a-task-id"}),
    ("tasks/cancel", {"id": "no-such-context~0123abcd"}),
    (
        "tasks/pushNotificationConfig/set",
        {"taskId": "nope~abc", "pushNotificationConfig": {"url": "http://127.0.0.1:9/x"}},
    ),
    ("tasks/pushNotificationConfig/get", {"id": "nope~abc"}),
    ("tasks/pushNotificationConfig/list", {"id": "nope~abc"}),
    ("tasks/pushNotificationConfig/delete", {"id": "nope~abc", "pushNotificationConfigId": "x"}),
    ("message/send", {"message": message("hi", taskId="nope~abc")}),
]


def test_unknown_task_is_task_not_found(orchestrator):
    for method, params in NOT_FOUND_CASES:
        err(rpc(orchestrator, method, params), -32001)


# --- JSON-RPC errors ------------------------------------------------------------------------------


def test_parse_error_has_a_null_id(orchestrator):
    resp = rpc(orchestrator, "", raw='{"jsonrpc": "2.0", "id": 1, "method": ')
    assert err(resp, -32700) and resp["id"] is None


INVALID_REQUESTS = [
    [{"jsonrpc": "2.0", "id": 1, "method": "tasks/get", "params": {"id": "x"}}],  # batch
    '"just a JSON string"',
    {"id": 7, "method": "tasks/get", "params": {"id": "x"}},  # no jsonrpc
    {"jsonrpc": "1.0", "id": 7, "method": "tasks/get"},
    {"jsonrpc": "2.0", "id": 7, "method": 42},
    {"jsonrpc": "2.0", "id": 7.5, "method": "tasks/get"},
    {"jsonrpc": "2.0", "id": 7, "method": "tasks/get", "params": "x"},  # params: not a structured value
    {"jsonrpc": "2.0", "method": "tasks/get", "params": {"id": "x"}},  # a notification
]


def test_invalid_request(orchestrator):
    for raw in INVALID_REQUESTS:
        resp = rpc(orchestrator, "", raw=raw)
        err(resp, -32600)
        if isinstance(raw, dict) and raw.get("id") == 7:
            assert resp["id"] == 7


def test_an_oversized_body_is_an_invalid_request_too(orchestrator, monkeypatch):
    monkeypatch.setenv("MAX_BODY_BYTES", "2000")
    from flightdeck import wiring

    wiring.reset()
    resp = rpc(
        orchestrator,
        "",
        raw={"jsonrpc": "2.0", "id": 1, "method": "message/send", "params": {"message": message("x" * 3000)}},
    )
    assert err(resp, -32600) and "too large" in resp["error"]["message"]


def test_method_not_found(orchestrator):
    resp = rpc(orchestrator, "tasks/explode", {"id": "x"}, request_id=99)
    assert err(resp, -32601) and resp["id"] == 99


INVALID_PARAMS = [
    ("message/send", {"message": {"kind": "message", "role": "user", "messageId": "m", "parts": []}}),
    (
        "message/send",
        {"message": {"kind": "message", "role": "user", "messageId": "m", "parts": [{"kind": "text", "text": "   "}]}},
    ),
    (
        "message/send",
        {"message": {"kind": "message", "role": "agent", "messageId": "m", "parts": [{"kind": "text", "text": "hi"}]}},
    ),
    ("message/send", {"message": {"role": "user", "parts": [{"kind": "text", "text": "no id"}]}}),
    ("message/send", {"message": message("hi"), "configuration": {"historyLength": -1}}),
    ("message/send", {"message": message("hi", contextId="bad context id!")}),
    ("message/send", {}),
    ("tasks/get", {"id": "x~y", "historyLength": -1}),
    ("tasks/get", {}),
    ("tasks/cancel", {"id": 5}),
    ("tasks/pushNotificationConfig/set", {"taskId": "x~y"}),
    ("tasks/pushNotificationConfig/delete", {"id": "x~y"}),
    ("tasks/get", [1, 2]),  # by-position params: valid JSON-RPC, but every A2A method takes an object
]


def test_invalid_params(orchestrator):
    for method, params in INVALID_PARAMS:
        err(rpc(orchestrator, method, params), -32602)


def _b64(data: bytes) -> str:
    import base64

    return base64.b64encode(data).decode()


UNSUPPORTED_PARTS = [
    ({"kind": "file", "file": {"uri": "https://example.com/a.txt", "mimeType": "text/plain"}}, "a file by uri"),
    (
        {"kind": "file", "file": {"bytes": _b64(b"%PDF-1.7"), "mimeType": "application/pdf"}},
        "a file of type application/pdf",
    ),
    ({"kind": "file", "file": {"bytes": _b64(b"hi")}}, "a file of type unknown"),
    ({"kind": "file", "file": {"bytes": _b64(b"\x89PNG"), "mimeType": "image/png"}}, "a file of type image/png"),
]


@pytest.mark.parametrize("part,what", UNSUPPORTED_PARTS, ids=[w for _, w in UNSUPPORTED_PARTS])
def test_other_parts_are_an_unsupported_content_type_naming_what_is_accepted(orchestrator, part, what):
    before = orchestrator.table_items()
    params = {
        "message": {
            "kind": "message",
            "role": "user",
            "messageId": "m",
            "parts": [{"kind": "text", "text": "look at this"}, part],
        }
    }
    error = err(rpc(orchestrator, "message/send", params), -32005)
    assert error["message"].startswith(f"message.parts.1: {what}")
    assert "data parts" in error["message"] and "text/* or application/json" in error["message"]
    _, _, card = orchestrator.api("agent_card_get")
    assert error["data"]["supportedInputModes"] == card["defaultInputModes"]
    assert orchestrator.table_items() == before


def test_data_parts_and_inline_text_files_reach_the_model_as_text(orchestrator):
    parts = [
        {"kind": "text", "text": "compare these:"},
        {"kind": "data", "data": {"city": "Zürich", "rank": [1, 2]}},
        {"kind": "file", "file": {"name": "t.csv", "mimeType": "text/csv", "bytes": _b64(b"a,b\n1,2")}},
        {"kind": "file", "file": {"mimeType": "application/json", "bytes": _b64(b'{"k": true}')}},
        {"kind": "file", "file": {"mimeType": "text/plain; charset=latin-1", "bytes": _b64("café".encode("latin-1"))}},
    ]
    task = ok(
        rpc(
            orchestrator,
            "message/send",
            {"message": {"kind": "message", "role": "user", "messageId": "m-d", "parts": parts}},
        )
    )
    sdk.Task.model_validate(task)
    session = orchestrator.api("session_get", SESSION_ID=task["contextId"])[2]
    assert session["messages"][0]["content"][0]["text"] == (
        'compare these:\n{"city": "Zürich", "rank": [1, 2]}\n[file t.csv, text/csv]\na,b\n1,2\n'
        '[file application/json]\n{"k": true}\n[file text/plain]\ncafé'
    )
    assert task["history"][0]["parts"] == parts  # the task keeps the message as it came


@pytest.mark.parametrize(
    "file",
    [
        {"mimeType": "text/plain", "bytes": "not base64!"},
        {"mimeType": "text/plain", "bytes": _b64(b"\xff\xfe\xfa")},
        {"mimeType": "text/plain; charset=no-such-charset", "bytes": _b64(b"x")},
    ],
    ids=["not-base64", "not-utf8", "unknown-charset"],
)
def test_a_text_file_that_does_not_decode_is_invalid_params(orchestrator, file):
    params = {
        "message": {"kind": "message", "role": "user", "messageId": "m", "parts": [{"kind": "file", "file": file}]}
    }
    assert err(rpc(orchestrator, "message/send", params), -32602)["message"].startswith("message.parts.0.file.bytes")


def test_streaming_methods_are_unsupported_operations_while_streaming_is_off(orchestrator):
    # STREAMING is off unless the deployment's front streams (tests/integration/test_a2a_streaming.py: on).
    for method in ("message/stream", "tasks/resubscribe"):
        error = err(rpc(orchestrator, method, {"id": "x", "message": message("hi")}), -32004)
        assert "STREAMING=off" in error["message"]


def test_no_authenticated_extended_card(orchestrator):
    err(rpc(orchestrator, "agent/getAuthenticatedExtendedCard", {}), -32007)


def test_an_unexpected_failure_is_an_internal_error_not_a_stack_trace(orchestrator, monkeypatch):
    from flightdeck.api import a2a_routes

    def boom(*_):
        raise RuntimeError("secret detail")

    monkeypatch.setitem(a2a_routes.METHODS, "tasks/get", (a2a_routes.METHODS["tasks/get"][0], boom))
    error = err(rpc(orchestrator, "tasks/get", {"id": "x~y"}), -32603)
    assert "secret detail" not in json.dumps(error)


# --- push notifications (server side) -----------------------------------------------------------------


class Webhook:
    """A loopback webhook that records requests and answers the next scripted status (default 200)."""

    def __init__(self):
        self.requests: list[dict] = []
        self.statuses: list[int] = []
        hook = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802
                raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                hook.requests.append(
                    {"path": self.path, "headers": dict(self.headers), "body": json.loads(raw or b"null")}
                )
                self.send_response(hook.statuses.pop(0) if hook.statuses else 200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_port}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def hook():
    p = Webhook()
    yield p
    p.close()


@pytest.fixture
def pushing(aws, monkeypatch, hook):
    """An orchestrator whose ALLOWED_HOST_MAPPING lists the webhook's base URL."""
    return make_agent(monkeypatch, allow=f"worker:http://127.0.0.1:9,hooks:{hook.url}/hooks")


def test_push_config_round_trip(pushing, hook):
    task = send(pushing, "@worker a long job")
    config = {
        "url": f"{hook.url}/hooks/a2a",
        "token": "client-token",
        "authentication": {"schemes": ["Bearer"], "credentials": "s3cret"},
    }
    view = ok(
        rpc(pushing, "tasks/pushNotificationConfig/set", {"taskId": task["id"], "pushNotificationConfig": config})
    )
    sdk.TaskPushNotificationConfig.model_validate(view)
    assert view["pushNotificationConfig"]["id"] == task["id"]  # no id given: the task's id
    second = ok(
        rpc(
            pushing,
            "tasks/pushNotificationConfig/set",
            {"taskId": task["id"], "pushNotificationConfig": {**config, "id": "second"}},
        )
    )
    assert second["pushNotificationConfig"]["id"] == "second"
    got = ok(rpc(pushing, "tasks/pushNotificationConfig/get", {"id": task["id"]}))
    assert got == view
    got = ok(rpc(pushing, "tasks/pushNotificationConfig/get", {"id": task["id"], "pushNotificationConfigId": "second"}))
    assert got == second
    listed = ok(rpc(pushing, "tasks/pushNotificationConfig/list", {"id": task["id"]}))
    sdk.ListTaskPushNotificationConfigSuccessResponse.model_validate({"jsonrpc": "2.0", "id": 1, "result": listed})
    assert sorted(c["pushNotificationConfig"]["id"] for c in listed) == sorted([task["id"], "second"])
    resp = rpc(pushing, "tasks/pushNotificationConfig/delete", {"id": task["id"], "pushNotificationConfigId": "second"})
    assert resp == {"jsonrpc": "2.0", "id": "req-1", "result": None}
    sdk.DeleteTaskPushNotificationConfigSuccessResponse.model_validate(resp)
    assert len(ok(rpc(pushing, "tasks/pushNotificationConfig/list", {"id": task["id"]}))) == 1
    err(
        rpc(pushing, "tasks/pushNotificationConfig/get", {"id": task["id"], "pushNotificationConfigId": "second"}),
        -32602,
    )


def test_push_config_get_without_a_config_id_returns_the_tasks_config(pushing, hook):
    """The only config, whatever its id; of several, the one named after the task, else the first by id."""
    task = send(
        pushing, "@worker x", configuration={"pushNotificationConfig": {"url": f"{hook.url}/hooks/a", "id": "only"}}
    )
    for params in (
        {"id": task["id"]},
        {"id": task["id"], "metadata": {}},
        {"id": task["id"], "pushNotificationConfigId": None},
    ):
        got = ok(rpc(pushing, "tasks/pushNotificationConfig/get", params))
        sdk.GetTaskPushNotificationConfigSuccessResponse.model_validate({"jsonrpc": "2.0", "id": 1, "result": got})
        assert got["pushNotificationConfig"]["id"] == "only", params
    ok(
        rpc(
            pushing,
            "tasks/pushNotificationConfig/set",
            {"taskId": task["id"], "pushNotificationConfig": {"url": f"{hook.url}/hooks/b", "id": "another"}},
        )
    )
    got = ok(rpc(pushing, "tasks/pushNotificationConfig/get", {"id": task["id"]}))
    assert got["pushNotificationConfig"]["id"] == "another"
    bare = send(pushing, "@worker y")
    error = err(rpc(pushing, "tasks/pushNotificationConfig/get", {"id": bare["id"]}), -32602)
    assert "no such push notification config" in error["message"]


REFUSED_PUSH_CONFIGS = [
    {"url": "https://evil.example.com/hook"},
    {"url": "HOOK/elsewhere"},  # the allowed host, but not under the allowed base path
    {"url": "ftp://127.0.0.1/hooks"},
    {"url": "HOOK/hooks/x", "authentication": {"schemes": ["Digest"], "credentials": "x"}},
    {"url": "HOOK/hooks/x", "authentication": {"schemes": ["Bearer"]}},
    # A dot segment, plain or escaped, must not climb out of the allowed base path (issue 12, defect 6).
    {"url": "HOOK/hooks/../admin/reset"},
    {"url": "HOOK/hooks/%2e%2e/admin/reset"},
    {"url": "HOOK/hooks/%2E%2e%2fadmin"},
    {"url": "HOOK/hooks\\..\\admin"},
]


def test_push_config_refused_unless_allowed_and_sendable(pushing, hook):
    task = send(pushing, "@worker x")
    for config in REFUSED_PUSH_CONFIGS:
        config = {**config, "url": config["url"].replace("HOOK", hook.url)}
        err(
            rpc(pushing, "tasks/pushNotificationConfig/set", {"taskId": task["id"], "pushNotificationConfig": config}),
            -32602,
        )
        err(
            rpc(
                pushing, "message/send", {"message": message("y"), "configuration": {"pushNotificationConfig": config}}
            ),
            -32602,
        )
    assert ok(rpc(pushing, "tasks/pushNotificationConfig/list", {"id": task["id"]})) == []


def test_terminal_task_is_pushed_to_each_webhook_with_its_token_and_authorization(pushing, hook):
    config = {
        "url": f"{hook.url}/hooks/a2a",
        "token": "client-token",
        "authentication": {"schemes": ["Bearer"], "credentials": "s3cret"},
    }
    task = send(pushing, "push me the answer", configuration={"pushNotificationConfig": config})
    ok(
        rpc(
            pushing,
            "tasks/pushNotificationConfig/set",
            {
                "taskId": task["id"],
                "pushNotificationConfig": {
                    "id": "basic",
                    "url": f"{hook.url}/hooks/b",
                    "authentication": {"schemes": ["Basic"], "credentials": "user:pw"},
                },
            },
        )
    )
    pushing.run_queue("turns")
    assert hook.requests == []  # through the delivery queue, not inline
    assert pushing.run_queue("delivery") == {"batchItemFailures": []}
    by_path = {r["path"]: r for r in hook.requests}
    assert set(by_path) == {"/hooks/a2a", "/hooks/b"}
    a = by_path["/hooks/a2a"]
    assert a["headers"]["X-A2A-Notification-Token"] == "client-token"
    assert a["headers"]["Authorization"] == "Bearer s3cret"
    assert by_path["/hooks/b"]["headers"]["Authorization"] == "Basic dXNlcjpwdw=="
    assert "X-A2A-Notification-Token" not in by_path["/hooks/b"]["headers"]
    pushed = sdk.Task.model_validate(a["body"])
    assert pushed.id == task["id"] and pushed.status.state == sdk.TaskState.completed
    assert "push me the answer" in pushed.artifacts[0].parts[0].root.text
    # A redelivered end of turn does not push twice.
    from flightdeck.domain.a2a.turn_hooks import on_end_turn
    from flightdeck.wiring import deps

    on_end_turn(deps(), task["contextId"], 1, "again")
    assert pushing.receive("delivery") == []


def test_cancel_pushes_the_canceled_task(pushing, hook):
    task = send(pushing, "@worker x", configuration={"pushNotificationConfig": {"url": f"{hook.url}/hooks/c"}})
    ok(rpc(pushing, "tasks/cancel", {"id": task["id"]}))
    pushing.run_queue("delivery")
    [req] = hook.requests
    assert req["body"]["status"]["state"] == "canceled" and "X-A2A-Notification-Token" not in req["headers"]


def test_push_delivery_retries_like_callbacks(pushing, hook):
    for status, expect_retry in [(503, True), (429, True), (404, False), (302, False)]:
        hook.statuses = [status]
        send(pushing, "x", configuration={"pushNotificationConfig": {"url": f"{hook.url}/hooks/r"}})
        pushing.run_queue("turns")
        resp = pushing.run_queue("delivery")
        assert bool(resp["batchItemFailures"]) is expect_retry, status
    # What the receiver refused is dropped, and kept in the dead-letter queue with the reason.
    reasons = sorted(json.loads(m["Body"])["reason"] for m in pushing.receive("delivery", dlq=True))
    assert [r.split(" ", 6)[:6] for r in reasons] == [
        ["refused", "by", "the", "receiver:", "HTTP", "302"],
        ["refused", "by", "the", "receiver:", "HTTP", "404"],
    ]


def test_a_push_url_is_stored_and_sent_in_the_normalised_form_that_was_checked(pushing, hook):
    config = {"url": f"{hook.url}/hooks/./a/../b%2Dc?x=%41", "token": "t"}
    task = send(pushing, "x", configuration={"pushNotificationConfig": config})
    [view] = ok(rpc(pushing, "tasks/pushNotificationConfig/list", {"id": task["id"]}))
    assert view["pushNotificationConfig"]["url"] == f"{hook.url}/hooks/b-c?x=A"
    pushing.run_queue("turns")
    assert pushing.run_queue("delivery") == {"batchItemFailures": []}
    assert [r["path"] for r in hook.requests] == ["/hooks/b-c?x=A"]


def test_a_queued_push_whose_url_escapes_the_base_is_dead_lettered_not_sent(pushing, hook):
    """The delivery worker checks the URL it sends: a config stored before normalisation cannot slip out."""
    from flightdeck.wiring import deps, state_store

    for url in (f"{hook.url}/hooks/../admin/reset", f"{hook.url}/hooks/%2e%2e/admin/reset"):
        deps().queues.send_delivery(
            {
                "kind": "a2a_push",
                "session_id": "s",
                "task_id": "s~k",
                "config": {"id": "c", "url": url, "token": "caller-chosen"},
                "task": {"kind": "task", "id": "s~k"},
                "created_ms": state_store().now_ms(),
            }
        )
    assert pushing.run_queue("delivery") == {"batchItemFailures": []}
    assert hook.requests == []
    assert len(pushing.receive("delivery", dlq=True)) == 2


def test_push_url_is_checked_again_when_sent(pushing, hook, monkeypatch):
    send(pushing, "x", configuration={"pushNotificationConfig": {"url": f"{hook.url}/hooks/r"}})
    pushing.run_queue("turns")
    monkeypatch.setenv("ALLOWED_HOST_MAPPING", "worker:http://127.0.0.1:9")
    from flightdeck import wiring

    wiring.reset()
    assert pushing.run_queue("delivery") == {"batchItemFailures": []}
    assert hook.requests == []
    [dead] = pushing.receive("delivery", dlq=True)
    assert "ALLOWED_HOST_MAPPING" in json.loads(dead["Body"])["reason"]


def test_flightdeck_delivery_still_works_next_to_pushes(pushing, hook):
    """The delivery queue carries both kinds; callbacks keep their own path."""
    from flightdeck.wiring import deps

    deps().queues.send_delivery(
        {"session_id": new_session_id(), "callback_service": "hooks", "bearer_token": "t" * 20, "result": "r"}
    )
    send(pushing, "x", configuration={"pushNotificationConfig": {"url": f"{hook.url}/hooks/p"}})
    pushing.run_queue("turns")
    assert pushing.run_queue("delivery") == {"batchItemFailures": []}
    assert sorted(r["path"] for r in hook.requests) == ["/hooks/api/tools/response", "/hooks/p"]
