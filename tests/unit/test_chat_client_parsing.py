"""flightdeck chat's own parsing: server-sent events cut anywhere, and tool results as timeline lines.

The HTTP paths run against real servers in tests/integration/test_chat_client.py.
"""

from __future__ import annotations

import json

import pytest
import requests

from flightdeck.chat_client.a2a_chat import card_url, sse_data
from flightdeck.chat_client.sessions import base_url, describe_result
from flightdeck.chat_client.transport import Problem
from flightdeck.domain.records import ResultSource, ToolResult, error_result


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
    assert _events(b": ping\r\n\r\nevent: message\nid: 7\ndata: first\ndata:second\n\n",
                   b"retry: 100\n\ndata: third\n\n", b"data: never finished") == ["first\nsecond", "third"]


def test_tool_results_say_who_answered_failed_or_timed_out():
    ok = ToolResult("t1", "success", "forty-two", ResultSource.CALLBACK).as_block()["toolResult"]
    assert describe_result("worker", ok) == "worker answered: forty-two"
    late = error_result("t2", "timeout", ResultSource.TIMEOUT).as_block()["toolResult"]
    assert describe_result("worker", late) == "worker timed out: no answer before the delegation's deadline"
    down = error_result("t3", "dispatch_failed", ResultSource.DISPATCH_FAILED, "HTTP 503 after 3 attempts")
    assert describe_result("worker", down.as_block()["toolResult"]) == \
        "worker failed: dispatch_failed (HTTP 503 after 3 attempts)"
    said = ToolResult("t4", "error", "I cannot read that file", ResultSource.CALLBACK).as_block()["toolResult"]
    assert describe_result("worker", said) == "worker failed: I cannot read that file"
    asks = {"toolUseId": "t5", "status": "error",
            "content": [{"text": json.dumps({"status": "input_required", "question": "which year?"})}]}
    assert describe_result("worker", asks) == "worker: input_required: which year?"


@pytest.mark.parametrize(("typed", "base"), [
    ("http://127.0.0.1:8080", "http://127.0.0.1:8080"),
    ("http://127.0.0.1:8080/", "http://127.0.0.1:8080"),
    ("https://abc.execute-api.eu-west-1.amazonaws.com/prod/api/chat", "https://abc.execute-api.eu-west-1.amazonaws.com/prod"),
])
def test_the_agent_url_is_its_base(typed, base):
    assert base_url(typed) == base


def test_a_card_url_defaults_to_the_well_known_path():
    assert card_url("http://h:1") == card_url("http://h:1/") == "http://h:1/.well-known/agent-card.json"
    assert card_url("http://h:1/cards/me.json") == "http://h:1/cards/me.json"
    for bad in ("h:1", "ftp://h/card"):
        with pytest.raises(Problem):
            card_url(bad)
