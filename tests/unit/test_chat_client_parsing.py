"""flightdeck chat's own parsing: server-sent events cut anywhere (and garbage), the timeline polling derives
from a session's messages (the events route's ids), and tool results as timeline lines.

The HTTP paths run against real servers in tests/integration/test_chat_client.py.
"""

from __future__ import annotations

import json

import pytest
import requests

from flightdeck.chat_client import sse
from flightdeck.chat_client.a2a_chat import card_url, sse_data
from flightdeck.chat_client.session_view import base_url, describe_result, timeline_of
from flightdeck.chat_client.sse import Comment, ServerEvent, StreamError, read_events
from flightdeck.chat_client.transport import Problem
from flightdeck.domain.agent import AgentDefinition, DelegateTool
from flightdeck.domain.records import ResultSource, Session, ToolResult, error_result
from flightdeck.domain.timeline import derive


class _Chunks:
    """A response body that arrives in the given pieces (what urllib3 hands requests, one read at a time)."""

    def __init__(self, *chunks: bytes):
        self.chunks = list(chunks)

    def read(self, amount=None):
        return self.chunks.pop(0) if self.chunks else b""


def _events(*chunks: bytes) -> list[str]:
    response = requests.Response()
    response.raw = _Chunks(*chunks)
    return list(sse_data(response))


def test_events_are_whole_wherever_the_stream_is_cut():
    one = {"jsonrpc": "2.0", "id": 1, "result": {"kind": "status-update", "text": "é"}}
    wire = f"data: {json.dumps(one, ensure_ascii=False)}\r\n\r\n".encode()
    for cut in range(1, len(wire)):  # every cut, a CRLF or a two-byte character split included
        assert _events(wire[:cut], wire[cut:]) == [json.dumps(one, ensure_ascii=False)]


def test_comments_other_fields_multi_line_data_and_a_cut_off_event():
    assert _events(
        b": ping\r\n\r\nevent: message\nid: 7\ndata: first\ndata:second\n\n",
        b"retry: 100\n\ndata: third\n\n",
        b"data: never finished",
    ) == ["first\nsecond", "third"]


def _read(*chunks: bytes) -> list[ServerEvent | Comment]:
    return list(read_events(iter(chunks)))


def test_events_and_comments_with_every_kind_of_line_end_cut_anywhere():
    wire = (
        b'\xef\xbb\xbf: hello\r\rid: think.1\revent: thinking\r\ndata: {"a":\r\ndata: 1}\n\n'
        b": keep-alive\n\nevent: answer\ndata: \xc3\xa9\r\n\r\n"
    )
    expected = [
        Comment("hello"),
        ServerEvent('{"a":\n1}', "thinking", "think.1"),
        Comment("keep-alive"),
        ServerEvent("\u00e9", "answer", "think.1"),
    ]  # the last event id stays until another is given
    assert _read(wire) == expected
    for cut in range(1, len(wire)):  # a CR apart from its LF, a two-byte character split, a cut field name
        assert _read(wire[:cut], wire[cut:]) == expected, cut
    assert _read(*[wire[i : i + 1] for i in range(len(wire))]) == expected  # byte by byte


def test_fields_the_format_defines_and_what_it_ignores():
    assert _read(b"data\n\n") == [ServerEvent("")]  # a field name alone: an empty value
    assert _read(b"data:\ndata:\n\n") == [ServerEvent("\n")]
    assert _read(b"data:  two spaces\n\n") == [ServerEvent(" two spaces")]  # one space after the colon goes
    assert _read(b"event: x\nretry: 10\nwhatever: y\nid\n\n") == []  # no data: not dispatched
    assert _read(b"id: a\0b\ndata: d\n\n") == [ServerEvent("d")]  # an id with NUL is ignored
    assert _read(b"data: cut off before its blank line") == []
    assert _read(b"data: at the very end\r") == []  # the line ended, the event did not
    assert _read(b"data: ends on a lone CR\r\r") == [ServerEvent("ends on a lone CR")]


def test_garbage_is_read_as_text_or_refused():
    # Bytes that are not UTF-8 become U+FFFD (the client then finds no JSON in them); NULs are text.
    assert _read(b"data: \xff\xfe{\0}\n\n") == [ServerEvent("\ufffd\ufffd{\0}")]
    assert _read(b"\n\n\r\n: \n\n") == [Comment("")]
    endless = b"data: " + b"x" * (sse.MAX_LINE_BYTES + 1)
    with pytest.raises(StreamError):
        _read(endless[:1000], endless[1000:])


AGENT = AgentDefinition(name="orchestrator", delegates=[DelegateTool(agent="worker")])


def _use(tool_use_id: str, task: str = "list owls", name: str = "ask_worker") -> dict:
    args = {"task": task} if name.startswith("ask_") else {"text": task}  # a delegation, a local tool
    return {"toolUse": {"toolUseId": tool_use_id, "name": name, "input": args}}


@pytest.mark.parametrize("status", ["busy", "idle"])
def test_polling_derives_the_timeline_ids_the_events_route_sends(status):
    late = error_result("t2", "timeout", ResultSource.TIMEOUT)
    messages = [
        {"role": "user", "content": [{"text": "@worker list owls @worker name rivers"}]},
        {"role": "assistant", "content": [{"text": "Delegating."}, _use("t1"), _use("t2", "name rivers")]},
        {
            "role": "user",
            "content": [ToolResult("t1", "success", "owls", ResultSource.CALLBACK).as_block(), late.as_block()],
        },
        {"role": "assistant", "content": [{"text": "1 of 2 delegations answered."}]},
        {"role": "user", "content": [{"text": "and a follow-up"}]},
        {"role": "assistant", "content": [_use("t3", "what time", name="clock")]},
        {"role": "user", "content": [ToolResult("t3", "success", "noon", ResultSource.LOCAL).as_block()]},
    ]
    for upto in range(1, len(messages) + 1):
        session = Session("s1", status, upto, messages[:upto], user_messages=2)
        served = [(e.id, e.kind) for e in derive(session, [], AGENT) if e.kind != "idle"]
        polled = [(e["id"], e["kind"]) for e in timeline_of(messages[:upto], busy=status == "busy")]
        # Same ids in the same order; polling cannot tell a timeout's or a local tool's result by kind.
        assert [i for i, _ in polled] == [i for i, _ in served], upto
        assert [k for _, k in polled if k not in ("callback_accepted",)] == [
            k for _, k in served if k not in ("callback_accepted", "timeout", "tool_result")
        ]
    answer = next(e for e in timeline_of(messages, busy=False) if e["kind"] == "answer")
    assert answer == {"id": "answer.2", "kind": "answer", "think": 2, "text": "1 of 2 delegations answered."}


def test_tool_results_say_who_answered_failed_or_timed_out():
    ok = ToolResult("t1", "success", "forty-two", ResultSource.CALLBACK).as_block()["toolResult"]
    assert describe_result("worker", ok) == "worker answered: forty-two"
    late = error_result("t2", "timeout", ResultSource.TIMEOUT).as_block()["toolResult"]
    assert describe_result("worker", late) == "worker timed out: no answer before the delegation's deadline"
    down = error_result("t3", "dispatch_failed", ResultSource.DISPATCH_FAILED, "HTTP 503 after 3 attempts")
    assert (
        describe_result("worker", down.as_block()["toolResult"])
        == "worker failed: dispatch_failed (HTTP 503 after 3 attempts)"
    )
    said = ToolResult("t4", "error", "I cannot read that file", ResultSource.CALLBACK).as_block()["toolResult"]
    assert describe_result("worker", said) == "worker failed: I cannot read that file"
    asks = {
        "toolUseId": "t5",
        "status": "error",
        "content": [{"text": json.dumps({"status": "input_required", "question": "which year?"})}],
    }
    assert describe_result("worker", asks) == "worker asks: which year?"  # a question, not JSON


@pytest.mark.parametrize(
    ("typed", "base"),
    [
        ("http://127.0.0.1:8080", "http://127.0.0.1:8080"),
        ("http://127.0.0.1:8080/", "http://127.0.0.1:8080"),
        (
            "https://abc.execute-api.eu-west-1.amazonaws.com/prod/api/chat",
            "https://abc.execute-api.eu-west-1.amazonaws.com/prod",
        ),
    ],
)
def test_the_agent_url_is_its_base(typed, base):
    assert base_url(typed) == base


def test_a_card_url_defaults_to_the_well_known_path():
    assert card_url("http://h:1") == card_url("http://h:1/") == "http://h:1/.well-known/agent-card.json"
    assert card_url("http://h:1/cards/me.json") == "http://h:1/cards/me.json"
    for bad in ("h:1", "ftp://h/card"):
        with pytest.raises(Problem):
            card_url(bad)
