"""Asking for input (flightdeck.domain.asking) through the real handlers on moto, one agent at a time.

B side: a question ends the turn and goes to the caller as `input_required` with its session; a
delegation continuing that session (continue_session) answers it; a re-sent continuation is a
replay; unknown, another peer's or busy sessions are refused. A side: the callback takes a
question, the model answers it by delegating in that context; mixed or malformed ask_user calls
and hostile context_ids are refused as results. A2A server: input-required, its push, the next
message (by taskId or by contextId alone) continues the task.
"""

from __future__ import annotations

import json

import pytest
from a2a import types as sdk

from flightdeck.domain.model import ModelReply
from tests.support.harness import hand_outbound_to_queues, make_agent, new_session_id
from tests.support.peer import ScriptedPeer

TOKEN = "tok-first-" + "q" * 40
SECOND = "tok-second-" + "q" * 40


@pytest.fixture(autouse=True)
def _outbound_through_the_queues(monkeypatch):
    hand_outbound_to_queues(monkeypatch)


@pytest.fixture
def peer():
    p = ScriptedPeer()
    yield p
    p.close()


@pytest.fixture
def agent(aws, monkeypatch, peer):
    """An agent whose worker, own callback service and webhooks are the scripted peer."""
    return make_agent(monkeypatch, allow=f"worker:{peer.url},orchestrator:{peer.url},hooks:{peer.url}/hooks")


def chat(agent, body, **kw):
    return agent.api("chat_post", body=body, **kw)


def view(agent, sid):
    return agent.api("session_get", SESSION_ID=sid)[2]


def delegated(sid, content, token, **extra):
    return {
        "session_id": sid,
        "content": content,
        "reply": {"callbackService": "orchestrator", "bearerToken": token},
        **extra,
    }


def deliver(agent):
    """The delivery messages queued, then sent by the delivery worker."""
    messages = agent.receive("delivery")
    agent.run_queue("delivery", messages)
    return [json.loads(m["Body"]) for m in messages]


# --- B side: asking the caller ----------------------------------------------------------------------


def test_a_question_goes_to_the_caller_and_a_continuation_of_the_session_answers_it(agent, peer):
    sid = new_session_id()
    assert chat(agent, delegated(sid, "?ask which year? summarise the plan", TOKEN))[0] == 202
    agent.run_queue("turns")
    [asked] = deliver(agent)
    assert (asked["status"], asked["result"], asked["context_id"]) == ("input_required", "which year?", sid)
    assert peer.requests[-1]["body"] == {"result": "which year?", "status": "input_required", "context_id": sid}
    assert peer.requests[-1]["headers"]["Authorization"] == f"Bearer {TOKEN}"
    assert agent.item(f"S#{sid}", "META")["route"]["status"] == "retired"
    session = view(agent, sid)
    assert (session["status"], session["question"], len(session["messages"])) == ("idle", "which year?", 2)

    status, _, accepted = chat(agent, delegated(sid, "2024", SECOND, continue_session=True))
    assert (status, accepted["status"], accepted["turn"]) == (202, "accepted", 2)
    agent.run_queue("turns")
    [answer] = deliver(agent)
    assert answer["status"] == "success" and "context_id" not in peer.requests[-1]["body"]
    assert answer["result"] == (
        '[orchestrator] Task: "summarise the plan" (asked "which year?", told "2024") — '
        'answer: 3 words; reversed: "plan the summarise"'
    )
    session = view(agent, sid)
    assert session["question"] is None
    # As stored: the question's call, then the answer as the user's message (no synthesized result).
    assert [m["role"] for m in session["messages"]] == ["user", "assistant", "user", "assistant"]
    assert session["messages"][2] == {"role": "user", "content": [{"text": "2024"}]}


def test_a_re_sent_continuation_is_a_replay_whether_the_session_is_busy_or_has_answered(agent, peer):
    sid = new_session_id()
    chat(agent, delegated(sid, "?ask which year? summarise", TOKEN))
    agent.run_queue("turns")
    deliver(agent)
    body = delegated(sid, "2024", SECOND, continue_session=True)
    assert chat(agent, body)[2]["status"] == "accepted"
    assert chat(agent, body)[2]["status"] == "replayed"  # busy with it
    agent.run_queue("turns")
    assert len(deliver(agent)) == 1
    status, _, again = chat(agent, body)  # answered: the retired route still knows its token
    assert (status, again["status"]) == (202, "replayed")
    assert agent.receive("turns") == [] and view(agent, sid)["iteration"] == 2


def test_continuing_an_unknown_or_another_peer_s_session_is_refused_and_a_busy_one_queues(agent):
    status, _, body = chat(agent, delegated("s-nobody", "2024", SECOND, continue_session=True))
    assert (status, body["error"]["code"]) == (404, "session_not_found") and "to continue" in body["error"]["message"]
    assert agent.item("S#s-nobody", "META") is None
    sid = new_session_id()
    chat(agent, delegated(sid, "?ask which year? summarise", TOKEN))
    agent.run_queue("turns")
    other = agent.add_peer("other")
    status, _, body = chat(agent, delegated(sid, "2024", SECOND, continue_session=True), token=other)
    assert (status, body["error"]["code"]) == (404, "session_not_found")
    assert view(agent, sid)["iteration"] == 1
    assert chat(agent, {"content": "2024", "continue_session": True})[0] == 422  # which session?
    assert chat(agent, delegated(sid, "2024", SECOND, continue_session="yes"))[0] == 422
    assert chat(agent, delegated(sid, "@worker busy now", SECOND, continue_session=True))[0] == 202
    # A continuation of a busy session waits in its inbox, as any message to it does.
    status, _, body = chat(agent, delegated(sid, "2025", "tok-third-" + "q" * 40, continue_session=True))
    assert (status, body["status"], body["position"]) == (202, "queued", 1)


def test_a_user_session_answers_its_question_by_the_next_chat_message(agent):
    sid = new_session_id()
    chat(agent, {"session_id": sid, "content": "?ask which year? summarise"})
    agent.run_queue("turns")
    assert view(agent, sid)["question"] == "which year?" and agent.receive("delivery") == []
    chat(agent, {"session_id": sid, "content": "1999"})
    agent.run_queue("turns")
    session = view(agent, sid)
    assert 'told "1999"' in session["messages"][-1]["content"][0]["text"] and session["question"] is None


# --- A side: a delegate's question ----------------------------------------------------------------


def _delegation(agent, content):
    sid = new_session_id()
    chat(agent, {"session_id": sid, "content": content})
    agent.run_queue("turns")
    [dispatch] = agent.bodies("dispatch")
    return sid, dispatch


def test_a_question_callback_becomes_the_tool_result_and_the_answer_goes_back_in_its_context(agent, peer):
    sid, dispatch = _delegation(agent, "@worker summarise the plan")
    token = agent.token(sid, 1, dispatch["tool_use_id"])
    status, _, _ = agent.api(
        "tool_response",
        body={"result": "which year?", "status": "input_required", "context_id": "b-ctx"},
        headers={"Authorization": f"Bearer {token}"},
    )
    assert status == 202
    agent.run_queue("turns")
    session = view(agent, sid)
    result = session["messages"][2]["content"][0]["toolResult"]
    assert result["status"] == "success"
    assert json.loads(result["content"][0]["text"]) == {
        "status": "input_required",
        "question": "which year?",
        "context_id": "b-ctx",
    }
    # No answer in the task: the agent passes the question on to its own user.
    assert session["question"] == "worker asks: which year?"
    chat(agent, {"session_id": sid, "content": "2024"})
    agent.run_queue("turns")
    [again] = agent.bodies("dispatch")
    assert (again["task"], again["context_id"]) == ("2024", "b-ctx")
    agent.sqs.send_message(QueueUrl=agent.queue_urls["dispatch"], MessageBody=json.dumps(again))
    agent.run_queue("dispatch")
    sent = peer.requests[-1]["body"]
    assert (sent["session_id"], sent["content"], sent["continue_session"]) == ("b-ctx", "2024", True)
    assert sent["reply"]["bearerToken"] != token


@pytest.mark.parametrize(
    "body, why",
    [
        ({"result": "q?", "status": "input_required"}, "needs the context_id"),
        ({"result": "done", "context_id": "b-ctx"}, "goes with status input_required only"),
        ({"result": "q?", "status": "input_required", "context_id": "not a session id!"}, "pattern"),
        ({"result": "q?", "status": "asking", "context_id": "b-ctx"}, "status"),
    ],
)
def test_a_malformed_question_callback_is_422_and_records_nothing(agent, body, why):
    sid, dispatch = _delegation(agent, "@worker summarise")
    token = agent.token(sid, 1, dispatch["tool_use_id"])
    status, _, resp = agent.api("tool_response", body=body, headers={"Authorization": f"Bearer {token}"})
    assert status == 422 and why in json.dumps(resp)
    assert not [i for i in agent.table_items() if i["sk"]["S"].startswith("RESULT#")]
    batch = {"items": [{"token": token, **body}]}
    [item] = agent.api("tool_responses_batch", body=batch)[2]["results"]
    assert (item["status"], item["http_status"]) == ("invalid", 422)


def test_a_batched_question_is_recorded_like_a_single_one(agent):
    sid, dispatch = _delegation(agent, "@worker summarise")
    token = agent.token(sid, 1, dispatch["tool_use_id"])
    batch = {"items": [{"token": token, "result": "which?", "status": "input_required", "context_id": "b-1"}]}
    [item] = agent.api("tool_responses_batch", body=batch)[2]["results"]
    assert (item["status"], item["http_status"]) == ("accepted", 202)
    [result] = [i for i in agent.table_items() if i["sk"]["S"].startswith("RESULT#")]
    assert json.loads(result["text"]["S"])["context_id"] == "b-1"


# --- the turn loop with a scripted model ------------------------------------------------------------


class Scripted:
    """A model that answers with the given tool calls, then "done"; it records what it was given."""

    def __init__(self, *calls: list[tuple[str, object]]):
        self.calls, self.seen = list(calls), []

    def converse(self, *, system, messages, tools):
        self.seen.append(messages)
        if not self.calls:
            return ModelReply(stop_reason="end_turn", message={"role": "assistant", "content": [{"text": "done"}]})
        uses = self.calls.pop(0)
        content = [
            {"toolUse": {"toolUseId": f"call-{len(self.seen)}-{i}", "name": n, "input": a}}
            for i, (n, a) in enumerate(uses)
        ]
        return ModelReply(stop_reason="tool_use", message={"role": "assistant", "content": content})


def _scripted(monkeypatch, model):
    import flightdeck.adapters.model_choice as models

    monkeypatch.setattr(models, "build_model", lambda agent: model)


def _results(agent, sid):
    """The error results of the session, by call: (status, the error's JSON)."""
    return {
        b["toolResult"]["toolUseId"]: (b["toolResult"]["status"], json.loads(b["toolResult"]["content"][0]["text"]))
        for m in view(agent, sid)["messages"]
        for b in m["content"]
        if "toolResult" in b and b["toolResult"]["status"] == "error"
    }


def test_ask_user_with_other_calls_or_without_a_question_is_an_error_result_and_the_turn_goes_on(agent, monkeypatch):
    model = Scripted([("ask_user", {"question": "which?"}), ("ask_worker", {"task": "t"})], [("ask_user", {})])
    _scripted(monkeypatch, model)
    sid = new_session_id()
    chat(agent, {"session_id": sid, "content": "go"})
    agent.run_queue("turns")
    assert [d["task"] for d in agent.bodies("dispatch")] == ["t"]  # the delegation goes out
    token = agent.token(sid, 1, "call-1-1", total=2)
    assert agent.api("tool_response", body={"result": "r"}, headers={"Authorization": f"Bearer {token}"})[0] == 202
    agent.run_queue("turns")  # think 2: a question without one
    agent.run_queue("turns")  # think 3: done
    results = _results(agent, sid)
    assert results["call-1-0"] == (
        "error",
        {
            "status": "error",
            "reason": "ask_user_not_alone",
            "detail": "ask_user must be the only tool call of its reply: ask again, alone, once these results are in",
        },
    )
    assert results["call-2-0"] == (
        "error",
        {
            "status": "error",
            "reason": "invalid_input",
            "detail": "ask_user: 'question' is required and must be a string",
        },
    )
    session = view(agent, sid)
    assert session["status"] == "idle" and session["question"] is None and session["iteration"] == 3


def test_a_hostile_context_id_is_refused_as_a_result_and_nothing_is_sent(agent, monkeypatch, peer):
    model = Scripted(
        [
            ("ask_worker", {"task": "t", "context_id": 7}),
            ("ask_worker", {"task": "t", "context_id": "s-of-someone-else"}),
            ("ask_worker", {"task": "t", "context_id": "x", "task_id": "y"}),
        ]
    )
    _scripted(monkeypatch, model)
    sid = new_session_id()
    chat(agent, {"session_id": sid, "content": "go"})
    agent.run_queue("turns")
    assert agent.bodies("dispatch") == [] and peer.requests == []
    reasons = {k: v[1]["detail"] for k, v in _results(agent, sid).items()}
    assert "must be a non-empty string" in reasons["call-1-0"]
    assert "names no conversation of this session with worker" in reasons["call-1-1"]
    assert "task_id is for A2A agents" in reasons["call-1-2"]
    agent.run_queue("turns")  # the refusals completed the turn: the model thinks again, and answers
    assert view(agent, sid)["status"] == "idle"


def test_the_model_sees_the_answer_as_the_result_of_its_question(agent, monkeypatch):
    model = Scripted([("ask_user", {"question": "which year?"})])
    _scripted(monkeypatch, model)
    sid = new_session_id()
    chat(agent, {"session_id": sid, "content": "go"})
    agent.run_queue("turns")
    chat(agent, {"session_id": sid, "content": "2024"})
    agent.run_queue("turns")
    given = model.seen[-1]
    assert given[-2]["content"][0]["toolUse"]["name"] == "ask_user"
    assert given[-1] == {
        "role": "user",
        "content": [{"toolResult": {"toolUseId": "call-1-0", "content": [{"text": "2024"}], "status": "success"}}],
    }


# --- A2A server: input-required ----------------------------------------------------------------------


def rpc(agent, method, params, **kw):
    status, _, resp = agent.api(
        "a2a_message_send", body={"jsonrpc": "2.0", "id": "r", "method": method, "params": params}, **kw
    )
    assert status == 200
    return resp


def ok(resp):
    assert "error" not in resp, resp
    return resp["result"]


def _message(text, **ids):
    return {
        "kind": "message",
        "role": "user",
        "messageId": f"m-{text}-{sorted(ids.items())}",
        "parts": [{"kind": "text", "text": text}],
        **ids,
    }


def _pushes(agent):
    return [
        (b["task"]["id"], b["task"]["status"]["state"]) for b in agent.bodies("delivery") if b["kind"] == "a2a_push"
    ]


def test_an_a2a_task_waits_in_input_required_and_the_message_on_its_task_id_continues_it(agent, peer):
    hooks = {"pushNotificationConfig": {"url": f"{peer.url}/hooks/a", "token": "first"}}
    task = ok(
        rpc(agent, "message/send", {"message": _message("?ask which year? summarise the plan"), "configuration": hooks})
    )
    agent.run_queue("turns")
    asked = sdk.Task.model_validate(ok(rpc(agent, "tasks/get", {"id": task["id"]})))
    assert asked.status.state == sdk.TaskState.input_required
    assert asked.status.message.parts[0].root.text == "which year?" and not asked.artifacts
    assert _pushes(agent) == [(task["id"], "input-required")]

    again = {"pushNotificationConfig": {"url": f"{peer.url}/hooks/a", "token": "second"}}
    resumed = ok(rpc(agent, "message/send", {"message": _message("2024", taskId=task["id"]), "configuration": again}))
    assert (resumed["id"], resumed["status"]["state"]) == (task["id"], "working")
    [config] = ok(rpc(agent, "tasks/pushNotificationConfig/list", {"id": task["id"]}))
    assert config["pushNotificationConfig"]["token"] == "second"  # the answer's sender hears what follows
    agent.run_queue("turns")
    done = sdk.Task.model_validate(ok(rpc(agent, "tasks/get", {"id": task["id"]})))
    assert done.status.state == sdk.TaskState.completed
    assert 'told "2024"' in done.artifacts[0].parts[0].root.text
    assert [(m.role.value, m.parts[0].root.text[:12]) for m in done.history] == [
        ("user", "?ask which y"),
        ("agent", "Before I can"),
        ("user", "2024"),
        ("agent", "[orchestrato"),
    ]
    assert "which year?" in done.history[1].parts[0].root.text
    assert _pushes(agent) == [(task["id"], "completed")]


def test_a_message_naming_only_the_context_answers_its_waiting_task(agent):
    task = ok(rpc(agent, "message/send", {"message": _message("?ask which year? summarise")}))
    agent.run_queue("turns")
    resumed = ok(rpc(agent, "message/send", {"message": _message("2024", contextId=task["contextId"])}))
    assert (resumed["id"], resumed["status"]["state"]) == (task["id"], "working")
    agent.run_queue("turns")
    assert ok(rpc(agent, "tasks/get", {"id": task["id"]}))["status"]["state"] == "completed"
    # Finished: the context's next message is a new task.
    following = ok(rpc(agent, "message/send", {"message": _message("thanks", contextId=task["contextId"])}))
    assert following["id"] != task["id"]


def test_another_peer_cannot_answer_a_task_s_question_and_a_canceled_question_takes_no_answer(agent, peer):
    hooks = {"pushNotificationConfig": {"url": f"{peer.url}/hooks/a", "token": "t"}}
    task = ok(rpc(agent, "message/send", {"message": _message("?ask which year? summarise"), "configuration": hooks}))
    agent.run_queue("turns")
    other = agent.add_peer("other")
    refused = rpc(agent, "message/send", {"message": _message("2024", taskId=task["id"])}, token=other)
    assert refused["error"]["code"] == -32001
    refused = rpc(agent, "message/send", {"message": _message("2024", contextId=task["contextId"])}, token=other)
    assert refused["error"]["code"] == -32001
    assert ok(rpc(agent, "tasks/get", {"id": task["id"]}))["status"]["state"] == "input-required"
    assert [state for _, state in _pushes(agent)] == ["input-required"]
    assert ok(rpc(agent, "tasks/cancel", {"id": task["id"]}))["status"]["state"] == "canceled"
    assert [state for _, state in _pushes(agent)] == ["canceled"]  # notified again: it ended
    late = rpc(agent, "message/send", {"message": _message("2024", taskId=task["id"])})
    assert late["error"]["code"] == -32602 and "terminal state: canceled" in late["error"]["message"]
    # The session is not canceled: its next message (the caller's, through /api/chat) is answered.
    chat(agent, {"session_id": task["contextId"], "content": "2024"})
    agent.run_queue("turns")
    assert 'told "2024"' in view(agent, task["contextId"])["messages"][-1]["content"][0]["text"]


@pytest.mark.parametrize(
    ("text", "state"), [("?ask which year? summarise the plan", "input-required"), ("summarise the plan", "completed")]
)
def test_a_first_turn_that_ends_before_message_send_marks_its_task_working_still_moves_the_task(
    agent, peer, monkeypatch, text, state
):
    # message/send writes the message (which queues the think) and then marks the task working: a turn
    # worker fast enough ends the turn in between. Found in CI: the question was lost, the task stayed
    # working (on moto's racy rollback, submitted) and a blocking send waited out its whole budget.
    from flightdeck.adapters.a2a_state import A2AStore

    marked = []
    start_task = A2AStore.start_task

    def after_the_turn_ended(self, session_id, key, start_turn):
        agent.run_queue("turns")
        marked.append(start_task(self, session_id, key, start_turn))
        return marked[-1]

    monkeypatch.setattr(A2AStore, "start_task", after_the_turn_ended)
    hooks = {"pushNotificationConfig": {"url": f"{peer.url}/hooks/a", "token": "first"}}
    task = ok(rpc(agent, "message/send", {"message": _message(text), "configuration": hooks}))
    assert marked == [False]  # the task had already moved on: nothing to mark
    assert task["status"]["state"] == state
    assert ok(rpc(agent, "tasks/get", {"id": task["id"]}))["status"]["state"] == state
    assert _pushes(agent) == [(task["id"], state)]


def test_a_continuation_given_up_on_is_canceled_at_the_session_it_continued(agent, peer, monkeypatch):
    """Issue 24, defect 4: the cancel goes to the delegate's session the continuation was sent to (its
    context_id), not to the session a new delegation would have created there (none: a 404 "settled")."""
    import time

    from flightdeck import wiring

    sid, dispatch = _delegation(agent, "@worker summarise the plan")
    token = agent.token(sid, 1, dispatch["tool_use_id"])
    body = {"result": "which year?", "status": "input_required", "context_id": "b-ctx"}
    assert agent.api("tool_response", body=body, headers={"Authorization": f"Bearer {token}"})[0] == 202
    agent.run_queue("turns")
    chat(agent, {"session_id": sid, "content": "2024"})
    agent.run_queue("turns")  # the answer goes to the worker as a continuation of b-ctx
    [again] = agent.bodies("dispatch")
    assert again["context_id"] == "b-ctx"
    # Its caller cancels the session while the continuation is out: the worker is told to stop b-ctx.
    assert agent.api("session_cancel", SESSION_ID=sid)[0] == 200
    cancels = [r["path"] for r in peer.requests if r["path"].endswith("/cancel")]
    assert cancels == ["/api/sessions/b-ctx/cancel"]
    # And so does the continuation's own deadline, when that passes first.
    sid, dispatch = _delegation(agent, "@worker summarise the plan")
    token = agent.token(sid, 1, dispatch["tool_use_id"])
    body = {"result": "which year?", "status": "input_required", "context_id": "b-ctx2"}
    assert agent.api("tool_response", body=body, headers={"Authorization": f"Bearer {token}"})[0] == 202
    agent.run_queue("turns")
    chat(agent, {"session_id": sid, "content": "2025"})
    agent.run_queue("turns")
    assert [b["context_id"] for b in agent.bodies("dispatch")] == ["b-ctx2"]
    later = int(time.time() * 1000) + wiring.deps().settings.async_tool_timeout_ms + 60_000
    monkeypatch.setattr(wiring.state_store(), "_clock", lambda: later)
    from flightdeck.domain.deadlines import sweep

    sweep(wiring.deps())
    cancels = [r["path"] for r in peer.requests if r["path"].endswith("/cancel")]
    assert cancels[1:] == ["/api/sessions/b-ctx2/cancel"]
