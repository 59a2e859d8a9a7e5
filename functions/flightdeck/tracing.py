"""OpenTelemetry spans in the GenAI, A2A and MCP conventions, exported over OTLP/HTTP when configured.

Off unless OTEL_EXPORTER_OTLP_TRACES_ENDPOINT or OTEL_EXPORTER_OTLP_ENDPOINT is set (and OTEL_SDK_DISABLED is not
true): then nothing of OpenTelemetry is imported, every helper here is a no-op, and a cold start pays nothing. On,
the SDK is imported at the first span, the standard OTEL_* variables configure it (sampler, service name,
resource, exporter headers), and lambda_entry flushes the spans before an invocation returns.

The trace context is the W3C traceparent we already carry (a delegation's POST and callback, A2A requests,
MCP's params._meta, the think, dispatch and delivery messages): a span here is the child of the traceparent
handed to it, or of the current span. What is emitted, and the convention versions: docs/TRACING.md.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager, ExitStack, contextmanager
from contextvars import ContextVar
from typing import Any, ParamSpec, TypeVar

P = ParamSpec("P")
R = TypeVar("R")

# The GenAI conventions' opt-in value for what we emit (open-telemetry/semantic-conventions-genai v0.1.0; A2A's
# a2a.md at its commit 6718089): docs/TRACING.md.
SEMCONV_OPT_IN = "gen_ai_latest_experimental"

# A2A v0.3 JSON-RPC methods (and v1's names, already logical) as the convention's a2a.method.name.
A2A_METHODS = {
    "message/send": "SendMessage",
    "message/stream": "SendStreamingMessage",
    "tasks/get": "GetTask",
    "tasks/cancel": "CancelTask",
    "tasks/resubscribe": "SubscribeToTask",
    "tasks/pushNotificationConfig/set": "CreateTaskPushNotificationConfig",
    "tasks/pushNotificationConfig/get": "GetTaskPushNotificationConfig",
    "tasks/pushNotificationConfig/list": "ListTaskPushNotificationConfigs",
    "tasks/pushNotificationConfig/delete": "DeleteTaskPushNotificationConfig",
    "agent/getAuthenticatedExtendedCard": "GetExtendedAgentCard",
}
# A2A v0.3 task states (lower-case words) as the convention's TASK_STATE_* values.
_A2A_STATES = {"input-required": "INPUT_REQUIRED", "auth-required": "AUTH_REQUIRED"}


def enabled() -> bool:
    return _tracer() is not None


def _configured() -> bool:
    if os.environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    if os.environ.get("OTEL_TRACES_EXPORTER", "otlp").strip().lower() == "none":
        return False
    return bool(os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT"))


_tracer_made: list[Any] = []  # [tracer or None] once the environment was read
_provider: Any = None


def _tracer() -> Any:
    """The tracer, made at the first span of a process configured to export (None when not)."""
    if not _tracer_made:
        if not _configured():
            _tracer_made.append(None)
            return None
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.trace.export import BatchSpanProcessor

        # Batched, and flushed at the end of each invocation (flush): one export request per invocation.
        install(BatchSpanProcessor(OTLPSpanExporter(session=_session())))
    return _tracer_made[0]


def _session() -> Any:
    """X-Ray's OTLP endpoint takes SigV4-signed requests only; any other collector, a plain session."""
    from flightdeck.adapters.otlp_sigv4 import SigV4Session, xray_region

    endpoint = os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or (
        os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT", "").rstrip("/") + "/v1/traces"
    )
    region = xray_region(endpoint)
    return SigV4Session(region) if region else None


def install(processor: Any) -> None:
    """Export through this span processor from now on (the OTLP one above; tests pass an in-memory one)."""
    global _provider
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider

    uninstall()
    # OTEL_SERVICE_NAME wins; without it, each agent is its own service (as its logs say).
    own = {} if os.environ.get("OTEL_SERVICE_NAME") else {"service.name": _service_name()}
    _provider = TracerProvider(resource=Resource.create(own))  # the sampler: OTEL_TRACES_SAMPLER(_ARG)
    _provider.add_span_processor(processor)
    _tracer_made.append(_provider.get_tracer("flightdeck"))


def uninstall() -> None:
    """Back to what the environment says at the next span (tests)."""
    global _provider
    if _provider is not None:
        _provider.shutdown()
    _provider = None
    _tracer_made.clear()


def _service_name() -> str:
    return os.environ.get("POWERTOOLS_SERVICE_NAME") or os.environ.get("AGENT_NAME") or "flightdeck"


def flush() -> None:
    """Export what this invocation recorded before it returns (Lambda freezes the process after)."""
    if _provider is not None:
        _provider.force_flush()


class _NoSpan:
    """What a span is when tracing is off: every call does nothing."""

    def set_attribute(self, key: str, value: Any) -> None:
        pass

    def set_attributes(self, attributes: Mapping[str, Any]) -> None:
        pass

    def is_recording(self) -> bool:
        return False


NO_SPAN = _NoSpan()


@contextmanager
def span(
    name: str,
    kind: str = "internal",
    parent: str = "",
    links: tuple[str, ...] = (),
    attributes: Mapping[str, Any] | None = None,
) -> Iterator[Any]:
    """A span named `name` (kind: internal | client | server | producer | consumer), current inside the block.

    parent: a W3C traceparent to be the child of (a remote caller, a message's); without it, the current span's.
    links: traceparents this span is linked to (a batch's messages). Attributes given None are left out; an
    exception leaving the block marks the span an error (error.type: its class) and goes on.
    """
    tracer = _tracer()
    if tracer is None:
        yield NO_SPAN
        return
    from opentelemetry import trace
    from opentelemetry.trace import SpanKind, Status, StatusCode

    context = _extract(parent) if parent and not _within(parent) else None
    span_links = [trace.Link(ctx) for ctx in (_span_context(p) for p in links) if ctx is not None]
    with tracer.start_as_current_span(
        name,
        context=context,
        kind=SpanKind[kind.upper()],
        attributes={k: v for k, v in (attributes or {}).items() if v is not None},
        links=span_links,
        record_exception=False,
        set_status_on_exception=False,
    ) as current:
        try:
            yield current
        except BaseException as exc:
            current.set_attribute("error.type", type(exc).__qualname__)
            current.set_status(Status(StatusCode.ERROR, str(exc)[:200]))
            raise


# The spans begun inside the current scope (begin), ended with it.
_scope: ContextVar[ExitStack | None] = ContextVar("flightdeck_tracing_scope", default=None)
# The tool span next_tool began last, ended by the next one or end_tool: [its context manager].
_tool: ContextVar[list[AbstractContextManager[Any]] | None] = ContextVar("flightdeck_tracing_tool", default=None)


@contextmanager
def scope() -> Iterator[None]:
    """A block the spans begun inside it (begin) end with: one whose parent is known only part way in."""
    with ExitStack() as stack:
        stack.callback(end_tool)  # a tool's span a failure left open
        token = _scope.set(stack)
        try:
            yield
        finally:
            _scope.reset(token)


def scoped(function: Callable[P, R]) -> Callable[P, R]:
    """The function's calls each a scope (begin)."""

    @functools.wraps(function)
    def within(*args: P.args, **kwargs: P.kwargs) -> R:
        with scope():
            return function(*args, **kwargs)

    return within


def begin(cm: AbstractContextManager[Any]) -> Any:
    """Enter a span (span(), invoke_agent()...) until the current scope ends; outside a scope, no span."""
    stack = _scope.get()
    if stack is None or _tracer() is None:
        return NO_SPAN
    return stack.enter_context(cm)


def next_tool(name: str, call_id: str, tool_type: str) -> Any:
    """Begin a tool call's span, current until the next one begins or end_tool (the calls of a reply, in a loop)."""
    end_tool()
    if _tracer() is None:
        return NO_SPAN
    cm = execute_tool(name, call_id, tool_type)
    _tool.set([cm])
    return cm.__enter__()


def end_tool() -> None:
    began = _tool.get()
    if began:
        _tool.set(None)
        began[0].__exit__(None, None, None)


def _within(traceparent: str) -> bool:
    """The current span is already this traceparent's child (the server or consumer span of the same hop): a span
    handed that traceparent nests under the current one instead of beside it."""
    from opentelemetry import trace

    parent = getattr(trace.get_current_span(), "parent", None)
    parts = traceparent.split("-")
    return (
        parent is not None
        and len(parts) == 4
        and f"{parent.trace_id:032x}" == parts[1]
        and f"{parent.span_id:016x}" == parts[2]
    )


@contextmanager
def entry(event: Any) -> Iterator[Any]:
    """A Lambda invocation: a scope (begin) and, when it is a request (API Gateway's event), a server span, the
    child of the request's traceparent. Other events (a think, an SQS batch) carry their trace in their messages."""
    if _tracer() is None:
        yield NO_SPAN
        return
    with scope():
        request = event if isinstance(event, dict) and "httpMethod" in event else {}
        headers = {str(k).lower(): str(v) for k, v in (request.get("headers") or {}).items()}
        method = str(request.get("httpMethod") or "")
        # A read (a session's poll, a card) starts no trace of its own: only one it is part of.
        if not method or (method in ("GET", "HEAD") and "traceparent" not in headers):
            yield NO_SPAN
            return
        route = str(request.get("resource") or request.get("path") or "")
        with span(
            f"{method} {route}",
            kind="server",
            parent=headers.get("traceparent", ""),
            attributes={"http.request.method": method, "http.route": route, "url.path": request.get("path")},
        ) as current:
            yield current


@contextmanager
def sqs_process(queue_arn: str, message_id: str, body: str) -> Iterator[Any]:
    """One SQS message's processing (the messaging conventions' `process` span, consumer): the child of the
    traceparent its body carries (the think, dispatch and delivery messages carry the trace they belong to)."""
    if _tracer() is None:
        yield NO_SPAN
        return
    import json

    try:
        carried = json.loads(body).get("traceparent") or ""
    except (ValueError, AttributeError):
        carried = ""
    if not isinstance(carried, str) or not carried:
        # Nothing to continue (a timer, a push): what it does takes the trace of the session it acts on.
        yield NO_SPAN
        return
    queue = queue_arn.rsplit(":", 1)[-1]
    with span(
        f"process {queue}",
        kind="consumer",
        parent=carried,
        attributes={
            "messaging.system": "aws_sqs",
            "messaging.operation.name": "process",
            "messaging.operation.type": "process",
            "messaging.destination.name": queue,
            "messaging.message.id": message_id,
        },
    ) as current:
        yield current


def _extract(traceparent: str, tracestate: str = "") -> Any:
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    carrier = {"traceparent": traceparent, **({"tracestate": tracestate} if tracestate else {})}
    return TraceContextTextMapPropagator().extract(carrier)


def _span_context(traceparent: str) -> Any:
    from opentelemetry import trace

    ctx = trace.get_current_span(_extract(traceparent)).get_span_context()
    return ctx if ctx.is_valid else None


def headers() -> dict[str, str]:
    """The current span's trace context as W3C headers (traceparent, tracestate when any): {} when off."""
    if _tracer() is None:
        return {}
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    carrier: dict[str, str] = {}
    TraceContextTextMapPropagator().inject(carrier)
    return carrier


def traceparent(fallback: str = "") -> str:
    """The current span's traceparent, for a hop that carries one (a message, a POST); `fallback` without one."""
    return headers().get("traceparent") or fallback


def error(current: Any, kind: str) -> None:
    """Mark a span failed with a low-cardinality error.type (an HTTP status, a JSON-RPC code, an outcome word)."""
    if current.is_recording():
        from opentelemetry.trace import Status, StatusCode

        current.set_attribute("error.type", kind)
        current.set_status(Status(StatusCode.ERROR))


# The GenAI agent spans (gen-ai-agent-spans.md, gen-ai-spans.md).


def provider_name(provider: str) -> str:
    """gen_ai.provider.name of an agent's model provider (flightdeck.domain.agent.ModelConfig)."""
    return "aws.bedrock" if provider == "bedrock" else "flightdeck.local"


def invoke_agent(agent: str, session_id: str, parent: str, provider: str, model: str) -> Any:
    """One think of an agent's turn: `invoke_agent {agent}`, the child of the turn's traceparent."""
    return span(
        f"invoke_agent {agent}",
        parent=parent,
        attributes={
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.agent.name": agent,
            "gen_ai.conversation.id": session_id,
            "gen_ai.provider.name": provider_name(provider),
            "gen_ai.request.model": model or None,
        },
    )


def chat(provider: str, model: str) -> Any:
    """One model call: `chat {model}`, a client span; record_usage puts its reply's tokens on it."""
    name = model or provider
    return span(
        f"chat {name}",
        kind="client",
        attributes={
            "gen_ai.operation.name": "chat",
            "gen_ai.provider.name": provider_name(provider),
            "gen_ai.request.model": name,
        },
    )


def record_usage(current: Any, usage: Mapping[str, Any], stop_reason: str = "", error_kind: str = "") -> None:
    """The reply's token counts (Converse's usage keys) as gen_ai.usage.*: input_tokens counts the cached ones too,
    as the convention says (Converse's inputTokens does not)."""
    if not current.is_recording():
        return
    read, write = int(usage.get("cacheReadInputTokens", 0) or 0), int(usage.get("cacheWriteInputTokens", 0) or 0)
    values = {
        "gen_ai.usage.input_tokens": int(usage["inputTokens"]) + read + write if "inputTokens" in usage else None,
        "gen_ai.usage.output_tokens": usage.get("outputTokens"),
        "gen_ai.usage.cache_read.input_tokens": read if "cacheReadInputTokens" in usage else None,
        "gen_ai.usage.cache_creation.input_tokens": write if "cacheWriteInputTokens" in usage else None,
        "gen_ai.response.finish_reasons": (stop_reason,) if stop_reason else None,
    }
    current.set_attributes({k: v for k, v in values.items() if v is not None})
    if error_kind:
        error(current, error_kind)


def execute_tool(name: str, call_id: str, tool_type: str) -> Any:
    """One tool call: `execute_tool {name}`. tool_type: function (built-ins), extension (MCP tools),
    agent (a delegation, a skill of a peer): what the convention's gen_ai.tool.type says it is."""
    return span(
        f"execute_tool {name}",
        attributes={
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": name,
            "gen_ai.tool.call.id": call_id,
            "gen_ai.tool.type": tool_type,
        },
    )


# The A2A convention (a2a.md): span name a2a.method.name, client and server.


def a2a_method(method: str) -> str:
    return A2A_METHODS.get(method, method)


def a2a_state(state: str) -> str:
    """An A2A task state as the convention writes it: TASK_STATE_COMPLETED..."""
    if not state or state.startswith("TASK_STATE_"):
        return state
    return "TASK_STATE_" + _A2A_STATES.get(state, state.upper().replace("-", "_"))


def a2a(
    method: str,
    kind: str,
    parent: str = "",
    task_id: str = "",
    context_id: str = "",
    more: Mapping[str, Any] | None = None,
) -> Any:
    """An A2A request: kind client (we call a peer) or server (a peer calls us; parent: its traceparent)."""
    name = a2a_method(method)
    return span(
        name,
        kind=kind,
        parent=parent,
        attributes={
            "a2a.method.name": name,
            "a2a.task.id": task_id or None,
            "gen_ai.conversation.id": context_id or None,
            **(more or {}),
        },
    )


def a2a_client(method: str, url: str, parent: str, params: Mapping[str, Any], version: str) -> Any:
    """An A2A request we send to `url` (the A2A convention's client span)."""
    from urllib.parse import urlsplit

    host = urlsplit(url)
    return a2a(
        method,
        "client",
        parent=parent,
        task_id=str(params.get("id") or params.get("taskId") or ""),
        more={"server.address": host.hostname, "server.port": host.port, "a2a.protocol.version": version},
    )


def a2a_answer(current: Any, status: int, result: Any, problem: str) -> None:
    """What a2a_client's request got: (HTTP status, JSON-RPC result or error, problem) as the A2A client has it."""
    failure = (result.get("code") if isinstance(result, dict) else None) or status or "unreachable"
    a2a_outcome(current, result, failure if problem else None)


def a2a_outcome(current: Any, result: Any, problem: Any = None) -> None:
    """What an A2A response said: its task (id, state, context), or its error (a JSON-RPC code, an HTTP status)."""
    if not current.is_recording():
        return
    if problem is not None:
        error(current, str(problem))
        return
    task = result.get("task", result) if isinstance(result, dict) else None
    if not isinstance(task, dict):
        return
    is_task = task.get("kind") == "task" or "status" in task
    status = task["status"] if isinstance(task.get("status"), dict) else {}
    values = {
        "a2a.task.id": task.get("id") if is_task else task.get("taskId"),
        "a2a.task.state": a2a_state(str(status.get("state") or "")),
        "gen_ai.conversation.id": task.get("contextId"),
    }
    current.set_attributes({k: v for k, v in values.items() if isinstance(v, str) and v})


# The MCP convention (mcp.md): span name `{mcp.method.name} {tool}`, trace context in params._meta.


def mcp(method: str, kind: str, tool: str = "", parent: str = "", more: Mapping[str, Any] | None = None) -> Any:
    return span(
        f"{method} {tool}" if tool else method,
        kind=kind,
        parent=parent,
        attributes={
            "mcp.method.name": method,
            "gen_ai.tool.name": tool or None,
            "gen_ai.operation.name": "execute_tool" if method == "tools/call" else None,
            **(more or {}),
        },
    )


def mcp_outcome(current: Any, outcome: str, result: Any = None) -> None:
    """An MCP exchange's end: an error.type unless it answered (a JSON-RPC error's code, else the outcome word)."""
    if outcome == "rpc_error" and isinstance(result, dict):
        error(current, str(result.get("code")))
    elif outcome != "ok":
        error(current, outcome)
    elif isinstance(result, dict) and result.get("isError") is True:
        error(current, "tool_error")


def with_meta(params: dict[str, Any]) -> dict[str, Any]:
    """MCP request params with the current span's trace context in params._meta (traceparent, tracestate)."""
    context = headers()
    if not context:
        return params
    return {**params, "_meta": {**(params.get("_meta") or {}), **context}}


def meta_traceparent(params: Mapping[str, Any] | None) -> str:
    """The traceparent an MCP request carries in params._meta, '' without one."""
    meta = (params or {}).get("_meta")
    value = meta.get("traceparent") if isinstance(meta, Mapping) else None
    return value if isinstance(value, str) else ""
