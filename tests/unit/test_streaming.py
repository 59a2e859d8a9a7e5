"""Streaming pieces that need no AWS: word chunks, the pace of a stream (a fake clock), SSE framing,
the timeline derived from a session, the local model's word stream, the web server's event."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from flightdeck.api.sse import comment, frame
from flightdeck.domain.agent import AgentDefinition, DelegateTool, ModelConfig
from flightdeck.domain.model import ModelReply, TextDelta, collect, delegate_tool_spec, word_chunks
from flightdeck.domain.records import ResultSource, Session, ToolResult, error_result
from flightdeck.domain.scripted_model import ScriptedModel
from flightdeck.domain.streaming import Note, Pace, Step, paced
from flightdeck.domain.timeline import derive, describe, waits_on_results
from flightdeck.handlers.web import AdapterContext, path_parameters, proxy_event

# --- word chunks ---------------------------------------------------------------------------------------


@given(st.text())
def test_word_chunks_give_back_the_text(text):
    assert "".join(word_chunks(text)) == text
    assert "".join(word_chunks(text, 3)) == text and len(word_chunks(text, 3)) <= 3


def test_word_chunks_are_words_with_their_spaces():
    assert word_chunks("  one two\nthree ") == ["  one ", "two\n", "three "]
    assert word_chunks("") == [""]
    assert word_chunks("a b c d e", 2) == ["a b c ", "d e"]


# --- the pace of a stream ------------------------------------------------------------------------------


class Clock:
    def __init__(self):
        self.now = 0.0
        self.sleeps: list[float] = []

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


def _pace(clock: Clock, poll=1.0, max_s=10.0, keepalive=3.0) -> Pace:
    return Pace(poll_s=poll, max_s=max_s, keepalive_s=keepalive, monotonic=clock.monotonic, sleep=clock.sleep)


def test_a_stream_polls_once_per_interval_and_ends_when_the_step_says_so():
    clock, calls = Clock(), []

    def step():
        calls.append(clock.now)
        return Step([f"e{len(calls)}"] if len(calls) % 2 else [], done=len(calls) == 5)

    assert list(paced(_pace(clock), step)) == ["e1", "e3", "e5"]
    assert calls == [0.0, 1.0, 2.0, 3.0, 4.0] and clock.sleeps == [1.0] * 4


def test_a_quiet_stream_keeps_alive_and_ends_after_its_time():
    clock = Clock()
    out = list(paced(_pace(clock, max_s=7.5), lambda: Step([])))
    notes = [o.text for o in out if isinstance(o, Note)]
    assert notes[:2] == ["keep-alive", "keep-alive"] and notes[-1].startswith("stream closed after 8 s")
    assert clock.now == 7.5  # the last sleep is cut to the time left
    # Its remaining time bounds it too (less a margin for the end).
    settings = type("S", (), {"stream_max_ms": 840_000, "stream_poll_interval_ms": 500, "stream_keepalive_ms": 15_000})
    assert Pace.of(settings, remaining_ms=30_000).max_s == 28.0 and Pace.of(settings).max_s == 840.0
    assert Pace.of(settings).poll_s == 0.5


# --- SSE framing -----------------------------------------------------------------------------------------


def test_an_event_is_one_data_line_of_json_whatever_its_text():
    data = {"text": "two\nlines\r\nand: colons"}
    raw = frame(data, event="answer", event_id="answer.1").decode()
    assert raw.endswith("\n\n") and raw.count("\n") == 4
    lines = raw.splitlines()
    assert lines[:2] == ["id: answer.1", "event: answer"] and json.loads(lines[2].removeprefix("data: ")) == data
    assert comment("a\nb") == b": a b\n\n"


# --- the timeline ------------------------------------------------------------------------------------------

AGENT = AgentDefinition(name="orchestrator", delegates=[DelegateTool(agent="worker")])
ASK = AGENT.delegates[0].name


def _use(tool_use_id: str, name: str = ASK, task: str = "list owls"):
    return {"toolUse": {"toolUseId": tool_use_id, "name": name, "input": {"task": task}}}


def _session(status: str, messages: list, turn: int = 1, user_messages: int = 1) -> Session:
    return Session("s1", status, turn, messages, user_messages=user_messages)


def _kinds(events):
    return [(e.id, e.kind) for e in events]


def test_a_delegation_s_timeline_keeps_its_ids_from_waiting_to_answered():
    asked = [
        {"role": "user", "content": [{"text": "@worker list owls @worker name rivers"}]},
        {"role": "assistant", "content": [{"text": "Delegating."}, _use("t1"), _use("t2", task="name rivers")]},
    ]
    thinking = derive(_session("busy", asked[:1]), [], AGENT)
    assert _kinds(thinking) == [("input.1", "message"), ("think.1", "thinking")]
    second = ToolResult("t2", "success", "Nile", ResultSource.CALLBACK)
    waiting = derive(_session("busy", asked), [second], AGENT)
    assert _kinds(waiting) == [
        ("input.1", "message"),
        ("think.1", "thinking"),
        ("tool.t1", "delegating"),
        ("tool.t2", "delegating"),
        ("result.t2", "callback_accepted"),
    ]
    assert waiting[2].data == {
        "tool_use_id": "t1",
        "tool": ASK,
        "agent": "worker",
        "task": "list owls",
        "protocol": "flightdeck",
        # where the delegation runs at the delegate (issue 29: a lane per agent)
        "peer_session_id": waiting[2].data["peer_session_id"],
    }
    assert waiting[2].data["peer_session_id"] != waiting[3].data["peer_session_id"]
    assert waits_on_results(_session("busy", asked))
    timeout = error_result("t1", "timeout", ResultSource.TIMEOUT)
    done = asked + [
        {"role": "user", "content": [timeout.as_block(), second.as_block()]},
        {"role": "assistant", "content": [{"text": "1 of 2 delegations answered."}]},
    ]
    answered = derive(_session("idle", done, turn=2), [], AGENT)
    # Each event keeps its id (a stream sends each once); replayed, a turn's results come in call order.
    assert set(_kinds(waiting)) < set(_kinds(answered))
    assert _kinds(answered) == _kinds(waiting)[:4] + [
        ("result.t1", "timeout"),
        ("result.t2", "callback_accepted"),
        # The turn complete: its answers counted as the answer counts them, the timeout named (issue 40).
        ("progress.1.1.done", "progress"),
        ("think.2", "thinking"),
        ("answer.2", "answer"),
        ("idle.1", "idle"),
    ]
    assert answered[-2].data["text"] == "1 of 2 delegations answered."
    assert describe(answered[6]) == "1 of 2 delegations answered (1 timed out)"
    assert answered[6].data["unanswered"] == {"timeout": 1}
    assert answered[-1].data["outcome"] == "timed_out"
    assert [describe(e) for e in answered[2:6]] == [
        "delegating to worker: list owls",
        "delegating to worker: name rivers",
        "no answer from worker in time: timed out",
        "worker answered",
    ]


@pytest.mark.parametrize(
    "reason,kind",
    [("dispatch_failed", "dispatch_failed"), ("canceled", "canceled"), ("peer_failed", "callback_accepted")],
)
def test_results_are_named_by_what_happened(reason, kind):
    messages = [
        {"role": "user", "content": [{"text": "go"}]},
        {"role": "assistant", "content": [_use("t1")]},
        {"role": "user", "content": [error_result("t1", reason, ResultSource.CALLBACK).as_block()]},
    ]
    assert derive(_session("busy", messages, turn=2), [], AGENT)[3].kind == kind


def test_local_tools_are_calls_and_results_not_delegations():
    messages = [
        {"role": "user", "content": [{"text": "!clock"}]},
        {"role": "assistant", "content": [_use("t1", name="clock")]},
        {"role": "user", "content": [ToolResult("t1", "success", "noon", ResultSource.LOCAL).as_block()]},
    ]
    events = derive(_session("busy", messages, turn=2), [], AGENT)
    assert [e.kind for e in events] == ["message", "thinking", "tool_call", "tool_result", "thinking"]
    assert describe(events[2]) == "running clock" and describe(events[3]) == "clock finished"


# --- the local model streams word by word -------------------------------------------------------------------


def test_the_local_model_streams_its_reply_word_by_word():
    model = ScriptedModel(ModelConfig(provider="local"), AGENT)
    messages = [{"role": "user", "content": [{"text": "how far is the moon"}]}]
    items = list(model.converse_stream(system="", messages=messages, tools=[delegate_tool_spec(ASK, "worker")]))
    reply = model.converse(system="", messages=messages, tools=[delegate_tool_spec(ASK, "worker")])
    assert items[-1] == reply and collect(iter(items)) == reply
    deltas = [i.text for i in items[:-1]]
    assert all(isinstance(i, TextDelta) for i in items[:-1]) and len(deltas) > 5
    assert "".join(deltas) == reply.text and all(len(d.split()) == 1 for d in deltas)


def test_collect_needs_a_reply():
    from flightdeck.domain.model import ModelError

    with pytest.raises(ModelError):
        collect(iter([TextDelta("only text")]))
    assert collect(iter([ModelReply(stop_reason="end_turn", message={"role": "assistant", "content": []})])).text == ""


# --- the web server's event (behind the Lambda Web Adapter) -------------------------------------------------


def test_the_web_server_puts_the_proxy_event_back_together():
    context = {
        "resourcePath": "/api/sessions/{session_id}/events",
        "stage": "prod",
        "requestId": "r1",
        "authorizer": {"principalId": "tester"},
    }
    event = proxy_event(
        "GET",
        "/api/sessions/s-1/events",
        "follow=false&x=1&x=2",
        [
            ("Authorization", "Bearer t"),
            ("x-amzn-request-context", json.dumps(context)),
            ("x-amzn-lambda-context", "{}"),
        ],
        b"",
        context,
    )
    assert event["resource"] == "/api/sessions/{session_id}/events" and event["httpMethod"] == "GET"
    assert event["pathParameters"] == {"session_id": "s-1"} and event["requestContext"] == context
    assert event["headers"] == {"Authorization": "Bearer t"}  # the adapter's own headers are not the caller's
    assert event["queryStringParameters"] == {"follow": "false", "x": "2"}
    assert event["multiValueQueryStringParameters"]["x"] == ["1", "2"]
    assert event["body"] is None and event["isBase64Encoded"] is False
    binary = proxy_event("POST", "/a2a", "", [], b"\xff\xfe", {"resourcePath": "/a2a"})
    assert binary["isBase64Encoded"] is True and binary["pathParameters"] is None
    assert path_parameters("/api/sessions/{session_id}", "/api/other") is None


def test_the_web_server_s_context_counts_down_to_the_invocation_s_deadline():
    import time

    soon = AdapterContext({"request_id": "r1", "deadline": int(time.time() * 1000) + 5_000})
    assert soon.aws_request_id == "r1" and 3_000 < soon.get_remaining_time_in_millis() <= 5_000
    assert AdapterContext({}).get_remaining_time_in_millis() > 800_000  # unknown: the function's own timeout
