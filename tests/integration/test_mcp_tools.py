"""An agent's MCP tools against a real MCP server on loopback (the `mcp` SDK, tests.support.mcp_server), through our
own client (flightdeck.adapters.mcp_http) and the turn loop on the in-memory state (tests.fakes): discovery and the
tools allowlist, inline and deferred calls, and everything that can go wrong with a server, each an error result
the model reads, never a stuck turn. Both protocol versions."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from flightdeck.adapters.mcp_http import LEGACY, MODERN, McpHttp
from flightdeck.adapters.secrets import mcp_credential
from flightdeck.domain import mcp_tools
from flightdeck.domain.agent import AgentDefinition, McpServer
from flightdeck.domain.aggregation import expire_due, record_and_advance
from flightdeck.domain.records import RecordOutcome, ResultSource, error_result
from flightdeck.domain.time_budget import TimeBudget
from tests.fakes.model import answer, call, calls
from tests.fakes.world import World, world
from tests.support.mcp_server import McpTestServer, free_port
from tests.support.trickle import Trickle, trickling

TOKEN = "notes-test-token-0123456789"


@pytest.fixture(autouse=True)
def _fresh_listings() -> Iterator[None]:
    mcp_tools.clear_cache()
    yield
    mcp_tools.clear_cache()


@pytest.fixture(scope="module")
def server() -> Iterator[McpTestServer]:
    s = McpTestServer(free_port(), tokens={TOKEN}).start()
    yield s
    s.stop()


@pytest.fixture(scope="module")
def legacy_server() -> Iterator[McpTestServer]:
    s = McpTestServer(free_port(), legacy_only=True).start()
    yield s
    s.stop()


def _agent(url: str, **server: Any) -> AgentDefinition:
    fields = {"name": "notes", "url": url, "credential": "env:NOTES_TOKEN", **server}
    return AgentDefinition(name="reader", mcp_servers=[McpServer.model_validate(fields)])


def _world(base: str, url: str, **server: Any) -> World:
    w = world(_agent(url, **server), allowed={"notes": base, "caller": "http://caller.test"})
    w.deps.mcp = McpHttp()
    w.deps.mcp_credential = mcp_credential
    return w


@pytest.fixture(autouse=True)
def _token(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NOTES_TOKEN", TOKEN)


def _tool_names(w: World) -> dict[str, Any]:
    return {t["toolSpec"]["name"]: t["toolSpec"] for t in w.model.heard[-1].tools}


def _result(w: World, sid: str, turn: int = 1) -> tuple[str, str]:
    [result] = w.state.get_results(sid, turn)
    return result.status, result.text


def _run_one_call(w: World, name: str, **args: Any) -> tuple[str, str]:
    """A think that calls one tool; its result as recorded, and the turn completed by it."""
    w.model.says(calls(call(name, "tu-1", **args)), answer("done"))
    sid = w.message("go").session_id
    assert w.think(sid, 1) == "tool_use"
    return _result(w, sid)


def test_discovery_offers_the_allowed_tools_namespaced_with_their_schemas(server):
    w = _world(server.base, server.url, tools=["search", {"name": "get_note", "timeout_ms": 3000}])
    w.model.says(answer("hello"))
    sid = w.message("hi").session_id
    assert w.think(sid, 1) == "end_turn"
    tools = _tool_names(w)
    # The allowlist: search and get_note, not add_note, slow, huge, boom (the server lists them all).
    assert {"notes__search", "notes__get_note"} <= set(tools)
    assert not {"notes__add_note", "notes__slow", "notes__boom"} & set(tools)
    schema = tools["notes__search"]["inputSchema"]["json"]
    assert schema["properties"]["query"]["type"] == "string" and schema["required"] == ["query"]


def test_without_an_allowlist_every_tool_is_offered(server):
    w = _world(server.base, server.url)
    w.model.says(answer("hello"))
    w.think(w.message("hi").session_id, 1)
    assert {"notes__search", "notes__add_note", "notes__slow", "notes__boom"} <= set(_tool_names(w))


def test_an_inline_call_records_its_structured_result_and_the_model_reads_it_as_json(server):
    w = _world(server.base, server.url)
    status, text = _run_one_call(w, "notes__search", query="owl")
    assert status == "success"
    assert json.loads(text) == {"query": "owl", "matches": [{"id": 1, "title": "Owls"}]}
    # The call completed the turn: the next think runs and the model reads the result.
    [(session_id, turn)] = w.thinks.take()[-1:]
    assert w.think(session_id, turn) == "end_turn"
    heard = w.model.heard[-1].messages[-1]["content"][0]["toolResult"]
    assert json.loads(heard["content"][0]["text"])["matches"][0]["title"] == "Owls"
    assert w.session(session_id).status == "idle"


def test_a_tool_that_fails_is_an_error_result_the_model_reads(server):
    w = _world(server.base, server.url)
    status, text = _run_one_call(w, "notes__boom")
    assert status == "error" and json.loads(text)["reason"] == "tool_error"
    assert "always does" in json.loads(text)["detail"]


def test_a_tool_outside_the_allowlist_is_not_called(server):
    w = _world(server.base, server.url, tools=["search"])
    before = list(server.calls)
    status, text = _run_one_call(w, "notes__huge", n=3)
    assert status == "error" and json.loads(text)["reason"] == "unknown_tool"
    assert server.calls == before


def test_a_slow_tool_is_taken_like_a_delegation_with_its_own_deadline(server):
    w = _world(server.base, server.url, tools=[{"name": "slow", "timeout_ms": 15_000}])
    w.model.says(calls(call("notes__slow", "tu-1", seconds=0.2)), answer("done"))
    sid = w.message("go").session_id
    now = w.clock.now
    assert w.think(sid, 1) == "tool_use"
    # Nothing recorded in the think: the turn waits on the call until its deadline (timeout + the queue's slack).
    assert w.state.get_results(sid, 1) == []
    turn = w.session(sid).aggregation
    assert turn.status == "waiting" and turn.deadline_of("tu-1") == now + 15_000 + mcp_tools.DEFERRED_SLACK_MS
    [message] = w.queues.dispatches
    assert mcp_tools.is_deferred_message(message) and message["arguments"] == {"seconds": 0.2}
    # The dispatch worker makes the call and records its result, which completes the turn.
    assert mcp_tools.run_deferred(w.deps, mcp_tools.DeferredCall.of(message), None) == "recorded"
    assert _result(w, sid) == ("success", json.dumps({"result": "slept 0.2"}))
    assert w.thinks.take()[-1:] == [(sid, 2)]
    # A redelivery of the message calls nothing again.
    calls_before = server.calls.count("slow")
    assert mcp_tools.run_deferred(w.deps, mcp_tools.DeferredCall.of(message), None) == "skipped"
    assert server.calls.count("slow") == calls_before


def test_a_deferred_call_whose_answer_never_comes_becomes_a_timeout_result(server):
    w = _world(server.base, server.url, tools=[{"name": "slow", "timeout_ms": 15_000}])
    w.model.says(calls(call("notes__slow", "tu-1", seconds=0.1)), answer("done"))
    sid = w.message("go").session_id
    w.think(sid, 1)
    # The worker never runs it (lost, or its function died): the timer at the deadline stands in for it.
    w.clock.advance(15_000 + mcp_tools.DEFERRED_SLACK_MS)
    assert expire_due(w.deps, sid, 1, by="timer").won
    status, text = _result(w, sid)
    assert status == "error" and json.loads(text)["reason"] == "timeout"
    assert w.thinks.take()[-1:] == [(sid, 2)]
    # ...and the message, received late, is skipped: the call is not made past its deadline.
    [message] = w.queues.dispatches
    assert mcp_tools.run_deferred(w.deps, mcp_tools.DeferredCall.of(message), None) == "skipped"


def test_a_deferred_call_is_cut_to_the_workers_time_and_then_is_a_timeout(server):
    w = _world(server.base, server.url, tools=[{"name": "slow", "timeout_ms": 15_000}])
    w.model.says(calls(call("notes__slow", "tu-1", seconds=3)), answer("done"))
    sid = w.message("go").session_id
    w.think(sid, 1)
    [message] = w.queues.dispatches
    budget = TimeBudget.__new__(TimeBudget)
    object.__setattr__(budget, "remaining_ms", lambda: 3_000)  # 1 s left for the call after the 2 s reserve
    assert mcp_tools.run_deferred(w.deps, mcp_tools.DeferredCall.of(message), budget) == "recorded"
    status, text = _result(w, sid)
    assert status == "error" and json.loads(text)["reason"] == "timeout"


def test_an_oversized_result_is_refused_not_truncated(server):
    w = _world(server.base, server.url)
    status, text = _run_one_call(w, "notes__huge", n=w.deps.settings.max_result_bytes + 1)
    assert status == "error" and json.loads(text)["reason"] == "result_too_large"


def test_a_revoked_credential_is_an_unauthorized_error_result(server):
    w = _world(server.base, server.url)
    assert _run_one_call(w, "notes__get_note", id=1)[0] == "success"
    server.tokens.discard(TOKEN)
    server.tokens.add("another-token")
    try:
        w2 = _world(server.base, server.url)
        status, text = _run_one_call(w2, "notes__get_note", id=1)
    finally:
        server.tokens.discard("another-token")
        server.tokens.add(TOKEN)
    assert status == "error" and json.loads(text)["reason"] == "mcp_unauthorized"
    assert "401" in json.loads(text)["detail"]


def test_a_redirect_is_not_followed(server):
    w = _world(server.base, f"{server.base}/redirect/mcp")
    status, text = _run_one_call(w, "notes__search", query="owl")
    assert status == "error" and json.loads(text)["reason"] == "mcp_http_error"
    assert "307" in json.loads(text)["detail"] and "not followed" in json.loads(text)["detail"]


def test_a_garbage_answer_is_a_protocol_error_result(server):
    w = _world(server.base, f"{server.base}/garbage/mcp")
    status, text = _run_one_call(w, "notes__search", query="owl")
    assert status == "error" and json.loads(text)["reason"] == "mcp_protocol_error"


def test_a_url_outside_the_allowlist_is_never_called(server):
    w = world(_agent(server.url), allowed={"elsewhere": "http://127.0.0.1:9", "caller": "http://caller.test"})
    w.deps.mcp = McpHttp()
    w.deps.mcp_credential = mcp_credential
    before = list(server.calls)
    status, text = _run_one_call(w, "notes__huge", n=1)
    assert status == "error" and json.loads(text)["reason"] == "not_allowed"
    assert server.calls == before


def _dying_server() -> tuple[int, threading.Thread]:
    """A server that reads the request, starts its answer and dies: the connection drops mid-answer."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(4)

    def serve() -> None:
        for _ in range(4):
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            conn.recv(65536)
            conn.sendall(b'HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 400\r\n\r\n{"jsonrpc"')
            conn.close()
        listener.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    return int(listener.getsockname()[1]), thread


def test_a_server_that_dies_mid_call_is_an_error_result_and_the_turn_goes_on():
    port, _ = _dying_server()
    w = _world(f"http://127.0.0.1:{port}", f"http://127.0.0.1:{port}/mcp")
    status, text = _run_one_call(w, "notes__search", query="owl")
    assert status == "error" and json.loads(text)["reason"] == "mcp_unreachable"
    [(sid, turn)] = w.thinks.take()[-1:]
    assert w.think(sid, turn) == "end_turn" and w.session(sid).status == "idle"


def test_a_server_down_at_start_is_reported_and_its_tools_come_when_it_answers(monkeypatch):
    port = free_port()
    w = _world(f"http://127.0.0.1:{port}", f"http://127.0.0.1:{port}/mcp")
    w.model.says(answer("without notes"), answer("with notes"))
    sid = w.message("hi").session_id
    assert w.think(sid, 1) == "end_turn"  # the agent works without the server's tools
    assert not any(n.startswith("notes__") for n in _tool_names(w))
    late = McpTestServer(port, tokens={TOKEN}).start()
    try:
        monkeypatch.setattr(mcp_tools, "LISTING_RETRY_S", 0.0)
        mcp_tools.clear_cache()  # its retry time has come
        w.message("again", sid)
        assert w.think(sid, 2) == "end_turn"
        assert "notes__search" in _tool_names(w)
    finally:
        late.stop()


def test_a_server_holding_its_listing_open_is_left_out_at_its_timeout_and_the_think_goes_on():
    """Listing runs inside every think: a server that sends keep-alives and never answers must not hold it."""
    with trickling(Trickle()) as trickle:
        w = _world(trickle.url, trickle.url + "/mcp", timeout_ms=1000)
        w.model.says(answer("without notes"))
        sid = w.message("hi").session_id
        assert w.think(sid, 1) == "end_turn"
        assert not any(n.startswith("notes__") for n in _tool_names(w))
        assert not trickle.finished.is_set() and trickle.closed.wait(30)


@pytest.mark.parametrize("legacy", [False, True], ids=["2026-07-28", "2025-11-25"])
def test_both_protocol_versions(server, legacy_server, legacy):
    target = legacy_server if legacy else server
    client = McpHttp()
    listed = client.list_tools(target.url, TOKEN, 5)
    assert listed.outcome == "ok" and listed.version == (LEGACY if legacy else MODERN)
    assert "search" in {t["name"] for t in listed.result["tools"]}
    answered = client.call_tool(target.url, TOKEN, "get_note", {"id": 2}, 5)
    assert answered.outcome == "ok" and answered.version == (LEGACY if legacy else MODERN)
    assert "Danube" in mcp_tools.render(answered.result)[0]
    # Through the turn loop too.
    w = _world(target.base, target.url)
    assert _run_one_call(w, "notes__get_note", id=3)[0] == "success"


def test_a_deferred_call_redelivered_after_the_call_is_not_made_again(server):
    # The worker claimed the call and made it, then died before recording its result (or timed out mid-call):
    # the redelivered message finds the claim and calls nothing; the timer's timeout result stands in.
    w = _world(server.base, server.url, tools=[{"name": "slow", "timeout_ms": 15_000}])
    w.model.says(calls(call("notes__slow", "tu-1", seconds=0.1)), answer("done"))
    sid = w.message("go").session_id
    w.think(sid, 1)
    [message] = w.queues.dispatches
    deferred = mcp_tools.DeferredCall.of(message)
    real_call = mcp_tools.call

    def call_then_die(*args: Any, **kwargs: Any) -> Any:
        real_call(*args, **kwargs)
        raise RuntimeError("the worker died after the call, before recording it")

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(mcp_tools, "call", call_then_die)
        with pytest.raises(RuntimeError):
            mcp_tools.run_deferred(w.deps, deferred, None)
    made = server.calls.count("slow")
    assert w.state.get_results(sid, 1) == []
    assert mcp_tools.run_deferred(w.deps, deferred, None) == "skipped"
    assert server.calls.count("slow") == made
    w.clock.advance(15_000 + mcp_tools.DEFERRED_SLACK_MS)
    assert expire_due(w.deps, sid, 1, by="timer").won
    status, text = _result(w, sid)
    assert status == "error" and json.loads(text)["reason"] == "timeout"


def test_a_second_answer_to_a_deferred_call_is_dropped(server):
    # Two runs that both got past the claim (a store that lost the claim; not possible on DynamoDB's conditional
    # write, but the record is conditional too): the first result stands, the second changes nothing.
    w = _world(server.base, server.url, tools=[{"name": "slow", "timeout_ms": 15_000}])
    w.model.says(calls(call("notes__slow", "tu-1", seconds=0.1)), answer("done"))
    sid = w.message("go").session_id
    w.think(sid, 1)
    [message] = w.queues.dispatches
    assert mcp_tools.run_deferred(w.deps, mcp_tools.DeferredCall.of(message), None) == "recorded"
    first = _result(w, sid)
    second = error_result("tu-1", "tool_error", ResultSource.LOCAL, "a second answer")
    advance = record_and_advance(w.deps, sid, 1, second, by="mcp", total=1)
    assert advance.outcome is RecordOutcome.DUPLICATE and _result(w, sid) == first
