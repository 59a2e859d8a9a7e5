"""The SQS workers of one agent on moto: dispatch, delivery, deadline timer, sweep, and redelivery."""

import json

import pytest

from flightdeck import wiring
from tests.support.clock import Clock
from tests.support.harness import hand_outbound_to_queues, make_agent, new_session_id
from tests.support.peer import ScriptedPeer


@pytest.fixture(autouse=True)
def _outbound_through_the_queues(monkeypatch):
    # These tests drive the dispatch and delivery workers: the turn worker queues everything.
    hand_outbound_to_queues(monkeypatch)


@pytest.fixture
def peer():
    p = ScriptedPeer()
    yield p
    p.close()


TIMEOUT_MS = 2_000


@pytest.fixture
def clock():
    return Clock()


@pytest.fixture
def timers():
    """The timers the agent arms, (body, delay_s), as they are sent."""
    return []


@pytest.fixture
def agent(aws, monkeypatch, peer, clock, timers):
    """An orchestrator whose worker (and own callback service) is the scripted peer, on a clock the test
    moves: its deadlines pass when a test says, never because the machine was slow between two steps. Its
    timers are recorded and sent undelayed (SQS delays are real time): a test receives them when its clock
    says they are due."""
    agent = make_agent(
        monkeypatch,
        allow=f"worker:{peer.url},orchestrator:{peer.url}",
        extra_env={"DISPATCH_MAX_ATTEMPTS": "3", "ASYNC_TOOL_TIMEOUT_MS": str(TIMEOUT_MS)},
    )
    on_clock(monkeypatch, clock, timers)
    return agent


def on_clock(monkeypatch, clock, timers) -> None:
    from flightdeck.wiring import deps, state_store

    monkeypatch.setattr(state_store(), "_clock", clock)
    queues = deps().queues
    send = queues.send_timer
    monkeypatch.setattr(queues, "send_timer", lambda body, delay_s: (timers.append((body, delay_s)), send(body, 0)))


def think(agent, content, sid=None):
    sid = sid or new_session_id()
    assert agent.api("chat_post", body={"session_id": sid, "content": content})[0] == 202
    agent.run_queue("turns")
    return sid


def session(agent, sid):
    return agent.api("session_get", SESSION_ID=sid)[2]


def test_dispatch_posts_the_task_with_a_reply_route_and_writes_no_result(agent, peer):
    think(agent, "@worker count the moons")
    resp = agent.run_queue("dispatch")
    assert resp == {"batchItemFailures": []}
    [req] = peer.requests
    assert req["path"] == "/api/chat"
    assert req["body"]["content"] == "count the moons"
    assert req["body"]["reply"]["callbackService"] == "orchestrator"
    assert req["headers"]["traceparent"].startswith("00-")
    token = req["body"]["reply"]["bearerToken"]
    assert agent.api("tool_response", TOKEN=token, RESULT="four moons")[0] == 202  # the token A minted verifies
    assert not [i for i in agent.table_items() if i["sk"]["S"].startswith("RESULT#") and i["text"]["S"] != "four moons"]


def test_dispatch_delivered_twice_posts_the_same_request_so_the_peer_replays_it(agent, peer):
    # A first attempt claims nothing (no read, no write): a second delivery posts again, byte for
    # byte, which our peer answers `replayed` (tests/integration/test_outbound_recovery.py).
    think(agent, "@worker one")
    [msg] = agent.receive("dispatch")
    agent.run_queue("dispatch", [msg], delete=False)
    agent.run_queue("dispatch", [msg])
    assert len(peer.requests) == 2 and peer.requests[0]["body"] == peer.requests[1]["body"]


def test_retryable_dispatch_failure_backs_off_through_visibility(agent, peer):
    peer.statuses = [503]
    think(agent, "@worker one")
    resp = agent.run_queue("dispatch")
    assert len(resp["batchItemFailures"]) == 1
    assert agent.receive("dispatch") == []  # hidden for the backoff, not deleted


def test_refused_dispatch_records_dispatch_failed_and_completes_the_turn(agent, peer):
    peer.statuses = [400]
    peer.body = {
        "error": {"code": "unknown_callback_service", "message": "callbackService 'orchestrator' is not allowed"}
    }
    sid = think(agent, "@worker one")
    agent.run_queue("dispatch")
    agent.run_queue("turns")
    s = session(agent, sid)
    assert s["status"] == "idle"
    result = s["messages"][2]["content"][0]["toolResult"]
    assert result["status"] == "error"
    detail = json.loads(result["content"][0]["text"])
    assert detail["reason"] == "dispatch_failed" and "HTTP 400" in detail["detail"]
    assert "failed" in s["messages"][-1]["content"][0]["text"]


def test_unreachable_worker_after_retries_is_dispatch_failed(agent, peer, monkeypatch, clock, timers):
    peer.close()
    monkeypatch.setenv("DISPATCH_MAX_ATTEMPTS", "1")
    from flightdeck import wiring

    wiring.reset()
    on_clock(monkeypatch, clock, timers)
    sid = think(agent, "@worker one")
    agent.run_queue("dispatch")
    agent.run_queue("turns")
    s = session(agent, sid)
    assert s["status"] == "idle"
    assert "unreachable" in s["messages"][2]["content"][0]["toolResult"]["content"][0]["text"]


def test_deadline_timer_synthesizes_timeouts_once_and_late_callback_is_410(agent, peer, clock, timers):
    t0 = clock.now
    sid = think(agent, "@worker one @worker two")
    agent.run_queue("dispatch")
    tokens = [r["body"]["reply"]["bearerToken"] for r in peer.requests]
    assert agent.api("tool_response", TOKEN=tokens[0], RESULT="first answer")[0] == 202
    agg = agent.turn_item(sid, 1)
    timer = {"session_id": sid, "turn": 1, "deadline_ms": int(agg["deadline_ms"])}
    assert timer["deadline_ms"] == t0 + TIMEOUT_MS
    assert timers == [(timer, TIMEOUT_MS // 1000)]  # delayed until the deadline
    from flightdeck.domain.deadlines import TimerMessage, fire_timer
    from flightdeck.wiring import deps

    clock.now += 1_000
    assert fire_timer(deps(), TimerMessage(**timer)) == "rechained"  # early: it chains itself on
    assert timers[1] == (timer, 1)  # on again, for what is left
    clock.now = timer["deadline_ms"]
    fired = agent.receive("timers")
    assert len(fired) == 2 and all(json.loads(t["Body"]) == timer for t in fired)
    assert agent.run_queue("timers", fired) == {"batchItemFailures": []}
    assert fire_timer(deps(), TimerMessage(**timer)) == "already_complete"
    status, _, body = agent.api("tool_response", TOKEN=tokens[1], RESULT="too late")
    assert status == 410
    turns = agent.receive("turns")
    assert [json.loads(t["Body"])["turn"] for t in turns] == [2]  # one next think, though two timers fired
    agent.run_queue("turns", turns)
    s = session(agent, sid)
    results = [b["toolResult"] for b in s["messages"][2]["content"]]
    assert results[0]["content"][0]["text"] == "first answer"
    assert json.loads(results[1]["content"][0]["text"]) == {"status": "error", "reason": "timeout"}
    assert s["status"] == "idle" and "timeout" in s["messages"][-1]["content"][0]["text"]


def test_sweep_reads_only_overdue_turns_from_the_index(agent, peer, monkeypatch, clock):
    from flightdeck.domain.deadlines import sweep
    from flightdeck.wiring import deps, state_store

    # An owed think's grace inside the turns' deadline: each turn is listed at its deadline (a deadline within
    # the grace keeps the owed think's listing: tests/integration/test_delegation_deadlines.py).
    monkeypatch.setattr(state_store(), "owed_think_grace_ms", 500)
    sids = [think(agent, f"@worker job {i}") for i in range(3)]
    assert sweep(deps()) == 0  # nothing overdue yet
    clock.now += TIMEOUT_MS + 100
    assert len(state_store().list_overdue(clock.now)) == 3
    from flightdeck.handlers import sweeper
    from flightdeck.local.invocation import LocalLambdaContext
    from tests.support.harness import load_event

    assert sweeper.handler(load_event("schedule/sweep.json"), LocalLambdaContext(function_name="sweeper")) == {
        "expired": 3
    }
    assert sweep(deps()) == 0
    assert sorted(t["session_id"] for t in agent.bodies("turns")) == sorted(sids)


def test_think_delivered_twice_has_one_effect(agent, peer, timers):
    sid = new_session_id()
    agent.api("chat_post", body={"session_id": sid, "content": "@worker one"})
    [msg] = agent.receive("turns")
    agent.run_queue("turns", [msg])
    agent.run_queue("turns", [msg])  # Lambda may deliver an asynchronous event twice
    # The redelivery re-sends its effects (it cannot know the first attempt finished them); the
    # dispatch worker sends the task to the peer once, and the model was asked once.
    dispatches = agent.receive("dispatch")
    assert len({json.loads(m["Body"])["tool_use_id"] for m in dispatches}) == 1
    agent.run_queue("dispatch", dispatches)
    assert len({json.dumps(r["body"], sort_keys=True) for r in peer.requests}) == 1  # one request, replayed
    # The redelivery re-arms the turn's timer (the first run may have died before arming it): a
    # second firing finds the turn as the first left it. Both name the turn's one deadline.
    assert len(timers) == 2 and timers[0] == timers[1] and timers[0][1] == TIMEOUT_MS // 1000
    agg = agent.turn_item(sid, 1)
    assert agg["status"] == "waiting" and agg["received"] == 0 and len(agg["expected"]) == 1
    assert len(session(agent, sid)["messages"]) == 2


def _route_as_its_own_item(agent, sid):
    """Store the session as it was before the reply route moved into META: the route a ROUTE item."""
    from boto3.dynamodb.types import TypeSerializer

    route = agent.item(f"S#{sid}", "META")["route"]
    key = {"pk": {"S": f"S#{sid}"}, "sk": {"S": "META"}}
    agent.dynamodb.update_item(TableName=agent.table, Key=key, UpdateExpression="REMOVE route")
    item = {k: TypeSerializer().serialize(v) for k, v in {**route, "pk": f"S#{sid}", "sk": "ROUTE"}.items()}
    agent.dynamodb.put_item(TableName=agent.table, Item=item)


def test_a_session_whose_route_is_an_item_of_its_own_is_answered_and_retired_as_before(agent, peer):
    sid = new_session_id()
    token = "tok-" + "y" * 40
    assert agent.api("chat_post_with_reply", SESSION_ID=sid, TOKEN=token)[0] == 202
    _route_as_its_own_item(agent, sid)
    [msg] = agent.receive("turns")
    agent.run_queue("turns", [msg])
    [delivery] = agent.receive("delivery")
    assert json.loads(delivery["Body"])["bearer_token"] == token
    stored = agent.item(f"S#{sid}", "ROUTE")
    assert stored["status"] == "retired" and stored["retired_turn"] == 1
    meta = agent.item(f"S#{sid}", "META")
    assert meta["status"] == "idle" and "route" not in meta


@pytest.mark.parametrize("stored", ["in META", "as a ROUTE item"])
def test_retire_route_retires_the_named_waiting_route_once(agent, stored):
    from flightdeck import wiring

    sid = new_session_id()
    token = "tok-" + "z" * 40
    assert agent.api("chat_post_with_reply", SESSION_ID=sid, TOKEN=token)[0] == 202
    if stored == "as a ROUTE item":
        _route_as_its_own_item(agent, sid)
    store = wiring.state_store()
    assert store.get_route(sid).bearer_token == token and store.get_route(sid).status == "active"
    assert store.retire_route(sid, "tok-" + "w" * 40) is False  # not that route
    assert store.retire_route(sid, token) is True
    assert store.retire_route(sid, token) is False  # once
    assert store.get_route(sid).status == "retired"


def test_end_turn_delivers_once_and_retires_the_route(agent, peer):
    sid = new_session_id()
    token = "tok-" + "x" * 40
    status, _, _ = agent.api("chat_post_with_reply", SESSION_ID=sid, TOKEN=token)
    assert status == 202
    [msg] = agent.receive("turns")
    agent.run_queue("turns", [msg])
    # Delivered twice, the second after the first run's claim has lapsed (a second start within it stops at
    # its claim, flightdeck.domain.think_claim).
    store = wiring.state_store()
    later = store.now_ms() + store.owed_think_grace_ms + 1
    store._clock = lambda: later
    agent.run_queue("turns", [msg])
    # The answer's write retired the route and ended the turn in one transaction, so the
    # redelivered think cannot tell whether the first run delivered: it sends the same answer
    # again, and the caller records it once (a duplicate). The model was asked once.
    deliveries = agent.receive("delivery")
    assert len(deliveries) == 2 and len({json.loads(m["Body"])["result"] for m in deliveries}) == 1
    route = agent.item(f"S#{sid}", "META")["route"]
    assert route["status"] == "retired" and route["retired_turn"] == 1
    assert agent.item(f"S#{sid}", "META")["status"] == "idle"
    agent.run_queue("delivery", deliveries[:1], delete=False)
    agent.run_queue("delivery", deliveries[:1])  # SQS redelivers: the target answers duplicate, no harm
    assert [r["path"] for r in peer.requests] == ["/api/tools/response"] * 2
    assert peer.requests[0]["headers"]["Authorization"] == f"Bearer {token}"
    assert peer.requests[0]["body"]["result"].startswith("[orchestrator] Task")


def emitted_metrics(capsys) -> dict[str, float]:
    """The metrics the handlers flushed to stdout (CloudWatch embedded metric format), summed by name."""
    totals: dict[str, float] = {}
    for line in capsys.readouterr().out.splitlines():
        if line.startswith("{") and '"_aws"' in line:
            doc = json.loads(line)
            for metric in doc["_aws"]["CloudWatchMetrics"][0]["Metrics"]:
                values = doc[metric["Name"]]
                totals[metric["Name"]] = totals.get(metric["Name"], 0) + sum(
                    values if isinstance(values, list) else [values]
                )
    return totals


@pytest.mark.parametrize("status,expect_retry", [(503, True), (429, True), (410, False), (401, False), (404, False)])
def test_delivery_retries_only_what_can_succeed_and_dead_letters_what_it_drops(
    agent, peer, capsys, status, expect_retry
):
    peer.statuses = [status]
    from flightdeck.wiring import deps

    deps().queues.send_delivery(
        {"session_id": "s", "callback_service": "orchestrator", "bearer_token": "t" * 20, "result": "r"}
    )
    capsys.readouterr()
    resp = agent.run_queue("delivery")
    assert bool(resp["batchItemFailures"]) is expect_retry
    dead = agent.receive("delivery", dlq=True)
    metrics = emitted_metrics(capsys)
    if expect_retry:
        assert dead == [] and "DeliveriesDeadLettered" not in metrics
    else:
        # The target refused this very answer: dropped, but counted and kept with the reason.
        [kept] = dead
        assert json.loads(json.loads(kept["Body"])["body"])["result"] == "r"
        assert f"HTTP {status}" in json.loads(kept["Body"])["reason"]
        assert metrics["DeliveriesDeadLettered"] == 1 and metrics["DeliveriesRefused"] == 1


@pytest.mark.parametrize("refused", [1, 2])
def test_an_answer_refused_for_its_size_is_sent_as_its_result_too_large_error(agent, peer, refused):
    peer.statuses = [413] * refused
    from flightdeck.wiring import deps

    deps().queues.send_delivery(
        {"session_id": "s", "callback_service": "orchestrator", "bearer_token": "t" * 20, "result": "r" * 500}
    )
    assert agent.run_queue("delivery") == {"batchItemFailures": []}
    answer, error = peer.requests  # the answer, then its error in its place: the caller's call ends now
    assert answer["body"]["result"] == "r" * 500 and error["body"]["status"] == "error"
    assert json.loads(error["body"]["result"])["reason"] == "result_too_large"
    dead = agent.receive("delivery", dlq=True)
    if refused == 1:
        assert dead == []
    else:  # the error refused too: dropped, and kept with the reason, as any answer its target refuses
        [kept] = dead
        assert "HTTP 413" in json.loads(kept["Body"])["reason"]


def test_delivery_to_an_unknown_service_goes_to_the_dead_letter_queue(agent, peer):
    from flightdeck.wiring import deps

    deps().queues.send_delivery(
        {"session_id": "s", "callback_service": "evil", "bearer_token": "t" * 20, "result": "r"}
    )
    assert agent.run_queue("delivery") == {"batchItemFailures": []}
    assert peer.requests == []
    [dead] = agent.receive("delivery", dlq=True)
    assert "not an allowed service" in json.loads(dead["Body"])["reason"]


def test_delivery_batches_answers_for_one_service(agent, peer):
    peer.body = lambda path, req: {
        "results": [{"index": i, "status": "accepted", "http_status": 202} for i, _ in enumerate(req["body"]["items"])]
    }
    from flightdeck.wiring import deps

    for i in range(3):
        deps().queues.send_delivery(
            {"session_id": f"s{i}", "callback_service": "orchestrator", "bearer_token": f"t{i}" * 10, "result": f"r{i}"}
        )
    assert agent.run_queue("delivery") == {"batchItemFailures": []}
    assert [r["path"] for r in peer.requests] == ["/api/tools/responses"]
    assert [i["result"] for i in peer.requests[0]["body"]["items"]] == ["r0", "r1", "r2"]


def test_a_batch_refused_as_a_whole_goes_one_by_one_and_only_an_answer_refused_itself_is_dropped(agent, peer):
    peer.body = {"error": {"code": "invalid_request", "message": "not for you"}}
    peer.statuses = [400, 202, 410, 202]  # the batch, then one request per answer: the second is late
    from flightdeck.wiring import deps

    for i in range(3):
        deps().queues.send_delivery(
            {"session_id": f"s{i}", "callback_service": "orchestrator", "bearer_token": f"t{i}" * 10, "result": f"r{i}"}
        )
    assert agent.run_queue("delivery") == {"batchItemFailures": []}
    assert [r["path"] for r in peer.requests] == ["/api/tools/responses"] + ["/api/tools/response"] * 3
    [dead] = agent.receive("delivery", dlq=True)
    assert json.loads(json.loads(dead["Body"])["body"])["result"] == peer.requests[2]["body"]["result"]
    assert "HTTP 410" in json.loads(dead["Body"])["reason"]


@pytest.mark.parametrize("bad", ["not json", '{"session_id": "s"}', "[1, 2]"])
def test_a_malformed_delivery_message_is_dead_lettered_and_the_rest_of_its_batch_delivered(agent, peer, bad):
    from flightdeck.wiring import deps

    deps().queues.send_delivery(
        {"session_id": "s", "callback_service": "orchestrator", "bearer_token": "t" * 20, "result": "r"}
    )
    agent.sqs.send_message(QueueUrl=agent.queue_urls["delivery"], MessageBody=bad)
    assert agent.run_queue("delivery") == {"batchItemFailures": []}
    assert [r["body"]["result"] for r in peer.requests] == ["r"]
    [dead] = agent.receive("delivery", dlq=True)
    assert json.loads(dead["Body"])["body"] == bad
    assert json.loads(dead["Body"])["reason"].startswith("malformed message")


def test_local_tools_run_inline_and_complete_the_turn(aws, monkeypatch):
    a = make_agent(monkeypatch, delegates=[], builtin_tools=["word_count"])
    sid = think(a, "!word_count one two three")
    a.run_queue("turns")
    s = session(a, sid)
    assert s["status"] == "idle"
    assert s["messages"][2]["content"][0]["toolResult"]["status"] == "success"


def test_tool_calls_past_the_limit_get_an_error_result_not_a_dispatch(aws, monkeypatch, peer):
    a = make_agent(
        monkeypatch, allow=f"worker:{peer.url},orchestrator:{peer.url}", extra_env={"MAX_TOOLS_PER_TURN": "2"}
    )
    sid = think(a, "@worker one @worker two @worker three")
    assert len(a.bodies("dispatch")) == 2
    results = [i for i in a.table_items() if i["sk"]["S"].startswith("RESULT#")]
    [refused] = results
    assert json.loads(refused["text"]["S"]) == {
        "status": "error",
        "reason": "too_many_tools",
        "detail": "at most 2 tool calls per turn",
    }
    assert a.turn_item(sid, 1)["received"] == 1
