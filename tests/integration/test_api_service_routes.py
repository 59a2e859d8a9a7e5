"""GET /api/sessions (the caller's own sessions on the sessions index), GET /health, GET /openapi.json,
and the session's counters (turn: user messages; iteration: think iterations), through the handlers on moto."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from flightdeck import topology
from flightdeck.adapters.session_index import encode_cursor
from tests.support.harness import load_event, new_session_id

REPO = Path(__file__).resolve().parents[2]


def _list(agent, limit: int = 20, cursor: str | None = None, token=None):
    event = load_event("api/sessions_list.json", LIMIT=str(limit))
    if cursor is not None:
        event["queryStringParameters"]["cursor"] = cursor
        event["multiValueQueryStringParameters"]["cursor"] = [cursor]
    event["headers"]["Authorization"] = event["multiValueHeaders"]["Authorization"] = None
    headers = agent.auth_headers() if token is None else ({"Authorization": f"Bearer {token}"} if token else {})
    for k, v in headers.items():
        event["headers"][k] = v
        event["multiValueHeaders"][k] = [v]
    event["headers"] = {k: v for k, v in event["headers"].items() if v is not None}
    event["multiValueHeaders"] = {k: v for k, v in event["multiValueHeaders"].items() if v is not None}
    return agent.call(event)


class Requests:
    """Counts the DynamoDB requests of the agent's client (botocore's own event hooks)."""

    def __init__(self, client):
        self.ops: list[str] = []
        client.meta.events.register("before-call.dynamodb", self._seen)

    def _seen(self, model, **_):
        self.ops.append(model.name)

    def take(self) -> list[str]:
        ops, self.ops = self.ops, []
        return ops


def _start_sessions(agent, n: int, token=None) -> list[str]:
    ids = []
    for i in range(n):
        sid = new_session_id()
        headers = {"Authorization": f"Bearer {token}"} if token else None
        status, _, body = agent.api("chat_post", body={"session_id": sid, "content": f"task {i}"}, headers=headers)
        assert status == 202, body
        ids.append(sid)
        time.sleep(0.003)  # distinct creation milliseconds: "newest first" is then one order
    return ids


def test_the_caller_lists_its_own_sessions_newest_first_in_pages_of_two_requests(orchestrator):
    from flightdeck.wiring import state_store

    mine = _start_sessions(orchestrator, 5)
    other = orchestrator.add_peer("other")
    theirs = _start_sessions(orchestrator, 2, token=other)
    requests = Requests(state_store().client)

    seen, cursor, pages = [], None, 0
    while True:
        status, _, body = _list(orchestrator, limit=2, cursor=cursor)
        assert status == 200, body
        pages += 1
        ops = requests.take()
        # The caller's token (GetItem, as on every peer route), the index, then the sessions it names
        # (an empty last page needs no BatchGetItem).
        assert ops == ["GetItem", "Query", "BatchGetItem"] if body["sessions"] else ["GetItem", "Query"], ops
        seen += body["sessions"]
        cursor = body["next_cursor"]
        if cursor is None:
            break
    assert [s["session_id"] for s in seen] == list(reversed(mine))
    assert pages == 3
    first = seen[0]
    assert set(first) == {
        "session_id",
        "status",
        "created_at",
        "updated_at",
        "agent",
        "first_message",
        "turns",
        "delegations",
    }
    # What the console's list shows, from the META items the page reads anyway.
    assert (first["agent"], first["first_message"], first["turns"]) == ("orchestrator", "task 4", 1)
    assert first["status"] == "busy" and first["created_at"] <= first["updated_at"]
    assert [s["created_at"] for s in seen] == sorted((s["created_at"] for s in seen), reverse=True)

    status, _, body = _list(orchestrator, token=other)
    assert status == 200 and [s["session_id"] for s in body["sessions"]] == list(reversed(theirs))
    assert body["next_cursor"] is None


def test_a_cursor_of_another_caller_or_of_nothing_is_400_and_changes_nothing(orchestrator):
    _start_sessions(orchestrator, 3)
    _, _, page = _list(orchestrator, limit=1)
    other = orchestrator.add_peer("other")
    before = orchestrator.table_items()
    status, _, body = _list(orchestrator, cursor=page["next_cursor"], token=other)
    assert status == 400 and body["error"]["code"] == "invalid_cursor"
    forged = encode_cursor(
        {"pk": {"S": "S#x"}, "sk": {"S": "META"}, "owner": {"S": "tester"}, "created_at": {"S": "1"}}
    )
    for cursor in ("not-a-cursor!", "e30", forged):
        status, _, body = _list(orchestrator, cursor=cursor)
        assert status == 400 and body["error"]["code"] == "invalid_cursor", (cursor, body)
    assert orchestrator.table_items() == before


def test_listing_needs_a_peer_token_and_a_sane_limit(orchestrator):
    status, headers, body = _list(orchestrator, token="")
    assert status == 401 and body["error"]["code"] == "unauthorized" and "www-authenticate" in headers
    for limit in (0, 101):
        status, _, body = _list(orchestrator, limit=limit)
        assert status == 422 and body["error"]["code"] == "invalid_request", body


def test_expired_sessions_are_not_listed(orchestrator):
    [old, new] = _start_sessions(orchestrator, 2)
    orchestrator.dynamodb.update_item(
        TableName=orchestrator.table,
        Key={"pk": {"S": f"S#{old}"}, "sk": {"S": "META"}},
        UpdateExpression="SET expires_at = :past",
        ExpressionAttributeValues={":past": {"N": "1"}},
    )
    _, _, body = _list(orchestrator)
    assert [s["session_id"] for s in body["sessions"]] == [new]


def test_the_index_is_the_topology_one(orchestrator):
    table = orchestrator.dynamodb.describe_table(TableName=orchestrator.table)["Table"]
    index = next(i for i in table["GlobalSecondaryIndexes"] if i["IndexName"] == topology.SESSIONS_INDEX)
    assert index["Projection"] == {"ProjectionType": "KEYS_ONLY"}
    assert [k["AttributeName"] for k in index["KeySchema"]] == [
        topology.SESSION_OWNER_ATTRIBUTE,
        topology.SESSION_CREATED_AT_ATTRIBUTE,
    ]


def test_health_needs_no_token_and_says_only_name_and_version(orchestrator):
    status, _, body = orchestrator.api("health_get")
    assert status == 200
    assert body == {"status": "ok", "agent": "orchestrator", "version": "0.1.0"}


def test_openapi_json_is_the_committed_document(orchestrator):
    status, headers, body = orchestrator.api("openapi_get")
    assert status == 200 and headers["content-type"] == "application/json"
    assert body == json.loads((REPO / "openapi.json").read_text())
    for path in ("/health", "/openapi.json", "/api/sessions"):
        assert "get" in body["paths"][path]
    assert body["paths"]["/api/sessions"]["get"]["security"] == [{"peerToken": []}]
    assert "security" not in body["paths"]["/health"]["get"]


def test_turn_counts_user_messages_and_iteration_counts_thinks(orchestrator):
    sid = new_session_id()
    status, _, body = orchestrator.api("chat_post", body={"session_id": sid, "content": "@worker one thing"})
    assert status == 202 and (body["turn"], body["iteration"]) == (1, 1)
    orchestrator.run_queue("turns")  # think 1: delegates to the worker
    [dispatch] = orchestrator.bodies("dispatch")
    token = orchestrator.token(sid, 1, dispatch["tool_use_id"])
    status, _, _ = orchestrator.api("tool_response", body={"result": "done"}, TOKEN=token)
    assert status == 202
    orchestrator.run_queue("turns")  # think 2: the final answer
    status, _, view = orchestrator.api("session_get", SESSION_ID=sid)
    assert view["status"] == "idle" and (view["turn"], view["iteration"]) == (1, 2)

    status, _, body = orchestrator.api("chat_post", body={"session_id": sid, "content": "and another"})
    # The user's second message is turn 2 (it starts think iteration 3).
    assert status == 202 and (body["turn"], body["iteration"]) == (2, 3), body
    status, _, view = orchestrator.api("session_get", SESSION_ID=sid)
    assert (view["turn"], view["iteration"]) == (2, 3)


def _cursor_of(owner: str, **fields: dict[str, str]) -> str:
    key = {"pk": {"S": "S#x"}, "sk": {"S": "META"}, "owner": {"S": owner}, "created_at": {"N": "1"}}
    return encode_cursor({**key, **fields})


@pytest.mark.parametrize(
    "fields",
    [
        {"created_at": {"N": "²"}},  # a Unicode digit: str.isdigit() says yes, DynamoDB no number
        {"created_at": {"N": "１２"}},  # fullwidth digits
        {"created_at": {"N": "٣"}},  # Arabic-Indic
        {"created_at": {"N": "1" * 40}},  # past DynamoDB's 38 digits
        {"created_at": {"N": ""}},
        {"pk": {"S": "S#\ud800"}},  # a lone surrogate: no UTF-8 to send
    ],
    ids=["superscript", "fullwidth", "arabic-indic", "40-digits", "empty", "lone-surrogate"],
)
def test_a_forged_cursor_that_looks_well_formed_is_400_not_a_5xx(orchestrator, fields):
    _start_sessions(orchestrator, 2)
    before = orchestrator.table_items()
    status, _, body = _list(orchestrator, cursor=_cursor_of("tester", **fields))
    assert status == 400 and body["error"]["code"] == "invalid_cursor", body
    assert orchestrator.table_items() == before
