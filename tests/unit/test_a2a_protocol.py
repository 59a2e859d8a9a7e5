"""A2A pieces that need no AWS: task ids, JSON-RPC envelopes, push headers, what a peer's task means."""

from __future__ import annotations

import json
import uuid
from types import SimpleNamespace
from unittest import mock

import pytest
from a2a import types as sdk

from flightdeck.api.a2a_routes import handle_rpc
from flightdeck.domain.a2a.client import schedule_poll, task_result
from flightdeck.domain.a2a.ports import parse_task_id, task_id_of
from flightdeck.domain.a2a.push_delivery import push_headers
from flightdeck.domain.a2a.wire import Message, Task


def test_task_ids_name_their_context():
    task_id = task_id_of("ctx-1", "abc123")
    assert parse_task_id(task_id) == ("ctx-1", "abc123")
    for bad in ("", "no-separator", "~key", "ctx~", "ctx~not/alnum", "ctx~" + "a" * 65):
        assert parse_task_id(bad) is None, bad


def _rpc(raw):
    # Envelope errors are answered before any method runs: no dependencies needed (but whether streaming is on).
    with mock.patch("flightdeck.api.a2a_routes.get_settings", lambda: SimpleNamespace(streaming="off")):
        return handle_rpc(SimpleNamespace(), raw if isinstance(raw, str) else json.dumps(raw))


@pytest.mark.parametrize(
    "raw,code,request_id",
    [
        ("{", -32700, None),
        ("", -32700, None),
        ("[]", -32600, None),
        ("42", -32600, None),
        ({"jsonrpc": "2.0", "id": "a", "method": "nope"}, -32601, "a"),
        ({"jsonrpc": "2.0", "id": 3, "method": "tasks/get", "params": {"id": "x", "historyLength": -2}}, -32602, 3),
        ({"jsonrpc": "2.0", "id": 4, "method": "message/send", "params": {"message": {"role": "user"}}}, -32602, 4),
        # The streaming methods' params are checked like the others'; with streaming off they answer -32004.
        ({"jsonrpc": "2.0", "id": 5, "method": "message/stream", "params": {}}, -32602, 5),
        (
            {
                "jsonrpc": "2.0",
                "id": 7,
                "method": "message/stream",
                "params": {
                    "message": {
                        "kind": "message",
                        "role": "user",
                        "messageId": "m1",
                        "parts": [{"kind": "text", "text": "hi"}],
                    }
                },
            },
            -32004,
            7,
        ),
        ({"jsonrpc": "2.0", "id": 6, "method": "tasks/resubscribe", "params": {"id": "x"}}, -32004, 6),
        ({"jsonrpc": "2.0", "id": True, "method": "tasks/get"}, -32600, None),
        ({"jsonrpc": "2.0", "id": 1, "method": "tasks/get", "extra": 1}, -32600, 1),
    ],
)
def test_envelope_errors(raw, code, request_id):
    resp = _rpc(raw)
    assert resp["error"]["code"] == code and resp["id"] == request_id, resp
    sdk.JSONRPCErrorResponse.model_validate(resp)  # the shape the a2a-sdk client parses


def test_error_codes_are_the_specs():
    from flightdeck.domain.a2a import wire as ours

    pairs = {
        ours.PARSE_ERROR: sdk.JSONParseError,
        ours.INVALID_REQUEST: sdk.InvalidRequestError,
        ours.METHOD_NOT_FOUND: sdk.MethodNotFoundError,
        ours.INVALID_PARAMS: sdk.InvalidParamsError,
        ours.INTERNAL_ERROR: sdk.InternalError,
        ours.TASK_NOT_FOUND: sdk.TaskNotFoundError,
        ours.TASK_NOT_CANCELABLE: sdk.TaskNotCancelableError,
        ours.PUSH_NOT_SUPPORTED: sdk.PushNotificationNotSupportedError,
        ours.UNSUPPORTED_OPERATION: sdk.UnsupportedOperationError,
        ours.CONTENT_TYPE_NOT_SUPPORTED: sdk.ContentTypeNotSupportedError,
        ours.EXTENDED_CARD_NOT_CONFIGURED: sdk.AuthenticatedExtendedCardNotConfiguredError,
    }
    for code, error_type in pairs.items():
        assert error_type().code == code, error_type


# Method and params are checked before the id: a request without one (a notification) still
# learns that its method is unknown or its params malformed (issue 14, point 4).
@pytest.mark.parametrize(
    "raw,code",
    [
        ({"jsonrpc": "2.0", "method": "tasks/explode"}, -32601),
        ({"jsonrpc": "2.0", "method": "tasks/get", "params": {"id": 5}}, -32602),
        ({"jsonrpc": "2.0", "method": "tasks/get", "params": [1]}, -32602),
        ({"jsonrpc": "2.0", "method": "tasks/get"}, -32602),
        ({"jsonrpc": "2.0", "method": "message/send", "params": {"message": {"role": "user"}}}, -32602),
        ({"jsonrpc": "2.0", "method": "tasks/get", "params": {"id": "x~y"}}, -32600),  # valid, yet no id
        ({"jsonrpc": "2.0", "method": "tasks/get", "params": "x"}, -32600),  # not a Request object at all
        ({"method": "tasks/explode"}, -32600),  # no jsonrpc: not a Request object either
    ],
)
def test_method_and_params_are_checked_with_or_without_an_id(raw, code):
    resp = _rpc(raw)
    assert resp["error"]["code"] == code and resp["id"] is None, resp
    sdk.JSONRPCErrorResponse.model_validate(resp)


def test_an_unknown_method_with_an_id_echoes_it_and_params_problems_name_the_field():
    assert _rpc({"jsonrpc": "2.0", "id": 9, "method": "nope", "params": {"x": 1}})["id"] == 9
    error = _rpc({"jsonrpc": "2.0", "id": 1, "method": "tasks/get", "params": {"id": 5}})["error"]
    assert error["message"].startswith("Invalid params: params.id: ")


def test_our_models_read_what_the_sdk_writes():
    message = sdk.Message(
        role=sdk.Role.user,
        message_id=str(uuid.uuid4()),
        context_id="c",
        parts=[sdk.Part(root=sdk.TextPart(text="hi")), sdk.Part(root=sdk.DataPart(data={"a": 1}))],
    )
    ours = Message.model_validate(message.model_dump(mode="json", exclude_none=True))
    assert ours.parts[0].text == "hi" and ours.parts[1].kind == "data"
    task = sdk.Task(
        id="t", context_id="c", status=sdk.TaskStatus(state=sdk.TaskState.input_required), history=[message]
    )
    assert Task.model_validate(task.model_dump(mode="json", exclude_none=True)).status.state == "input-required"


def _peer_task(state: str, **extra) -> Task:
    return Task.model_validate({"kind": "task", "id": "t", "contextId": "c", "status": {"state": state}, **extra})


def test_a_peer_task_as_our_tool_result():
    done = _peer_task(
        "completed",
        artifacts=[
            {"artifactId": "1", "parts": [{"kind": "text", "text": "part one"}, {"kind": "data", "data": {}}]},
            {"artifactId": "2", "parts": [{"kind": "text", "text": "part two"}]},
        ],
    )
    assert (task_result("u", done).status, task_result("u", done).text) == ("success", "part one\npart two")
    from_status = _peer_task(
        "completed",
        status={
            "state": "completed",
            "message": {
                "kind": "message",
                "role": "agent",
                "messageId": "m",
                "parts": [{"kind": "text", "text": "in the status"}],
            },
        },
    )
    assert task_result("u", from_status).text == "in the status"
    from_history = _peer_task(
        "completed",
        history=[
            {"kind": "message", "role": "user", "messageId": "1", "parts": [{"kind": "text", "text": "question"}]},
            {"kind": "message", "role": "agent", "messageId": "2", "parts": [{"kind": "text", "text": "answer"}]},
        ],
    )
    assert task_result("u", from_history).text == "answer"
    failed = task_result("u", _peer_task("auth-required"))
    assert failed.status == "error"
    assert json.loads(failed.text) == {
        "status": "error",
        "reason": "peer_auth_required",
        "detail": "A2A task t ended in state auth-required",
    }


def test_push_headers():
    assert push_headers({"url": "u"}) == {}
    assert push_headers({"url": "u", "token": "t"}) == {"X-A2A-Notification-Token": "t"}
    bearer = {"url": "u", "authentication": {"schemes": ["Digest", "bearer"], "credentials": "abc"}}
    assert push_headers(bearer) == {"Authorization": "Bearer abc"}
    basic = {"url": "u", "authentication": {"schemes": ["Basic"], "credentials": "user:pw"}}
    assert push_headers(basic) == {"Authorization": "Basic dXNlcjpwdw=="}
    encoded = {"url": "u", "authentication": {"schemes": ["Basic"], "credentials": "dXNlcjpwdw=="}}
    assert push_headers(encoded) == {"Authorization": "Basic dXNlcjpwdw=="}


def test_polls_back_off_and_never_pass_the_deadline():
    sent = []
    deps = SimpleNamespace(
        clock=SimpleNamespace(now_ms=lambda: 0),
        queues=SimpleNamespace(send_timer=lambda body, delay: sent.append((body["polls"], delay))),
    )
    for polls in range(8):
        schedule_poll(deps, "s", 1, "u", 100_000, polls)
    assert sent == [(1, 1), (2, 2), (3, 4), (4, 8), (5, 16), (6, 30), (7, 30), (8, 30)]
    sent.clear()
    assert schedule_poll(deps, "s", 1, "u", 5_000, 5) and sent == [(6, 4)]
    assert not schedule_poll(deps, "s", 1, "u", 1_500, 0)  # the deadline timer covers the rest
