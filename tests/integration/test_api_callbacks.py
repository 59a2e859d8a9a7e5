"""POST /api/tools/response(s) through the callback handler on moto: every status, and the races."""

import json
from concurrent.futures import ThreadPoolExecutor

import pytest

from tests.support.harness import PREVIOUS_SECRET, new_session_id


def start_turn(agent, n_tools: int = 1):
    """A real turn: chat + one think iteration that delegates n tasks. Returns (session_id, turn, tool_use_ids)."""
    sid = new_session_id()
    content = " ".join(f"@worker task number {i}" for i in range(n_tools))
    assert agent.api("chat_post", body={"session_id": sid, "content": content})[0] == 202
    agent.run_queue("turns")
    dispatches = agent.bodies("dispatch")
    assert len(dispatches) == n_tools
    return sid, dispatches[0]["turn"], [d["tool_use_id"] for d in dispatches]


def post(agent, token, result="an answer"):
    return agent.api("tool_response", body={"result": result}, headers={"Authorization": f"Bearer {token}"})


def result_items(agent, sid):
    return [i for i in agent.table_items() if i["sk"]["S"].startswith("RESULT#") and i["pk"]["S"] == f"S#{sid}"]


def test_accepted_then_duplicate(orchestrator):
    sid, turn, [tid] = start_turn(orchestrator)
    token = orchestrator.token(sid, turn, tid)
    status, _, body = orchestrator.api("tool_response", TOKEN=token, RESULT="forty-two")
    assert (status, body) == (202, {"status": "accepted", "completed_turn": True})
    status, _, body = post(orchestrator, token, "forty-two")
    assert (status, body) == (200, {"status": "duplicate", "completed_turn": False})
    [item] = result_items(orchestrator, sid)
    assert item["text"]["S"] == "forty-two"
    assert len(orchestrator.bodies("turns")) == 1  # exactly one next think


def test_callback_after_completion_is_late_and_changes_nothing(orchestrator):
    sid, turn, ids = start_turn(orchestrator, 2)
    post(orchestrator, orchestrator.token(sid, turn, ids[0], total=2))
    post(orchestrator, orchestrator.token(sid, turn, ids[1], total=2))
    before = orchestrator.table_items()
    # a different result for an id that is already in, after the turn completed
    status, _, body = orchestrator.api(
        "tool_response", TOKEN=orchestrator.token(sid, turn, "tooluse_unexpected"), RESULT="late"
    )
    assert status == 410 and body["error"]["code"] == "late"
    assert orchestrator.table_items() == before


@pytest.mark.parametrize("case", ["unknown_turn", "unexpected_id", "unknown_session"])
def test_unknown_turn_or_id_is_410(orchestrator, case):
    sid, turn, [tid] = start_turn(orchestrator)
    before = orchestrator.table_items()
    token = {
        "unknown_turn": orchestrator.token(sid, turn + 5, tid),
        "unexpected_id": orchestrator.token(sid, turn, "tooluse_not_expected"),
        "unknown_session": orchestrator.token("no-such-session", 1, tid),
    }[case]
    status, _, body = post(orchestrator, token)
    assert status == 410, body
    assert orchestrator.table_items() == before


def _tampered(token: str) -> str:
    payload, sig = token.split(".")
    return payload + "." + ("A" if sig[0] != "A" else "B") + sig[1:]


@pytest.mark.parametrize(
    "make",
    [
        lambda a, sid, turn, tid: None,  # no Authorization header
        lambda a, sid, turn, tid: "Basic dXNlcjpwdw==",
        lambda a, sid, turn, tid: "Bearer " + a.token(sid, turn, tid, secret="forged-secret-0123456789abcdef0123"),
        lambda a, sid, turn, tid: "Bearer " + _tampered(a.token(sid, turn, tid)),
        lambda a, sid, turn, tid: "Bearer " + a.token(sid, turn, tid, exp_in_s=-120),
        lambda a, sid, turn, tid: "Bearer " + a.token(sid, turn, tid, agent="worker"),
        lambda a, sid, turn, tid: "Bearer " + "x" * 5000,
    ],
    ids=["missing", "not-bearer", "forged", "tampered", "expired", "other-agent", "oversized"],
)
def test_bad_tokens_get_the_same_401_and_change_nothing(orchestrator, make):
    sid, turn, [tid] = start_turn(orchestrator)
    before = orchestrator.table_items()
    header = make(orchestrator, sid, turn, tid)
    if header is None:
        status, headers, body = orchestrator.api("tool_response_no_auth")
    else:
        status, headers, body = orchestrator.api(
            "tool_response", body={"result": "x"}, headers={"Authorization": header}
        )
    assert status == 401
    assert headers["www-authenticate"].startswith("Bearer")
    assert body["error"]["code"] == "unauthorized"
    assert orchestrator.table_items() == before


def test_token_signed_with_the_previous_secret_is_accepted(orchestrator):
    sid, turn, [tid] = start_turn(orchestrator)
    assert post(orchestrator, orchestrator.token(sid, turn, tid, secret=PREVIOUS_SECRET))[0] == 202


@pytest.mark.parametrize(
    "event,status,code",
    [
        ("tool_response_malformed_json", 400, "malformed_json"),
        ("tool_response_missing_result", 422, "invalid_request"),
    ],
)
def test_malformed_bodies(orchestrator, event, status, code):
    sid, turn, [tid] = start_turn(orchestrator)
    before = orchestrator.table_items()
    got, _, body = orchestrator.api(event, TOKEN=orchestrator.token(sid, turn, tid))
    assert got == status and body["error"]["code"] == code
    assert orchestrator.table_items() == before


def _too_large_result(agent, sid):
    [item] = result_items(agent, sid)
    return item["result_status"]["S"], json.loads(item["text"]["S"])


def test_an_oversized_result_is_413_and_ends_its_call_with_a_result_too_large_error(orchestrator):
    sid, turn, [tid] = start_turn(orchestrator)
    status, _, body = post(orchestrator, orchestrator.token(sid, turn, tid), "é" * 90_001)  # 180,002 bytes > 180,000
    assert status == 413 and body["error"]["code"] == "too_large"
    # Never cut short, never stored: the call ends with an error that says so, and the turn goes on now.
    status_, error = _too_large_result(orchestrator, sid)
    assert (status_, error["reason"]) == ("error", "result_too_large") and "180000 bytes" in error["detail"]
    assert orchestrator.turn_item(sid, turn)["status"] == "complete" and len(orchestrator.bodies("turns")) == 1
    assert post(orchestrator, orchestrator.token(sid, turn, tid), "fits")[:1] == (200,)  # its result is in


@pytest.mark.parametrize("token", ["good", "forged"])
def test_a_body_over_max_body_bytes_ends_its_call_only_when_its_header_token_is_good(orchestrator, monkeypatch, token):
    monkeypatch.setenv("MAX_BODY_BYTES", "5000")
    from flightdeck import wiring

    wiring.reset()
    sid, turn, [tid] = start_turn(orchestrator)
    good = orchestrator.token(sid, turn, tid)
    status, _, body = post(orchestrator, good if token == "good" else _tampered(good), "x" * 6000)
    if token == "forged":  # the body is never read, and nothing is recorded
        assert status == 401 and result_items(orchestrator, sid) == []
        assert orchestrator.turn_item(sid, turn)["status"] == "waiting"
        return
    assert status == 413 and body["error"]["code"] == "payload_too_large"
    assert _too_large_result(orchestrator, sid)[1]["reason"] == "result_too_large"
    assert orchestrator.turn_item(sid, turn)["status"] == "complete"


def test_batch_items_are_independent(orchestrator):
    sid, turn, ids = start_turn(orchestrator, 3)
    t = [orchestrator.token(sid, turn, i, total=3) for i in ids]
    items = [
        {"token": t[0], "result": "first"},
        {"token": t[0], "result": "first"},  # duplicate of the one before
        {"token": _tampered(t[1]), "result": "forged"},
        {"result": "no token"},
        {"token": t[2], "result": "third"},
    ]
    status, _, body = orchestrator.api("tool_responses_batch", body={"items": items})
    assert status == 200
    assert [(r["status"], r["http_status"]) for r in body["results"]] == [
        ("accepted", 202),
        ("duplicate", 200),
        ("unauthorized", 401),
        ("invalid", 422),
        ("accepted", 202),
    ]
    assert {i["text"]["S"] for i in result_items(orchestrator, sid)} == {"first", "third"}


def test_batch_over_100_items_is_refused(orchestrator):
    status, _, body = orchestrator.api("tool_responses_batch", body={"items": [{"token": "x", "result": "y"}] * 101})
    assert status == 422


def test_50_concurrent_copies_of_one_callback_record_it_once(orchestrator_on_server):
    orchestrator = orchestrator_on_server
    sid, turn, [tid] = start_turn(orchestrator)
    token = orchestrator.token(sid, turn, tid)
    with ThreadPoolExecutor(max_workers=50) as pool:
        answers = list(pool.map(lambda i: post(orchestrator, token, "same answer"), range(50)))
    statuses = sorted(a[0] for a in answers)
    assert statuses.count(202) == 1 and statuses.count(200) == 49, statuses
    assert len(result_items(orchestrator, sid)) == 1
    assert len(orchestrator.bodies("turns")) == 1


def test_20_concurrent_callbacks_complete_the_turn_once(orchestrator_on_server):
    orchestrator = orchestrator_on_server
    sid, turn, ids = start_turn(orchestrator, 20)
    tokens = [orchestrator.token(sid, turn, i, total=20) for i in ids]
    with ThreadPoolExecutor(max_workers=20) as pool:
        answers = list(pool.map(lambda t: post(orchestrator, t, f"answer {t[-6:]}"), tokens))
    assert [a[0] for a in answers] == [202] * 20
    assert sum(a[2]["completed_turn"] for a in answers) == 1
    assert len(result_items(orchestrator, sid)) == 20
    turns = orchestrator.bodies("turns")
    assert turns == [{"session_id": sid, "turn": turn + 1, "traceparent": "", "first_start": True}]
    # The aggregation on the session item: complete, every id counted, the index now lists the owed think.
    meta = orchestrator.item(f"S#{sid}", "META")
    assert (meta["agg_turn"], meta["agg_status"], "agg_open" in meta) == (turn, "complete", False)
    assert int(meta["owed_think"]) == turn + 1 and meta["agg_expected"] == set(ids)
