"""A delegating tool whose peer is an A2A agent: failures become structured results, pushes are checked.

The peer here is scripted (a loopback HTTP server answering GET card / POST JSON-RPC
as each test says), to reach the paths a well-behaved a2a-sdk agent never takes;
tests/integration/test_a2a_interop.py delegates to a real a2a-sdk agent.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from tests.support.harness import make_agent, new_session_id

CARD_PATH = "/.well-known/agent-card.json"


class A2APeer:
    """GET the card, POST JSON-RPC: `card` and `rpc` decide the answers; requests are recorded."""

    def __init__(self):
        self.requests: list[dict[str, Any]] = []
        self.card_status = 200
        self.push = True
        self.rpc_url_override: str | None = None
        self.rpc: Callable[[dict[str, Any]], tuple[int, Any]] = lambda body: (200, _result(body, _task("working")))
        peer = self

        class Handler(BaseHTTPRequestHandler):
            def _send(self, status: int, payload: Any):
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self):  # noqa: N802
                peer.requests.append({"method": "GET", "path": self.path})
                self._send(peer.card_status, peer.card())

            def do_POST(self):  # noqa: N802
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"null")
                peer.requests.append({"method": "POST", "path": self.path, "body": body, "headers": dict(self.headers)})
                status, payload = peer.rpc(body)
                self._send(status, payload)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_port}"

    def card(self) -> dict[str, Any]:
        return {
            "protocolVersion": "0.3.0",
            "name": "scripted",
            "description": "scripted",
            "version": "1",
            "url": self.rpc_url_override or f"{self.url}/rpc",
            "preferredTransport": "JSONRPC",
            "capabilities": {"pushNotifications": self.push},
            "defaultInputModes": ["text/plain"],
            "defaultOutputModes": ["text/plain"],
            "skills": [],
        }

    @property
    def posts(self) -> list[dict[str, Any]]:
        return [r for r in self.requests if r["method"] == "POST"]

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def _task(state: str, text: str = "", task_id: str = "peer-task-1") -> dict[str, Any]:
    task: dict[str, Any] = {"kind": "task", "id": task_id, "contextId": "peer-ctx", "status": {"state": state}}
    if state == "completed":
        task["artifacts"] = [{"artifactId": "a", "parts": [{"kind": "text", "text": text}]}]
    elif text:
        task["status"]["message"] = {
            "kind": "message",
            "role": "agent",
            "messageId": "m",
            "parts": [{"kind": "text", "text": text}],
        }
    return task


def _result(body: dict[str, Any], result: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": body.get("id"), "result": result}


def _error(body: dict[str, Any], code: int, message: str) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": body.get("id"), "error": {"code": code, "message": message}}


@pytest.fixture
def peer():
    p = A2APeer()
    yield p
    p.close()


@pytest.fixture
def agent(aws, monkeypatch, peer):
    from flightdeck.domain.a2a.client import clear_card_cache

    clear_card_cache()
    config = {
        "name": "orchestrator",
        "model": {"provider": "local"},
        "delegates": [
            {"agent": "peer", "protocol": "a2a", "card_url": f"{peer.url}{CARD_PATH}"},
            {"agent": "stranger", "protocol": "a2a", "card_url": "https://stranger.example.com/card"},
        ],
    }
    return make_agent(
        monkeypatch,
        delegates=[],
        allow=f"peer:{peer.url},orchestrator:http://127.0.0.1:9",
        extra_env={"AGENT_CONFIG": json.dumps(config), "DISPATCH_MAX_ATTEMPTS": "3"},
    )


def delegate(agent, content: str) -> str:
    sid = new_session_id()
    assert agent.api("chat_post", body={"session_id": sid, "content": content})[0] == 202
    agent.run_queue("turns")
    return sid


def tool_result(agent, sid: str) -> dict[str, Any]:
    agent.run_queue("turns")
    s = agent.api("session_get", SESSION_ID=sid)[2]
    assert s["status"] == "idle", s
    return s["messages"][2]["content"][0]["toolResult"]


def error_of(result: dict[str, Any]) -> dict[str, Any]:
    assert result["status"] == "error", result
    return json.loads(result["content"][0]["text"])


# --- dispatch --------------------------------------------------------------------------------------


def test_message_send_is_non_blocking_with_our_push_receiver_and_token(agent, peer):
    sid = delegate(agent, "@peer find the answer")
    assert agent.run_queue("dispatch") == {"batchItemFailures": []}
    [card, post] = peer.requests
    assert card == {"method": "GET", "path": CARD_PATH}
    assert post["path"] == "/rpc" and post["body"]["method"] == "message/send"
    params = post["body"]["params"]
    assert params["message"]["parts"] == [{"kind": "text", "text": "find the answer"}]
    assert params["configuration"]["blocking"] is False
    push = params["configuration"]["pushNotificationConfig"]
    assert push["url"] == "http://127.0.0.1:9/api/a2a/push"
    # The notification token is the callback token: /api/tools/response accepts it too.
    assert agent.api("tool_response", TOKEN=push["token"], RESULT="via the callback route")[0] == 202
    assert tool_result(agent, sid)["content"][0]["text"] == "via the callback route"


def test_card_url_outside_the_allowlist_is_a_dispatch_failure(agent, peer):
    sid = delegate(agent, "@stranger hello")
    agent.run_queue("dispatch")
    # Only the allowed delegate's card was read (by the think, for its skills' tools); nothing was sent.
    assert peer.requests == [{"method": "GET", "path": CARD_PATH}]
    detail = error_of(tool_result(agent, sid))
    assert detail["reason"] == "dispatch_failed" and "ALLOWED_HOST_MAPPING" in detail["detail"]


def test_card_pointing_outside_the_allowlist_is_refused(agent, peer):
    peer.rpc_url_override = "https://elsewhere.example.com/rpc"
    sid = delegate(agent, "@peer hello")
    agent.run_queue("dispatch")
    assert peer.posts == []
    assert "not under ALLOWED_HOST_MAPPING" in error_of(tool_result(agent, sid))["detail"]


@pytest.fixture
def under_a_path(aws, monkeypatch, peer):
    """An agent allowed to call only under {peer}/a2a/, with delegates whose card URLs play with dot segments."""
    from flightdeck.domain.a2a.client import clear_card_cache

    clear_card_cache()
    base = f"{peer.url}/a2a"
    config = {
        "name": "orchestrator",
        "model": {"provider": "local"},
        "delegates": [
            {"agent": "clean", "protocol": "a2a", "card_url": f"{base}/./x/..{CARD_PATH}"},
            {"agent": "dots", "protocol": "a2a", "card_url": f"{base}/..{CARD_PATH}"},
            {"agent": "escaped", "protocol": "a2a", "card_url": f"{base}/%2e%2e{CARD_PATH}"},
        ],
    }
    peer.rpc_url_override = f"{base}/rpc"
    return make_agent(
        monkeypatch,
        delegates=[],
        allow=f"peer:{base},orchestrator:http://127.0.0.1:9",
        extra_env={"AGENT_CONFIG": json.dumps(config)},
    )


def test_a_card_url_is_normalised_before_the_check_and_fetched_as_checked(under_a_path, peer):
    for name in ("dots", "escaped"):
        sid = delegate(under_a_path, f"@{name} hello")
        under_a_path.run_queue("dispatch")
        # The think read the card it may (clean's, for its skills' tools), as checked; nothing else.
        assert peer.requests == [{"method": "GET", "path": f"/a2a{CARD_PATH}"}], name
        assert "ALLOWED_HOST_MAPPING" in error_of(tool_result(under_a_path, sid))["detail"]
    delegate(under_a_path, "@clean hello")
    assert under_a_path.run_queue("dispatch") == {"batchItemFailures": []}
    assert [(r["method"], r["path"]) for r in peer.requests] == [("GET", f"/a2a{CARD_PATH}"), ("POST", "/a2a/rpc")]


def test_a_card_whose_rpc_url_climbs_out_of_the_base_is_refused(under_a_path, peer):
    peer.rpc_url_override = f"{peer.url}/a2a/%2E%2E/admin/rpc"
    sid = delegate(under_a_path, "@clean hello")
    under_a_path.run_queue("dispatch")
    assert peer.posts == []
    assert "not under ALLOWED_HOST_MAPPING" in error_of(tool_result(under_a_path, sid))["detail"]


def test_card_errors_retry_or_fail(agent, peer):
    peer.card_status = 503
    delegate(agent, "@peer hello")
    assert len(agent.run_queue("dispatch")["batchItemFailures"]) == 1  # retried by visibility
    peer.card_status = 404
    sid = delegate(agent, "@peer again")
    agent.run_queue("dispatch")
    assert "agent card: HTTP 404" in error_of(tool_result(agent, sid))["detail"]


def test_json_rpc_error_is_a_structured_failure(agent, peer):
    peer.rpc = lambda body: (200, _error(body, -32601, "Method not found"))
    sid = delegate(agent, "@peer hello")
    agent.run_queue("dispatch")
    detail = error_of(tool_result(agent, sid))
    assert detail["reason"] == "dispatch_failed" and "JSON-RPC error -32601" in detail["detail"]


def test_garbage_answers_are_structured_failures(agent, peer):
    peer.rpc = lambda body: (200, _result(body, {"kind": "task", "id": "x"}))
    sid = delegate(agent, "@peer hello")
    agent.run_queue("dispatch")
    assert "not a Task or Message" in error_of(tool_result(agent, sid))["detail"]
    peer.rpc = lambda body: (200, "not json-rpc")
    sid = delegate(agent, "@peer again")
    agent.run_queue("dispatch")
    assert "not a JSON-RPC response" in error_of(tool_result(agent, sid))["detail"]


def test_push_not_supported_falls_back_to_polling(agent, peer):
    def rpc(body):
        if "pushNotificationConfig" in body["params"].get("configuration", {}):
            return 200, _error(body, -32003, "Push Notification is not supported")
        return 200, _result(body, _task("working"))

    peer.rpc = rpc
    sid = delegate(agent, "@peer hello")
    agent.run_queue("dispatch")
    assert [("pushNotificationConfig" in p["body"]["params"]["configuration"]) for p in peer.posts] == [True, False]
    assert agent.item(f"S#{sid}", f"A2A#REMOTE#000001#{_tool_use_id(agent, sid)}")["mode"] == "poll"


def _tool_use_id(agent, sid: str) -> str:
    s = agent.api("session_get", SESSION_ID=sid)[2]
    return s["messages"][1]["content"][1]["toolUse"]["toolUseId"]


def test_a_direct_message_answer_is_the_result(agent, peer):
    peer.rpc = lambda body: (
        200,
        _result(
            body,
            {"kind": "message", "role": "agent", "messageId": "m", "parts": [{"kind": "text", "text": "right away"}]},
        ),
    )
    sid = delegate(agent, "@peer hello")
    agent.run_queue("dispatch")
    assert tool_result(agent, sid) == {
        "toolUseId": _tool_use_id(agent, sid),
        "status": "success",
        "content": [{"text": "right away"}],
    }


def test_a_task_already_failed_in_the_answer_is_an_error_result(agent, peer):
    peer.rpc = lambda body: (200, _result(body, _task("failed", "out of fuel")))
    sid = delegate(agent, "@peer hello")
    agent.run_queue("dispatch")
    assert error_of(tool_result(agent, sid)) == {"status": "error", "reason": "peer_failed", "detail": "out of fuel"}


# --- polling -----------------------------------------------------------------------------------------


def _poll(agent, sid: str, polls: int = 0) -> str:
    from flightdeck.domain.a2a.client import PollMessage, poll_remote_task
    from flightdeck.wiring import deps

    agg = agent.turn_item(sid, 1)
    return poll_remote_task(
        deps(),
        PollMessage(
            kind="a2a_poll",
            session_id=sid,
            turn=1,
            tool_use_id=_tool_use_id(agent, sid),
            deadline_ms=int(agg["deadline_ms"]),
            polls=polls,
        ),
    )


def test_polling_until_terminal(agent, peer):
    peer.push = False
    sid = delegate(agent, "@peer hello")
    agent.run_queue("dispatch")
    assert "pushNotificationConfig" not in peer.posts[0]["body"]["params"]["configuration"]
    assert _poll(agent, sid) == "pending"  # still working: the next poll is queued, later
    peer.rpc = lambda body: (200, _result(body, _task("completed", "polled answer")))
    assert _poll(agent, sid, 1) == "recorded"
    assert [p["body"]["method"] for p in peer.posts] == ["message/send", "tasks/get", "tasks/get"]
    assert peer.posts[-1]["body"]["params"] == {"id": "peer-task-1"}
    assert _poll(agent, sid, 2) == "stopped"  # the turn is complete: no more polls
    assert tool_result(agent, sid)["content"][0]["text"] == "polled answer"


def test_polling_failures(agent, peer):
    peer.push = False
    sid = delegate(agent, "@peer hello")
    agent.run_queue("dispatch")
    peer.rpc = lambda body: (502, {"oops": True})
    assert _poll(agent, sid) == "pending"  # transient: keep polling
    peer.rpc = lambda body: (200, _error(body, -32001, "Task not found"))
    assert _poll(agent, sid) == "failed"
    detail = error_of(tool_result(agent, sid))
    assert detail["reason"] == "poll_failed" and "-32001" in detail["detail"]


# --- the push receiver ---------------------------------------------------------------------------------


def _push(agent, token: str | None, body: Any):
    headers = {} if token is None else {"X-A2A-Notification-Token": token}
    event_body = body if isinstance(body, str) else json.dumps(body)
    from tests.support.harness import load_event

    event = load_event("api/a2a_push.json", TOKEN=token or "", RESULT="")
    event["body"] = event_body
    if token is None:
        event["headers"].pop("X-A2A-Notification-Token")
        event["multiValueHeaders"].pop("X-A2A-Notification-Token")
    else:
        event["headers"].update(headers)
    return agent.call(event)


def _dispatched_token(agent, peer, content: str = "@peer hello") -> tuple[str, str]:
    sid = delegate(agent, content)
    agent.run_queue("dispatch")
    return sid, peer.posts[-1]["body"]["params"]["configuration"]["pushNotificationConfig"]["token"]


def test_push_receiver_checks_the_token_and_records_terminal_tasks_once(agent, peer):
    sid, token = _dispatched_token(agent, peer)
    assert _push(agent, None, _task("completed", "x"))[0] == 401
    assert _push(agent, token[:-2] + "xx", _task("completed", "x"))[0] == 401
    assert _push(agent, token, "{not json")[0] == 400
    assert _push(agent, token, {"kind": "task", "id": "t"})[0] == 422
    status, _, body = _push(agent, token, _task("working"))
    assert (status, body["status"]) == (200, "in_progress")
    assert agent.receive("turns") == []
    status, _, body = _push(agent, token, _task("completed", "pushed answer"))
    assert (status, body["status"], body["completed_turn"]) == (202, "accepted", True)
    assert _push(agent, token, _task("completed", "pushed answer"))[0] == 200  # duplicate
    assert tool_result(agent, sid)["content"][0]["text"] == "pushed answer"


def test_a_push_after_the_timeout_is_late(agent, peer, monkeypatch):
    from flightdeck.domain.aggregation import expire_turn
    from flightdeck.wiring import deps, state_store

    sid, token = _dispatched_token(agent, peer)
    deadline = state_store().get_turn(sid, 1).deadline_ms
    monkeypatch.setattr(state_store(), "_clock", lambda: deadline)  # the deadline has come
    assert expire_turn(deps(), sid, 1, by="timer")
    monkeypatch.undo()
    assert _push(agent, token, _task("completed", "too late"))[0] == 410
    assert _push(agent, token, _task("failed", "too late"))[0] == 410
    assert error_of(tool_result(agent, sid))["reason"] == "timeout"


@pytest.mark.parametrize(
    "state,reason",
    [
        ("failed", "peer_failed"),
        ("canceled", "peer_canceled"),
        ("rejected", "peer_rejected"),
        ("auth-required", "peer_auth_required"),
    ],
)
def test_pushed_failures_are_structured_error_results(agent, peer, state, reason):
    sid, token = _dispatched_token(agent, peer)
    assert _push(agent, token, _task(state, "could not do it"))[0] == 202
    assert error_of(tool_result(agent, sid)) == {"status": "error", "reason": reason, "detail": "could not do it"}


def test_a_pushed_input_required_task_is_the_peer_s_question_with_its_context_and_task(agent, peer):
    sid, token = _dispatched_token(agent, peer)
    assert _push(agent, token, _task("input-required", "which year?"))[0] == 202
    result = tool_result(agent, sid)
    assert result["status"] == "success"
    assert json.loads(result["content"][0]["text"]) == {
        "status": "input_required",
        "question": "which year?",
        "context_id": "peer-ctx",
        "task_id": "peer-task-1",
    }


def test_a2a_delegate_needs_a_card_url(monkeypatch):
    from flightdeck.domain.agent import DelegateTool

    with pytest.raises(ValueError, match="card_url"):
        DelegateTool(agent="peer", protocol="a2a")
    assert DelegateTool(agent="peer", protocol="a2a", card_url="https://p.example.com/card").name == "ask_peer"


def test_our_peer_token_goes_with_message_send_and_tasks_get(agent, peer, monkeypatch):
    from flightdeck import wiring
    from flightdeck.domain.peers import new_token

    ours = new_token("orchestrator")
    monkeypatch.setenv("PEER_TOKENS", json.dumps({"peer": ours}))  # keyed by the delegate's service name
    wiring.reset()
    peer.push = False
    sid = delegate(agent, "@peer hello")
    agent.run_queue("dispatch")
    assert _poll(agent, sid) == "pending"
    assert [(p["body"]["method"], p["headers"].get("Authorization")) for p in peer.posts] == [
        ("message/send", f"Bearer {ours}"),
        ("tasks/get", f"Bearer {ours}"),
    ]


# --- answers over MAX_RESULT_BYTES, on every path (issue 12, defect 7) ----------------------------------

LIMIT = 1_000


@pytest.fixture
def small_limit(agent, monkeypatch):
    from flightdeck import wiring

    monkeypatch.setenv("MAX_RESULT_BYTES", str(LIMIT))
    wiring.reset()
    return agent


def _too_large(agent, sid: str) -> None:
    """The turn goes on with an error that says why; nothing of the answer is stored."""
    assert error_of(tool_result(agent, sid)) == {
        "status": "error",
        "reason": "result_too_large",
        "detail": f"the answer exceeds {LIMIT} bytes",
    }
    assert not [i for i in agent.table_items() if "ü" in json.dumps(i, ensure_ascii=False)]


def test_an_oversized_direct_message_answer_is_an_error_result(small_limit, peer):
    agent = small_limit
    text = "ü" * (LIMIT // 2 + 1)  # LIMIT + 2 bytes of UTF-8
    peer.rpc = lambda body: (
        200,
        _result(
            body, {"kind": "message", "role": "agent", "messageId": "m", "parts": [{"kind": "text", "text": text}]}
        ),
    )
    sid = delegate(agent, "@peer hello")
    assert agent.run_queue("dispatch") == {"batchItemFailures": []}
    _too_large(agent, sid)


def test_an_oversized_task_completed_in_the_send_answer_is_an_error_result(small_limit, peer):
    agent = small_limit
    peer.rpc = lambda body: (200, _result(body, _task("completed", "ü" * LIMIT)))
    sid = delegate(agent, "@peer hello")
    agent.run_queue("dispatch")
    _too_large(agent, sid)


def test_an_oversized_polled_answer_is_an_error_result(small_limit, peer):
    agent = small_limit
    peer.push = False
    sid = delegate(agent, "@peer hello")
    agent.run_queue("dispatch")
    peer.rpc = lambda body: (200, _result(body, _task("completed", "ü" * LIMIT)))
    assert _poll(agent, sid) == "recorded"
    _too_large(agent, sid)


def test_an_oversized_pushed_answer_is_413_and_an_error_result(small_limit, peer):
    agent = small_limit
    sid, token = _dispatched_token(agent, peer)
    status, _, body = _push(agent, token, _task("completed", "ü" * LIMIT))
    assert status == 413 and body["error"]["code"] == "too_large"
    _too_large(agent, sid)


def test_an_answer_of_exactly_the_limit_is_kept_whole(small_limit, peer):
    agent = small_limit
    text = "ü" * (LIMIT // 2)  # exactly LIMIT bytes
    peer.rpc = lambda body: (
        200,
        _result(
            body, {"kind": "message", "role": "agent", "messageId": "m", "parts": [{"kind": "text", "text": text}]}
        ),
    )
    sid = delegate(agent, "@peer hello")
    agent.run_queue("dispatch")
    assert tool_result(agent, sid)["content"][0]["text"] == text


# --- polls within the invocation's time (issue 13) -------------------------------------------------------


def test_ten_polls_of_a_slow_peer_end_within_the_invocation_and_poll_on(agent, peer):
    from flightdeck.handlers import deadline_timer
    from flightdeck.local.invocation import LocalLambdaContext

    peer.push = False
    sid = delegate(agent, " ".join(f"@peer job {i}" for i in range(10)))
    agent.run_queue("dispatch")
    deadline_ms = int(agent.turn_item(sid, 1)["deadline_ms"])
    tool_use_ids = [
        b["toolUse"]["toolUseId"]
        for b in agent.api("session_get", SESSION_ID=sid)[2]["messages"][1]["content"]
        if "toolUse" in b
    ]
    assert len(tool_use_ids) == 10
    polls = [
        {
            "MessageId": f"poll-{i}",
            "ReceiptHandle": f"rh-{i}",
            "Attributes": {},
            "Body": json.dumps(
                {
                    "kind": "a2a_poll",
                    "session_id": sid,
                    "turn": 1,
                    "tool_use_id": tid,
                    "deadline_ms": deadline_ms,
                    "polls": 1,
                }
            ),
        }
        for i, tid in enumerate(tool_use_ids)
    ]

    # The invocation's time on a clock of the test's: each poll of the slow peer takes 0.4 s of it, however
    # long the machine takes besides (a busy one ran the real clock out before the polls' own time did).
    spent_s = [0.0]

    def slow(body):
        spent_s[0] += 0.4
        return 200, _result(body, _task("working"))

    peer.rpc = slow
    before = len(peer.posts)
    context = LocalLambdaContext(function_name="orchestrator-timers", timeout_s=3.2)
    context.get_remaining_time_in_millis = lambda: max(0, int((3.2 - spent_s[0]) * 1000))  # type: ignore[method-assign]
    assert deadline_timer.handler(agent.sqs_event("timers", polls), context) == {"batchItemFailures": []}
    assert context.get_remaining_time_in_millis() > 0  # 10 polls of 0.4 s did not run it out
    assert 1 <= len(peer.posts) - before < 10
    queued = agent.sqs.get_queue_attributes(
        QueueUrl=agent.queue_urls["timers"],
        AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesDelayed"],
    )["Attributes"]
    # The turn's deadline timer, the dispatch's first polls, and each of these scheduled again, tried or not.
    assert sum(int(n) for n in queued.values()) == 1 + 10 + 10
