"""A2A continuation: a message with the taskId of a working task goes on with that task; the same
messageId again is the same message; another peer's task or context stays invisible.

Through the real handlers on moto; shapes checked against the a2a-sdk's own types.
"""

from __future__ import annotations

import json

import pytest
from a2a import types as sdk

from flightdeck import wiring
from flightdeck.domain.a2a import turn_hooks as a2a
from tests.integration.test_a2a_server import err, get, message, ok, rpc, send
from tests.integration.test_inbox import drain


def continue_task(agent, task, text, **extra):
    result = ok(rpc(agent, "message/send", {"message": message(text, taskId=task["id"], **extra)}))
    sdk.Task.model_validate(result)
    return result


def texts(history):
    return [(m["role"], m["parts"][0]["text"]) for m in history]


def test_a_message_with_the_task_id_of_a_working_task_continues_it_and_its_history_has_every_turn(orchestrator):
    task = send(orchestrator, "first question")
    follow = message("second question", taskId=task["id"])
    cont = ok(rpc(orchestrator, "message/send", {"message": follow}))
    assert (cont["id"], cont["status"]["state"]) == (task["id"], "working")
    # The message waits in the session's inbox; the task's history shows it already.
    assert texts(cont["history"]) == [("user", "first question"), ("user", "second question")]
    assert cont["history"][1]["messageId"] == follow["messageId"]
    orchestrator.run_queue("turns")  # turn 1 ends; the same write starts the continuation's turn
    assert get(orchestrator, task["id"])["status"]["state"] == "working"
    drain(orchestrator, task["contextId"])
    done = get(orchestrator, task["id"])
    assert done["status"]["state"] == "completed"
    assert 'Task: "second question"' in done["artifacts"][0]["parts"][0]["text"]
    history = texts(done["history"])
    assert [r for r, _ in history] == ["user", "agent", "user", "agent"]
    assert history[0][1] == "first question" and 'Task: "first question"' in history[1][1]
    assert history[2][1] == "second question" and 'Task: "second question"' in history[3][1]
    assert texts(get(orchestrator, task["id"], historyLength=2)["history"]) == history[2:]
    assert len(orchestrator.api("session_get", SESSION_ID=task["contextId"])[2]["messages"]) == 4


def test_the_same_message_id_again_is_the_same_message_and_changes_nothing(orchestrator):
    first = message("start the task")
    task = ok(rpc(orchestrator, "message/send", {"message": first}))
    before = orchestrator.table_items()
    again = ok(rpc(orchestrator, "message/send", {"message": first}))  # no contextId: the derived one again
    assert again["id"] == task["id"] and again["status"]["state"] == "working"
    assert orchestrator.table_items() == before
    follow = message("go on", taskId=task["id"])
    ok(rpc(orchestrator, "message/send", {"message": follow}))
    before = orchestrator.table_items()
    assert ok(rpc(orchestrator, "message/send", {"message": follow}))["id"] == task["id"]
    assert orchestrator.table_items() == before
    drain(orchestrator, task["contextId"])
    done = get(orchestrator, task["id"])
    assert [t for r, t in texts(done["history"]) if r == "user"] == ["start the task", "go on"]
    # Once the task is over, the first message again is answered with the finished task.
    assert ok(rpc(orchestrator, "message/send", {"message": first}))["status"]["state"] == "completed"


def test_a_continuation_that_finds_the_session_idle_starts_its_turn_and_the_turn_before_does_not_complete_it(
    orchestrator, monkeypatch
):
    task = send(orchestrator, "first question")
    real_end = a2a.on_end_turn
    monkeypatch.setattr(a2a, "on_end_turn", lambda *args, **kwargs: None)
    orchestrator.run_queue("turns")  # the answer is stored and the session idle; the task is not completed yet
    monkeypatch.setattr(a2a, "on_end_turn", real_end)
    session = orchestrator.api("session_get", SESSION_ID=task["contextId"])[2]
    assert session["status"] == "idle" and get(orchestrator, task["id"])["status"]["state"] == "working"
    cont = continue_task(orchestrator, task, "second question")
    assert cont["status"]["state"] == "working"
    # The end of turn 1 now runs (late): a message of the task started turn 2, so the task goes on.
    with orchestrator.acting():
        a2a.on_end_turn(wiring.deps(), task["contextId"], 1, "the first answer")
    assert get(orchestrator, task["id"])["status"]["state"] == "working"
    drain(orchestrator, task["contextId"])
    done = get(orchestrator, task["id"])
    assert (
        done["status"]["state"] == "completed" and 'Task: "second question"' in done["artifacts"][0]["parts"][0]["text"]
    )


def test_a_message_queued_for_a_task_that_is_canceled_gets_no_think(orchestrator):
    task = send(orchestrator, "@worker a long job")
    orchestrator.run_queue("turns")  # delegating: the turn waits
    continue_task(orchestrator, task, "and one more thing")
    canceled = ok(rpc(orchestrator, "tasks/cancel", {"id": task["id"]}))
    assert canceled["status"]["state"] == "canceled"
    body = drain(orchestrator, task["contextId"])
    roles_texts = [(m["role"], "".join(b.get("text", "") for b in m["content"])) for m in body["messages"]]
    assert roles_texts[-2] == ("user", "and one more thing")
    assert roles_texts[-1] == ("assistant", a2a.CANCELED_TEXT)  # closed at once: the model never saw it
    assert not any('Task: "and one more thing"' in t for _, t in roles_texts)
    assert get(orchestrator, task["id"])["status"]["state"] == "canceled"


def test_another_peers_task_or_context_stays_invisible(orchestrator):
    task = send(orchestrator, "mine alone")
    eve = orchestrator.add_peer("eve")
    before = orchestrator.table_items()
    for params in (
        {"message": message("let me in", taskId=task["id"])},
        {"message": message("let me in", contextId=task["contextId"])},
    ):
        status, _, resp = orchestrator.api(
            "a2a_message_send", body={"jsonrpc": "2.0", "id": 1, "method": "message/send", "params": params}, token=eve
        )
        assert status == 200 and resp["error"]["code"] == -32001, resp
    assert orchestrator.table_items() == before


@pytest.mark.parametrize(
    "patch,where",
    [
        ({"taskId": 12345}, "taskId"),
        ({"taskId": ["a", "b"]}, "taskId"),
        ({"taskId": "x" * 10_000}, "taskId"),
        ({"messageId": "m" * 300}, "messageId"),
        ({"messageId": 7}, "messageId"),
        ({"contextId": "not-the-tasks-context"}, "contextId"),
    ],
    ids=["int-task-id", "list-task-id", "huge-task-id", "huge-message-id", "int-message-id", "other-context"],
)
def test_hostile_continuations_are_invalid_params_and_change_nothing(orchestrator, patch, where):
    task = send(orchestrator, "a working task")
    before = orchestrator.table_items()
    bad = {**message("more", taskId=task["id"]), **patch}
    error = err(rpc(orchestrator, "message/send", {"message": bad}), -32602)
    assert where in error["message"] and len(json.dumps(error)) < 2_000
    assert orchestrator.table_items() == before
