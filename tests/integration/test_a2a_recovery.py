"""A2A server faults (issue 24): a function that dies between two writes of a task leaves a step that
has an owner (the sweep's owed think, the client's retry), a question's answer stays with its task, and
a stream's timestamps never go back.

Through the real handlers on moto, the fault at the exact step: the method that does the next step
raises `Died`, a BaseException (the function's process ends; no handler catches it), then the
recovery owners run.
"""

from __future__ import annotations

import dataclasses
import json
from datetime import datetime

import httpx
import pytest
from a2a import types as sdk

from flightdeck.adapters.a2a_state import A2AStore
from flightdeck.adapters.dynamo.store import StateStore
from flightdeck.adapters.dynamo.table import OWED_THINK_GRACE_MS
from flightdeck.api import a2a_stream_routes
from flightdeck.domain.a2a import tasks as a2a_tasks
from flightdeck.domain.streaming import Pace
from tests.integration.test_a2a_server import err, get, message, ok, rpc, send
from tests.integration.test_inbox import drain
from tests.integration.test_liveness import run_sweep, shift_clock
from tests.support.harness import make_agent
from tests.support.inprocess import gateway


class Died(BaseException):
    """The function's process ended at this step."""


def dies(*_args, **_kwargs):
    raise Died()


def texts(history):
    return [(m["role"], m["parts"][0]["text"]) for m in history]


def session_of(agent, sid):
    return agent.api("session_get", SESSION_ID=sid)[2]


# --- defect 2: a tasks/cancel that dies inside its close ---------------------------------------------


def test_a_cancel_that_dies_while_closing_the_session_leaves_the_close_owed_and_the_sweep_finishes_it(
    orchestrator, monkeypatch
):
    task = send(orchestrator, "@worker one @worker two")
    orchestrator.run_queue("turns")  # delegates: the turn waits on two results
    sid = task["contextId"]
    # The cancel completes the waiting turn (the next think owed), then dies at the write that ends it.
    real = StateStore.finish_session_turn
    monkeypatch.setattr(StateStore, "finish_session_turn", dies)
    with pytest.raises(Died):
        rpc(orchestrator, "tasks/cancel", {"id": task["id"]})
    monkeypatch.setattr(StateStore, "finish_session_turn", real)
    assert get(orchestrator, task["id"])["status"]["state"] == "canceled"
    meta = orchestrator.item(f"S#{sid}", "META")
    assert (meta["status"], meta["turn"], meta.get("owed_think")) == ("busy", 2, 2)  # the close is still owed
    # The client's retry is told the task is canceled; the close is the sweep's (a think of turn 2 closes).
    assert err(rpc(orchestrator, "tasks/cancel", {"id": task["id"]}), -32002)["data"]["state"] == "canceled"
    shift_clock(OWED_THINK_GRACE_MS + 1_000)
    run_sweep(orchestrator)
    thinks = orchestrator.receive("turns")
    assert [json.loads(t["Body"])["turn"] for t in thinks] == [2]
    orchestrator.run_queue("turns", thinks)
    session = session_of(orchestrator, sid)
    assert session["status"] == "idle"
    assert "toolResult" in session["messages"][-2]["content"][0]
    assert session["messages"][-1]["content"][0]["text"] == a2a_tasks.CANCELED_TEXT
    assert orchestrator.receive("turns") == []  # closed, not thought: the model was not asked again
    # The context is free: a new task starts in it, and runs.
    following = send(orchestrator, "next question", contextId=sid)
    assert following["status"]["state"] == "working"
    orchestrator.run_queue("turns")
    assert get(orchestrator, following["id"])["status"]["state"] == "completed"


def test_a_cancel_that_dies_before_stopping_the_delegations_is_finished_by_its_retry(orchestrator, monkeypatch):
    task = send(orchestrator, "@worker one")
    orchestrator.run_queue("turns")
    sid = task["contextId"]
    real = a2a_tasks._stop_delegations
    monkeypatch.setattr(a2a_tasks, "_stop_delegations", dies)
    with pytest.raises(Died):
        rpc(orchestrator, "tasks/cancel", {"id": task["id"]})  # the task is canceled; its turn still waits
    monkeypatch.setattr(a2a_tasks, "_stop_delegations", real)
    assert orchestrator.turn_item(sid, 1)["status"] == "waiting"
    assert err(rpc(orchestrator, "tasks/cancel", {"id": task["id"]}), -32002)["data"]["state"] == "canceled"
    # The retry did what the first did not: the delegation stopped, the session closed.
    assert orchestrator.turn_item(sid, 1)["completed_by"] == "a2a_cancel"
    assert session_of(orchestrator, sid)["status"] == "idle"


# --- defect 3: a question's answer is a continuation that was waiting --------------------------------


def test_a_continuation_waiting_when_the_task_asks_is_its_answer_and_the_clients_next_message_stays_with_it(
    orchestrator,
):
    task = send(orchestrator, "?ask which year? summarise the plan")
    follow = ok(rpc(orchestrator, "message/send", {"message": message("also list the costs", taskId=task["id"])}))
    assert follow["status"]["state"] == "working"  # queued: the task's first turn has not run yet
    # Turn 1 ends with the question; the same write starts turn 2 with the waiting message, which the
    # model is given as the question's answer: the task works on, it does not wait for another.
    orchestrator.run_queue("turns", orchestrator.receive("turns")[:1])
    sid = task["contextId"]
    assert orchestrator.item(f"S#{sid}", "META")["turn"] == 2
    asked = get(orchestrator, task["id"])
    assert asked["status"]["state"] == "working"
    assert [r for r, _ in texts(asked["history"])] == ["user", "agent", "user"]
    assert "which year?" in texts(asked["history"])[1][1]
    # The client's next message (it saw the question in the history) continues the same task.
    more = ok(rpc(orchestrator, "message/send", {"message": message("2024", taskId=task["id"])}))
    assert (more["id"], more["status"]["state"]) == (task["id"], "working")
    drain(orchestrator, sid)
    done = get(orchestrator, task["id"])
    assert done["status"]["state"] == "completed"
    history = texts(done["history"])
    assert [t for r, t in history if r == "user"] == [
        "?ask which year? summarise the plan",
        "also list the costs",
        "2024",
    ]
    assert "2024" in done["artifacts"][0]["parts"][0]["text"]  # the task's answer is its last turn's
    # Every turn of the session is the task's: none ran outside it.
    assert orchestrator.item(f"S#{sid}", "META")["turn"] == 3
    assert [m for m in done["history"] if m["role"] == "agent"][-1]["parts"][0]["text"] == done["artifacts"][0][
        "parts"
    ][0]["text"]


# --- defect 7: a message/send that dies before its task starts ---------------------------------------


@pytest.mark.parametrize("dies_at", ["the hand-off", "marking it working"])
def test_a_message_send_that_dies_before_its_task_starts_is_redone_by_the_clients_retry(
    orchestrator, monkeypatch, dies_at
):
    first = message("count the moons of mars")
    target, name = (a2a_tasks, "ingest_chat") if dies_at == "the hand-off" else (A2AStore, "start_task")
    real = getattr(target, name)
    monkeypatch.setattr(target, name, dies)
    with pytest.raises(Died):
        rpc(orchestrator, "message/send", {"message": first})
    monkeypatch.setattr(target, name, real)
    # The client's retry (the same messageId) hands the message over, once, and gets the task working.
    again = ok(rpc(orchestrator, "message/send", {"message": first}))
    assert again["status"]["state"] == "working"
    assert ok(rpc(orchestrator, "message/send", {"message": first}))["id"] == again["id"]  # and again: no-op
    orchestrator.run_queue("turns")
    assert orchestrator.receive("turns") == []
    done = get(orchestrator, again["id"])
    assert done["status"]["state"] == "completed"
    assert texts(done["history"])[0] == ("user", "count the moons of mars")
    assert [r for r, _ in texts(done["history"])] == ["user", "agent"]  # its message once, not twice
    session = session_of(orchestrator, again["contextId"])
    assert session["status"] == "idle" and len(session["messages"]) == 2


def test_a_task_left_submitted_is_started_by_a_message_naming_it(orchestrator, monkeypatch):
    context = "ctx-" + message("x")["messageId"]
    real = a2a_tasks.ingest_chat
    monkeypatch.setattr(a2a_tasks, "ingest_chat", dies)
    with pytest.raises(Died):
        rpc(orchestrator, "message/send", {"message": message("first question", contextId=context)})
    monkeypatch.setattr(a2a_tasks, "ingest_chat", real)
    # A new task in the context is told which task holds it; a message naming that task continues it.
    busy = err(rpc(orchestrator, "message/send", {"message": message("other", contextId=context)}), -32602)
    task_id = busy["data"]["taskId"]
    cont = ok(rpc(orchestrator, "message/send", {"message": message("second question", taskId=task_id)}))
    assert (cont["id"], cont["status"]["state"]) == (task_id, "working")
    drain(orchestrator, context)
    done = get(orchestrator, task_id)
    assert done["status"]["state"] == "completed"
    assert [t for r, t in texts(done["history"]) if r == "user"] == ["first question", "second question"]


@pytest.mark.parametrize("dies_at", ["the hand-off", "marking it working"])
def test_a_task_left_submitted_by_a_client_that_gives_up_is_handed_over_by_the_sweep(
    orchestrator, monkeypatch, dies_at
):
    """The owner does not depend on the client: the task stays due in the deadline index until its message
    is in its session, and the sweep hands it over from the stored message (found by the explorer's
    nightly run, seeds where the client never retries)."""
    first = message("count the moons of jupiter")
    target, name = (a2a_tasks, "ingest_chat") if dies_at == "the hand-off" else (A2AStore, "start_task")
    real = getattr(target, name)
    monkeypatch.setattr(target, name, dies)
    with pytest.raises(Died):
        rpc(orchestrator, "message/send", {"message": first})
    monkeypatch.setattr(target, name, real)
    run_sweep(orchestrator)  # within the grace: nothing yet (message/send may still be under way)
    shift_clock(OWED_THINK_GRACE_MS + 1_000)
    run_sweep(orchestrator)
    context = next(i["pk"]["S"][2:] for i in orchestrator.table_items() if i["sk"]["S"].startswith("A2A#TASK#"))
    drain(orchestrator, context)
    [task] = [i for i in orchestrator.table_items() if i["sk"]["S"].startswith("A2A#TASK#")]
    assert task["state"]["S"] == "completed" and "due_at" not in task
    session = session_of(orchestrator, context)
    assert session["status"] == "idle" and len(session["messages"]) == 2  # its message once, answered once


def test_an_answer_that_dies_before_it_reaches_the_session_puts_the_question_back(orchestrator, monkeypatch):
    context = "ctx-" + message("x")["messageId"]
    asked = ok(rpc(orchestrator, "message/send", {"message": message("?ask which year? plan it", contextId=context)}))
    drain(orchestrator, context)
    assert get(orchestrator, asked["id"])["status"]["state"] == "input-required"
    real = a2a_tasks.ingest_chat
    monkeypatch.setattr(a2a_tasks, "ingest_chat", dies)
    with pytest.raises(Died):  # the answer resumed the task, then the function died before handing it over
        rpc(orchestrator, "message/send", {"message": message("2024", taskId=asked["id"], contextId=context)})
    monkeypatch.setattr(a2a_tasks, "ingest_chat", real)
    assert get(orchestrator, asked["id"])["status"]["state"] == "working"
    shift_clock(OWED_THINK_GRACE_MS + 1_000)
    run_sweep(orchestrator)
    # Working on an idle session no more: the question stands again, for the client to answer.
    again = get(orchestrator, asked["id"])
    assert again["status"]["state"] == "input-required"
    assert "which year" in json.dumps(again["status"])
    answered = ok(
        rpc(orchestrator, "message/send", {"message": message("2024", taskId=asked["id"], contextId=context)})
    )
    assert answered["status"]["state"] == "working"
    drain(orchestrator, context)
    assert get(orchestrator, asked["id"])["status"]["state"] == "completed"


# --- extra: a stream's timestamps ----------------------------------------------------------------


def _stamp(value: str) -> datetime:
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


def test_a_streams_status_timestamps_never_go_back(aws, monkeypatch):
    """The task goes from its first think to its end between two polls (it delegates, is answered, and
    answers), and the poll that finds it over reports the steps since the one before: stamped when
    found, they were later than the completion the final status carries."""
    streaming = {"STREAMING": "on", "STREAM_POLL_INTERVAL_MS": "100", "STREAM_KEEPALIVE_MS": "1000"}
    with gateway("orchestrator") as url:
        agent = make_agent(monkeypatch, extra_env=streaming)
        ran = []

        def between_polls(_s: float) -> None:
            if ran:
                return
            agent.run_queue("turns")  # delegates (the worker is unreachable: the dispatch waits on its queue)
            [dispatch] = agent.bodies("dispatch")
            sid, tool_use_id = dispatch["session_id"], dispatch["tool_use_id"]
            token = agent.token(sid, 1, tool_use_id)
            ran.append(agent.api("tool_response", TOKEN=token, RESULT="384,400 km")[0])
            agent.run_queue("turns")  # the answer: the task completes
            shift_clock(2_000)  # the next poll comes later

        monkeypatch.setattr(
            a2a_stream_routes,
            "Pace",
            type(
                "P",
                (),
                {"of": staticmethod(lambda *a, **k: dataclasses.replace(Pace.of(*a, **k), sleep=between_polls))},
            ),
        )
        body = {
            "jsonrpc": "2.0",
            "id": "s1",
            "method": "message/stream",
            "params": {"message": message("@worker how far is the moon")},
        }
        with httpx.Client(timeout=30, headers=agent.auth_headers()) as http:
            resp = http.post(f"{url}/a2a", json=body)
        events = [
            json.loads(line[len("data:") :])["result"] for line in resp.text.splitlines() if line.startswith("data:")
        ]
    assert ran == [202] and events[0]["kind"] == "task"
    statuses = [events[0]["status"]] + [e["status"] for e in events[1:] if e["kind"] == "status-update"]
    working = [e for e in events[1:] if e["kind"] == "status-update" and not e["final"]]
    assert working and events[-1]["final"] and events[-1]["status"]["state"] == "completed"
    sdk.TaskStatusUpdateEvent.model_validate(events[-1])
    stamps = [_stamp(s["timestamp"]) for s in statuses]
    assert stamps == sorted(stamps), [s["timestamp"] for s in statuses]
