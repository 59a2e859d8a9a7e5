"""Inbound peer authentication, session ownership and the audit log, through the handlers on moto.

Every request is a sample API Gateway event (events/api/*.json) sent through the real
handler (tests/support/harness.py): the test peer's token goes along unless a test says
otherwise (`token=None`: no header; `token="..."`: that one).
"""

from __future__ import annotations

import hashlib
import json
import logging
import time

import pytest

from flightdeck import wiring
from flightdeck.domain.peers import new_token, peer_of, token_sha256
from flightdeck.observability import audit_logger
from tests.support.harness import TEST_PEER, load_event, make_agent, new_session_id
from tests.support.peer import ScriptedPeer

A2A_TASK_NOT_FOUND = -32001


def _error(body):
    return body["error"]


def chat(agent, sid, content="hello there", **kw):
    return agent.api("chat_post", body={"session_id": sid, "content": content}, **kw)


def rpc(agent, method, params, **kw):
    status, headers, body = agent.api(
        "a2a_message_send", body={"jsonrpc": "2.0", "id": "r1", "method": method, "params": params}, **kw
    )
    return status, headers, body


def send_task(agent, text="count the owls", **kw) -> dict:
    message = {
        "kind": "message",
        "role": "user",
        "messageId": f"m-{time.monotonic_ns()}",
        "parts": [{"kind": "text", "text": text}],
    }
    status, _, body = rpc(agent, "message/send", {"message": message}, **kw)
    assert status == 200 and "result" in body, body
    return body["result"]


class AuditLines(logging.Handler):
    """Collects the audit logger's records as dicts (the same fields its JSON lines carry)."""

    def __init__(self):
        super().__init__(logging.INFO)
        self.lines: list[dict] = []

    def emit(self, record):
        self.lines.append({k: v for k, v in vars(record).items()})

    def find(self, **match):
        return [line for line in self.lines if all(line.get(k) == v for k, v in match.items())]


@pytest.fixture
def audit_lines():
    handler = AuditLines()
    audit_logger._logger.addHandler(handler)
    yield handler
    audit_logger._logger.removeHandler(handler)


# --- 401: no token, or not a peer token -----------------------------------------------------------


@pytest.mark.parametrize(
    "event,replacements",
    [
        ("chat_post", {}),
        ("session_get", {"SESSION_ID": "s-anything"}),
        ("a2a_message_send", {}),
    ],
)
def test_missing_token_is_401_with_www_authenticate(orchestrator, event, replacements):
    status, headers, body = orchestrator.api(event, token=None, **replacements)
    assert status == 401 and _error(body)["code"] == "unauthorized"
    assert headers["www-authenticate"].startswith('Bearer realm="flightdeck"')


@pytest.mark.parametrize(
    "header",
    [
        "Bearer",
        "Bearer not-a-peer-token",
        f"Basic {'x' * 40}",
        "Bearer fdp_Upper_" + "a" * 43,  # peer ids are lowercase
        "Bearer fdp_orchestrator_short",  # the secret is 32+ characters
        "Bearer fdp_orchestrator_" + "a" * 43 + " trailing",
    ],
)
def test_malformed_token_is_401(orchestrator, header):
    status, headers, body = orchestrator.api("chat_post", headers={"Authorization": header})
    assert status == 401 and _error(body)["code"] == "unauthorized"
    assert "www-authenticate" in headers


def test_authentication_comes_before_anything_else_is_looked_at(orchestrator):
    # Malformed JSON and an oversized body: still 401 without a token, not 400/413.
    assert orchestrator.api("chat_post", body="{not json", token=None)[0] == 401
    assert orchestrator.api("chat_post", body="x" * 1_100_000, token=None)[0] == 401
    assert orchestrator.api("a2a_message_send", body="{not json", token=None)[0] == 401


# --- 403: unknown, wrong, revoked -------------------------------------------------------------------


def test_unknown_peer_is_403(orchestrator):
    status, headers, body = orchestrator.api("chat_post", token=new_token("stranger"))
    assert status == 403 and _error(body)["code"] == "forbidden"
    assert "www-authenticate" not in headers


def test_known_peer_with_a_wrong_secret_is_403_like_an_unknown_one(orchestrator):
    forged = new_token(TEST_PEER)
    _, _, unknown = orchestrator.api("chat_post", token=new_token("stranger"))
    status, _, body = orchestrator.api("chat_post", token=forged)
    assert status == 403 and body == unknown  # one answer: nothing says which


def test_revoked_peer_is_403_at_once(orchestrator):
    token = orchestrator.add_peer("alice")
    assert chat(orchestrator, new_session_id(), token=token)[0] == 202
    orchestrator.registry.revoke("alice")
    status, _, body = chat(orchestrator, new_session_id(), token=token)
    assert status == 403 and _error(body)["code"] == "forbidden"
    assert orchestrator.api("session_get", SESSION_ID="s-x", token=token)[0] == 403
    assert rpc(orchestrator, "tasks/get", {"id": "x~abc"}, token=token)[0] == 403


def test_rotation_old_token_refused_after_its_grace_new_one_accepted(orchestrator):
    old = orchestrator.add_peer("bob")
    new = new_token("bob")
    orchestrator.registry.rotate("bob", new, grace_ms=60_000)
    assert chat(orchestrator, new_session_id(), token=old)[0] == 202  # within the grace period
    assert chat(orchestrator, new_session_id(), token=new)[0] == 202
    # The grace period ends (moved into the past rather than waited for).
    orchestrator.dynamodb.update_item(
        TableName=orchestrator.table,
        Key={"pk": {"S": "PEER#bob"}, "sk": {"S": "PEER"}},
        UpdateExpression="SET previous_valid_until = :past",
        ExpressionAttributeValues={":past": {"N": str(int(time.time() * 1000) - 1)}},
    )
    assert chat(orchestrator, new_session_id(), token=old)[0] == 403
    assert chat(orchestrator, new_session_id(), token=new)[0] == 202


def test_rotation_without_grace_refuses_the_old_token_at_once(orchestrator):
    old = orchestrator.add_peer("carol")
    new = new_token("carol")
    orchestrator.registry.rotate("carol", new)
    assert chat(orchestrator, new_session_id(), token=old)[0] == 403
    assert chat(orchestrator, new_session_id(), token=new)[0] == 202


def test_the_registry_stores_only_hashes(orchestrator):
    tokens = {TEST_PEER: orchestrator.peer_token, "dave": orchestrator.add_peer("dave")}
    newer = new_token("dave")
    orchestrator.registry.rotate("dave", newer, grace_ms=60_000)
    tokens["dave-new"] = newer
    assert chat(orchestrator, new_session_id(), token=newer)[0] == 202
    dump = json.dumps(orchestrator.table_items())
    for token in tokens.values():
        secret = token.split("_", 2)[2]
        assert token not in dump and secret not in dump
    stored = orchestrator.item("PEER#dave", "PEER")
    assert stored["token_sha256"] == token_sha256(newer) == hashlib.sha256(newer.encode()).hexdigest()
    assert stored["previous_sha256"] == token_sha256(tokens["dave"])
    assert stored["status"] == "active" and stored["created_at"] > 0 and stored["rotated_at"] > 0


# --- POST /api/chat: the token is checked by the write that takes the message ----------------------


def _store_calls(orchestrator):
    """Every DynamoDB request the agent's store makes from now on: (operation, its parameters)."""
    calls = []
    wiring.state_store().client.meta.events.register(
        "before-parameter-build.dynamodb", lambda model, params, **_: calls.append((model.name, params))
    )
    return calls


def _checks_of(params):
    return [i["ConditionCheck"]["Key"]["pk"]["S"] for i in params.get("TransactItems", []) if "ConditionCheck" in i]


def test_a_new_session_is_taken_by_one_write_that_also_checks_the_token(orchestrator):
    calls = _store_calls(orchestrator)
    status, _, body = orchestrator.api("chat_post", body={"content": "one write"})
    assert status == 202 and body["status"] == "accepted"
    # No read of the registry: the transaction that creates the session checks the peer's record.
    assert [op for op, _ in calls] == ["TransactWriteItems"]
    assert _checks_of(calls[0][1]) == [f"PEER#{TEST_PEER}"]


def test_a_revocation_refuses_the_next_write_and_nothing_is_stored(orchestrator):
    token = orchestrator.add_peer("frank")
    assert orchestrator.api("chat_post", body={"content": "first"}, token=token)[0] == 202
    orchestrator.registry.revoke("frank")
    assert len(orchestrator.bodies("turns")) == 1  # (taken: what follows must start none)
    before = orchestrator.table_items()
    status, _, body = orchestrator.api("chat_post", body={"content": "after the revocation"}, token=token)
    assert status == 403 and body == {"error": {"code": "forbidden", "message": "this token is not accepted"}}
    assert orchestrator.table_items() == before and orchestrator.bodies("turns") == []


def test_an_answer_given_without_a_write_is_checked_against_the_registry_first(orchestrator):
    # A forged token for a known peer: whatever the request would have been answered, it is 403.
    sid = new_session_id()
    assert orchestrator.api("chat_post_with_reply", SESSION_ID=sid, TOKEN="t" * 40)[0] == 202
    forged = new_token(TEST_PEER)
    before = orchestrator.table_items()
    cases = {
        "a replay (answered from the stored route)": ("chat_post_with_reply", {"SESSION_ID": sid, "TOKEN": "t" * 40}),
        "a busy session (409)": ("chat_post", {"body": {"session_id": sid, "content": "again"}}),
        "a body that fails the schema (422)": ("chat_post_missing_content", {}),
        "malformed JSON (400)": ("chat_post_malformed_json", {}),
        "an oversized body (413)": ("chat_post", {"body": "x" * 1_100_000}),
    }
    for case, (event, kw) in cases.items():
        status, _, body = orchestrator.api(event, token=forged, **kw)
        assert status == 403 and body["error"]["code"] == "forbidden", case
    assert orchestrator.table_items() == before
    # The same replay with the real token: answered from the stored route, after one read of the registry.
    calls = _store_calls(orchestrator)
    status, _, body = orchestrator.api("chat_post_with_reply", SESSION_ID=sid, TOKEN="t" * 40)
    assert status == 202 and body["status"] == "replayed"
    assert ("GetItem", f"PEER#{TEST_PEER}") in [(op, p.get("Key", {}).get("pk", {}).get("S")) for op, p in calls]


def test_a_revocation_between_the_request_and_its_write_refuses_it(orchestrator):
    token = orchestrator.add_peer("grace")

    def revoke_first(**_):  # the revocation lands after the token was looked at (its shape), before the write
        if orchestrator.item("PEER#grace", "PEER")["status"] == "active":
            orchestrator.registry.revoke("grace")

    wiring.state_store().client.meta.events.register("before-call.dynamodb.TransactWriteItems", revoke_first)
    status, _, _ = orchestrator.api("chat_post", body={"content": "racing the revocation"}, token=token)
    assert status == 403
    assert [i for i in orchestrator.table_items() if i["pk"]["S"].startswith("S#")] == []


@pytest.mark.parametrize("authorizer", [{"principalId": "unidentified"}, {"peer": "someone-else"}])
def test_a_token_the_authorizer_found_wanting_is_read_at_once_not_left_to_a_failed_write(orchestrator, authorizer):
    calls = _store_calls(orchestrator)
    event = load_event("api/chat_post.json")
    event["headers"]["Authorization"] = f"Bearer {new_token(TEST_PEER)}"  # forged
    event["requestContext"]["authorizer"] = authorizer
    status, _, body = orchestrator.call(event)
    assert status == 403 and body["error"]["code"] == "forbidden"
    assert [op for op, _ in calls] == ["GetItem"]  # the registry; no write was tried
    # The authorizer named the caller: the write checks the token, no read first.
    calls.clear()
    event["headers"]["Authorization"] = f"Bearer {orchestrator.peer_token}"
    event["requestContext"]["authorizer"] = {"peer": TEST_PEER, "principalId": TEST_PEER}
    assert orchestrator.call(event)[0] == 202
    assert [op for op, _ in calls] == ["TransactWriteItems"]


# --- ownership: another peer's session does not exist for it ---------------------------------------


def test_another_peers_session_is_404_on_read_and_on_continuing_it(orchestrator):
    sid = new_session_id()
    assert chat(orchestrator, sid)[0] == 202
    orchestrator.run_queue("turns")  # the local model answers: the session is idle again
    other = orchestrator.add_peer("mallory")
    status, _, body = orchestrator.api("session_get", SESSION_ID=sid, token=other)
    assert status == 404 and _error(body)["code"] == "session_not_found"
    status, _, body = chat(orchestrator, sid, "now it is mine", token=other)
    assert status == 404 and _error(body)["code"] == "session_not_found"
    # Same answer as for a session that never existed.
    assert orchestrator.api("session_get", SESSION_ID="s-never", token=other)[2]["error"]["code"] == "session_not_found"
    # The owner's session is untouched and still theirs.
    status, _, session = orchestrator.api("session_get", SESSION_ID=sid)
    assert status == 200 and len(session["messages"]) == 2
    assert orchestrator.item(f"S#{sid}", "META")["owner"] == TEST_PEER
    assert chat(orchestrator, sid, "and one more")[0] == 202


def test_a_busy_session_of_another_peer_is_404_not_409(orchestrator):
    sid = new_session_id()
    assert chat(orchestrator, sid)[0] == 202  # busy: its turn was not run
    status, _, body = chat(orchestrator, sid, token=orchestrator.add_peer("eve"))
    assert status == 404  # 409 would tell eve that the session exists


# --- A2A -----------------------------------------------------------------------------------------


def test_a2a_other_peers_task_is_task_not_found(orchestrator):
    task = send_task(orchestrator)
    other = orchestrator.add_peer("trudy")
    for method, params in [
        ("tasks/get", {"id": task["id"]}),
        ("tasks/cancel", {"id": task["id"]}),
        (
            "tasks/pushNotificationConfig/set",
            {"taskId": task["id"], "pushNotificationConfig": {"url": "http://127.0.0.1:9/hook", "token": "t"}},
        ),
        ("tasks/pushNotificationConfig/get", {"id": task["id"]}),
        ("tasks/pushNotificationConfig/list", {"id": task["id"]}),
        ("tasks/pushNotificationConfig/delete", {"id": task["id"], "pushNotificationConfigId": task["id"]}),
    ]:
        status, _, body = rpc(orchestrator, method, params, token=other)
        assert status == 200 and body["error"]["code"] == A2A_TASK_NOT_FOUND, (method, body)
    # Neither can it add a message to the task, nor a task to the task's context.
    message = {"kind": "message", "role": "user", "messageId": "m-x", "parts": [{"kind": "text", "text": "hi"}]}
    for extra in ({"taskId": task["id"]}, {"contextId": task["contextId"]}):
        status, _, body = rpc(orchestrator, "message/send", {"message": {**message, **extra}}, token=other)
        assert body["error"]["code"] == A2A_TASK_NOT_FOUND, (extra, body)
    # ...nor read the context as a session.
    assert orchestrator.api("session_get", SESSION_ID=task["contextId"], token=other)[0] == 404
    # The owner still can.
    status, _, body = rpc(orchestrator, "tasks/get", {"id": task["id"]})
    assert body["result"]["id"] == task["id"]
    assert orchestrator.api("session_get", SESSION_ID=task["contextId"])[0] == 200


# --- INBOUND_AUTH=off (isolated test rigs) ------------------------------------------------------------


def test_inbound_auth_off_lets_anyone_in_and_stores_no_owner(aws, monkeypatch):
    agent = make_agent(monkeypatch, extra_env={"INBOUND_AUTH": "off"})
    sid = new_session_id()
    assert chat(agent, sid, token=None)[0] == 202
    assert agent.api("session_get", SESSION_ID=sid, token=None)[0] == 200
    assert "owner" not in agent.item(f"S#{sid}", "META")


# --- outbound: our token for the peer we call ----------------------------------------------------------


def test_dispatch_presents_our_token_for_that_peer_and_both_calls_are_audited(aws, monkeypatch, audit_lines):
    peer = ScriptedPeer()
    try:
        ours = new_token("orchestrator")
        agent = make_agent(
            monkeypatch,
            allow=f"worker:{peer.url},orchestrator:http://127.0.0.1:9",
            extra_env={"PEER_TOKENS": json.dumps({"worker": ours})},
        )
        sid = new_session_id()
        body = json.dumps({"session_id": sid, "content": "@worker count the owls"})
        assert agent.api("chat_post", body=body)[0] == 202
        agent.run_queue("turns")
        agent.run_queue("dispatch")
        [request] = peer.requests
        assert request["headers"]["Authorization"] == f"Bearer {ours}"
        [inbound] = audit_lines.find(direction="inbound")
        assert (inbound["operation"], inbound["peer"], inbound["outcome"], inbound["http_status"]) == (
            "chat",
            TEST_PEER,
            "accepted",
            202,
        )
        assert inbound["payload_sha256"] == hashlib.sha256(body.encode()).hexdigest()
        [outbound] = audit_lines.find(direction="outbound")
        assert (outbound["operation"], outbound["peer"], outbound["outcome"], outbound["session_id"]) == (
            "dispatch",
            "worker",
            "http_202",
            sid,
        )
        sent = json.dumps(request["body"]).encode()  # the peer got exactly these bytes (ASCII JSON)
        assert outbound["payload_sha256"] == hashlib.sha256(sent).hexdigest()
        assert all(line["audit"] is True for line in audit_lines.lines)
    finally:
        peer.close()


def test_refused_calls_are_audited_once_with_the_claimed_peer(orchestrator, audit_lines):
    stranger = new_token("stranger")
    orchestrator.api("chat_post", token=stranger)
    orchestrator.api("chat_post", token=None)
    orchestrator.api("session_get", SESSION_ID="s-1")  # a read, not a delegation call: not audited
    refused, missing = audit_lines.lines
    assert (refused["outcome"], refused["http_status"], refused["peer"], refused["claimed_peer"]) == (
        "forbidden",
        403,
        "",
        "stranger",
    )
    assert (missing["outcome"], missing["http_status"], missing["peer"]) == ("unauthorized", 401, "")
    assert peer_of(stranger) == "stranger"


def test_callbacks_are_audited_with_the_peer_the_token_names(orchestrator, audit_lines):
    sid = new_session_id()
    assert chat(orchestrator, sid, "@worker count the owls")[0] == 202
    orchestrator.run_queue("turns")
    turn = orchestrator.turn_item(sid, 1)
    [tool_use_id] = turn["expected"]
    token = orchestrator.token(sid, 1, tool_use_id)
    status, _, _ = orchestrator.api(
        "tool_response", body={"result": "four owls"}, headers={"Authorization": f"Bearer {token}"}
    )
    assert status == 202
    [line] = audit_lines.find(operation="tool_response")
    assert (line["direction"], line["peer"], line["outcome"]) == ("inbound", "worker", "accepted")
    assert line["payload_sha256"] == hashlib.sha256(json.dumps({"result": "four owls"}).encode()).hexdigest()
    orchestrator.api("tool_response", body={"result": "x"}, headers={"Authorization": "Bearer nonsense"})
    [bad] = audit_lines.find(operation="tool_response", outcome="unauthorized")
    assert bad["peer"] == "" and bad["http_status"] == 401
