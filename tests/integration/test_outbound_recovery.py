"""Outbound calls that fail halfway: a dispatch whose answer is lost, a batch refused for its size.

Two agents in one process, each with its own table and queues on moto, each reached over
loopback HTTP through its real API handlers (tests/support/relay.py).
"""

from __future__ import annotations

import json
import time
from types import SimpleNamespace

import pytest

from tests.support.harness import hand_outbound_to_queues, make_agent, new_session_id
from tests.support.relay import AgentRelay


@pytest.fixture
def relays():
    to_orchestrator, to_worker = AgentRelay(), AgentRelay()
    yield to_orchestrator, to_worker
    to_orchestrator.close()
    to_worker.close()


def make_pair(monkeypatch, relays, **orchestrator_env: str):
    """An orchestrator delegating to a worker; each reaches the other through its relay."""
    to_orchestrator, to_worker = relays
    allow = f"worker:{to_worker.url},orchestrator:{to_orchestrator.url}"
    worker = make_agent(monkeypatch, "worker", delegates=[], allow=allow)
    orchestrator_token = worker.add_peer("orchestrator")
    orchestrator = make_agent(
        monkeypatch,
        "orchestrator",
        allow=allow,
        extra_env={
            "PEER_TOKENS": json.dumps({"worker": orchestrator_token}),
            "DISPATCH_MAX_ATTEMPTS": "3",
            **orchestrator_env,
        },
    )
    to_orchestrator.agent, to_worker.agent = orchestrator, worker
    return orchestrator, worker


@pytest.fixture
def pair(aws, monkeypatch, relays):
    return make_pair(monkeypatch, relays)


def clock_ahead(monkeypatch, seconds: float) -> None:
    """Both agents' state clocks move on (a retry happens after its backoff, not at once)."""
    import flightdeck.adapters.dynamo.table as dynamo_table

    real = time.time
    monkeypatch.setattr(dynamo_table, "time", SimpleNamespace(time=lambda: real() + seconds, sleep=time.sleep))


def visible_now(agent, key: str, message: dict) -> None:
    """End a backoff early: the message is received again at once."""
    agent.sqs.change_message_visibility(
        QueueUrl=agent.queue_urls[key], ReceiptHandle=message["ReceiptHandle"], VisibilityTimeout=0
    )


def tool_results(session: dict) -> list[dict]:
    return [b["toolResult"] for m in session["messages"] for b in m["content"] if "toolResult" in b]


# --- defect 4 (issue 12): a retried dispatch is a replay ------------------------------------------


def test_a_dispatch_whose_answer_was_lost_is_replayed_and_the_delegation_completes(pair, relays, monkeypatch):
    orchestrator, worker = pair
    _, to_worker = relays
    sid = new_session_id()
    assert orchestrator.api("chat_post", body={"session_id": sid, "content": "@worker count the moons"})[0] == 202
    to_worker.lose_answers = 1  # the worker takes the task; its 202 is lost on the way back
    orchestrator.run_queue("turns")  # the think dispatches inline: a 504, so the task goes to the retry queue
    [dispatch] = orchestrator.receive("dispatch")
    assert json.loads(dispatch["Body"])["prior_attempts"] == 1
    assert orchestrator.run_queue("dispatch", [dispatch]) == {"batchItemFailures": []}

    first, retry = to_worker.exchanges
    assert (first.status, first.sent_status) == (202, 504)
    assert retry.body == first.body  # byte-identical: the same token, the same task
    assert (retry.status, json.loads(retry.answer)["status"]) == (202, "replayed")

    peer_sid = json.loads(first.body)["session_id"]
    with worker.acting():
        worker.run_queue("turns")  # the worker thinks once, and its answer goes back inline
        assert worker.receive("delivery") == []
        assert worker.receive("turns") == []
        meta = worker.item(f"S#{peer_sid}", "META")
        assert (meta["turn"], meta["msg_count"], meta["status"]) == (1, 1, "idle")  # one task, one think
        messages = [
            i
            for i in worker.table_items()
            if i["pk"]["S"] == f"S#{peer_sid}" and i["sk"]["S"].startswith(("MSG#", "INBOX#", "ITER#"))
        ]
        # The task (a new session's first message: on its META) and its one answer (the iteration is its one copy).
        assert len(messages) + ("first_msg" in meta) == 2

    orchestrator.run_queue("turns")
    session = orchestrator.api("session_get", SESSION_ID=sid)[2]
    assert session["status"] == "idle"
    [result] = tool_results(session)
    assert result["status"] == "success", result
    assert result["content"][0]["text"].startswith("[worker]") and "count the moons" in result["content"][0]["text"]


def test_a_replay_after_the_answer_went_out_is_replayed_and_runs_nothing(orchestrator):
    # The receiving side on its own: the task is done and answered (session idle, route retired)
    # when the retry of its dispatch arrives.
    sid, token = new_session_id(), "tok-" + "r" * 40
    assert orchestrator.api("chat_post_with_reply", SESSION_ID=sid, TOKEN=token)[0] == 202
    orchestrator.run_queue("turns")
    assert len(orchestrator.receive("delivery")) == 1
    assert orchestrator.item(f"S#{sid}", "META")["route"]["status"] == "retired"
    status, _, body = orchestrator.api("chat_post_with_reply", SESSION_ID=sid, TOKEN=token)
    assert (status, body["status"], body["turn"]) == (202, "replayed", 1)
    assert orchestrator.receive("turns") == [] and orchestrator.receive("delivery") == []
    assert orchestrator.item(f"S#{sid}", "META")["turn"] == 1


def test_a_dispatch_message_from_before_issued_ms_still_mints_one_token_for_all_attempts(orchestrator, monkeypatch):
    from flightdeck.domain.dispatch import DispatchMessage, callback_token
    from flightdeck.domain.tokens import verify
    from flightdeck.wiring import deps

    d = deps()
    msg = DispatchMessage(
        session_id="s-1",
        turn=1,
        tool_use_id="t-1",
        tool_name="ask_worker",
        task="x",
        total_tools=1,
        deadline_ms=int(time.time() * 1000) + 300_000,
    )  # no issued_ms
    delegate = d.settings.agent.delegate_for_tool("ask_worker")
    first = callback_token(d, msg, delegate)
    clock_ahead(monkeypatch, 7)
    assert callback_token(d, msg, delegate) == first
    claims = verify(first, d.keys(), agent="orchestrator", now=time.time())
    assert claims.iat == (msg.deadline_ms - d.settings.async_tool_timeout_ms) // 1000


# --- defect 5 (issue 12): a batch refused for its size is split, not dropped ----------------------


def test_seven_answers_whose_batch_is_too_large_are_each_delivered(pair, relays, monkeypatch):
    hand_outbound_to_queues(monkeypatch)  # the seven answers meet in one delivery batch
    orchestrator, worker = pair
    to_orchestrator, _ = relays
    sid = new_session_id()
    content = " ".join(f"@worker part {i}" for i in range(7))
    assert orchestrator.api("chat_post", body={"session_id": sid, "content": content})[0] == 202
    orchestrator.run_queue("turns")
    tool_use_ids = [d["tool_use_id"] for d in orchestrator.bodies("dispatch")]
    assert len(tool_use_ids) == 7
    # Each answer is exactly MAX_RESULT_BYTES of UTF-8; as JSON on the wire (\u00e9) three times that,
    # so one is 192 kB and the seven together are over the callback's 1 MB MAX_BODY_BYTES.
    answers = {tid: f"{i}" + "é" * 31_999 + "." for i, tid in enumerate(tool_use_ids)}
    assert {len(a.encode()) for a in answers.values()} == {64_000}
    with worker.acting():
        from flightdeck.wiring import deps

        for tid, answer in answers.items():
            deps().queues.send_delivery(
                {
                    "session_id": f"peer-{tid}",
                    "callback_service": "orchestrator",
                    "bearer_token": orchestrator.token(sid, 1, tid, total=7),
                    "result": answer,
                }
            )
        batch = worker.receive("delivery")
        assert len(batch) == 7
        assert worker.run_queue("delivery", batch) == {"batchItemFailures": []}
        assert worker.receive("delivery", dlq=True) == []
    # The whole batch is refused for its size, then each half is delivered (3 + 4 answers).
    assert [(e.path, e.status) for e in to_orchestrator.exchanges] == [
        ("/api/tools/responses", 413),
        ("/api/tools/responses", 200),
        ("/api/tools/responses", 200),
    ]
    recorded = {
        i["sk"]["S"].rsplit("#", 1)[1]: i["text"]["S"]
        for i in orchestrator.table_items()
        if i["sk"]["S"].startswith("RESULT#")
    }
    assert recorded == answers  # every answer, whole
    assert orchestrator.turn_item(sid, 1)["status"] == "complete"


# --- defect 5 (issue 36): an answer too large for its caller ends its call at once ------------------


def _ends_as_too_large(orchestrator, sid: str) -> dict:
    """The orchestrator's turn went on without a timeout: idle, the call's result a result_too_large error."""
    orchestrator.run_queue("turns")  # the next think, started by the call's completion
    session = orchestrator.api("session_get", SESSION_ID=sid)[2]
    assert session["status"] == "idle", session
    [result] = tool_results(session)
    error = json.loads(result["content"][0]["text"])
    assert (result["status"], error["reason"]) == ("error", "result_too_large"), result
    assert orchestrator.turn_item(sid, 1)["completed_by"] == "callback"  # not a timer, not the sweep
    return error


@pytest.mark.parametrize("limit", ["MAX_RESULT_BYTES", "MAX_BODY_BYTES"])
def test_an_answer_over_the_callers_limit_ends_its_call_at_once_and_dead_letters_nothing(
    aws, monkeypatch, relays, limit
):
    # The caller takes fewer bytes than the worker's answer: as a result (MAX_RESULT_BYTES), or as a body,
    # which it refuses unread (MAX_BODY_BYTES; the header token says which call it answers).
    orchestrator, worker = make_pair(monkeypatch, relays, **{limit: "20000"})
    to_orchestrator, _ = relays
    sid = new_session_id()
    task = "@worker " + "word " * 3000  # the worker's answer quotes it twice: over 30,000 bytes
    assert orchestrator.api("chat_post", body={"session_id": sid, "content": task})[0] == 202
    orchestrator.run_queue("turns")  # the think dispatches inline
    with worker.acting():
        worker.run_queue("turns")  # the worker answers inline: refused for its size, then its error goes
        assert worker.receive("delivery") == [] and worker.receive("delivery", dlq=True) == []
    first, second = to_orchestrator.exchanges
    assert (first.path, first.status, len(first.body) > 30_000) == ("/api/tools/response", 413, True)
    # The caller recorded the call as too large when it refused it: the worker's small error is a duplicate.
    assert (second.status, json.loads(second.body)["status"]) == (200, "error")
    _ends_as_too_large(orchestrator, sid)


def test_an_answer_over_the_protocols_limit_is_sent_as_its_error(pair, relays, monkeypatch):
    from flightdeck.domain.limits import MAX_ANSWER_BYTES

    hand_outbound_to_queues(monkeypatch)
    orchestrator, worker = pair
    to_orchestrator, _ = relays
    sid = new_session_id()
    assert orchestrator.api("chat_post", body={"session_id": sid, "content": "@worker write it all"})[0] == 202
    orchestrator.run_queue("turns")
    [dispatch] = orchestrator.bodies("dispatch")
    answer = "é" * (MAX_ANSWER_BYTES // 2 + 1)  # a handler's answer, say: no model reply is this large
    with worker.acting():
        from flightdeck.wiring import deps

        deps().queues.send_delivery(
            {
                "session_id": "peer-session",
                "callback_service": "orchestrator",
                "bearer_token": orchestrator.token(sid, 1, dispatch["tool_use_id"]),
                "result": answer,
            }
        )
        assert worker.run_queue("delivery") == {"batchItemFailures": []}
        assert worker.receive("delivery", dlq=True) == []
    [sent] = to_orchestrator.exchanges  # the error in its place, not the answer: nothing a caller refuses
    assert (sent.status, len(sent.body) < 1_000) == (202, True)
    error = _ends_as_too_large(orchestrator, sid)
    assert f"{MAX_ANSWER_BYTES + 2} bytes; at most {MAX_ANSWER_BYTES} are sent" in error["detail"]
