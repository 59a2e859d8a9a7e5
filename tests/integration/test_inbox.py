"""The session inbox: a message to a busy session waits (202 queued) and becomes its own turn, in order.

Through the real handlers on moto (and over HTTP to a moto server where requests must truly run at
once). The model is the local deterministic one: a plain message is answered
`[orchestrator] Task: "<message>" — ...`, so each answer names the message it answers.
"""

from __future__ import annotations

import importlib
import json
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from flightdeck import wiring
from flightdeck.domain import chat
from flightdeck.local.invocation import LocalLambdaContext
from tests.integration.test_api_callbacks import post
from tests.support.harness import hand_outbound_to_queues, load_event, new_session_id


def chat_post(agent, sid, content, headers=None, **fields):
    return agent.api("chat_post", body={"session_id": sid, "content": content, **fields}, headers=headers)


def session(agent, sid):
    status, _, body = agent.api("session_get", SESSION_ID=sid)
    assert status == 200, body
    return body


def drain(agent, sid, rounds: int = 30):
    """Run the turns queue (as Lambda's event source mapping would) until the session is idle with nothing waiting."""
    for _ in range(rounds):
        agent.run_queue("turns")
        body = session(agent, sid)
        if body["status"] == "idle" and body["queued"] == 0:
            return body
    raise AssertionError(f"session {sid} did not go idle: {session(agent, sid)}")


def conversation(body):
    """(role, text) of the user messages and the answers, in order (tool calls and results left out)."""
    out = []
    for m in body["messages"]:
        if any("toolUse" in b or "toolResult" in b for b in m["content"]):
            continue
        out.append((m["role"], "".join(b.get("text", "") for b in m["content"] if "text" in b)))
    return out


def answered(body, asked: list[str]) -> None:
    """Each message asked, in order, followed by exactly one answer that names it."""
    pairs = conversation(body)
    assert [t for r, t in pairs if r == "user"] == asked, pairs
    answers = [t for r, t in pairs if r == "assistant"]
    assert len(answers) == len(asked), pairs
    for question, answer in zip(asked, answers):
        assert f'Task: "{question}"' in answer, (question, answer)


def inbox_items(agent, sid):
    return [i for i in agent.table_items() if i["pk"]["S"] == f"S#{sid}" and i["sk"]["S"].startswith("INBOX#")]


# --- queued follow-ups -----------------------------------------------------------------------------


def test_follow_ups_to_a_busy_session_are_queued_with_their_positions_and_each_gets_its_own_turn(orchestrator):
    sid = new_session_id()
    status, _, first = chat_post(orchestrator, sid, "first question")
    assert (status, first["status"], first["turn"], first["iteration"]) == (202, "accepted", 1, 1)
    queued = [chat_post(orchestrator, sid, f"follow-up {n}")[2] for n in (1, 2, 3)]
    assert [(q["status"], q["position"], q["turn"], q["iteration"]) for q in queued] == [
        ("queued", 1, 2, None),
        ("queued", 2, 3, None),
        ("queued", 3, 4, None),
    ]
    view = session(orchestrator, sid)
    assert view["status"] == "busy" and view["queued"] == 3 and view["turn"] == 1
    assert [m["role"] for m in view["messages"]] == ["user"]  # queued messages are not in the conversation yet
    body = drain(orchestrator, sid)
    answered(body, ["first question", "follow-up 1", "follow-up 2", "follow-up 3"])
    assert (body["turn"], body["iteration"]) == (4, 4)
    # Each queued message is one item, also its turn's input message: no second copy was written.
    items = inbox_items(orchestrator, sid)
    assert sorted(int(i["turn"]["N"]) for i in items) == [2, 3, 4]
    assert not [
        i
        for i in orchestrator.table_items()
        if i["sk"]["S"].startswith("MSG#") and i["pk"]["S"] == f"S#{sid}" and not i["sk"]["S"].startswith("MSG#000001#")
    ]


def test_a_follow_up_while_the_turn_waits_on_a_delegation_is_answered_after_it(orchestrator):
    sid = new_session_id()
    chat_post(orchestrator, sid, "@worker look up the tide tables")
    orchestrator.run_queue("turns")
    [dispatch] = orchestrator.bodies("dispatch")
    status, _, body = chat_post(orchestrator, sid, "and the moon phase")
    assert (status, body["status"], body["position"]) == (202, "queued", 1)
    # The result completes the turn; its final think ends it and starts the queued message's turn.
    post(orchestrator, orchestrator.token(sid, dispatch["turn"], dispatch["tool_use_id"]), "high tide at noon")
    body = drain(orchestrator, sid)
    pairs = conversation(body)
    assert [r for r, _ in pairs] == ["user", "assistant", "user", "assistant"]
    assert "high tide at noon" in pairs[1][1] and pairs[2][1] == "and the moon phase"
    assert 'Task: "and the moon phase"' in pairs[3][1]


def test_concurrent_follow_ups_to_one_busy_session_are_each_answered_once_in_order(orchestrator_on_server):
    agent = orchestrator_on_server
    sid = new_session_id()
    chat_post(agent, sid, "@worker a long job")
    agent.run_queue("turns")  # delegating: the session stays busy until the result comes
    [dispatch] = agent.bodies("dispatch")
    n = 8
    with ThreadPoolExecutor(n) as pool:
        answers = list(pool.map(lambda i: chat_post(agent, sid, f"concurrent follow-up {i}"), range(n)))
    assert all(status == 202 and body["status"] == "queued" for status, _, body in answers), answers
    by_position = {body["position"]: body["turn"] for _, _, body in answers}
    assert sorted(by_position) == list(range(1, n + 1))  # each its own place: no two share one
    assert all(turn == position + 1 for position, turn in by_position.items())
    order = [f"concurrent follow-up {i}" for i in sorted(range(n), key=lambda i: answers[i][2]["position"])]
    post(agent, agent.token(sid, dispatch["turn"], dispatch["tool_use_id"]), "the job is done")
    body = drain(agent, sid)
    pairs = conversation(body)
    assert pairs[0] == ("user", "@worker a long job") and "the job is done" in pairs[1][1]
    answered({"messages": body["messages"][4:]}, order)  # in order of their places in the inbox
    assert body["turn"] == n + 1 and body["queued"] == 0


def test_follow_ups_racing_the_turns_they_follow_are_each_answered_once(orchestrator_on_server):
    """Messages arrive while thinks end turns: each either starts a turn (the session was idle) or waits
    and is started by the write that ends the turn before it; none is lost, none runs twice."""
    agent = orchestrator_on_server
    sid = new_session_id()
    chat_post(agent, sid, "the first message")
    n, results = 6, {}

    def think_until_posted():
        while len(results) < n:
            agent.run_queue("turns")

    def send(i):
        time.sleep(0.12 * i)
        results[i] = chat_post(agent, sid, f"racing follow-up {i}")

    with ThreadPoolExecutor(n + 1) as pool:
        thinker = pool.submit(think_until_posted)
        list(pool.map(send, range(n)))
        thinker.result()
    assert all(status == 202 and body["status"] in ("accepted", "queued") for status, _, body in results.values())
    body = drain(agent, sid)
    asked = [t for r, t in conversation(body) if r == "user"]
    assert sorted(asked[1:]) == sorted(f"racing follow-up {i}" for i in range(n))  # each once
    answered(body, asked)  # each followed by its own answer
    # Every answer's `turn` (a queued message's: the number it gets when its turn starts) is where it landed.
    assert all(asked[b["turn"] - 1] == f"racing follow-up {i}" for i, (_, _, b) in results.items())


# --- deduplication ---------------------------------------------------------------------------------


def test_a_repeat_by_message_id_or_idempotency_key_gets_the_same_answer_and_changes_nothing(orchestrator):
    sid = new_session_id()
    chat_post(orchestrator, sid, "first question")
    status, _, queued = chat_post(orchestrator, sid, "second", message_id="client-msg-2")
    assert (status, queued["status"], queued["position"]) == (202, "queued", 1)
    before = orchestrator.table_items()
    for again in (
        chat_post(orchestrator, sid, "second", message_id="client-msg-2"),
        chat_post(orchestrator, sid, "second", headers={"Idempotency-Key": "client-msg-2"}),
        chat_post(
            orchestrator,
            sid,
            "second, reworded",
            message_id="client-msg-2",
            headers={"Idempotency-Key": "client-msg-2"},
        ),
    ):
        assert again[0] == 202 and again[2] == queued
    assert orchestrator.table_items() == before
    status, _, third = chat_post(orchestrator, sid, "third", headers={"Idempotency-Key": "key-3"})
    assert (third["status"], third["position"]) == ("queued", 2)
    body = drain(orchestrator, sid)
    answered(body, ["first question", "second", "third"])
    # Once its turn started, a repeat is answered with that turn (and still starts nothing).
    before = orchestrator.table_items()
    status, _, later = chat_post(orchestrator, sid, "second", message_id="client-msg-2")
    assert (status, later) == (
        202,
        {"session_id": sid, "turn": 2, "iteration": 2, "status": "replayed", "position": None},
    )
    status, _, later = chat_post(orchestrator, sid, "third", message_id="key-3")
    assert (later["status"], later["turn"], later["iteration"]) == ("replayed", 3, 3)
    assert orchestrator.table_items() == before and orchestrator.bodies("turns") == []


def test_a_first_message_with_an_id_names_its_session_so_that_a_repeat_finds_it(orchestrator):
    status, _, first = orchestrator.api("chat_post", body={"content": "start here", "message_id": "m-first"})
    assert (status, first["status"]) == (202, "accepted")
    status, _, again = orchestrator.api(
        "chat_post", body={"content": "start here"}, headers={"Idempotency-Key": "m-first"}
    )
    assert (status, again["status"], again["session_id"], again["turn"]) == (202, "replayed", first["session_id"], 1)
    assert len(orchestrator.bodies("turns")) == 1
    # Another peer's same id is another message (its own session).
    eve = orchestrator.add_peer("eve")
    status, _, theirs = orchestrator.api(
        "chat_post", body={"content": "start here", "message_id": "m-first"}, token=eve
    )
    assert status == 202 and theirs["status"] == "accepted" and theirs["session_id"] != first["session_id"]


def test_a_repeat_on_an_idle_session_of_a_message_that_started_its_turn_starts_nothing(orchestrator):
    sid = new_session_id()
    chat_post(orchestrator, sid, "only once", message_id="once")
    drain(orchestrator, sid)
    before = orchestrator.table_items()
    status, _, again = chat_post(orchestrator, sid, "only once", message_id="once")
    assert (status, again["status"], again["turn"], again["iteration"]) == (202, "replayed", 1, 1)
    assert orchestrator.table_items() == before and orchestrator.bodies("turns") == []


@pytest.mark.parametrize(
    "fields,headers,status,code",
    [
        ({"message_id": 12345}, None, 422, "invalid_request"),
        ({"message_id": ["a"]}, None, 422, "invalid_request"),
        ({"message_id": ""}, None, 422, "invalid_request"),
        ({"message_id": "x" * 129}, None, 422, "invalid_request"),
        ({"message_id": "has space"}, None, 422, "invalid_request"),
        ({"message_id": "ünïcode"}, None, 422, "invalid_request"),
        ({}, {"Idempotency-Key": "y" * 5000}, 422, "invalid_request"),
        ({}, {"Idempotency-Key": "two words"}, 422, "invalid_request"),
        ({"message_id": "a"}, {"Idempotency-Key": "b"}, 400, "conflicting_message_ids"),
    ],
    ids=["int", "list", "empty", "too-long", "space", "non-ascii", "huge-header", "header-space", "conflicting"],
)
def test_hostile_message_ids_get_a_clear_4xx_and_change_nothing(orchestrator, fields, headers, status, code):
    sid = new_session_id()
    chat_post(orchestrator, sid, "busy now")
    before = orchestrator.table_items()
    got, _, body = chat_post(orchestrator, sid, "follow-up", headers=headers, **fields)
    assert (got, body["error"]["code"]) == (status, code), body
    assert body["error"]["message"] and "Traceback" not in json.dumps(body)
    assert orchestrator.table_items() == before


def test_a_full_inbox_is_429_and_a_repeat_of_a_queued_message_still_gets_its_answer(orchestrator, monkeypatch):
    monkeypatch.setattr(chat, "MAX_QUEUED_MESSAGES", 2)
    sid = new_session_id()
    chat_post(orchestrator, sid, "working")
    assert chat_post(orchestrator, sid, "one", message_id="q1")[2]["position"] == 1
    assert chat_post(orchestrator, sid, "two")[2]["position"] == 2
    before = orchestrator.table_items()
    status, headers, body = chat_post(orchestrator, sid, "three")
    assert status == 429 and body["error"]["code"] == "inbox_full" and headers["retry-after"]
    assert orchestrator.table_items() == before
    status, _, again = chat_post(orchestrator, sid, "one", message_id="q1")
    assert (status, again["status"], again["position"]) == (202, "queued", 1)
    drain(orchestrator, sid)
    assert chat_post(orchestrator, sid, "three")[2]["status"] == "accepted"


def test_another_peers_session_stays_invisible_to_a_follow_up(orchestrator):
    sid = new_session_id()
    chat_post(orchestrator, sid, "mine")
    eve = orchestrator.add_peer("eve")
    before = orchestrator.table_items()
    status, _, body = orchestrator.api("chat_post", body={"session_id": sid, "content": "let me in"}, token=eve)
    assert status == 404 and body["error"]["code"] == "session_not_found"
    assert orchestrator.table_items() == before


# --- B side: a busy delegated session answers each delegation on its own route -------------------------


def _past_the_claims_lease() -> None:
    store = wiring.state_store()
    later = store.now_ms() + store.owed_think_grace_ms + 1
    store._clock = lambda: later


def test_a_second_delegation_to_a_busy_session_is_answered_separately_on_its_own_route(orchestrator, monkeypatch):
    hand_outbound_to_queues(monkeypatch)
    sid = new_session_id()
    first_token, second_token = "first-token-" + "a" * 30, "second-token-" + "b" * 30
    status, _, first = orchestrator.api("chat_post_with_reply", SESSION_ID=sid, TOKEN=first_token)
    assert (status, first["status"]) == (202, "accepted")
    event = load_event("api/chat_post_with_reply.json", SESSION_ID=sid, TOKEN=second_token)
    body = json.loads(event["body"])
    body["content"] = "the second delegated task"
    status, _, second = orchestrator.api("chat_post_with_reply", body=body)
    assert (status, second["status"], second["position"]) == (202, "queued", 1)
    # The same delegation again (a dispatcher's retry) is the same queued message.
    assert orchestrator.api("chat_post_with_reply", body=body)[2] == second
    route = orchestrator.item(f"S#{sid}", "META")["route"]
    assert route["bearer_token"] == first_token  # the queued one's route waits with its message
    [think] = orchestrator.receive("turns")
    orchestrator.run_queue("turns", [think])
    route = orchestrator.item(f"S#{sid}", "META")["route"]
    assert (route["bearer_token"], route["status"], route["from_turn"]) == (second_token, "active", 2)
    drain(orchestrator, sid)
    deliveries = orchestrator.bodies("delivery")
    assert [d["bearer_token"] for d in deliveries] == [first_token, second_token]
    assert 'Task: "the second delegated task"' in deliveries[1]["result"]
    assert deliveries[0]["result"] != deliveries[1]["result"]
    assert orchestrator.item(f"S#{sid}", "META")["route"]["status"] == "retired"
    # A late redelivery of the first think (past its first run's claim) re-sends its answer to the first
    # route only (the caller dedupes).
    _past_the_claims_lease()
    orchestrator.run_queue("turns", [think])
    assert [d["bearer_token"] for d in orchestrator.bodies("delivery")] == [first_token]


def test_a_redelivered_think_whose_answer_started_the_queued_turn_resends_to_its_own_route(orchestrator, monkeypatch):
    hand_outbound_to_queues(monkeypatch)
    sid = new_session_id()
    tokens = ["route-one-" + "a" * 30, "route-two-" + "b" * 30]
    orchestrator.api("chat_post_with_reply", SESSION_ID=sid, TOKEN=tokens[0])
    orchestrator.api("chat_post_with_reply", SESSION_ID=sid, TOKEN=tokens[1])
    [think] = orchestrator.receive("turns")
    orchestrator.run_queue("turns", [think], delete=False)  # turn 1 answered, turn 2 started
    assert [d["bearer_token"] for d in orchestrator.bodies("delivery")] == [tokens[0]]
    # The same think again (a retried invocation): the answer of turn 1 goes to its route once more,
    # and turn 2's think is started again (a start has no deduplication; the second run of turn 2
    # finds its reply stored, or the session moved on, and stores nothing new). Lambda retries it a minute
    # on, past the first run's claim (a second start within it stops there: flightdeck.domain.think_claim).
    _past_the_claims_lease()
    orchestrator.run_queue("turns", [think])
    assert [d["bearer_token"] for d in orchestrator.bodies("delivery")] == [tokens[0]]
    assert [b["turn"] for b in orchestrator.bodies("turns")] == [2, 2]
    assert session(orchestrator, sid)["turn"] == 2


# --- liveness -------------------------------------------------------------------------------------


def _shift_clock(ms: int) -> None:
    store = wiring.state_store()
    store._clock = lambda: int(time.time() * 1000) + ms


def _sweep(agent):
    handler = importlib.import_module("flightdeck.handlers.sweeper").handler
    return handler(load_event("schedule/sweep.json"), LocalLambdaContext(function_name=f"{agent.name}-sweep"))


def test_the_next_think_send_fails_after_the_turn_ending_write_started_a_queued_turn_and_the_sweep_sends_it(
    orchestrator, monkeypatch
):
    from tests.integration.test_liveness import fail_next_think_send

    sid = new_session_id()
    chat_post(orchestrator, sid, "first")
    chat_post(orchestrator, sid, "queued second")
    failed = fail_next_think_send(monkeypatch)
    assert orchestrator.run_queue("turns") == {"batchItemFailures": []}  # the answer is in; the send failed
    assert failed["failed"] == 1 and orchestrator.bodies("turns") == []
    meta = orchestrator.item(f"S#{sid}", "META")
    assert (meta["status"], meta["turn"], meta["owed_think"]) == ("busy", 2, 2)  # owed since that write
    _shift_clock(wiring.state_store().owed_think_grace_ms + 1_000)
    _sweep(orchestrator)
    body = drain(orchestrator, sid)
    answered(body, ["first", "queued second"])


def test_a_crash_between_the_turn_ending_write_and_the_next_think_is_covered_by_redelivery_and_the_sweep(
    orchestrator, monkeypatch
):
    from flightdeck.domain import turn_loop

    class Died(BaseException):
        """The function's process ended right after the committed write."""

    sid = new_session_id()
    chat_post(orchestrator, sid, "first")
    chat_post(orchestrator, sid, "queued second")
    real = turn_loop._send_next_think
    monkeypatch.setattr(turn_loop, "_send_next_think", lambda *a: (_ for _ in ()).throw(Died()))
    [think] = orchestrator.receive("turns")
    with pytest.raises(Died):
        orchestrator.run_queue("turns", [think], delete=False)
    monkeypatch.setattr(turn_loop, "_send_next_think", real)
    meta = orchestrator.item(f"S#{sid}", "META")
    assert (meta["status"], meta["turn"], meta["owed_think"]) == ("busy", 2, 2)  # owed since that write
    # Both owners send it: the sweep, after the grace ...
    _shift_clock(wiring.state_store().owed_think_grace_ms + 1_000)
    _sweep(orchestrator)
    # ... and the turn message's redelivery (it was not deleted), which re-runs what followed the write.
    orchestrator.run_queue("turns", [think])
    body = drain(orchestrator, sid)
    answered(body, ["first", "queued second"])  # each once: the second send was a harmless duplicate
