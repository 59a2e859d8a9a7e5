"""The spans a think emits, by the OpenTelemetry GenAI, A2A and MCP conventions (flightdeck.tracing), caught by
the SDK's in-memory exporter; and that without an OTLP endpoint nothing of OpenTelemetry is loaded."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from flightdeck import tracing
from flightdeck.observability import trace_id_of
from tests.fakes.model import answer, call, calls
from tests.fakes.outbound import PeerReply
from tests.fakes.world import AGENT, WORKER_URL, world

CALLER = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


@pytest.fixture
def spans():
    exporter = InMemorySpanExporter()
    tracing.install(SimpleSpanProcessor(exporter))
    yield exporter
    tracing.uninstall()


def _by_name(exporter: InMemorySpanExporter) -> dict[str, object]:
    return {s.name: s for s in exporter.get_finished_spans()}


def test_a_think_that_delegates_is_an_invoke_agent_span_with_its_chat_and_execute_tool_spans(spans):
    # Given a delegation from a caller's trace, and a model that delegates (its usage with cached tokens)
    w = world()
    w.peers.answer(f"{WORKER_URL}/api/chat", PeerReply(202, {"status": "accepted"}))
    usage = {"inputTokens": 10, "outputTokens": 4, "cacheReadInputTokens": 30, "cacheWriteInputTokens": 5}
    w.model.says(calls(call("ask_worker", "tu-1", task="count owls")).model_copy(update={"usage": usage}))
    sid = w.message("count the owls", traceparent=CALLER).session_id
    # When the think runs
    assert w.think(sid, 1) == "tool_use"
    # Then one trace, the caller's: invoke_agent its child, chat and execute_tool the think's children
    found = _by_name(spans)
    agent, chat, tool = found[f"invoke_agent {AGENT}"], found["chat local"], found["execute_tool ask_worker"]
    assert {s.context.trace_id for s in found.values()} == {int(trace_id_of(CALLER), 16)}
    assert agent.parent.span_id == int(CALLER.split("-")[2], 16) and agent.parent.is_remote
    assert chat.parent.span_id == tool.parent.span_id == agent.context.span_id
    assert agent.attributes["gen_ai.operation.name"] == "invoke_agent"
    assert agent.attributes["gen_ai.agent.name"] == AGENT
    assert agent.attributes["gen_ai.conversation.id"] == sid
    assert (chat.kind, chat.attributes["gen_ai.operation.name"]) == (SpanKind.CLIENT, "chat")
    assert chat.attributes["gen_ai.provider.name"] == "flightdeck.local"
    # input_tokens counts the cached ones (the convention's), Converse's inputTokens does not
    assert chat.attributes["gen_ai.usage.input_tokens"] == 45
    assert chat.attributes["gen_ai.usage.output_tokens"] == 4
    assert chat.attributes["gen_ai.usage.cache_read.input_tokens"] == 30
    assert chat.attributes["gen_ai.usage.cache_creation.input_tokens"] == 5
    assert chat.attributes["gen_ai.response.finish_reasons"] == ("tool_use",)
    assert tool.attributes["gen_ai.operation.name"] == "execute_tool"
    assert (tool.attributes["gen_ai.tool.name"], tool.attributes["gen_ai.tool.call.id"]) == ("ask_worker", "tu-1")
    # ...and the delegation's POST carries the tool call's span as its parent: the worker's spans are its children
    [post] = w.peers.posts
    assert post.headers["traceparent"] == f"00-{tool.context.trace_id:032x}-{tool.context.span_id:016x}-01"


def test_a_final_answer_is_delivered_as_the_think_s_child(spans):
    # Given a delegated session (its answer goes back to the caller), and a model that answers at once
    w = world()
    w.peers.answer("http://caller.local/api/tools/response", PeerReply(200, {"status": "accepted"}))
    w.model.says(answer("three owls"))
    sid = w.message("count the owls", traceparent=CALLER, reply_token="tok").session_id
    w.think(sid, 1)
    agent = _by_name(spans)[f"invoke_agent {AGENT}"]
    [post] = [p for p in w.peers.posts if p.url.endswith("/api/tools/response")]
    assert post.headers["traceparent"] == f"00-{agent.context.trace_id:032x}-{agent.context.span_id:016x}-01"


def test_a_think_without_a_trace_starts_one(spans):
    w = world()
    w.model.says(answer("hello"))
    sid = w.message("hi").session_id
    w.think(sid, 1)
    agent = _by_name(spans)[f"invoke_agent {AGENT}"]
    assert agent.parent is None and agent.context.trace_id


def test_a2a_and_mcp_names_and_context_follow_their_conventions(spans):
    with tracing.a2a("message/send", "client") as current:
        tracing.a2a_outcome(current, {"kind": "task", "id": "t-1", "contextId": "c-1", "status": {"state": "working"}})
        meta = tracing.with_meta({"name": "notes__search", "_meta": {"other": 1}})
    with tracing.mcp("tools/call", "server", "search", parent=tracing.meta_traceparent(meta)):
        pass
    with tracing.a2a("tasks/get", "client") as current:
        tracing.a2a_outcome(current, None, -32001)
    found = _by_name(spans)
    send, mcp_call, get = found["SendMessage"], found["tools/call search"], found["GetTask"]
    assert send.kind == SpanKind.CLIENT and send.attributes["a2a.method.name"] == "SendMessage"
    assert send.attributes["a2a.task.id"] == "t-1" and send.attributes["a2a.task.state"] == "TASK_STATE_WORKING"
    assert send.attributes["gen_ai.conversation.id"] == "c-1"
    assert meta["_meta"]["other"] == 1 and meta["_meta"]["traceparent"].startswith("00-")
    assert mcp_call.parent.span_id == send.context.span_id and mcp_call.kind == SpanKind.SERVER
    assert mcp_call.attributes["mcp.method.name"] == "tools/call"
    assert mcp_call.attributes["gen_ai.tool.name"] == "search"
    assert get.attributes["error.type"] == "-32001"
    assert tracing.a2a_state("input-required") == "TASK_STATE_INPUT_REQUIRED"


_PROBE = """
import sys
from flightdeck import tracing
from flightdeck.observability import lambda_entry
with tracing.span("x") as s:
    pass
lambda_entry(lambda e, c: None)({}, None)
print(tracing.enabled(), s is tracing.NO_SPAN, any(m.startswith("opentelemetry") for m in sys.modules))
"""


def test_without_an_endpoint_nothing_of_opentelemetry_is_loaded():
    env = {"PATH": "", "AGENT_NAME": "a", "POWERTOOLS_TRACE_DISABLED": "true"}
    out = subprocess.run([sys.executable, "-c", _PROBE], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "True", "False"]


def test_otel_sdk_disabled_wins_over_an_endpoint():
    env = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9", "OTEL_SDK_DISABLED": "true", "AGENT_NAME": "a"}
    out = subprocess.run([sys.executable, "-c", _PROBE], env=env, capture_output=True, text=True, check=True)
    assert json.loads(out.stdout.split()[0].lower()) is False


def test_spans_to_xray_are_signed_for_xray_in_its_region(monkeypatch):
    import http.server
    import threading

    from flightdeck.adapters.otlp_sigv4 import SigV4Session, xray_region

    assert xray_region("https://xray.eu-west-1.amazonaws.com/v1/traces") == "eu-west-1"
    assert xray_region("http://127.0.0.1:4318/v1/traces") is None
    seen: list[dict[str, str]] = []

    class Receiver(http.server.BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802 - http.server's name
            seen.append({k.lower(): v for k, v in self.headers.items()})
            self.rfile.read(int(self.headers["content-length"]))
            self.send_response(200)
            self.end_headers()

        def log_message(self, *args):
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Receiver)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "test-only-secret")
    try:
        session = SigV4Session("eu-west-1")
        session.headers["Content-Type"] = "application/x-protobuf"
        url = f"http://127.0.0.1:{server.server_address[1]}/v1/traces"
        assert session.post(url, data=b"\x0a\x00", timeout=10).status_code == 200
    finally:
        server.shutdown()
    [headers] = seen
    assert "Credential=AKIDEXAMPLE/" in headers["authorization"]
    assert "/eu-west-1/xray/aws4_request" in headers["authorization"]
    assert "content-type" in headers["authorization"].split("SignedHeaders=")[1]
