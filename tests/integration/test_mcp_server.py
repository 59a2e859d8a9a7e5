"""POST /mcp on a local agent (tests/support/mcp/agents.toml): the mcp SDK client over Streamable HTTP
(a structured skill, `ask` with a delegation behind it that outlasts its request and is collected
later), the version and header rules of both eras, keys by channel (an A2A token on /mcp, an MCP key on
/a2a, a key revoked mid-session), another client's session, hostile bodies: 4xx, never 5xx."""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import requests

from flightdeck import config_file
from flightdeck.local.stack import LocalStack

pytestmark = pytest.mark.slow

CONFIG = Path(__file__).resolve().parents[1] / "support" / "mcp" / "agents.toml"
USER_TOKEN = "fdp_user_LOCAL-ONLY-mcp-tests-user-token-0123456789abcdef"  # the file's a2a peer
MODERN, LEGACY = "2026-07-28", "2025-11-25"
META = {
    "io.modelcontextprotocol/protocolVersion": MODERN,
    "io.modelcontextprotocol/clientInfo": {"name": "tests", "version": "1"},
    "io.modelcontextprotocol/clientCapabilities": {},
}
TASKS = "io.modelcontextprotocol/tasks"
META_TASKS = {**META, "io.modelcontextprotocol/clientCapabilities": {"extensions": {TASKS: {}}}}


def _peers(stack: LocalStack, *args: str) -> str:
    command = [sys.executable, "-m", "flightdeck.cli", "peers", *args, "--agent", "assistant"]
    command += ["--endpoint-url", stack.moto_endpoint]
    return subprocess.run(command, capture_output=True, text=True, check=True).stdout.strip()


@pytest.fixture(scope="module")
def stack():
    # A call waits 3 s in its request; the worker thinks 5 s: `ask` with a delegation outlasts it.
    with LocalStack(config_file.load(CONFIG), relay=None, extra_env={"MCP_WAIT_MS": "3000"}) as running:
        yield running


@pytest.fixture(scope="module")
def url(stack):
    return stack.urls["assistant"].rstrip("/") + "/mcp"


@pytest.fixture(scope="module")
def key(stack):
    return _peers(stack, "add", "claude", "--channel", "mcp")


@pytest.fixture(scope="module")
def other_key(stack):
    return _peers(stack, "add", "cursor", "--channel", "mcp")


def post(url, body, token, version=MODERN, headers=None, raw=None, stream=False):
    sent = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
    if token:
        sent["Authorization"] = f"Bearer {token}"
    if version and isinstance(body, dict) and "method" in body:
        sent["MCP-Protocol-Version"] = version
        if version == MODERN:
            sent["Mcp-Method"] = body["method"]
            name = (body.get("params") or {}).get("name")
            if isinstance(name, str):
                sent["Mcp-Name"] = name
    sent.update(headers or {})
    data = raw if raw is not None else json.dumps(body)
    return requests.post(url, data=data, headers=sent, timeout=60, stream=stream)


def rpc(method, params=None, request_id=1, meta=True):
    params = dict(params or {})
    if meta:
        params["_meta"] = META
    return {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}


def call(url, token, name, arguments):
    return post(url, rpc("tools/call", {"name": name, "arguments": arguments}), token)


# --- the mcp SDK client --------------------------------------------------------------------------------


def _sdk(url, token, scenario):
    import httpx2
    from mcp import ClientSession
    from mcp.client.streamable_http import streamable_http_client

    async def run():
        async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=60) as http:
            async with streamable_http_client(url, http_client=http) as streams:
                read, write = streams[0], streams[1]
                async with ClientSession(read, write) as session:
                    await session.initialize()
                    return await scenario(session)

    return asyncio.run(run())


def test_the_sdk_client_lists_the_tools_and_calls_a_structured_skill(url, key):
    async def scenario(session):
        tools = await session.list_tools()
        counted = await session.call_tool("count_words", {"text": "one two three"})
        return tools, counted

    tools, counted = _sdk(url, key, scenario)
    names = [t.name for t in tools.tools]
    assert names == ["count_words", "summarise", "ask", "get_result", "cancel"]  # internal_only is not exposed
    summarise = next(t for t in tools.tools if t.name == "summarise")
    assert summarise.input_schema["required"] == ["text"] and summarise.output_schema["required"] == [
        "summary",
        "words",
    ]
    assert counted.is_error is False and counted.structured_content == {"words": 3}
    assert json.loads(counted.content[0].text) == {"words": 3}


def test_the_sdk_client_asks_with_a_delegation_that_outlasts_its_request_and_collects_it_later(url, key):
    async def scenario(session):
        first = await session.call_tool("ask", {"message": "@worker name two owls"})
        assert first.structured_content["status"] == "working", first
        sid = first.structured_content["session_id"]
        deadline = time.monotonic() + 60
        while True:
            later = await session.call_tool("get_result", {"session_id": sid})
            if later.structured_content["status"] != "working" or time.monotonic() > deadline:
                return sid, later
            await asyncio.sleep(0.5)

    sid, later = _sdk(url, key, scenario)
    assert later.structured_content["status"] == "completed" and later.structured_content["session_id"] == sid
    assert "worker" in later.structured_content["answer"] and later.is_error is False


def test_ask_without_delegation_answers_within_the_request(url, key):
    response = call(url, key, "ask", {"message": "hello"})
    result = response.json()["result"]
    assert result["resultType"] == "complete" and result["structuredContent"]["status"] == "completed"
    assert result["structuredContent"]["answer"]


def test_the_readmes_curl_check_lists_the_tools(stack, key):
    """The README's one-line check, run as written (README.md, "Using an agent from an MCP client")."""
    if shutil.which("curl") is None:  # CI has curl: there a missing one is a failure, not a skip
        assert os.environ.get("CI") != "true", "curl is not installed"
        pytest.skip("curl is not installed")
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    section = readme.split("## Using an agent from an MCP client", 1)[1].split("\n## ", 1)[0]
    command = re.search(r"```bash\n(curl .*?)\n```", section, re.DOTALL).group(1)
    env = {"API": stack.urls["assistant"].rstrip("/"), "TOKEN": key, "PATH": "/usr/bin:/bin"}
    out = subprocess.run(["bash", "-c", command], capture_output=True, text=True, env=env, timeout=30, check=True)
    assert [t["name"] for t in json.loads(out.stdout)["result"]["tools"]][-3:] == ["ask", "get_result", "cancel"]


# --- versions, headers, methods ----------------------------------------------------------------------


def test_discover_and_the_legacy_handshake(url, key):
    found = post(url, rpc("server/discover"), key).json()["result"]
    assert found["supportedVersions"] == [MODERN, LEGACY]
    assert found["capabilities"] == {"tools": {"listChanged": False}, "extensions": {TASKS: {}}}
    assert found["_meta"]["io.modelcontextprotocol/serverInfo"]["name"] == "flightdeck-assistant"
    init = {"protocolVersion": LEGACY, "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}
    response = post(url, rpc("initialize", init, meta=False), key, version=None)
    # A session id is minted (it scopes request ids for notifications/cancelled) and stored nowhere.
    assert response.json()["result"]["capabilities"]["tasks"] == {"cancel": {}, "requests": {"tools": {"call": {}}}}
    assert response.json()["result"]["protocolVersion"] == LEGACY and len(response.headers["mcp-session-id"]) == 32
    assert post(url, {"jsonrpc": "2.0", "method": "notifications/initialized"}, key, LEGACY).status_code == 202
    assert post(url, rpc("ping", meta=False), key, LEGACY).json()["result"] == {}


@pytest.mark.parametrize(
    "version,headers,status,code",
    [
        ("1999-01-01", {}, 400, -32022),  # a version not served
        (None, {}, 400, -32020),  # the header missing while _meta says 2026-07-28
        (MODERN, {"Mcp-Method": "prompts/list"}, 400, -32020),  # Mcp-Method not the body's
        (LEGACY, {}, 200, None),  # 2025-11-25 needs no _meta
    ],
)
def test_wrong_or_missing_version_headers(url, key, version, headers, status, code):
    response = post(url, rpc("tools/list"), key, version=version, headers=headers)
    assert response.status_code == status, response.text
    body = response.json()
    if code is None:
        assert "result" in body
    else:
        assert body["error"]["code"] == code
    if code == -32022:
        assert body["error"]["data"]["supported"] == [MODERN, LEGACY]


def test_mcp_name_must_match_and_meta_is_required(url, key):
    body = rpc("tools/call", {"name": "count_words", "arguments": {"text": "a"}})
    assert post(url, body, key, headers={"Mcp-Name": "ask"}).json()["error"]["code"] == -32020
    no_meta = rpc("tools/list", meta=False)
    response = post(url, no_meta, key)
    assert response.status_code == 400 and response.json()["error"]["code"] == -32602


def test_unknown_methods_and_tools(url, key):
    response = post(url, rpc("resources/list"), key)
    assert response.status_code == 404 and response.json()["error"]["code"] == -32601
    assert post(url, rpc("initialize", {}), key).status_code == 404  # removed in 2026-07-28
    assert post(url, rpc("resources/list", meta=False), key, LEGACY).json()["error"]["code"] == -32601
    assert call(url, key, "nope", {}).json()["error"]["code"] == -32602
    assert call(url, key, "internal_only", {"text": "a"}).json()["error"]["code"] == -32602
    assert requests.get(url, timeout=10).status_code == 405
    assert requests.delete(url, timeout=10).status_code == 405


def test_schema_mismatch_is_a_tool_error_and_stores_nothing(url, key):
    before = post(url, rpc("tools/list"), key)  # warm
    assert before.status_code == 200
    result = call(url, key, "summarise", {"text": 42}).json()["result"]
    assert result["isError"] is True and "is not of type" in result["content"][0]["text"]
    assert result["_meta"]["flightdeck/problems"]
    assert "session_id" not in json.dumps(result)  # nothing was started


# --- keys, channels, isolation ---------------------------------------------------------------------------


def test_a_missing_token_is_401_with_www_authenticate(url):
    response = post(url, rpc("tools/list"), None)
    assert response.status_code == 401 and response.headers["WWW-Authenticate"].startswith("Bearer")


def test_an_a2a_token_does_not_open_mcp_and_an_mcp_key_does_not_open_a2a(stack, url, key):
    assert post(url, rpc("tools/list"), USER_TOKEN).status_code == 403
    base = stack.urls["assistant"].rstrip("/")
    send = {"jsonrpc": "2.0", "id": 1, "method": "tasks/get", "params": {"id": "x"}}
    assert (
        requests.post(f"{base}/a2a", json=send, headers={"Authorization": f"Bearer {key}"}, timeout=10).status_code
        == 403
    )
    chat = requests.post(
        f"{base}/api/chat", json={"content": "hi"}, headers={"Authorization": f"Bearer {key}"}, timeout=10
    )
    assert chat.status_code == 403


def test_a_key_issued_for_both_opens_both(stack, url):
    both = _peers(stack, "add", "both", "--channel", "a2a", "--channel", "mcp")
    assert post(url, rpc("tools/list"), both).status_code == 200
    base = stack.urls["assistant"].rstrip("/")
    chat = requests.post(
        f"{base}/api/chat", json={"content": "hi"}, headers={"Authorization": f"Bearer {both}"}, timeout=10
    )
    assert chat.status_code == 202


def test_another_clients_session_does_not_exist(url, key, other_key):
    mine = call(url, key, "ask", {"message": "hello"}).json()["result"]["structuredContent"]["session_id"]
    for name, arguments in (
        ("get_result", {"session_id": mine}),
        ("cancel", {"session_id": mine}),
        ("ask", {"message": "continue", "session_id": mine}),
    ):
        result = call(url, other_key, name, arguments).json()["result"]
        assert result["isError"] is True and "no session" in result["content"][0]["text"], (name, result)
    assert (
        call(url, key, "get_result", {"session_id": mine}).json()["result"]["structuredContent"]["status"]
        == "completed"
    )


def test_a_key_revoked_mid_session_is_refused_at_once(stack, url):
    token = _peers(stack, "add", "revoked-client", "--channel", "mcp")
    sid = call(url, token, "ask", {"message": "hello"}).json()["result"]["structuredContent"]["session_id"]
    _peers(stack, "revoke", "revoked-client")
    response = call(url, token, "get_result", {"session_id": sid})
    assert response.status_code == 403


def test_cancel_stops_a_working_call(url, key):
    sid = call(url, key, "ask", {"message": "@worker a long one"}).json()["result"]["structuredContent"]["session_id"]
    result = call(url, key, "cancel", {"session_id": sid}).json()["result"]
    assert result["structuredContent"] == {"session_id": sid, "canceled": True}
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        state = call(url, key, "get_result", {"session_id": sid}).json()["result"]["structuredContent"]
        if state["status"] != "working":
            break
        time.sleep(0.3)
    assert state["status"] == "completed"  # closed: its answer is the cancel's closing line


def test_notifications_cancelled_cancels_the_call_its_request_started(url, key, other_key):
    init = {"protocolVersion": LEGACY, "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}
    mcp_session = post(url, rpc("initialize", init, meta=False), key, version=None).headers["Mcp-Session-Id"]
    in_session = {"Mcp-Session-Id": mcp_session}
    body = rpc("tools/call", {"name": "ask", "arguments": {"message": "@worker a long one"}}, 7, meta=False)
    sid = post(url, body, key, LEGACY, in_session).json()["result"]["structuredContent"]["session_id"]

    def cancelled(token, request_id, headers):
        note = {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": request_id}}
        return post(url, note, token, LEGACY, headers).status_code

    # Another client, another MCP session, another request id: 202 and nothing changes.
    assert cancelled(other_key, 7, in_session) == 202
    assert cancelled(key, 7, {"Mcp-Session-Id": "another"}) == 202
    assert cancelled(key, 8, in_session) == 202
    assert (
        call(url, key, "get_result", {"session_id": sid}).json()["result"]["structuredContent"]["status"] == "working"
    )
    assert cancelled(key, 7, in_session) == 202
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        state = call(url, key, "get_result", {"session_id": sid}).json()["result"]["structuredContent"]
        if state["status"] != "working":
            break
        time.sleep(0.3)
    assert state["status"] == "completed"  # closed by the cancellation, its delegation told to stop
    bad = post(url, rpc("tools/list", meta=False), key, LEGACY, {"Mcp-Session-Id": "a b"})
    assert bad.status_code == 400 and bad.json()["error"]["code"] == -32600


def test_progress_is_streamed_as_sse_when_the_client_accepts_it_and_gave_a_token(url, key):
    body = rpc("tools/call", {"name": "ask", "arguments": {"message": "@worker two owls, slowly"}})
    body["params"]["_meta"] = {**META, "progressToken": "p-1"}
    response = post(url, body, key)
    assert response.headers["Content-Type"].startswith("text/event-stream"), response.headers
    events = [json.loads(line[5:]) for line in response.text.splitlines() if line.startswith("data:")]
    progress, last = events[:-1], events[-1]
    assert progress and all(e["method"] == "notifications/progress" for e in progress)
    assert [e["params"]["progress"] for e in progress] == list(range(1, len(progress) + 1))  # increasing
    assert all(e["params"]["progressToken"] == "p-1" for e in progress)
    assert last["id"] == 1 and last["result"]["resultType"] == "complete"  # the response ends the stream
    # Without a token (or without SSE in Accept), the same call is answered as JSON.
    plain = call(url, key, "ask", {"message": "hello"})
    assert plain.headers["Content-Type"].startswith("application/json")


def test_closing_the_sse_stream_cancels_the_call_in_2026_07_28_and_not_in_2025_11_25(url, key):
    def stream_then_close(version):
        body = rpc("tools/call", {"name": "ask", "arguments": {"message": "@worker a long one"}})
        if version == MODERN:
            body["params"]["_meta"] = {**META, "progressToken": "p"}
        else:
            body["params"]["_meta"] = {"progressToken": "p"}
        with post(url, body, key, version=version, stream=True) as response:
            for line in response.iter_lines():
                if line.startswith(b"data:"):
                    first = json.loads(line[5:])
                    break
        return first["params"]["message"].rsplit("session ", 1)[1].rstrip(")")

    def settled(sid):
        deadline = time.monotonic() + 30
        while True:
            state = call(url, key, "get_result", {"session_id": sid}).json()["result"]["structuredContent"]
            if state["status"] != "working" or time.monotonic() > deadline:
                return state
            time.sleep(0.3)

    closed = settled(stream_then_close(MODERN))
    assert closed["status"] == "completed" and "canceled" in closed["answer"], closed  # the closing line
    kept = settled(stream_then_close(LEGACY))
    assert kept["status"] == "completed" and "worker" in kept["answer"], kept  # it went on: the answer is kept


# --- tasks: 2026-07-28's extension and 2025-11-25's experimental tasks ------------------------------------


def task_rpc(url, token, method, params, meta=META_TASKS, name=None):
    """A 2026-07-28 tasks-surface request (Mcp-Name: the taskId, or the tool's name for tools/call)."""
    body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": {**params, "_meta": meta}}
    header = name if name is not None else params.get("taskId", params.get("name"))
    return post(url, body, token, headers={"Mcp-Name": header})


def until_settled(url, token, task_id, statuses=("completed", "cancelled", "failed")):
    deadline = time.monotonic() + 30
    while True:
        task = task_rpc(url, token, "tasks/get", {"taskId": task_id}).json()["result"]
        if task["status"] in statuses or time.monotonic() > deadline:
            return task
        time.sleep(0.3)


def test_a_tasks_client_gets_a_task_for_ask_and_its_result_inlined_later(url, key):
    created = task_rpc(url, key, "tools/call", {"name": "ask", "arguments": {"message": "@worker name two owls"}})
    result = created.json()["result"]
    assert result["resultType"] == "task" and result["status"] == "working", result
    assert "task" not in result and "result" not in result and "ttl" not in result and "pollInterval" not in result
    assert isinstance(result["ttlMs"], int) and result["ttlMs"] > 0 and result["pollIntervalMs"] == 1000
    assert result["createdAt"].endswith("Z") and result["lastUpdatedAt"].endswith("Z")
    task_id = result["taskId"]
    # Durable at once: the first poll resolves, and says working while the worker thinks.
    first = task_rpc(url, key, "tasks/get", {"taskId": task_id}).json()["result"]
    assert first["resultType"] == "complete" and first["taskId"] == task_id and first["status"] == "working"
    assert "result" not in first
    done = until_settled(url, key, task_id)
    assert done["status"] == "completed", done
    inlined = done["result"]
    assert inlined["isError"] is False and "worker" in inlined["content"][0]["text"]
    assert inlined["structuredContent"]["status"] == "completed"
    assert "io.modelcontextprotocol/related-task" not in inlined.get("_meta", {})


def test_a_skill_called_as_a_task_completes_with_its_structured_answer(url, key):
    created = task_rpc(url, key, "tools/call", {"name": "count_words", "arguments": {"text": "one two three"}})
    task_id = created.json()["result"]["taskId"]
    done = until_settled(url, key, task_id)
    assert done["status"] == "completed" and done["result"]["structuredContent"] == {"words": 3}


def test_without_the_extension_calls_are_answered_in_the_request_and_the_task_methods_refused(url, key):
    plain = task_rpc(url, key, "tools/call", {"name": "count_words", "arguments": {"text": "a b"}}, meta=META)
    assert plain.json()["result"]["resultType"] == "complete" and "taskId" not in plain.json()["result"]
    # A 2025-11-25-style `task` hint does not make a task of a call in 2026-07-28 without the extension.
    hinted = task_rpc(url, key, "tools/call", {"name": "count_words", "arguments": {"text": "a"}, "task": {}}, META)
    assert hinted.json()["result"]["resultType"] == "complete"
    for method, params in (
        ("tasks/get", {"taskId": "x"}),
        ("tasks/update", {"taskId": "x", "inputResponses": {}}),
        ("tasks/cancel", {"taskId": "x"}),
    ):
        error = task_rpc(url, key, method, params, meta=META).json()["error"]
        assert error["code"] == -32021 and error["data"] == {"requiredCapabilities": {"extensions": {TASKS: {}}}}
    # get_result and cancel answer at once: never a task.
    quick = task_rpc(url, key, "tools/call", {"name": "get_result", "arguments": {"session_id": "nope"}})
    assert quick.json()["result"]["resultType"] == "complete"


def test_task_methods_check_their_header_their_params_and_whose_task_it_is(url, key, other_key):
    created = task_rpc(url, key, "tools/call", {"name": "ask", "arguments": {"message": "hello"}})
    task_id = created.json()["result"]["taskId"]
    mismatch = task_rpc(url, key, "tasks/get", {"taskId": task_id}, name="another")
    assert mismatch.status_code == 400 and mismatch.json()["error"]["code"] == -32020
    for bad in ("nope", task_id.rsplit(":", 2)[0] + ":99:ask", task_id.replace(":ask", ":get_result"), "x" * 400):
        error = task_rpc(url, key, "tasks/get", {"taskId": bad}).json()["error"]
        assert error["code"] == -32602 and "no task" in error["message"], bad
    # Another client's task does not exist for it, and its cancel changes nothing.
    assert task_rpc(url, other_key, "tasks/get", {"taskId": task_id}).json()["error"]["code"] == -32602
    assert task_rpc(url, other_key, "tasks/cancel", {"taskId": task_id}).json()["error"]["code"] == -32602
    wrong_type = task_rpc(url, key, "tasks/get", {"taskId": 7}, name="7").json()["error"]
    assert wrong_type["code"] == -32020  # a header is text: it cannot mirror a number
    legacy_type = post(url, rpc("tasks/get", {"taskId": 7}, meta=False), key, LEGACY).json()["error"]
    assert legacy_type["code"] == -32602 and "taskId" in legacy_type["message"]
    not_an_object = task_rpc(url, key, "tasks/update", {"taskId": task_id, "inputResponses": []}).json()["error"]
    assert not_an_object["code"] == -32602 and "inputResponses" in not_an_object["message"]
    for removed in ("tasks/result", "tasks/list"):  # removed by the extension: the result is on tasks/get
        response = task_rpc(url, key, removed, {"taskId": task_id})
        assert response.status_code == 404 and response.json()["error"]["code"] == -32601


def test_the_agents_question_is_an_input_request_answered_with_tasks_update(url, key):
    created = task_rpc(url, key, "tools/call", {"name": "ask", "arguments": {"message": "?ask which colour?"}})
    task_id = created.json()["result"]["taskId"]
    asked = until_settled(url, key, task_id, ("input_required", "completed"))
    assert asked["status"] == "input_required" and asked["statusMessage"] == "which colour?", asked
    ((request_key, request),) = asked["inputRequests"].items()
    assert request["method"] == "elicitation/create" and request["params"]["message"] == "which colour?"
    assert request["params"]["requestedSchema"]["required"] == ["answer"]
    # A key never issued is ignored (acked, nothing changes); a malformed answer is -32602, nothing changes.
    ack = task_rpc(url, key, "tasks/update", {"taskId": task_id, "inputResponses": {"other": {"action": "accept"}}})
    assert ack.json()["result"] == {"resultType": "complete", "_meta": ack.json()["result"]["_meta"]}
    malformed = {request_key: {"action": "accept", "content": {"answer": 3}}}
    assert (
        task_rpc(url, key, "tasks/update", {"taskId": task_id, "inputResponses": malformed}).json()["error"]["code"]
        == -32602
    )
    assert task_rpc(url, key, "tasks/get", {"taskId": task_id}).json()["result"]["status"] == "input_required"
    answer = {request_key: {"action": "accept", "content": {"answer": "teal"}}}
    for _ in range(2):  # a repeat of the update is the same answer, not a second one
        acked = task_rpc(url, key, "tasks/update", {"taskId": task_id, "inputResponses": answer})
        assert acked.json()["result"]["resultType"] == "complete"
    done = until_settled(url, key, task_id)
    assert done["status"] == "completed" and "teal" in done["result"]["content"][0]["text"], done
    assert "inputRequests" not in done


def test_tasks_cancel_acks_and_the_task_settles_cancelled(url, key):
    created = task_rpc(url, key, "tools/call", {"name": "ask", "arguments": {"message": "@worker a long one"}})
    task_id = created.json()["result"]["taskId"]
    ack = task_rpc(url, key, "tasks/cancel", {"taskId": task_id}).json()["result"]
    assert ack["resultType"] == "complete" and not {"taskId", "status", "result", "error"} & set(ack)
    done = until_settled(url, key, task_id)
    assert done["status"] == "cancelled" and "result" not in done
    again = task_rpc(url, key, "tasks/cancel", {"taskId": task_id}).json()["result"]
    assert again["resultType"] == "complete"  # idempotent on a terminal task


def test_a_follow_up_is_a_task_of_its_own_and_the_first_keeps_its_answer(url, key):
    first = task_rpc(url, key, "tools/call", {"name": "ask", "arguments": {"message": "alpha beta"}}).json()["result"]
    done = until_settled(url, key, first["taskId"])
    sid = done["result"]["structuredContent"]["session_id"]
    arguments = {"message": "gamma delta epsilon", "session_id": sid}
    second = task_rpc(url, key, "tools/call", {"name": "ask", "arguments": arguments}).json()["result"]
    assert second["taskId"] != first["taskId"]
    later = until_settled(url, key, second["taskId"])
    assert "gamma" in later["result"]["content"][0]["text"]
    again = task_rpc(url, key, "tasks/get", {"taskId": first["taskId"]}).json()["result"]
    assert again["result"]["content"][0]["text"] == done["result"]["content"][0]["text"]


def test_legacy_tasks_are_created_polled_collected_and_cancelled(url, key):
    from mcp_types._v2025_11_25 import CallToolResult, CreateTaskResult, GetTaskResult, ListToolsResult

    listed = ListToolsResult.model_validate(post(url, rpc("tools/list", meta=False), key, LEGACY).json()["result"])
    support = {t.name: t.execution.task_support if t.execution else None for t in listed.tools}
    assert support == {
        "count_words": "optional",
        "summarise": "optional",
        "ask": "optional",
        "get_result": None,
        "cancel": None,
    }
    body = rpc("tools/call", {"name": "ask", "arguments": {"message": "@worker name an owl"}, "task": {"ttl": 60000}})
    created = CreateTaskResult.model_validate(
        post(url, {**body, "params": {**body["params"], "_meta": {}}}, key, LEGACY).json()["result"]
    )
    task_id = created.task.task_id
    assert created.task.status == "working" and created.task.poll_interval == 1000
    got = GetTaskResult.model_validate(
        post(url, rpc("tasks/get", {"taskId": task_id}, meta=False), key, LEGACY).json()["result"]
    )
    assert got.task_id == task_id and got.status in ("working", "completed")
    # tasks/result waits within the request's budget (3 s here; the worker thinks 5 s): past it, -32000 and
    # the client asks again.
    answers = []
    while not answers or "error" in answers[-1]:
        answers.append(post(url, rpc("tasks/result", {"taskId": task_id}, meta=False), key, LEGACY).json())
        assert len(answers) < 10, answers
    assert answers[0]["error"]["code"] == -32000 and answers[0]["error"]["data"]["status"] == "working"
    collected = answers[-1]["result"]
    assert collected["_meta"]["io.modelcontextprotocol/related-task"] == {"taskId": task_id}
    assert "worker" in CallToolResult.model_validate(collected).content[0].text
    finished = post(url, rpc("tasks/cancel", {"taskId": task_id}, meta=False), key, LEGACY).json()["error"]
    assert finished["code"] == -32602 and "finished" in finished["message"]
    # A long one cancelled: the answer is the cancelled task, and tasks/result gives the cancelled call.
    long = rpc("tools/call", {"name": "ask", "arguments": {"message": "@worker a long one"}, "task": {}}, meta=False)
    long_id = post(url, long, key, LEGACY).json()["result"]["task"]["taskId"]
    cancelled = post(url, rpc("tasks/cancel", {"taskId": long_id}, meta=False), key, LEGACY).json()["result"]
    assert GetTaskResult.model_validate(cancelled).status == "cancelled"
    after = post(url, rpc("tasks/result", {"taskId": long_id}, meta=False), key, LEGACY).json()["result"]
    assert after["isError"] is True and after["structuredContent"]["status"] == "canceled"
    # A task asked of a tool that answers at once is -32601, as that era asks.
    quick = rpc("tools/call", {"name": "get_result", "arguments": {"session_id": "x"}, "task": {}}, meta=False)
    assert post(url, quick, key, LEGACY).json()["error"]["code"] == -32601


# --- hostile bodies: 4xx, never 5xx ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "raw,status",
    [
        ("[" * 5000 + "]" * 5000, 400),  # deep
        ('{"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"x": "' + "a" * 1_100_000 + '"}}', 400),
        (
            '{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "ask", "arguments": {"message": "\\ud800"}}}',
            200,
        ),
        ("not json", 400),
        ("[]", 400),
        ('{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": []}', 200),
        ('{"jsonrpc": "2.0", "id": true, "method": "tools/list"}', 400),
    ],
)
def test_hostile_bodies_are_refused_never_5xx(url, key, raw, status):
    response = post(url, None, key, headers={"MCP-Protocol-Version": LEGACY}, raw=raw)
    assert response.status_code < 500 and response.status_code in (status, 413), response.text[:300]
    body = response.json()
    assert "error" in body or body.get("result", {}).get("isError") is not False
