"""Tools of MCP servers: the servers an agent names (`mcp_servers`), their allowed tools offered to its model as
`<server>__<tool>`, each call bounded, size-checked, audited and recorded like any other tool result.

Discovery follows flightdeck.domain.skills.peers: each server's tools are listed on first use and again after
LISTING_TTL_S (per process: once per warm container and TTL, never per think); a server that cannot be listed is
reported with its URL and why, its tools left out until it answers, and the turn goes on without them.

A call whose timeout is at most MCP_INLINE_MAX_MS runs inside the think. A longer one is taken like a delegation:
the turn waits on its id with its own deadline (the tool's timeout plus DEFERRED_SLACK_MS), and the call is handed to
the dispatch queue, whose worker makes it within the tool's timeout and records the result; a result that never
comes becomes the timer's timeout result. The server is reached only at its configured URL, checked against the
allowlist on every call; nothing a server answers is ever used as a URL, and redirects are not followed.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any

from flightdeck import tracing
from flightdeck.domain.agent import AgentDefinition, McpServer
from flightdeck.domain.aggregation import record_and_advance
from flightdeck.domain.mcp_ports import McpExchange
from flightdeck.domain.ports import Deps
from flightdeck.domain.records import ResultSource, ToolResult, error_result
from flightdeck.domain.time_budget import TimeBudget
from flightdeck.observability import audit, count, logger, payload_sha256, timeline

SEPARATOR = "__"
LISTING_TTL_S = 300.0
# A server that could not be listed is tried again this much later (not on every think).
LISTING_RETRY_S = 30.0
# A call allowed this long or less runs inside the think; a longer one goes to the dispatch worker.
MCP_INLINE_MAX_MS = 10_000
# A deferred call's deadline in the turn: its timeout plus the queue hop, so the worker's own timeout comes first.
DEFERRED_SLACK_MS = 5_000
# Converse (Bedrock) tool names: ^[a-zA-Z0-9_-]{1,64}$.
MAX_TOOL_NAME = 64
MAX_SCHEMA_BYTES = 16_000
DEFERRED_KIND = "mcp_call"
# A deferred call's claim (DispatchPort): final at once, unlike a delegation's "sending", so no retry calls again.
CALL_CLAIMED = "calling"


@dataclass(frozen=True)
class McpToolInfo:
    server: str
    name: str
    description: str
    input_schema: dict[str, Any]

    @property
    def tool_name(self) -> str:
        return f"{self.server}{SEPARATOR}{self.name}"


@dataclass(frozen=True)
class Listing:
    url: str
    tools: tuple[McpToolInfo, ...] = ()
    problem: str = ""
    version: str = ""
    # Tools its configuration names (`tools`) that the server did not list.
    missing: tuple[str, ...] = ()


_listings: dict[str, tuple[float, Listing]] = {}


def clear_cache() -> None:
    _listings.clear()


def split_tool_name(agent: AgentDefinition, tool_name: str) -> tuple[McpServer, str] | None:
    """The server and tool a tool name calls, when it names a configured server and one of its allowed tools."""
    server_name, sep, tool = tool_name.partition(SEPARATOR)
    server = agent.mcp_server(server_name) if sep and tool else None
    return (server, tool) if server is not None and server.allows(tool) else None


def server_url(deps: Deps, server: McpServer) -> str | None:
    """The server's URL in the form checked against the allowlist (the one sent), or None: not allowed."""
    return deps.settings.allowed_host_mapping.check_url(server.url)


def _token(deps: Deps, server: McpServer) -> str | None:
    if not server.credential:
        return None
    return deps.mcp_credential(server.credential) or None


def read_listing(server: McpServer, url: str, exchange: McpExchange) -> Listing:
    """The allowed tools of a tools/list answer, each with a usable name and input schema."""
    if exchange.outcome != "ok" or exchange.result is None:
        return Listing(url, problem=_why(exchange))
    raw = exchange.result.get("tools")
    if not isinstance(raw, list):
        return Listing(url, problem="not a tools/list result (no tools list)")
    tools = []
    offered = {entry["name"] for entry in raw if isinstance(entry, dict) and isinstance(entry.get("name"), str)}
    missing = tuple(t.name for t in server.tools or () if t.name not in offered)
    for entry in raw:
        if not isinstance(entry, dict) or not isinstance(entry.get("name"), str) or not server.allows(entry["name"]):
            continue
        schema = entry.get("inputSchema")
        if not isinstance(schema, dict) or schema.get("type") != "object":
            schema = {"type": "object"}
        if len(json.dumps(schema)) > MAX_SCHEMA_BYTES:
            logger.warning(
                "an MCP tool's input schema is too large; left out", extra={"url": url, "tool": entry["name"]}
            )
            continue
        info = McpToolInfo(server.name, entry["name"], str(entry.get("description") or "")[:1000], schema)
        if len(info.tool_name) <= MAX_TOOL_NAME and all(c.isalnum() or c in "_-" for c in info.tool_name):
            tools.append(info)
    return Listing(url, tuple(tools), version=exchange.version, missing=missing)


def listing(deps: Deps, server: McpServer, budget: TimeBudget | None = None) -> Listing:
    """The server's tools as last listed, listed again when older than its TTL. Never raises."""
    url = server_url(deps, server)
    if url is None:
        return Listing(server.url, problem="its URL is not under any ALLOWED_HOST_MAPPING base URL")
    now = time.monotonic()
    key = f"{server.name} {url}"
    cached = _listings.get(key)
    if cached is not None and cached[0] > now:
        return cached[1]
    if deps.mcp is None:
        return Listing(url, problem="no MCP client is wired")
    timeout_s = min(server.timeout_ms, MCP_INLINE_MAX_MS) / 1000
    if budget is not None:
        timeout_s = budget.call_timeout_s(timeout_s)
    try:
        found = read_listing(server, url, deps.mcp.list_tools(url, _token(deps, server), timeout_s))
    except Exception as exc:  # noqa: BLE001 - a server's listing never fails the turn (a credential not found...)
        found = Listing(url, problem=f"{type(exc).__name__}: {exc}"[:300])
    if found.problem:
        count("McpServersUnreachable")
        logger.warning(
            "an MCP server could not be listed: its tools are not offered until it is",
            extra={"server": server.name, "url": url, "detail": found.problem},
        )
    elif found.missing:
        logger.warning(
            "an MCP server does not offer tools its configuration names: they are not offered to the model",
            extra={"server": server.name, "url": url, "tools": list(found.missing)},
        )
    _listings[key] = (now + (LISTING_RETRY_S if found.problem else LISTING_TTL_S), found)
    return found


def tool_specs(deps: Deps, budget: TimeBudget | None = None) -> list[dict[str, Any]]:
    """A Converse tool for each allowed tool of each server that answers."""
    specs = []
    for server in deps.settings.agent.mcp_servers:
        for tool in listing(deps, server, budget).tools:
            specs.append(
                {
                    "toolSpec": {
                        "name": tool.tool_name,
                        "description": (tool.description or tool.name)
                        + f" (tool {tool.name!r} of the MCP server {server.name!r}).",
                        "inputSchema": {"json": tool.input_schema},
                    }
                }
            )
    return specs


def call_deadline_ms(agent: AgentDefinition, tool_name: str, now_ms: int) -> int | None:
    """An MCP call's own deadline in its turn (None: not an MCP tool)."""
    found = split_tool_name(agent, tool_name)
    if found is None:
        return None
    timeout = found[0].timeout_of(found[1])
    return now_ms + timeout + (DEFERRED_SLACK_MS if timeout > MCP_INLINE_MAX_MS else 0)


def is_deferred(agent: AgentDefinition, tool_name: str) -> bool:
    found = split_tool_name(agent, tool_name)
    return found is not None and found[0].timeout_of(found[1]) > MCP_INLINE_MAX_MS


def deferred_message(
    session_id: str, turn: int, tool_use_id: str, tool_name: str, arguments: dict[str, Any], total: int, deadline: int
) -> dict[str, Any]:
    """The dispatch queue's message of a deferred call (flightdeck.handlers.dispatch_worker)."""
    return {
        "kind": DEFERRED_KIND,
        "session_id": session_id,
        "turn": turn,
        "tool_use_id": tool_use_id,
        "tool_name": tool_name,
        "arguments": arguments,
        "total_tools": total,
        "deadline_ms": deadline,
        # The tool call's span, for the dispatch worker's (tracing.sqs_process): one trace across the queue.
        **({"traceparent": tracing.traceparent()} if tracing.enabled() else {}),
    }


def is_deferred_message(body: dict[str, Any]) -> bool:
    return body.get("kind") == DEFERRED_KIND


def call(
    deps: Deps,
    tool_use_id: str,
    tool_name: str,
    arguments: dict[str, Any],
    budget: TimeBudget | None = None,
    ids: dict[str, Any] | None = None,
) -> ToolResult:
    """One call, within its tool's timeout (and the invocation's time): its result as the model reads it, or an
    error result it can read. Never raises; audited."""
    found = split_tool_name(deps.settings.agent, tool_name)
    if found is None:
        return error_result(tool_use_id, "unknown_tool", ResultSource.LOCAL, f"no tool named {tool_name!r}")
    server, tool = found
    ids = ids or {}
    url = server_url(deps, server)
    if url is None:
        return _refused(tool_use_id, server, tool, "not_allowed", f"{server.url} is not an allowed URL", ids)
    if deps.mcp is None:
        return _refused(tool_use_id, server, tool, "mcp_unavailable", "no MCP client is wired", ids)
    timeout_s = server.timeout_of(tool) / 1000
    if budget is not None:
        timeout_s = budget.call_timeout_s(timeout_s)
    if timeout_s <= 0:
        return _refused(tool_use_id, server, tool, "timeout", "no time left in this invocation for the call", ids)
    started = time.monotonic()
    try:
        exchange = deps.mcp.call_tool(url, _token(deps, server), tool, arguments, timeout_s)
    except Exception as exc:  # noqa: BLE001 - a credential that cannot be read, an adapter's bug: an error result
        exchange = McpExchange("unreachable", detail=f"{type(exc).__name__}: {exc}"[:300])
    duration_ms = int((time.monotonic() - started) * 1000)
    result = _result_of(deps, tool_use_id, server, tool, exchange)
    audit(
        "outbound",
        "mcp:tools/call",
        server.name,
        exchange.request_sha256 or payload_sha256(json.dumps(arguments, sort_keys=True)),
        "ok" if result.status == "success" else _reason(result),
        tool=tool,
        http_status=exchange.http_status or None,
        duration_ms=duration_ms,
        protocol_version=exchange.version or None,
        **ids,
    )
    count("McpToolCalls")
    if result.status != "success":
        count("McpToolErrors")
    timeline(
        "mcp_tool_result",
        f"{server.name}__{tool} answered in {duration_ms} ms"
        if result.status == "success"
        else f"{server.name}__{tool} failed: {_reason(result)}",
        **ids,
    )
    return result


def _refused(
    tool_use_id: str, server: McpServer, tool: str, reason: str, detail: str, ids: dict[str, Any]
) -> ToolResult:
    audit("outbound", "mcp:tools/call", server.name, "", reason, tool=tool, **ids)
    return error_result(tool_use_id, reason, ResultSource.LOCAL, detail)


def _reason(result: ToolResult) -> str:
    try:
        return str(json.loads(result.text).get("reason", "error"))
    except (ValueError, AttributeError):
        return "error"


_REASONS = {
    "unreachable": "mcp_unreachable",
    "timeout": "timeout",
    "protocol": "mcp_protocol_error",
    "rpc_error": "mcp_error",
    "too_large": "result_too_large",
}


def _why(exchange: McpExchange) -> str:
    if exchange.outcome == "http":
        return f"HTTP {exchange.http_status}" + (f": {exchange.detail}" if exchange.detail else "")
    return f"{exchange.outcome}: {exchange.detail}" if exchange.detail else exchange.outcome


def _result_of(deps: Deps, tool_use_id: str, server: McpServer, tool: str, exchange: McpExchange) -> ToolResult:
    where = f"{server.name}__{tool}"
    if exchange.outcome == "http":
        reason = "mcp_unauthorized" if exchange.http_status in (401, 403) else "mcp_http_error"
        return error_result(tool_use_id, reason, ResultSource.LOCAL, f"{where}: {_why(exchange)}"[:1000])
    if exchange.outcome != "ok" or exchange.result is None:
        reason = _REASONS.get(exchange.outcome, "mcp_error")
        return error_result(tool_use_id, reason, ResultSource.LOCAL, f"{where}: {_why(exchange)}"[:1000])
    text, is_error = render(exchange.result)
    if text is None:
        return error_result(tool_use_id, "mcp_protocol_error", ResultSource.LOCAL, f"{where}: not a tools/call result")
    size = len(text.encode("utf-8"))
    if size > deps.settings.max_result_bytes:
        # As a callback's: refused, never truncated (the model is told, and may ask for less).
        return error_result(
            tool_use_id,
            "result_too_large",
            ResultSource.LOCAL,
            f"{where}: the result is {size} bytes; at most {deps.settings.max_result_bytes} are taken",
        )
    if is_error:
        return error_result(tool_use_id, "tool_error", ResultSource.LOCAL, text[:4000])
    return ToolResult(tool_use_id, "success", text, ResultSource.LOCAL)


def render(result: dict[str, Any]) -> tuple[str | None, bool]:
    """(what the model reads of a CallToolResult, whether the tool reported an error); None: not one.

    structuredContent is given as JSON; else the text of its content blocks (a non-text block named by its type)."""
    is_error = result.get("isError") is True
    structured = result.get("structuredContent")
    if isinstance(structured, dict):
        return json.dumps(structured, ensure_ascii=False), is_error
    content = result.get("content")
    if not isinstance(content, list):
        return None, is_error
    parts = []
    for block in content:
        if not isinstance(block, dict):
            return None, is_error
        if block.get("type") == "text" and isinstance(block.get("text"), str):
            parts.append(block["text"])
        elif block.get("type") == "resource" and isinstance(block.get("resource"), dict):
            resource = block["resource"]
            parts.append(
                resource["text"] if isinstance(resource.get("text"), str) else f"[resource {resource.get('uri', '')}]"
            )
        else:
            parts.append(f"[{block.get('type', 'unknown')} content]")
    return "\n".join(parts), is_error


@dataclass
class DeferredCall:
    """A deferred call as the dispatch worker reads it."""

    session_id: str
    turn: int
    tool_use_id: str
    tool_name: str
    total_tools: int
    deadline_ms: int
    arguments: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def of(cls, body: dict[str, Any]) -> DeferredCall:
        return cls(
            session_id=str(body["session_id"]),
            turn=int(body["turn"]),
            tool_use_id=str(body["tool_use_id"]),
            tool_name=str(body["tool_name"]),
            total_tools=int(body["total_tools"]),
            deadline_ms=int(body["deadline_ms"]),
            arguments=dict(body["arguments"]) if isinstance(body.get("arguments"), dict) else {},
        )


def run_deferred(deps: Deps, msg: DeferredCall, budget: TimeBudget | None) -> str:
    """The dispatch worker's run of a deferred call: the call at most once, its result recorded like a callback's.

    A tool may not be idempotent, and MCP gives a call no idempotency key (its `idempotentHint` is a hint of an
    untrusted server), so the call is claimed in a final state before it is made: a redelivered message (the
    worker died or timed out after the claim, perhaps after the call) finds the claim and calls nothing; the
    timer's timeout result at the deadline stands in for an answer that was lost. The result itself is recorded
    on condition that the call has none yet (record_result), so a late second answer is dropped."""
    ids = {"session_id": msg.session_id, "turn": msg.turn, "tool_use_id": msg.tool_use_id}
    if deps.clock.now_ms() >= msg.deadline_ms:
        return "skipped"  # the timer's timeout result stands in for it
    agg = deps.turns.get_turn(msg.session_id, msg.turn)
    if agg is not None and agg.status == "complete":
        return "skipped"
    if any(r.tool_use_id == msg.tool_use_id for r in deps.turns.get_results(msg.session_id, msg.turn)):
        return "skipped"
    if not deps.dispatches.claim_dispatch(
        msg.session_id, msg.turn, msg.tool_use_id, deps.settings.session_retention_ms, status=CALL_CLAIMED
    ):
        count("McpCallsNotRepeated")
        timeline("mcp_call_not_repeated", f"{msg.tool_name}: already called once; not called again", **ids)
        return "skipped"
    result = call(deps, msg.tool_use_id, msg.tool_name, msg.arguments, budget, ids)
    record_and_advance(deps, msg.session_id, msg.turn, result, by="mcp", total=msg.total_tools)
    return "recorded"
