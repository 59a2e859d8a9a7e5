"""One trace of a delegated task, as a trace store the project did not write sees it: Arize Phoenix's OTLP/HTTP
endpoint, read back through its REST API (GET /v1/projects/default/spans).

Two agents on loopback (flightdeck.local.stack) export their spans (OTEL_EXPORTER_OTLP_ENDPOINT): the orchestrator
delegates to the worker over our delegation API and over A2A, and calls an MCP server's tool (one call inline,
one deferred through the dispatch queue: the SQS hop). Phoenix is a separate install (docs/TRACING.md): the
tests start it (FLIGHTDECK_PHOENIX or `phoenix` on PATH; or use the one at FLIGHTDECK_PHOENIX_URL), and skip without it, except under CI=true (.ci/run
installs it beside the tests, and writes its install's exit status to the file FLIGHTDECK_PHOENIX_INSTALLED names:
waited for), where a missing Phoenix fails.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from flightdeck.local.stack import LocalStack

pytestmark = pytest.mark.slow

USER_TOKEN = "fdp_user_test-only-user-token-0123456789abcdef"
ORCHESTRATOR_TOKEN = "fdp_orchestrator_test-only-orchestrator-token-0123456789"
AS_USER = {"Authorization": f"Bearer {USER_TOKEN}"}
REPO = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _phoenix() -> str:
    installing = os.environ.get("FLIGHTDECK_PHOENIX_INSTALLED")  # .ci/run installs it beside the tests
    if installing:
        # Its exit status, written when the install ends (minutes on a busy machine).
        status = _wait("Phoenix's install to end", lambda: Path(installing).read_text().strip(), 1200)
        assert status == "0", f"Phoenix did not install (exit {status}): see .ci/run"
    found = os.environ.get("FLIGHTDECK_PHOENIX") or shutil.which("phoenix")
    if found:
        return found
    if os.environ.get("CI") == "true":
        pytest.fail("CI=true and no Phoenix (FLIGHTDECK_PHOENIX or `phoenix` on PATH): .ci/run installs it")
    pytest.skip("Arize Phoenix is not installed (docs/TRACING.md): FLIGHTDECK_PHOENIX=path/to/phoenix")


def _wait(what: str, check: Any, timeout_s: float = 120.0) -> Any:
    deadline = time.monotonic() + timeout_s
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"waited {timeout_s:.0f} s for {what}")
        time.sleep(0.2)


@pytest.fixture(scope="module")
def phoenix(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    running = os.environ.get("FLIGHTDECK_PHOENIX_URL")  # one already serving (its other traces are left alone)
    if running:
        yield running.rstrip("/")
        return
    binary = _phoenix()
    port, grpc = free_port(), free_port()
    work = tmp_path_factory.mktemp("phoenix")
    env = {
        **os.environ,
        "PHOENIX_HOST": "127.0.0.1",
        "PHOENIX_PORT": str(port),
        "PHOENIX_GRPC_PORT": str(grpc),
        "PHOENIX_WORKING_DIR": str(work),
    }
    env.pop("OTEL_EXPORTER_OTLP_ENDPOINT", None)
    log = (work / "phoenix.log").open("wb")
    proc = subprocess.Popen([binary, "serve"], env=env, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"

    def up() -> bool:
        if proc.poll() is not None:
            raise AssertionError(f"phoenix exited {proc.returncode}: {(work / 'phoenix.log').read_text()[-2000:]}")
        try:
            return requests.get(f"{url}/v1/projects", timeout=2).status_code == 200
        except requests.RequestException:
            return False

    try:
        _wait("Phoenix to answer", up, 600)  # its first start migrates its database: minutes on a busy machine
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        log.close()


def _config(base_port: int, notes_port: int) -> str:
    worker = f"http://127.0.0.1:{base_port + 1}"
    return f"""
[defaults]
TOOL_AGG_PUNCTUATE_INTERVAL_MS = 1000

[local.mcp_servers.notes]
script = "{REPO}/examples/mcp/notes_server.py"
port = {notes_port}
token_env = "NOTES_TOKEN"

[agents.orchestrator]
allow = ["worker"]
allowed_hosts = {{ worker_a2a = "{worker}", notes = "http://127.0.0.1:{notes_port}" }}
peer_tokens = {{ worker_a2a = "{ORCHESTRATOR_TOKEN}" }}
callback_secret = "test-only-orchestrator-secret-0123456789abcdef"
[agents.orchestrator.peers]
user = "{USER_TOKEN}"
[[agents.orchestrator.delegates]]
agent = "worker"
[[agents.orchestrator.delegates]]
agent = "worker_a2a"
protocol = "a2a"
card_url = "{worker}/.well-known/agent-card.json"
[[agents.orchestrator.mcp_servers]]
name = "notes"
url = "http://127.0.0.1:{notes_port}/mcp"
credential = "env:NOTES_TOKEN"
tools = ["search", {{ name = "get_note", timeout_ms = 20000 }}]

[agents.worker]
allow = ["orchestrator"]
callback_secret = "test-only-worker-secret-0123456789abcdef01234"
[agents.worker.peers]
orchestrator = "{ORCHESTRATOR_TOKEN}"
"""


@pytest.fixture(scope="module")
def stack(phoenix: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    base = free_port()
    path = tmp_path_factory.mktemp("traced") / "agents.toml"
    path.write_text(_config(base, free_port()))
    env = {"OTEL_EXPORTER_OTLP_ENDPOINT": phoenix, "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf"}
    with LocalStack(path, port=base, relay=None, extra_env=env) as local:
        yield local


def _flat(attributes: Any, prefix: str = "") -> dict[str, Any]:
    """Phoenix returns attributes nested by their dots ({"gen_ai": {"tool": {"name": ...}}}): flattened back."""
    if not isinstance(attributes, dict):
        return {prefix[:-1]: attributes}
    out: dict[str, Any] = {}
    for key, value in attributes.items():
        out.update(_flat(value, f"{prefix}{key}."))
    return out


def _spans(phoenix: str) -> list[dict[str, Any]]:
    out, cursor = [], None
    while True:
        params: dict[str, Any] = {"limit": 1000, **({"cursor": cursor} if cursor else {})}
        page = requests.get(f"{phoenix}/v1/projects/default/spans", params=params, timeout=10).json()
        for span in page["data"]:
            out.append({**span, "attributes": _flat(span.get("attributes") or {})})
        cursor = page.get("next_cursor")
        if not cursor:
            return out


def _chat(stack: LocalStack, content: str) -> str:
    resp = requests.post(
        f"{stack.urls['orchestrator']}/api/chat", json={"content": content}, headers=AS_USER, timeout=10
    )
    assert resp.status_code == 202, resp.text
    sid = resp.json()["session_id"]

    def idle() -> dict[str, Any] | None:
        url = f"{stack.urls['orchestrator']}/api/sessions/{sid}"
        session = requests.get(url, headers=AS_USER, timeout=10).json()
        return session if session["status"] == "idle" else None

    _wait("the task to end", idle, 60)
    return sid


def _trace_of(phoenix: str, sid: str, names: Counter[str]) -> list[dict[str, Any]]:
    """The spans of the session's trace, once those named have all arrived (at least as many of each)."""

    def arrived() -> list[dict[str, Any]] | None:
        spans = _spans(phoenix)
        roots = [s for s in spans if s["attributes"].get("gen_ai.conversation.id") == sid]
        if not roots:
            return None
        trace = [s for s in spans if s["context"]["trace_id"] == roots[0]["context"]["trace_id"]]
        return trace if not names - Counter(s["name"] for s in trace) else None

    return _wait(f"spans {sorted(names)}", arrived, 60)


def _ancestors(span: dict[str, Any], by_id: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    while span.get("parent_id") in by_id:
        span = by_id[span["parent_id"]]
        out.append(span)
    return out


def test_a_delegation_over_http_a2a_and_mcp_is_one_trace_across_both_agents(stack, phoenix):
    sid = _chat(stack, "@worker count the owls @worker_a2a name two rivers !notes__search owls")
    # Each agent's thinks: the orchestrator's two (delegating, then answering), one per task of the worker's
    expected = Counter(
        {
            "invoke_agent orchestrator": 2,
            "invoke_agent worker": 2,
            "chat local": 4,
            "execute_tool ask_worker": 1,
            "execute_tool ask_worker_a2a": 1,
            "execute_tool notes__search": 1,
            "SendMessage": 2,
            "tools/call search": 1,
            "POST /api/chat": 2,
            "POST /api/tools/response": 1,
        }
    )
    trace = _trace_of(phoenix, sid, expected)
    by_id = {s["context"]["span_id"]: s for s in trace}
    names = [s["name"] for s in trace]
    services = {s["attributes"].get("gen_ai.agent.name") for s in trace if s["name"].startswith("invoke_agent")}
    assert services == {"orchestrator", "worker"}
    assert names.count("invoke_agent orchestrator") == 2, names
    # The worker's thinks descend from the orchestrator's tool call that delegated to it
    delegated = {s["context"]["span_id"] for s in trace if s["name"] == "execute_tool ask_worker"}
    a2a_tool = {s["context"]["span_id"] for s in trace if s["name"] == "execute_tool ask_worker_a2a"}
    worker_thinks = [s for s in trace if s["name"] == "invoke_agent worker"]
    assert len(worker_thinks) == 2
    lineages = [{a["context"]["span_id"] for a in _ancestors(s, by_id)} for s in worker_thinks]
    assert any(lineage & delegated for lineage in lineages) and any(lineage & a2a_tool for lineage in lineages)
    # A2A, named by a2a.method.name: the orchestrator's client span, the execute_tool span's child, is an ancestor
    # of the worker's server span (Phoenix keeps no span kind: they are told apart by their place)
    sends = [s for s in trace if s["name"] == "SendMessage"]
    [client] = [s for s in sends if s["parent_id"] in a2a_tool]
    [server] = [s for s in sends if s is not client]
    assert client["context"]["span_id"] in {a["context"]["span_id"] for a in _ancestors(server, by_id)}
    for send in (client, server):
        assert send["attributes"]["a2a.method.name"] == "SendMessage" and send["attributes"]["a2a.task.id"]
        assert send["attributes"]["a2a.task.state"].startswith("TASK_STATE_")
    assert client["attributes"]["a2a.task.id"] == server["attributes"]["a2a.task.id"]
    assert client["attributes"]["server.address"] == "127.0.0.1"
    # MCP: the client span of the tool call, the execute_tool span's child
    [mcp_call] = [s for s in trace if s["name"] == "tools/call search"]
    assert mcp_call["attributes"]["mcp.method.name"] == "tools/call"
    assert by_id[mcp_call["parent_id"]]["name"] == "execute_tool notes__search"
    # The model calls: chat spans with the provider and token usage
    chats = [s for s in trace if s["name"] == "chat local"]
    assert len(chats) == 4
    for chat in chats:
        assert chat["attributes"]["gen_ai.operation.name"] == "chat"
        assert chat["attributes"]["gen_ai.provider.name"] == "flightdeck.local"
        assert chat["attributes"]["gen_ai.usage.input_tokens"] > 0
        assert chat["attributes"]["gen_ai.usage.output_tokens"] > 0
    tool = next(s for s in trace if s["name"] == "execute_tool ask_worker")
    assert tool["attributes"]["gen_ai.tool.call.id"] and tool["attributes"]["gen_ai.operation.name"] == "execute_tool"
    assert by_id[tool["parent_id"]]["name"] == "invoke_agent orchestrator"


def test_a_tool_call_deferred_through_the_dispatch_queue_stays_in_its_trace(stack, phoenix):
    # get_note's timeout is past what a think calls inline: the dispatch worker calls it, from SQS
    sid = _chat(stack, '!notes__get_note {"id": 1}')
    trace = _trace_of(phoenix, sid, Counter(["execute_tool notes__get_note", "tools/call get_note"]))
    by_id = {s["context"]["span_id"]: s for s in trace}
    [mcp_call] = [s for s in trace if s["name"] == "tools/call get_note"]
    lineage = _ancestors(mcp_call, by_id)
    process = lineage[0]
    assert process["name"] == "process orchestrator-dispatch"
    assert process["attributes"]["messaging.system"] == "aws_sqs"
    assert process["attributes"]["messaging.operation.type"] == "process"
    assert by_id[process["parent_id"]]["name"] == "execute_tool notes__get_note"
