"""Hostile request bodies through the real handlers on moto: a clear 4xx (a JSON-RPC error on /a2a),
never a 500, and nothing changed. Issue 12 defect 8 (lone surrogates), issue 14 point 9 (hostile shapes).
"""

from __future__ import annotations

import base64
import json

import pytest

from tests.integration.test_api_callbacks import result_items, start_turn
from tests.support.harness import new_session_id

DEEP_ARRAY = "[" * 50_000 + "]" * 50_000
DEEP_OBJECT = '{"a":' * 30_000 + "1" + "}" * 30_000
JUST_TOO_DEEP = "[" * 33 + "]" * 33  # parses, but deeper than strict_json.MAX_DEPTH
LONG_INT = "9" * 5_000  # beyond Python's 4300-digit int parsing limit
SURROGATE = "a \ud800 b"  # json.dumps writes it as the escape "\ud800"

# (name, raw body) wrapped into a route's body by each test.
HOSTILE_VALUES = [
    ("deep-array", DEEP_ARRAY),
    ("deep-object", DEEP_OBJECT),
    ("just-too-deep", JUST_TOO_DEEP),
    ("long-int", LONG_INT),
    ("huge-float", "1e999999"),
    ("nan", "NaN"),
    ("infinity", "-Infinity"),
]


def _state(agent):
    return sorted(json.dumps(i, sort_keys=True) for i in agent.table_items())


def _error(body):
    assert set(body) == {"error"} and body["error"]["message"], body
    return body["error"]


# --- POST /api/chat ------------------------------------------------------------------------------


@pytest.mark.parametrize("name,value", HOSTILE_VALUES, ids=[n for n, _ in HOSTILE_VALUES])
def test_chat_refuses_hostile_json_with_a_400_and_changes_nothing(orchestrator, name, value):
    before = _state(orchestrator)
    for raw in (value, '{"content": ' + value + "}", '{"content": "x", "reply": ' + value + "}"):
        status, _, body = orchestrator.api("chat_post", body=raw)
        assert status == 400, (name, status, body)
        assert _error(body)["code"] in {"malformed_json", "json_too_deep", "bad_number"}
        assert "not valid JSON" in body["error"]["message"]
    assert _state(orchestrator) == before
    assert orchestrator.bodies("turns") == []


def test_chat_refuses_text_that_is_not_unicode_naming_the_field(orchestrator):
    before = _state(orchestrator)
    cases = [
        ({"content": SURROGATE}, "content"),
        (
            {"content": "ok", "reply": {"callbackService": "worker", "bearerToken": "t" * 20 + "\udfff"}},
            "reply.bearerToken",
        ),
    ]
    for body, field in cases:
        status, _, answer = orchestrator.api("chat_post", body=json.dumps(body))
        assert status == 422, answer
        assert answer["error"]["message"].startswith(f"{field}: ") and "Unicode" in answer["error"]["message"]
    assert _state(orchestrator) == before


def test_a_valid_surrogate_pair_is_just_text(orchestrator):
    sid = new_session_id()
    status, _, _ = orchestrator.api("chat_post", body=json.dumps({"session_id": sid, "content": "smile \U0001f600"}))
    assert status == 202
    assert orchestrator.api("session_get", SESSION_ID=sid)[2]["messages"][0]["content"][0]["text"] == "smile \U0001f600"


def test_a_body_wrong_in_every_field_gets_a_bounded_answer(orchestrator):
    before = _state(orchestrator)
    status, _, body = orchestrator.api("chat_post", body=json.dumps({f"field{i}": i for i in range(900)}))
    assert status == 422
    # 900 unknown fields; content is optional since a structured call (skill) may stand in for it.
    assert len(body["error"]["details"]) <= 20 and "(and 899 more problems)" in body["error"]["message"]
    # Wider than strict_json allows: refused before validation would build an error per member.
    for wide in ({f"field{i}": i for i in range(40_000)}, {"content": "x", "reply": [0] * 20_000}):
        status, _, body = orchestrator.api("chat_post", body=json.dumps(wide))
        assert status == 400 and _error(body)["code"] == "json_too_wide", body
    assert _state(orchestrator) == before


def test_invalid_utf8_is_a_400(orchestrator):
    event_body = base64.b64encode(b'{"content": "\xed\xa0\x80 \xff"}').decode()
    from tests.support.harness import load_event

    event = load_event("api/chat_post.json")
    event.update(body=event_body, isBase64Encoded=True)
    event["headers"].update(orchestrator.auth_headers())
    status, _, body = orchestrator.call(event)
    assert status == 400 and _error(body)["code"] == "malformed_json"


# --- POST /api/tools/response(s) -----------------------------------------------------------------------


def test_callback_refuses_hostile_json_with_a_400(orchestrator):
    sid, turn, [tid] = start_turn(orchestrator)
    token = orchestrator.token(sid, turn, tid)
    before = _state(orchestrator)
    for name, value in HOSTILE_VALUES:
        for raw in (value, '{"result": ' + value + "}"):
            status, _, body = orchestrator.api("tool_response", body=raw, headers={"Authorization": f"Bearer {token}"})
            assert status == 400, (name, body)
            status, _, body = orchestrator.api("tool_responses_batch", body='{"items": [' + raw + "]}")
            assert status == 400, (name, body)
    assert _state(orchestrator) == before


def test_a_result_that_is_not_unicode_is_a_422_not_a_500(orchestrator):
    sid, turn, [tid] = start_turn(orchestrator)
    token = orchestrator.token(sid, turn, tid)
    before = _state(orchestrator)
    status, _, body = orchestrator.api(
        "tool_response", body=json.dumps({"result": SURROGATE}), headers={"Authorization": f"Bearer {token}"}
    )
    assert status == 422 and body["error"]["message"].startswith("result: ") and "Unicode" in body["error"]["message"]
    assert _state(orchestrator) == before
    assert (
        orchestrator.api(
            "tool_response", body={"result": "a fine answer"}, headers={"Authorization": f"Bearer {token}"}
        )[0]
        == 202
    )


def test_in_a_batch_only_the_item_that_is_not_unicode_is_refused(orchestrator):
    sid, turn, ids = start_turn(orchestrator, 2)
    t = [orchestrator.token(sid, turn, i, total=2) for i in ids]
    items = [{"token": t[0], "result": SURROGATE}, {"token": t[1], "result": "second"}]
    status, _, body = orchestrator.api("tool_responses_batch", body=json.dumps({"items": items}))
    assert status == 200
    [bad, good] = body["results"]
    assert (bad["status"], bad["http_status"]) == ("invalid", 422) and "Unicode" in bad["message"]
    assert bad["message"].startswith("result: ")
    assert (good["status"], good["http_status"]) == ("accepted", 202)
    assert {i["text"]["S"] for i in result_items(orchestrator, sid)} == {"second"}


@pytest.mark.parametrize(
    "raw", ["{", DEEP_ARRAY, '{"result": ' + LONG_INT + "}"], ids=["malformed", "deep", "long-int"]
)
def test_the_header_token_is_checked_before_the_body_is_parsed(orchestrator, monkeypatch, raw):
    from flightdeck.api import strict_json

    parsed = []
    real = strict_json.loads
    monkeypatch.setattr(strict_json, "loads", lambda text: parsed.append(1) or real(text))
    # Powertools holds the deserializer it was given: rebuild the handler around the spy.
    from flightdeck.api import a2a_push_routes, callback_routes
    from flightdeck.api.resolver import http_handler

    handler = http_handler(callback_routes.router, a2a_push_routes.router)
    from flightdeck.handlers import callback

    monkeypatch.setattr(callback, "handler", handler)
    for event, headers in [
        ("tool_response", {"Authorization": "Bearer not-a-token"}),
        ("tool_response", {"Authorization": "Basic dXNlcjpwdw=="}),
        ("a2a_push", {"X-A2A-Notification-Token": "forged"}),
    ]:
        status, response_headers, body = orchestrator.api(event, body=raw, headers=headers)
        assert status == 401 and body["error"]["code"] == "unauthorized", (event, body)
        assert response_headers["www-authenticate"].startswith("Bearer")
    assert parsed == []
    sid, turn, [tid] = start_turn(orchestrator)
    status, _, _ = orchestrator.api(
        "tool_response", body=raw, headers={"Authorization": f"Bearer {orchestrator.token(sid, turn, tid)}"}
    )
    assert status == 400 and parsed  # a valid token: now the body is read, and refused


# --- POST /api/a2a/push ---------------------------------------------------------------------------------


def test_push_receiver_refuses_hostile_json_and_text_that_is_not_unicode(orchestrator):
    sid, turn, [tid] = start_turn(orchestrator)
    token = orchestrator.token(sid, turn, tid)
    before = _state(orchestrator)
    headers = {"X-A2A-Notification-Token": token}
    for name, value in HOSTILE_VALUES:
        status, _, body = orchestrator.api("a2a_push", body='{"kind": "task", "id": ' + value + "}", headers=headers)
        assert status == 400, (name, body)
    task = {
        "kind": "task",
        "id": "t",
        "contextId": "c",
        "status": {"state": "completed"},
        "artifacts": [{"artifactId": "a", "parts": [{"kind": "text", "text": SURROGATE}]}],
    }
    status, _, body = orchestrator.api("a2a_push", body=json.dumps(task), headers=headers)
    assert status == 422 and body["error"]["message"].startswith("artifacts.0.parts.0.text: "), body
    assert _state(orchestrator) == before


# --- POST /a2a --------------------------------------------------------------------------------------


def _rpc(agent, raw: str):
    status, _, body = agent.api("a2a_message_send", body=raw)
    assert status == 200, body
    return body


def _send_text(text: str) -> str:
    return json.dumps(
        {
            "jsonrpc": "2.0",
            "id": "q",
            "method": "message/send",
            "params": {
                "message": {
                    "kind": "message",
                    "role": "user",
                    "messageId": "m-1",
                    "parts": [{"kind": "text", "text": text}],
                }
            },
        }
    )


@pytest.mark.parametrize("name,value", HOSTILE_VALUES, ids=[n for n, _ in HOSTILE_VALUES])
def test_a2a_answers_hostile_json_with_a_parse_error(orchestrator, name, value):
    before = _state(orchestrator)
    for raw in (value, '{"jsonrpc": "2.0", "id": 1, "method": "message/send", "params": ' + value + "}"):
        body = _rpc(orchestrator, raw)
        assert body["error"]["code"] == -32700 and body["id"] is None, (name, body)
    assert _state(orchestrator) == before


def test_a2a_refuses_text_that_is_not_unicode_up_front_and_starts_no_task(orchestrator):
    before = _state(orchestrator)
    body = _rpc(orchestrator, _send_text(SURROGATE))
    assert body["id"] == "q" and body["error"]["code"] == -32602, body
    assert "params.message.parts.0.text" in body["error"]["message"]
    assert body["error"]["data"] == {"field": "params.message.parts.0.text"}
    metadata_key = json.dumps(
        {
            "jsonrpc": "2.0",
            "id": 2,
            "method": "message/send",
            "params": {
                "message": {
                    "kind": "message",
                    "role": "user",
                    "messageId": "m-2",
                    "parts": [{"kind": "text", "text": "hi"}],
                    "metadata": {"\udc00": 1},
                }
            },
        }
    )
    body = _rpc(orchestrator, metadata_key)
    assert body["error"]["code"] == -32602 and "params.message.metadata" in body["error"]["message"]
    assert _state(orchestrator) == before
    assert orchestrator.bodies("turns") == []


@pytest.mark.parametrize("where", ["text", "metadata"])
def test_a2a_a_message_too_large_to_store_is_invalid_params_not_an_internal_error(orchestrator, where):
    message = {"kind": "message", "role": "user", "messageId": "m-big", "parts": [{"kind": "text", "text": "hi"}]}
    if where == "text":
        message["parts"][0]["text"] = "é" * 90_000  # within 100,000 characters, 540 KB JSON-escaped
    else:
        message["metadata"] = {"blob": "é" * 90_000}
    before = _state(orchestrator)
    body = _rpc(
        orchestrator, json.dumps({"jsonrpc": "2.0", "id": 1, "method": "message/send", "params": {"message": message}})
    )
    assert body["error"]["code"] == -32602 and "too large" in body["error"]["message"], body["error"]
    assert _state(orchestrator) == before


def test_a2a_invalid_utf8_is_a_parse_error(orchestrator):
    from tests.support.harness import load_event

    event = load_event("api/a2a_message_send.json")
    event.update(body=base64.b64encode(b'{"jsonrpc": "2.0", "id": 1, "method": "\xff"}').decode(), isBase64Encoded=True)
    event["headers"].update(orchestrator.auth_headers())
    status, _, body = orchestrator.call(event)
    assert status == 200 and body["error"]["code"] == -32700


def test_a2a_not_json_typed_is_an_invalid_request(orchestrator):
    status, _, body = orchestrator.api(
        "a2a_message_send", body=_send_text("hi"), headers={"Content-Type": "text/plain"}
    )
    assert status == 200 and body["error"]["code"] == -32600
