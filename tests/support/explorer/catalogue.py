"""The explorer's catalogue: each path through the system, as a client and the peers drive it.

A scenario is a script over a World (tests.support.explorer.world): requests into the agent, `settle()`
to run what is due now, the worker's answers, the clock. It asserts nothing: the explorer crashes it
at each of its steps, so a request may get no answer and a state may not be reached; the invariants,
checked after recovery, are the test. Ids are fixed (each run has a table of its own), so every run
takes the same steps until its crash.

To add a path: write its script here and add it to CATALOGUE (docs/ARCHITECTURE.md §3).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from flightdeck.domain.a2a.ports import task_id_of
from flightdeck.domain.a2a.tasks import task_key_of
from tests.support.explorer.world import CRASHED, World


@dataclass(frozen=True)
class Scenario:
    id: str
    script: Callable[[World], None]
    silent: frozenset[str] = field(default_factory=frozenset)  # tasks the worker never answers


def _message(sid: str, text: str, message_id: str, **ids: Any) -> dict[str, Any]:
    return {
        "kind": "message",
        "role": "user",
        "messageId": message_id,
        "contextId": sid,
        "parts": [{"kind": "text", "text": text}],
        **ids,
    }


def _task_id(sid: str, message_id: str) -> str:
    return task_id_of(sid, task_key_of(sid, message_id))


def _task_state(w: World, sid: str, message_id: str) -> str:
    """The task's state as tasks/get would tell the client (read from the table)."""
    key = {"pk": {"S": f"S#{sid}"}, "sk": {"S": f"A2A#TASK#{task_key_of(sid, message_id)}"}}
    got = w.agent.dynamodb.get_item(TableName=w.agent.table, Key=key, ConsistentRead=True).get("Item")
    return got["state"]["S"] if got else "unknown"


# --- chat, delegations ---------------------------------------------------------------------------


def chat(w: World) -> None:
    w.chat("s-chat", "count the moons of mars", "m-1")
    w.settle()


def one_delegation(w: World) -> None:
    w.chat("s-one", "@worker look up the tide tables", "m-1")
    w.settle()
    w.answer_delegations()
    w.settle()


def two_delegations(w: World) -> None:
    w.chat("s-two", "@worker first part @worker second part", "m-1")
    w.settle()
    w.answer_delegations()
    w.settle()


def follow_up_while_busy(w: World) -> None:
    w.chat("s-follow", "@worker a long job", "m-1")
    w.settle()
    w.chat("s-follow", "and the moon phase", "m-2")  # queued: the turn waits on the delegation
    w.answer_delegations()
    w.settle()


def think_started_twice(w: World) -> None:
    """Each think starts twice, the second run while the first asks the model (a first start held past the grace
    beside the sweep's re-send): both claim; one run asks, the other finds the think claimed and stops. (A first
    start inside its window claims nothing: every other scenario runs that path.)"""
    w.started_twice = True
    w.chat("s-twice", "@worker look up the tide tables", "m-1")
    w.settle()
    w.answer_delegations()
    w.settle()


def cancel_while_waiting(w: World) -> None:
    w.chat("s-cancel", "@worker a long job", "m-1")
    w.settle()
    w.cancel("s-cancel")
    w.settle()


def cancel_with_queued_follow_up(w: World) -> None:
    w.chat("s-cancelq", "@worker a long job", "m-1")
    w.settle()
    w.chat("s-cancelq", "and then this", "m-2")  # queued, position 1
    w.cancel("s-cancelq")
    w.settle()


def delegated_to_us(w: World) -> None:
    """B side: a peer delegates to this agent, whose answer goes to the peer's callback."""
    w.chat("s-asked", "summarise the launch plan", "m-1", reply_token="tok-route-one-" + "a" * 30)
    w.settle()


def we_ask_our_caller(w: World) -> None:
    """B side: the agent asks its caller; the caller's continuation of the session answers."""
    asking = "tok-route-ask-" + "b" * 30
    w.chat("s-we-ask", "?ask which year? summarise the plan", "m-1", reply_token=asking)
    w.settle()
    if w.deliveries.get(asking):  # the caller answers a question it has
        w.chat("s-we-ask", "2024", "m-2", reply_token="tok-route-answer-" + "c" * 30, continue_session=True)
        w.settle()


def delegate_asks(w: World) -> None:
    """A side: the worker asks a question; the model answers it by continuing the worker's session."""
    w.chat("s-they-ask", "@worker [ask] summarise the plan ?answer 2024", "m-1")
    w.settle()
    w.answer_delegations()  # the question
    w.settle()
    w.answer_delegations()  # the continuation's answer
    w.settle()


def per_delegation_timeouts(w: World) -> None:
    """The sleeper's own timeout_ms (4 s) passes while the worker's (300 s) does not."""
    w.chat("s-timeouts", "@worker fast one @sleeper slow one", "m-1")
    w.settle()
    w.answer_delegations()
    w.settle()
    w.clock.now += 5_000
    w.settle()


def answer_at_the_deadline(w: World) -> None:
    """Both answers arrive as the sleeper's deadline passes: each callback's two writes (its result put, then
    its count on the session item) race the timer, which completes the turn from the stored results (a crash
    between them leaves a result stored, not counted: the peer's retry or the timer counts it once)."""
    w.chat("s-race", "@worker fast one @sleeper slow one", "m-1")
    w.settle()
    w.clock.now += 4_000
    w.answer_delegations()
    w.settle()


def streamed_think(w: World) -> None:
    """A stream watches the session: the think streams the model and relays its text (LIVE writes)."""
    w.chat("s-stream", "first words", "m-1")
    w.settle()
    w.watch("s-stream")
    w.chat("s-stream", "tell me about tides and moons", "m-2")
    w.settle()


def mcp_inline_call(w: World) -> None:
    """An MCP tool answered inside the think (flightdeck.domain.mcp_tools), then the think that reads it."""
    w.chat("s-mcp", "!notes__search tides", "m-1")
    w.settle()


def mcp_deferred_call(w: World) -> None:
    """A slow MCP tool, taken like a delegation: the dispatch worker calls it and records its result."""
    w.chat("s-mcp-slow", '!notes__slow {"seconds": 12}', "m-1")
    w.settle()


def mcp_deferred_call_delivered_twice(w: World) -> None:
    """The slow MCP tool's message delivered twice at once (SQS standard queues deliver at least once): the tool
    is called once, whichever delivery runs first and wherever it dies."""
    w.delivered_twice.add("dispatch")
    w.chat("s-mcp-twice", '!notes__slow {"seconds": 12}', "m-1")
    w.settle()


# --- A2A ------------------------------------------------------------------------------------------


def a2a_send(w: World) -> None:
    w.a2a("message/send", {"message": _message("a-send", "count the moons of mars", "am-1")})
    w.settle()


def a2a_continue(w: World) -> None:
    w.a2a("message/send", {"message": _message("a-cont", "@worker a long job", "am-1")})
    w.settle()
    more = _message("a-cont", "and the moon phase", "am-2", taskId=_task_id("a-cont", "am-1"))
    w.a2a("message/send", {"message": more})  # waits in the inbox: the task goes on into its turn
    w.answer_delegations()
    w.settle()


def a2a_cancel(w: World) -> None:
    w.a2a("message/send", {"message": _message("a-cancel", "@worker a long job", "am-1")})
    w.settle()
    w.a2a("tasks/cancel", {"id": _task_id("a-cancel", "am-1")})
    w.settle()


def a2a_question(w: World) -> None:
    w.a2a("message/send", {"message": _message("a-ask", "?ask which year? summarise the plan", "am-1")})
    w.settle()
    if _task_state(w, "a-ask", "am-1") != "input-required":
        return  # the client answers a question it has seen
    answer = _message("a-ask", "2024", "am-2", taskId=_task_id("a-ask", "am-1"))
    w.a2a("message/send", {"message": answer})
    w.settle()


# --- skills, MCP server, A2A v1.0 ------------------------------------------------------------------


def skill_by_handler(w: World) -> None:
    """A structured call to a skill bound to a handler: answered without the model, held to its schema."""
    w.chat("s-skill-handler", "", "m-1", skill="count_words", arguments={"text": "one two three"})
    w.settle()


def skill_by_model(w: World) -> None:
    """A structured call to a skill the model answers, held to its output schema."""
    w.chat("s-skill-model", "", "m-1", skill="get_quote", arguments={"product": "widget", "quantity": 3})
    w.settle()


def _mcp_result(answer: Any) -> dict[str, Any]:
    """A /mcp answer's JSON-RPC result ({} for none: the function died, or an error)."""
    if answer is CRASHED or not isinstance(answer[2], dict):
        return {}
    result = answer[2].get("result")
    return result if isinstance(result, dict) else {}


def mcp_server_tools_call(w: World) -> None:
    """MCP tools/call of `ask` on /mcp, taken as a task (the client polls tasks/get), with a delegation behind it."""
    task = _mcp_result(
        w.mcp("tools/call", {"name": "ask", "arguments": {"message": "@worker look up the tide tables"}})
    )
    w.settle()
    w.answer_delegations()
    w.settle()
    if task.get("taskId"):
        w.mcp("tasks/get", {"taskId": task["taskId"]})


def mcp_server_tasks_update(w: World) -> None:
    """MCP tools/call whose agent asks the client a question; tasks/update answers it, and the task goes on."""
    task = _mcp_result(w.mcp("tools/call", {"name": "ask", "arguments": {"message": "?ask which year? the plan"}}))
    w.settle()
    if not task.get("taskId"):
        return
    asked = _mcp_result(w.mcp("tasks/get", {"taskId": task["taskId"]}))
    if asked.get("status") != "input_required":
        return  # the client answers a question it has seen
    key = next(iter(asked["inputRequests"]))
    answer = {key: {"action": "accept", "content": {"answer": "2024"}}}
    w.mcp("tasks/update", {"taskId": task["taskId"], "inputResponses": answer})
    w.settle()


def _v1_message(sid: str, text: str, message_id: str) -> dict[str, Any]:
    return {"role": "ROLE_USER", "messageId": message_id, "contextId": sid, "parts": [{"text": text}]}


def a2a_v1_send(w: World) -> None:
    """A2A v1.0 SendMessage (returnImmediately: the client polls), with a delegation behind it."""
    message = _v1_message("a1-send", "@worker a long job", "am-1")
    w.a2a("SendMessage", {"message": message, "configuration": {"returnImmediately": True}}, version="1.0")
    w.settle()
    w.answer_delegations()
    w.settle()


# --- THINK_GATHERING = "shared": thinks that share an invocation ------------------------------------


def a_batch_of_thinks(w: World) -> None:
    """Two sessions' thinks in one batch of the thinks queue, one after the other in one invocation (the
    explorer runs a batch's thinks on one thread, so each crash point falls before, inside or between them),
    then each session's next think, gathered too."""
    w.chat("s-batch-a", "@worker look up the tide tables", "m-1")
    w.chat("s-batch-b", "count the moons of mars", "m-1")
    w.settle()
    w.answer_delegations()
    w.settle()


def a2a_v1_subscribe(w: World) -> None:
    """A2A v1.0 SubscribeToTask while the task works (its stream watches the session, then closes without a
    final event), and again from its last event once the think ran: the rest, to the final status."""
    message = _v1_message("a1-sub", "count the moons of mars", "am-1")
    w.a2a("SendMessage", {"message": message, "configuration": {"returnImmediately": True}}, version="1.0")
    task_id = _task_id("a1-sub", "am-1")
    first = w.subscribe(task_id)
    w.settle()
    w.subscribe(task_id, first.last_id if first is not None else "")


# Run with every think gathered on the thinks queue (tests/integration/test_crash_points_shared.py).
BATCHED: tuple[Scenario, ...] = (Scenario("a-batch-crashed-between-its-thinks", a_batch_of_thinks),)

CATALOGUE: tuple[Scenario, ...] = (
    Scenario("chat", chat),
    Scenario("one-delegation", one_delegation),
    Scenario("two-delegations", two_delegations),
    Scenario("follow-up-while-busy", follow_up_while_busy),
    Scenario("think-started-twice", think_started_twice),
    Scenario("cancel-while-waiting", cancel_while_waiting),
    Scenario("cancel-with-queued-follow-up", cancel_with_queued_follow_up),
    Scenario("delegated-to-us", delegated_to_us),
    Scenario("we-ask-our-caller", we_ask_our_caller),
    Scenario("delegate-asks-continuation-answers", delegate_asks),
    Scenario("per-delegation-timeouts", per_delegation_timeouts, frozenset({"slow one"})),
    Scenario("answer-at-the-deadline", answer_at_the_deadline),
    Scenario("streamed-think", streamed_think),
    Scenario("mcp-inline-call", mcp_inline_call),
    Scenario("mcp-deferred-call", mcp_deferred_call),
    Scenario("mcp-deferred-call-delivered-twice", mcp_deferred_call_delivered_twice),
    Scenario("a2a-send", a2a_send),
    Scenario("a2a-continue", a2a_continue),
    Scenario("a2a-cancel", a2a_cancel),
    Scenario("a2a-question-answer", a2a_question),
    Scenario("skill-by-handler", skill_by_handler),
    Scenario("skill-by-model", skill_by_model),
    Scenario("mcp-server-tools-call", mcp_server_tools_call),
    Scenario("mcp-server-tasks-update", mcp_server_tasks_update),
    Scenario("a2a-v1-send", a2a_v1_send),
    Scenario("a2a-v1-subscribe", a2a_v1_subscribe),
)
# The front doors added after the engine (skills, the MCP server, A2A v1.0): a module of their own
# (tests/integration/test_crash_points_doors.py), so that pytest-xdist runs them beside the engine's.
DOORS = frozenset(
    {
        "skill-by-handler",
        "skill-by-model",
        "mcp-server-tools-call",
        "mcp-server-tasks-update",
        "a2a-v1-send",
        "a2a-v1-subscribe",
    }
)
