"""What the console says happened (issue 40): a session's outcome (flightdeck.domain.session_outcome), a
progress count that agrees with the answer after a timeout, a skill call's arguments on its delegating event."""

from __future__ import annotations

import json

import pytest

from flightdeck.domain.agent import AgentDefinition, DelegateTool
from flightdeck.domain.asking import ASK_USER
from flightdeck.domain.model import error_reply
from flightdeck.domain.records import ResultSource, Session, ToolResult, error_result
from flightdeck.domain.session_cancel import CLOSING_TEXT
from flightdeck.domain.session_outcome import outcome
from flightdeck.domain.timeline import derive

AGENT = AgentDefinition(name="orchestrator", delegates=[DelegateTool(agent="worker")])
ASK = AGENT.delegates[0].name
TASK = {"role": "user", "content": [{"text": "@worker list owls @worker name rivers"}]}
CALLS = {
    "role": "assistant",
    "content": [
        {"toolUse": {"toolUseId": "t1", "name": ASK, "input": {"task": "list owls"}}},
        {"toolUse": {"toolUseId": "t2", "name": ASK, "input": {"task": "name rivers"}}},
    ],
}
ANSWER = {"role": "assistant", "content": [{"text": "done"}]}
NILE = ToolResult("t2", "success", "Nile", ResultSource.CALLBACK)


def _results(*results: ToolResult) -> dict:
    return {"role": "user", "content": [r.as_block() for r in results]}


def _idle(*messages: dict, status: str = "idle") -> Session:
    return Session("s1", status, len(messages), list(messages), user_messages=1)


def _failed(reason: str) -> ToolResult:
    return error_result("t1", reason, ResultSource.CALLBACK)


@pytest.mark.parametrize(
    "messages,expected",
    [
        (
            [TASK, CALLS, _results(ToolResult("t1", "success", "owls", ResultSource.CALLBACK), NILE), ANSWER],
            "completed",
        ),
        ([TASK, CALLS, _results(error_result("t1", "timeout", ResultSource.TIMEOUT), NILE), ANSWER], "timed_out"),
        ([TASK, CALLS, _results(_failed("dispatch_failed"), NILE), ANSWER], "failed"),
        ([TASK, CALLS, _results(_failed("peer_failed"), NILE), ANSWER], "failed"),
        ([TASK, error_reply("model_error", "throttled").message], "failed"),
        ([TASK, {"role": "assistant", "content": [{"text": CLOSING_TEXT}]}], "canceled"),
        (
            [
                TASK,
                {
                    "role": "assistant",
                    "content": [
                        {"toolUse": {"toolUseId": "q", "name": ASK_USER, "input": {"question": "Which year?"}}}
                    ],
                },
            ],
            "input_required",
        ),
    ],
)
def test_an_idle_session_says_what_became_of_its_last_turn(messages, expected):
    assert outcome(_idle(*messages)) == expected
    # The timeline's idle event says it too.
    assert derive(_idle(*messages), [], AGENT)[-1].data["outcome"] == expected


def test_a_timeout_of_an_earlier_turn_is_not_the_outcome_of_the_last():
    earlier = [TASK, CALLS, _results(error_result("t1", "timeout", ResultSource.TIMEOUT), NILE), ANSWER]
    assert outcome(_idle(*earlier, {"role": "user", "content": [{"text": "thanks"}]}, ANSWER)) == "completed"


def test_a_busy_or_canceled_session_is_working_or_canceled():
    assert outcome(_idle(TASK, status="busy")) == "working"
    assert outcome(_idle(TASK, CALLS, status="canceled")) == "canceled"


def test_progress_while_waiting_does_not_count_a_timeout_as_answered():
    from flightdeck.domain.records import TurnAggregation

    timeout = error_result("t1", "timeout", ResultSource.TIMEOUT)
    waiting = Session(
        "s1",
        "busy",
        1,
        [TASK, CALLS],
        user_messages=1,
        aggregation=TurnAggregation(
            "s1", 1, frozenset({"t1", "t2"}), total=2, received=1, status="waiting", deadline_ms=0
        ),
    )
    [progress] = [e for e in derive(waiting, [timeout], AGENT) if e.kind == "progress"] or [None]
    assert progress is None  # nothing answered yet: no "1 of 2 answered"


def test_a_skill_call_shows_its_skill_and_arguments():
    call = {
        "role": "assistant",
        "content": [
            {"toolUse": {"toolUseId": "t1", "name": "worker__summarise", "input": {"text": "owls", "words": 3}}}
        ],
    }
    [delegating] = [e for e in derive(_idle(TASK, call, status="busy"), [], AGENT) if e.kind == "delegating"]
    assert delegating.data["skill"] == "summarise"
    assert json.loads(delegating.data["arguments"]) == {"text": "owls", "words": 3}
