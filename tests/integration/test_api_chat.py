"""POST /api/chat, GET /api/sessions/{id}, the agent card, and the error shape, through the handlers on moto."""

import json

import pytest

from tests.support.harness import make_agent, new_session_id


def _error(body):
    assert set(body) == {"error"} and {"code", "message"} <= set(body["error"]), body
    return body["error"]


def test_new_task_gets_a_session_and_starts_a_turn(orchestrator):
    status, _, body = orchestrator.api("chat_post")
    assert status == 202
    assert body["status"] == "accepted" and body["turn"] == 1 and body["session_id"]
    [turn] = orchestrator.bodies("turns")
    assert turn["session_id"] == body["session_id"] and turn["turn"] == 1


def test_reply_route_is_stored_with_its_ttl(orchestrator):
    sid = new_session_id()
    status, _, body = orchestrator.api("chat_post_with_reply", SESSION_ID=sid, TOKEN="t" * 40)
    assert status == 202, body
    route = orchestrator.item(f"S#{sid}", "META")["route"]
    assert route["callback_service"] == "orchestrator" and route["status"] == "active"
    assert route["expires_at"] > route["created_at"] // 1000


def test_the_same_delegation_twice_starts_one_turn(orchestrator):
    sid = new_session_id()
    orchestrator.api("chat_post_with_reply", SESSION_ID=sid, TOKEN="t" * 40)
    status, _, body = orchestrator.api("chat_post_with_reply", SESSION_ID=sid, TOKEN="t" * 40)
    assert status == 202 and body["status"] == "replayed"
    assert len(orchestrator.bodies("turns")) == 1


@pytest.mark.parametrize(
    "event,status,code",
    [
        ("chat_post_unknown_service", 400, "unknown_callback_service"),
        ("chat_post_url_as_service", 400, "unknown_callback_service"),
        ("chat_post_malformed_json", 400, "malformed_json"),
        ("chat_post_unknown_field", 422, "invalid_request"),
        ("chat_post_missing_content", 422, "invalid_request"),
        ("chat_get_wrong_method", 405, "method_not_allowed"),
        ("unknown_route", 404, "not_found"),
    ],
)
def test_bad_requests_get_a_clear_error_and_change_nothing(orchestrator, event, status, code):
    before = orchestrator.table_items()
    got, headers, body = orchestrator.api(event)
    assert got == status
    err = _error(body)
    assert err["code"] == code and err["message"]
    assert "Traceback" not in json.dumps(body)
    assert orchestrator.table_items() == before
    assert orchestrator.bodies("turns") == []
    if status == 405:
        assert headers["allow"] == "POST"


def test_unknown_service_message_names_the_service(orchestrator):
    _, _, body = orchestrator.api("chat_post_unknown_service")
    assert "'evil'" in body["error"]["message"]


def test_oversized_body_is_413(orchestrator, monkeypatch):
    big = json.dumps({"content": "x" * 1_100_000})
    status, _, body = orchestrator.api("chat_post", body=big)
    assert status == 413 and _error(body)["code"] == "payload_too_large"
    assert [i for i in orchestrator.table_items() if not i["pk"]["S"].startswith("PEER#")] == []


def test_a_busy_session_queues_a_second_message(orchestrator):
    sid = new_session_id()
    assert orchestrator.api("chat_post", body={"session_id": sid, "content": "one"})[0] == 202
    status, _, body = orchestrator.api("chat_post", body={"session_id": sid, "content": "two"})
    assert status == 202 and body == {
        "session_id": sid,
        "turn": 2,
        "iteration": None,
        "status": "queued",
        "position": 1,
    }
    assert len(orchestrator.bodies("turns")) == 1  # no think for it yet: it waits for the turn before it


def test_session_view_and_unknown_session(orchestrator):
    sid = new_session_id()
    orchestrator.api("chat_post", body={"session_id": sid, "content": "hello there"})
    status, _, body = orchestrator.api("session_get", SESSION_ID=sid)
    assert status == 200
    assert body["status"] == "busy" and body["messages"] == [{"role": "user", "content": [{"text": "hello there"}]}]
    status, _, body = orchestrator.api("session_get", SESSION_ID="no-such-session")
    assert status == 404 and _error(body)["code"] == "session_not_found"


def test_the_cards_url_is_public_base_url_whatever_host_the_request_names(aws, monkeypatch):
    # The stack sets PUBLIC_BASE_URL to the stage's URL (infra/stack.py): a Host header never makes the card.
    agent = make_agent(
        monkeypatch, extra_env={"PUBLIC_BASE_URL": "https://abc123.execute-api.eu-west-1.amazonaws.com/prod/"}
    )
    status, _, card = agent.api("agent_card_get", headers={"Host": "attacker.example", "X-Forwarded-Proto": "http"})
    assert status == 200 and card["url"] == "https://abc123.execute-api.eu-west-1.amazonaws.com/prod/a2a"


def test_agent_card_is_a2a_v03_and_truthful(orchestrator):
    status, _, card = orchestrator.api("agent_card_get")
    assert status == 200
    assert card["protocolVersion"] == "0.3.0"
    assert card["name"] == "orchestrator"
    assert card["preferredTransport"] == "JSONRPC"
    assert card["url"] == "https://abc123.execute-api.us-east-1.amazonaws.com/prod/a2a"
    capabilities = dict(card["capabilities"])
    # Skill contracts (docs/SKILLS.md): responseSchema is served; reliable delivery (docs/A2A.md).
    [extension, _reliable] = capabilities.pop("extensions")
    assert extension["uri"] == "urn:flightdeck:a2a:ext:skill-contracts:v1" and extension["params"]["skills"] == {}
    assert capabilities == {
        "streaming": False,
        "pushNotifications": True,
        "stateTransitionHistory": False,
        "extendedAgentCard": False,  # v1.0's name, merged in (docs/A2A.md)
    }
    assert card["defaultInputModes"] == ["text/plain", "text/*", "application/json"] and card["skills"]
    assert card["securitySchemes"]["callbackToken"]["scheme"] == "bearer"


def test_a_body_that_is_not_json_typed_is_415(orchestrator):
    before = orchestrator.table_items()
    for content_type in ("text/plain", "multipart/form-data", "application/x-www-form-urlencoded"):
        status, _, body = orchestrator.api("chat_post", headers={"Content-Type": content_type})
        assert status == 415, (content_type, body)
    assert status == 415 and body["error"]["code"] == "unsupported_media_type"
    assert orchestrator.table_items() == before


def test_a_session_past_its_retention_but_not_yet_deleted_is_taken_over_as_a_new_one(orchestrator, monkeypatch):
    """Issue 24, defect 8: TTL's deletion can take days; meanwhile GET says 404, so a message to that
    session id (given, or derived from a message id) starts a new session instead of 409 forever."""
    import time

    from flightdeck import wiring

    sid = new_session_id()
    assert orchestrator.api("chat_post", body={"session_id": sid, "content": "long ago"})[0] == 202
    status, _, derived = orchestrator.api("chat_post", body={"content": "by id", "message_id": "client-msg-old"})
    assert status == 202
    orchestrator.run_queue("turns")
    retention = wiring.deps().settings.session_retention_ms
    later = int(time.time() * 1000) + retention + 60_000
    monkeypatch.setattr(wiring.state_store(), "_clock", lambda: later)
    assert orchestrator.api("session_get", SESSION_ID=sid)[0] == 404
    status, _, body = orchestrator.api("chat_post", body={"session_id": sid, "content": "today"})
    assert (status, body["status"]) == (202, "accepted"), body
    status, _, again = orchestrator.api("chat_post", body={"content": "by id", "message_id": "client-msg-old"})
    assert (status, again["session_id"], again["status"]) == (202, derived["session_id"], "accepted"), again
    orchestrator.run_queue("turns")
    status, _, view = orchestrator.api("session_get", SESSION_ID=sid)
    assert status == 200 and view["status"] == "idle"
    assert [m["role"] for m in view["messages"]] == ["user", "assistant"]  # nothing of the old session
    assert 'Task: "today"' in view["messages"][-1]["content"][0]["text"]
