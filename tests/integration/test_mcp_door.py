"""POST /mcp through the a2a function's real handler on moto, the event API Gateway delivers (issue 36): an agent
at its max_concurrent_tasks answers in MCP's terms (a tool error with a retry hint; tasks/update a JSON-RPC error,
its answer not taken), a task waiting for input that is cancelled is cancelled and its question closed, and
whatever fails unexpectedly is JSON-RPC -32603 with the request's id, never the REST error shape.
The same endpoint through the mcp SDK and a local stack: tests/integration/test_mcp_server.py."""

from __future__ import annotations

import json
from typing import Any

import pytest
from botocore.awsrequest import AWSResponse

from flightdeck import wiring
from flightdeck.domain.peers import new_token
from flightdeck.domain.session_cancel import CLOSING_TEXT
from flightdeck.local.gateway import GatewayIdentity, Router, build_proxy_event
from tests.support.harness import agent_config, make_agent, new_session_id

MODERN = "2026-07-28"
TASKS = "io.modelcontextprotocol/tasks"
META = {
    "io.modelcontextprotocol/protocolVersion": MODERN,
    "io.modelcontextprotocol/clientInfo": {"name": "tests", "version": "1"},
    "io.modelcontextprotocol/clientCapabilities": {},
}
META_TASKS = {**META, "io.modelcontextprotocol/clientCapabilities": {"extensions": {TASKS: {}}}}


@pytest.fixture
def agent(aws, monkeypatch):
    config = json.loads(agent_config("orchestrator", ["worker"]))
    config["max_concurrent_tasks"] = 1
    yield make_agent(monkeypatch, extra_env={"AGENT_CONFIG": json.dumps(config)})
    wiring.reset()


@pytest.fixture
def key(agent):
    token = new_token("claude")
    agent.registry.add("claude", token, channels=("mcp",))
    return token


def mcp(agent, key, method: str, params: dict[str, Any], *, tasks: bool = True, request_id: Any = 1):
    """One 2026-07-28 request: (HTTP status, the parsed body)."""
    meta = META_TASKS if tasks else META
    body = {"jsonrpc": "2.0", "id": request_id, "method": method, "params": {**params, "_meta": meta}}
    headers = [("MCP-Protocol-Version", MODERN), ("Mcp-Method", method)]
    name = params.get("name", params.get("taskId"))
    if isinstance(name, str):
        headers.append(("Mcp-Name", name))
    return post(agent, key, body, headers)


def post(agent, key, body: dict[str, Any], headers: list[tuple[str, str]]):
    sent = [
        ("Host", "127.0.0.1"),
        ("Content-Type", "application/json"),
        ("Accept", "application/json, text/event-stream"),
        ("Authorization", f"Bearer {key}"),
        *headers,
    ]
    event = build_proxy_event(
        method="POST",
        raw_path="/mcp",
        query_string="",
        headers=sent,
        body=json.dumps(body).encode(),
        match=Router().match("POST", "/mcp"),
        source_ip="127.0.0.1",
        identity=GatewayIdentity(),
        local_port=443,
    )
    status, _, answer = agent.call(event)
    return status, answer


def result(answer: dict[str, Any], request_id: Any = 1) -> dict[str, Any]:
    assert answer.get("jsonrpc") == "2.0" and answer["id"] == request_id and "error" not in answer, answer
    return answer["result"]


def rpc_error(status: int, answer: dict[str, Any], code: int, request_id: Any = 1) -> dict[str, Any]:
    # A JSON-RPC response, HTTP 200: never the REST shape ({"error": {"code": "internal_error", ...}}, HTTP 500).
    assert status == 200 and answer.get("jsonrpc") == "2.0" and answer["id"] == request_id, (status, answer)
    assert answer["error"]["code"] == code and "result" not in answer, answer
    return answer["error"]


def occupy(agent) -> str:
    """Take the agent's one slot: a session whose turn waits on a delegation (its think never run here)."""
    sid = new_session_id()
    assert agent.api("chat_post", body={"session_id": sid, "content": "@worker a long job"})[0] == 202
    return sid


def asked(agent, key) -> tuple[str, str]:
    """A task whose agent asked a question: (its id, the key of its input request)."""
    created = result(mcp(agent, key, "tools/call", {"name": "ask", "arguments": {"message": "?ask which colour?"}})[1])
    task_id = created["taskId"]
    agent.run_queue("turns")
    task = result(mcp(agent, key, "tasks/get", {"taskId": task_id})[1])
    assert task["status"] == "input_required" and task["statusMessage"] == "which colour?", task
    return task_id, next(iter(task["inputRequests"]))


# --- a busy agent (defect 2) --------------------------------------------------------------------------------


@pytest.mark.parametrize("tasks", [False, True], ids=["in-request", "tasks-extension"])
def test_a_tools_call_at_max_concurrent_tasks_is_a_tool_error_with_a_retry_hint(agent, key, tasks):
    occupy(agent)
    status, answer = mcp(agent, key, "tools/call", {"name": "ask", "arguments": {"message": "hello"}}, tasks=tasks)
    assert status == 200, answer
    called = result(answer)
    # A tool execution error: the model reads it and calls again later; no task was made of it.
    assert called["resultType"] == "complete" and called["isError"] is True and "taskId" not in called, called
    assert "busy" in called["content"][0]["text"] and "5 s" in called["content"][0]["text"]
    assert called["_meta"]["flightdeck/reason"] == "agent_busy" and called["_meta"]["flightdeck/retry_after_s"] == 5
    assert "structuredContent" not in called


def test_a_tasks_update_at_max_concurrent_tasks_is_a_json_rpc_error_and_the_question_stays(agent, key):
    task_id, request_key = asked(agent, key)
    occupy(agent)  # the answer would start a turn: refused, nothing stored
    answer = {request_key: {"action": "accept", "content": {"answer": "teal"}}}
    status, refused = mcp(agent, key, "tasks/update", {"taskId": task_id, "inputResponses": answer})
    error = rpc_error(status, refused, -32000)
    assert error["data"] == {"reason": "agent_busy", "maxConcurrentTasks": 1, "retryAfterSeconds": 5}, error
    still = result(mcp(agent, key, "tasks/get", {"taskId": task_id})[1])
    assert still["status"] == "input_required" and list(still["inputRequests"]) == [request_key]


# --- cancelling a task that waits for input (defect 3) ------------------------------------------------------


def test_a_task_waiting_for_input_that_is_cancelled_is_cancelled_and_its_question_closed(agent, key):
    task_id, request_key = asked(agent, key)
    ack = result(mcp(agent, key, "tasks/cancel", {"taskId": task_id})[1])
    assert ack["resultType"] == "complete" and "status" not in ack
    task = result(mcp(agent, key, "tasks/get", {"taskId": task_id})[1])
    assert task["status"] == "cancelled" and task["statusMessage"] == CLOSING_TEXT, task
    assert "inputRequests" not in task and "result" not in task
    # The question is closed: an answer to it is ignored (the key is no longer outstanding), a repeat of the
    # cancel changes nothing, and the session's next message is a message of its own, not the answer.
    late = {request_key: {"action": "accept", "content": {"answer": "teal"}}}
    result(mcp(agent, key, "tasks/update", {"taskId": task_id, "inputResponses": late})[1])
    result(mcp(agent, key, "tasks/cancel", {"taskId": task_id})[1])
    assert result(mcp(agent, key, "tasks/get", {"taskId": task_id})[1])["status"] == "cancelled"
    session_id = task_id.split(":")[0]
    arguments = {"message": "teal", "session_id": session_id}
    follow_up = result(mcp(agent, key, "tools/call", {"name": "ask", "arguments": arguments})[1])
    assert follow_up["taskId"] != task_id
    agent.run_queue("turns")
    done = result(mcp(agent, key, "tasks/get", {"taskId": follow_up["taskId"]})[1])
    text = done["result"]["content"][0]["text"]
    assert done["status"] == "completed" and 'Task: "teal"' in text and "told" not in text, text
    assert result(mcp(agent, key, "tasks/get", {"taskId": task_id})[1])["status"] == "cancelled"


def test_a_cancel_that_loses_to_the_answer_cancels_the_work_on_it(agent, key, monkeypatch):
    from flightdeck.adapters.dynamo.sessions import SessionStore
    from flightdeck.api.mcp import tasks

    task_id, request_key = asked(agent, key)
    close_question = SessionStore.close_question

    def answered_first(self, *args, **kwargs):
        # The answer is taken between the cancel's read and its write: the write's condition refuses it.
        answer = {request_key: {"action": "accept", "content": {"answer": "teal"}}}
        tasks.update(wiring.deps(), task_id, answer, "claude")
        return close_question(self, *args, **kwargs)

    monkeypatch.setattr(SessionStore, "close_question", answered_first)
    result(mcp(agent, key, "tasks/cancel", {"taskId": task_id})[1])
    monkeypatch.undo()
    agent.run_queue("turns")
    task = result(mcp(agent, key, "tasks/get", {"taskId": task_id})[1])
    assert task["status"] == "cancelled", task


# --- whatever else fails: -32603, in JSON-RPC -----------------------------------------------------------------


def test_an_unexpected_failure_is_json_rpc_internal_error_with_the_request_id(agent, key, monkeypatch):
    from flightdeck.api.mcp import tools

    def broken(*args, **kwargs):
        raise RuntimeError("a bug")

    monkeypatch.setattr(tools, "list_tools", broken)
    status, answer = mcp(agent, key, "tools/list", {}, request_id="req-7")
    error = rpc_error(status, answer, -32603, "req-7")
    assert error["message"].startswith("Internal error")
    assert "a bug" not in json.dumps(answer)  # never the exception to the caller; the log has it


def test_an_aws_failure_is_json_rpc_internal_error_worth_a_retry(agent, key):
    task_id, _ = asked(agent, key)
    client = wiring.state_store().client
    client.meta.events.register("before-send.dynamodb.Query", _denied)
    try:
        status, answer = mcp(agent, key, "tasks/get", {"taskId": task_id}, request_id=9)
    finally:
        client.meta.events.unregister("before-send.dynamodb.Query", _denied)
    error = rpc_error(status, answer, -32603, 9)
    assert error["data"] == {"retryAfterSeconds": 1} and "retry" in error["message"]


def test_a_notification_that_cannot_be_taken_is_http_500_with_a_json_rpc_error_without_an_id(agent, key):
    # 2025-11-25's notifications/cancelled cancels the session its call started: that write fails here.
    client = wiring.state_store().client
    client.meta.events.register("before-send.dynamodb.UpdateItem", _denied)
    try:
        body = {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 3}}
        status, answer = post(agent, key, body, [("MCP-Protocol-Version", "2025-11-25"), ("Mcp-Session-Id", "s-1")])
    finally:
        client.meta.events.unregister("before-send.dynamodb.UpdateItem", _denied)
    assert status == 500 and answer["jsonrpc"] == "2.0" and answer["id"] is None, (status, answer)
    assert answer["error"]["code"] == -32603 and answer["error"]["data"] == {"retryAfterSeconds": 1}


def _denied(request, **kwargs):
    body = b'{"__type":"com.amazon.coral.service#AccessDeniedException","message":"injected"}'
    return AWSResponse(request.url, 400, {"Content-Type": "application/x-amz-json-1.0"}, _Raw(body))


class _Raw:
    def __init__(self, body: bytes):
        self.body = body

    def stream(self, **_):
        yield self.body
