"""Asking for input (flightdeck.domain.asking): the ask_user tool, the conversation the model is given,
which contexts a delegation may continue, and the local model's ?ask / ?answer."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from flightdeck.domain import asking
from flightdeck.domain.agent import AgentDefinition, DelegateTool
from flightdeck.domain.dispatch import peer_session_id
from flightdeck.domain.model import ModelReply
from flightdeck.domain.records import Session
from flightdeck.domain.scripted_model import STOCK_QUESTION, ScriptedModel
from flightdeck.domain.toolbox import tool_specs


def _user(text):
    return {"role": "user", "content": [{"text": text}]}


def _results(reply, *texts, status="success"):
    return {
        "role": "user",
        "content": [
            {"toolResult": {"toolUseId": u["toolUseId"], "content": [{"text": t}], "status": status}}
            for u, t in zip(reply.tool_uses, texts, strict=True)
        ],
    }


def _reply(*uses, text="thinking"):
    content = [{"text": text}] + [
        {"toolUse": {"toolUseId": f"id{i}", "name": n, "input": a}} for i, (n, a) in enumerate(uses)
    ]
    return ModelReply(stop_reason="tool_use", message={"role": "assistant", "content": content})


ORCHESTRATOR = AgentDefinition(
    name="orch",
    delegates=[
        DelegateTool(agent="worker"),
        DelegateTool(agent="echo", protocol="a2a", card_url="http://127.0.0.1:9/card"),
    ],
)
WORKER = AgentDefinition(name="worker")


def _talk(agent, messages):
    model = ScriptedModel(agent.model, agent, sleep=lambda s: None)
    return model.converse(system="", messages=asking.answers_as_results(messages), tools=tool_specs(agent))


# --- the tool and the delegate's continuation arguments ------------------------------------------------


def test_ask_user_is_offered_last_with_one_required_string_argument():
    specs = tool_specs(WORKER)
    assert [s["toolSpec"]["name"] for s in specs] == ["ask_user"]
    schema = specs[0]["toolSpec"]["inputSchema"]["json"]
    assert schema["required"] == ["question"] and schema["properties"]["question"]["type"] == "string"
    assert tool_specs(WORKER.model_copy(update={"ask_user": False})) == []


def test_a_delegate_named_user_clashes_with_ask_user_unless_it_is_renamed_or_asking_is_off():
    with pytest.raises(ValidationError, match="ask_user"):
        AgentDefinition(name="a", delegates=[DelegateTool(agent="user")])
    AgentDefinition(name="a", delegates=[DelegateTool(agent="user", tool_name="ask_the_user")])
    AgentDefinition(name="a", delegates=[DelegateTool(agent="user")], ask_user=False)


def test_delegating_tools_take_an_optional_context_id_and_a2a_ones_a_task_id_too():
    specs = {s["toolSpec"]["name"]: s["toolSpec"]["inputSchema"]["json"] for s in tool_specs(ORCHESTRATOR)}
    assert specs["ask_worker"]["required"] == ["task"] and set(specs["ask_worker"]["properties"]) == {
        "task",
        "context_id",
        "response_schema",  # optional: the structure the answer must have (flightdeck.domain.skills)
    }
    assert set(specs["ask_echo"]["properties"]) == {"task", "context_id", "task_id", "response_schema"}


# --- a reply that asks ---------------------------------------------------------------------------------


def test_only_a_reply_whose_calls_are_all_valid_questions_asks():
    assert asking.question_of(_reply(("ask_user", {"question": " which year? "}))) == "which year?"
    assert asking.question_of(_reply(("ask_user", {"question": "a?"}), ("ask_user", {"question": "b?"}))) == "a?\nb?"
    assert asking.question_of(_reply(("ask_user", {"question": "a?"}), ("ask_worker", {"task": "t"}))) is None
    for bad in ({}, {"question": 3}, {"question": "  "}, {"question": "x" * (asking.MAX_QUESTION_CHARS + 1)}, "q"):
        assert asking.question_of(_reply(("ask_user", bad))) is None
        assert asking.question_problem(bad)
    assert asking.question_of(ModelReply(stop_reason="end_turn", message={"role": "assistant", "content": []})) is None


def test_the_message_after_a_question_is_given_to_the_model_as_the_ask_user_result():
    asked = _reply(("ask_user", {"question": "a?"}), ("ask_user", {"question": "b?"})).message
    messages = [_user("task"), asked, _user("the answer")]
    converted = asking.answers_as_results(messages)
    assert converted[:2] == messages[:2]
    assert converted[2] == {
        "role": "user",
        "content": [
            {"toolResult": {"toolUseId": i, "content": [{"text": "the answer"}], "status": "success"}}
            for i in ("id0", "id1")
        ],
    }
    assert messages[2] == _user("the answer")  # the stored conversation is not changed
    assert asking.pending_question(messages[:2]) == "a?\nb?" and asking.pending_question(messages) is None
    # A delegation's results are results: nothing to convert.
    delegated = [_user("t"), _reply(("ask_worker", {"task": "t"})).message, _user("later")]
    assert asking.answers_as_results(delegated) == delegated


def test_input_required_results_round_trip_and_other_text_is_not_one():
    text = asking.input_required_result("which year?", "ctx", "task-1")
    assert json.loads(text) == {
        "status": "input_required",
        "question": "which year?",
        "context_id": "ctx",
        "task_id": "task-1",
    }
    assert asking.parse_input_required(text) == {"question": "which year?", "context_id": "ctx", "task_id": "task-1"}
    for other in (
        "plain",
        "[]",
        '{"status": "error"}',
        '{"status": "input_required", "question": 1, "context_id": "c"}',
    ):
        assert asking.parse_input_required(other) is None


# --- which conversation a delegation may continue ---------------------------------------------------------


def _session(messages, session_id="s-1"):
    return Session(session_id=session_id, status="busy", turn=3, messages=messages)


def _continued(messages, tool_input, delegate="worker"):
    return asking.continued_context(_session(messages), ORCHESTRATOR.delegate_for_agent(delegate), "orch", tool_input)


def test_a_delegation_continues_the_session_an_earlier_delegation_to_the_same_agent_started():
    first = _reply(("ask_worker", {"task": "t"}))
    derived = peer_session_id("orch", "s-1", "id0")
    messages = [_user("t"), first.message, _results(first, "done")]
    assert _continued(messages, {"task": "more"}) == ("", "")
    assert _continued(messages, {"task": "more", "context_id": derived}) == (derived, "")
    asked = asking.input_required_result("which year?", "b-ctx")
    assert _continued([_user("t"), first.message, _results(first, asked)], {"task": "2024", "context_id": "b-ctx"}) == (
        "b-ctx",
        "",
    )


@pytest.mark.parametrize(
    "tool_input, why",
    [
        ({"task": "x", "context_id": "nobody-knows"}, "names no conversation"),
        ({"task": "x", "context_id": 12}, "must be a non-empty string"),
        ({"task": "x", "context_id": ["a"]}, "must be a non-empty string"),
        ({"task": "x", "task_id": "t-1"}, "must be a non-empty string"),
        ({"task": "x", "context_id": "CTX", "task_id": "t-1"}, "task_id is for A2A agents"),
    ],
)
def test_a_continuation_of_an_unknown_context_or_of_the_wrong_type_is_refused(tool_input, why):
    first = _reply(("ask_worker", {"task": "t"}))
    messages = [_user("t"), first.message, _results(first, asking.input_required_result("q?", "CTX"))]
    with pytest.raises(ValueError, match=why):
        _continued(messages, tool_input)


def test_a_context_is_known_only_from_the_same_delegate_and_never_from_what_a_call_asked_for():
    echo = _reply(("ask_echo", {"task": "t"}))
    messages = [_user("t"), echo.message, _results(echo, asking.input_required_result("q?", "E-CTX", "E-TASK"))]
    assert _continued(messages, {"task": "a", "context_id": "E-CTX", "task_id": "E-TASK"}, "echo") == (
        "E-CTX",
        "E-TASK",
    )
    with pytest.raises(ValueError, match="is not a task of context"):
        _continued(messages, {"task": "a", "context_id": "E-CTX", "task_id": "OTHER"}, "echo")
    with pytest.raises(ValueError, match="names no conversation"):
        _continued(messages, {"task": "a", "context_id": "E-CTX"}, "worker")  # another delegate's context
    # A refused call's context_id does not become known by having been asked for.
    hostile = _reply(("ask_worker", {"task": "t", "context_id": "someone-elses"}))
    refused = _results(hostile, '{"status": "error", "reason": "invalid_context_id"}', status="error")
    with pytest.raises(ValueError, match="names no conversation"):
        _continued([_user("t"), hostile.message, refused], {"task": "again", "context_id": "someone-elses"})


# --- the local model --------------------------------------------------------------------------------


def test_ask_marker_asks_the_question_up_to_its_question_mark_and_the_answer_answers_the_task():
    messages = [_user("?ask which year? summarise the plan")]
    reply = _talk(WORKER, messages)
    assert asking.question_of(reply) == "which year?"
    [use] = reply.tool_uses
    assert use["name"] == "ask_user" and use["toolUseId"].startswith("tooluse_")
    answer = _talk(WORKER, messages + [reply.message, _user("2024")])
    assert answer.stop_reason == "end_turn"
    assert answer.text == (
        '[worker] Task: "summarise the plan" (asked "which year?", told "2024") — answer: 3 words; '
        'reversed: "plan the summarise"'
    )


def test_ask_marker_without_a_question_asks_a_stock_one_and_without_the_tool_it_is_text():
    assert asking.question_of(_talk(WORKER, [_user("summarise ?ask")])) == STOCK_QUESTION
    quiet = AgentDefinition(name="worker", ask_user=False)
    assert _talk(quiet, [_user("?ask which year? x")]).stop_reason == "end_turn"


def test_ask_inside_a_delegated_task_is_the_delegate_s_and_answer_text_is_nobody_s_task():
    reply = _talk(ORCHESTRATOR, [_user("@worker ?ask which year? summarise ?answer 2024")])
    assert [(u["name"], u["input"]) for u in reply.tool_uses] == [
        ("ask_worker", {"task": "?ask which year? summarise"})
    ]


def test_a_delegate_s_question_is_answered_with_the_task_s_answer_text_in_its_context_once():
    messages = [_user("@worker ?ask which year? summarise ?answer 2024")]
    first = _talk(ORCHESTRATOR, messages)
    messages += [first.message, _results(first, asking.input_required_result("which year?", "B-1"))]
    again = _talk(ORCHESTRATOR, messages)
    assert [(u["name"], u["input"]) for u in again.tool_uses] == [("ask_worker", {"task": "2024", "context_id": "B-1"})]
    # Asked again in the same context: the answer text was given once; the question goes to the user.
    messages += [again.message, _results(again, asking.input_required_result("and the month?", "B-1"))]
    relayed = _talk(ORCHESTRATOR, messages)
    assert asking.question_of(relayed) == "worker asks: and the month?"


def test_without_answer_text_a_delegate_s_question_is_passed_on_and_the_answer_passed_back():
    messages = [_user("@echo ?ask which year? summarise")]
    first = _talk(ORCHESTRATOR, messages)
    messages += [first.message, _results(first, asking.input_required_result("which year?", "E-1", "T-1"))]
    relayed = _talk(ORCHESTRATOR, messages)
    assert asking.question_of(relayed) == "echo asks: which year?"
    messages += [relayed.message, _user("1999")]
    passed = _talk(ORCHESTRATOR, messages)
    assert [(u["name"], u["input"]) for u in passed.tool_uses] == [
        ("ask_echo", {"task": "1999", "context_id": "E-1", "task_id": "T-1"})
    ]
    messages += [passed.message, _results(passed, "echo: 1999")]
    final = _talk(ORCHESTRATOR, messages)
    assert final.stop_reason == "end_turn" and "echo: 1999" in final.text


def test_a_delegate_s_question_is_reported_when_the_agent_cannot_ask():
    agent = ORCHESTRATOR.model_copy(update={"ask_user": False})
    messages = [_user("@worker summarise")]
    first = _talk(agent, messages)
    final = _talk(agent, messages + [first.message, _results(first, asking.input_required_result("which?", "B"))])
    assert final.stop_reason == "end_turn" and '@worker via ask_worker ("summarise") asks: which?' in final.text


# --- what clients see -----------------------------------------------------------------------------


def test_the_timeline_has_a_question_event_instead_of_a_tool_call():
    from flightdeck.domain.timeline import derive

    asked = _reply(("ask_user", {"question": "which year?"})).message
    session = Session(session_id="s", status="idle", turn=1, messages=[_user("t"), asked], user_messages=1)
    assert [(e.kind, e.data.get("text")) for e in derive(session, [], WORKER)] == [
        ("message", "t"),
        ("thinking", None),
        ("question", "which year?"),
        ("idle", None),
    ]


def test_flightdeck_chat_prints_the_question_as_the_answer():
    """Polled or streamed, the chat sees a question event (the id the events route gives it), which
    it prints as the answer: the next message answers it."""
    from flightdeck.chat_client.session_view import timeline_of

    asked = _reply(("ask_user", {"question": "which year?"})).message
    events = timeline_of([_user("t"), asked], busy=False)
    question = [e for e in events if e["kind"] == "question"]
    assert question == [{"id": "question.1", "kind": "question", "think": 1, "text": "which year?"}]
    assert not [e for e in events if e["kind"] in ("tool_call", "delegating", "answer")]
    # The id is the one flightdeck.domain.timeline gives a question (question.<think>).
