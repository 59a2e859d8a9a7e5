"""POST /mcp: the MCP Streamable HTTP endpoint, both protocol eras on one URL (docs/MCP.md).

One HTTP request in, one answer out: a JSON-RPC response (application/json), an SSE stream of
progress notifications ending with the response (a tools/call whose client accepts
text/event-stream and gave a progressToken), or 202 for a notification. Checked in this order,
nothing changing until every check passed:

1. the Origin (and, on loopback, the Host): 403 for another site's page (DNS rebinding);
2. the body: JSON within strict_json's bounds (-32700), one request or notification (-32600);
3. the version: `initialize` negotiates (2025-11-25); otherwise MCP-Protocol-Version names a version
   served (400, -32022 with the supported ones) and, for 2026-07-28, agrees with `_meta` and
   Mcp-Method / Mcp-Name agree with the body (400, -32020);
4. the method (2026-07-28: 404, -32601; 2025-11-25: -32601) and its params (-32602).

The protocol lives here and in flightdeck.api.mcp.wire; the tools in flightdeck.api.mcp.tools. It
imports the engine (flightdeck.domain), never the A2A channel (tests/unit/test_import_graph.py).
"""

from __future__ import annotations

import base64
import binascii
import json
import re
import uuid
from collections.abc import Callable, Iterator
from typing import Any
from urllib.parse import urlsplit

from botocore.exceptions import BotoCoreError, ClientError
from pydantic import BaseModel, ValidationError

from flightdeck import __version__, tracing
from flightdeck.api import strict_json
from flightdeck.api.auth import current_peer, note
from flightdeck.api.mcp import tasks, tools
from flightdeck.api.mcp.wire import (
    HEADER_METHOD,
    HEADER_MISMATCH,
    HEADER_NAME,
    HEADER_VERSION,
    INTERNAL_ERROR,
    INVALID_PARAMS,
    INVALID_REQUEST,
    LEGACY,
    LIST_TTL_MS,
    META_CLIENT_CAPABILITIES,
    META_SERVER_INFO,
    META_VERSION,
    METHOD_NOT_FOUND,
    MODERN,
    PARSE_ERROR,
    SUPPORTED_VERSIONS,
    UNSUPPORTED_VERSION,
    AnyParams,
    CallParams,
    InitializeParams,
    ListParams,
    McpError,
)
from flightdeck.api.sse import SSE_HEADERS, StreamReply, frame
from flightdeck.domain.ports import Deps
from flightdeck.domain.records import ItemTooLargeError
from flightdeck.observability import count, logger
from flightdeck.settings import get_settings
from flightdeck.wiring import deps

# What a tools/call waits for inside one request, at most, and what it leaves the function to answer.
ANSWER_MARGIN_MS = 3_000
_LOOPBACK = {"127.0.0.1", "localhost", "::1", "[::1]"}
_ALLOW = "POST"
# 2025-11-25: initialize mints an Mcp-Session-Id that nothing stores. It only scopes the client's request ids
# (unique within a session), so that notifications/cancelled can name the session a tools/call started.
HEADER_SESSION = "mcp-session-id"
_SESSION_ID = re.compile(r"[\x21-\x7e]{1,128}")


def _headers(event: dict[str, Any]) -> dict[str, str]:
    # A field value's leading and trailing whitespace is not part of it (RFC 9110).
    return {str(k).lower(): str(v).strip(" \t") for k, v in (event.get("headers") or {}).items() if v is not None}


def _body(payload: Any, status: int = 200, headers: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "statusCode": status,
        "headers": {"Content-Type": "application/json", **(headers or {})},
        "body": json.dumps(payload, ensure_ascii=False) if payload is not None else "",
        "isBase64Encoded": False,
    }


def _error(request_id: Any, exc: McpError) -> dict[str, Any]:
    error: dict[str, Any] = {"code": exc.code, "message": exc.message}
    if exc.data is not None:
        error["data"] = exc.data
    return _body({"jsonrpc": "2.0", "id": request_id, "error": error}, exc.http_status)


def refusal(status: int, code: str, message: str) -> dict[str, Any]:
    """A body refused before it is read (too large, not JSON-typed, not UTF-8): HTTP 4xx with a JSON-RPC error."""
    rpc = PARSE_ERROR if code == "malformed_json" else INVALID_REQUEST
    return _error(
        None, McpError(rpc, f"{'Parse error' if rpc == PARSE_ERROR else 'Invalid Request'}: {message}", None, status)
    )


def _origin_allowed(event: dict[str, Any], headers: dict[str, str]) -> bool:
    """No page of another site may drive the endpoint (Streamable HTTP: validate Origin; DNS rebinding).

    An Origin, when sent, must be the agent's own (PUBLIC_BASE_URL) or, for an agent on loopback, a
    loopback one; an agent on loopback also requires a loopback Host (a rebound name is refused)."""
    base = get_settings().public_base_url
    own = urlsplit(base) if base else None
    local = own is None or (own.hostname or "") in _LOOPBACK
    if local:
        host = urlsplit("//" + headers.get("host", "127.0.0.1")).hostname or ""
        if host not in _LOOPBACK:
            return False
    origin = headers.get("origin")
    if origin is None:
        return True
    parsed = urlsplit(origin)
    if own is not None and (parsed.scheme, parsed.netloc) == (own.scheme, own.netloc):
        return True
    return local and (parsed.hostname or "") in _LOOPBACK


def _decoded(value: str) -> str | None:
    """A header value, its Base64 sentinel (=?base64?...?=) decoded; None when malformed."""
    if value.startswith("=?base64?") and value.endswith("?="):
        try:
            return base64.b64decode(value[9:-2], validate=True).decode("utf-8")
        except (binascii.Error, UnicodeDecodeError):
            return None
    return value


def _server_info() -> dict[str, Any]:
    return {"name": f"flightdeck-{get_settings().agent_name}", "version": __version__}


def _capabilities(version: str) -> dict[str, Any]:
    # Only what is implemented: tools (a fixed list: no list_changed notifications), and each era's tasks
    # for tools/call (flightdeck.api.mcp.tasks; 2025-11-25 without tasks/list: a client's tasks are its sessions').
    if version == MODERN:
        return {"tools": {"listChanged": False}, "extensions": {tasks.EXTENSION: {}}}
    return {"tools": {"listChanged": False}, "tasks": {"cancel": {}, "requests": {"tools": {"call": {}}}}}


def _instructions(d: Deps) -> str:
    agent = d.settings.agent
    return (
        f"Agent {d.settings.agent_name}: {getattr(agent, 'description', '') or 'a Flightdeck agent'}. "
        f"Call a skill's tool for a structured answer, or '{tools.ASK}' to talk to the agent; "
        f"a call still 'working' is collected later with '{tools.GET_RESULT}'."
    )


class Request:
    """One checked JSON-RPC message: its id (None: a notification), method, params, version."""

    def __init__(self, request_id: Any, method: str, params: dict[str, Any], version: str, has_id: bool):
        self.id, self.method, self.params, self.version, self.has_id = request_id, method, params, version, has_id
        self.budget_ms = 0  # tools/call: how long it may wait for its answer in this request
        self.mcp_session = ""  # 2025-11-25: the Mcp-Session-Id sent (minted by initialize)

    @property
    def modern(self) -> bool:
        return self.version == MODERN


def _parse(raw: str) -> tuple[dict[str, Any], Any]:
    try:
        body = strict_json.loads(raw)
    except strict_json.JsonRefused as exc:
        raise McpError(PARSE_ERROR, f"Parse error: {exc.message}", None, 400) from None
    if isinstance(body, list):
        raise McpError(
            INVALID_REQUEST, "Invalid Request: batches are not supported; send one message per POST", None, 400
        )
    if not isinstance(body, dict):
        raise McpError(INVALID_REQUEST, "Invalid Request: a message is a JSON object", None, 400)
    raw_id = body.get("id")
    request_id = raw_id if isinstance(raw_id, (str, int)) and not isinstance(raw_id, bool) else None
    if isinstance(raw_id, str) and not strict_json.is_unicode(raw_id):
        request_id = None
    return body, request_id


def _check(body: dict[str, Any], request_id: Any, headers: dict[str, str]) -> Request:
    method = body.get("method")
    if body.get("jsonrpc") != "2.0" or not isinstance(method, str) or not strict_json.is_unicode(method):
        if "method" not in body and ("result" in body or "error" in body):
            raise McpError(INVALID_REQUEST, "Invalid Request: this server sends no requests to answer", None, 400)
        raise McpError(INVALID_REQUEST, 'Invalid Request: "jsonrpc": "2.0" and a string method are required', None, 400)
    has_id = "id" in body
    if has_id and request_id is None:
        raise McpError(INVALID_REQUEST, "Invalid Request: id must be a string or an integer", None, 400)
    params = body.get("params", {})
    if params is None:
        params = {}
    if not isinstance(params, dict):
        raise McpError(INVALID_PARAMS, "Invalid params: params must be an object", None, 400 if not has_id else 200)
    where = strict_json.lone_surrogate_at(params)
    if where is not None:
        raise McpError(INVALID_PARAMS, f"Invalid params: params.{strict_json.dotted(where)}: not valid Unicode text")
    raw_meta = params.get("_meta")
    meta: dict[str, Any] = raw_meta if isinstance(raw_meta, dict) else {}
    header = headers.get(HEADER_VERSION)
    if header is None:
        if method == "initialize" or not has_id:
            return Request(request_id, method, params, LEGACY, has_id)
        if meta.get(META_VERSION) == MODERN:
            raise McpError(HEADER_MISMATCH, "Header mismatch: the MCP-Protocol-Version header is required", None, 400)
        raise McpError(
            UNSUPPORTED_VERSION,
            "Unsupported protocol version: the MCP-Protocol-Version header is required "
            f"(supported: {', '.join(SUPPORTED_VERSIONS)})",
            {"supported": list(SUPPORTED_VERSIONS), "requested": None},
            400,
        )
    if header not in SUPPORTED_VERSIONS:
        raise McpError(
            UNSUPPORTED_VERSION,
            f"Unsupported protocol version {header[:64]!r} (supported: {', '.join(SUPPORTED_VERSIONS)})",
            {"supported": list(SUPPORTED_VERSIONS), "requested": header[:64]},
            400,
        )
    if header == MODERN and has_id:
        _check_modern(method, params, meta, headers)
    request = Request(request_id, method, params, header, has_id)
    if header == LEGACY and HEADER_SESSION in headers:
        if not _SESSION_ID.fullmatch(headers[HEADER_SESSION]):
            raise McpError(
                INVALID_REQUEST, "Bad Request: Mcp-Session-Id must be 1 to 128 visible ASCII characters", None, 400
            )
        request.mcp_session = headers[HEADER_SESSION]
    return request


def _check_modern(method: str, params: dict[str, Any], meta: dict[str, Any], headers: dict[str, str]) -> None:
    """2026-07-28: the request's _meta says its version and the client's capabilities (-32602, 400), and the
    headers mirror the body (-32020, 400)."""
    if not isinstance(params.get("_meta"), dict) or META_VERSION not in meta:
        raise McpError(INVALID_PARAMS, f"Invalid params: params._meta.{META_VERSION} is required", None, 400)
    if not isinstance(meta.get(META_CLIENT_CAPABILITIES), dict):
        raise McpError(
            INVALID_PARAMS, f"Invalid params: params._meta.{META_CLIENT_CAPABILITIES} must be an object", None, 400
        )
    body_version = meta.get(META_VERSION)
    if body_version != MODERN:
        raise McpError(
            HEADER_MISMATCH,
            f"Header mismatch: MCP-Protocol-Version {MODERN!r} and _meta {META_VERSION} {str(body_version)[:64]!r} differ",
            None,
            400,
        )
    method_header = headers.get(HEADER_METHOD)
    if method_header != method:
        what = "is missing" if method_header is None else f"{method_header[:64]!r} is not the body's {method[:64]!r}"
        raise McpError(HEADER_MISMATCH, f"Header mismatch: Mcp-Method {what}", None, 400)
    named = {"tools/call": "name", "tasks/get": "taskId", "tasks/update": "taskId", "tasks/cancel": "taskId"}
    if method in named:
        name_header = headers.get(HEADER_NAME)
        if name_header is None or _decoded(name_header) != params.get(named[method]):
            what = "is missing" if name_header is None else f"does not match params.{named[method]}"
            raise McpError(HEADER_MISMATCH, f"Header mismatch: Mcp-Name {what}", None, 400)


def _validated(model: type[BaseModel], params: dict[str, Any]) -> Any:
    try:
        return model.model_validate(params)
    except ValidationError as exc:
        first = exc.errors()[0] if exc.errors() else {"loc": (), "msg": "invalid"}
        where = ".".join(str(p) for p in first.get("loc", ())) or "params"
        raise McpError(INVALID_PARAMS, f"Invalid params: {where}: {first.get('msg', 'invalid')}") from None


def _complete(request: Request, result: dict[str, Any]) -> dict[str, Any]:
    """A result in the request's version: 2026-07-28's carry resultType and the server's identity."""
    if request.modern:
        result = {"resultType": "complete", **result}
        result.setdefault("_meta", {})[META_SERVER_INFO] = _server_info()
    return result


def _initialize(d: Deps, request: Request) -> dict[str, Any]:
    params = _validated(InitializeParams, request.params)
    # A version served is echoed; any other gets the one this era speaks, and the client decides.
    version = params.protocolVersion if params.protocolVersion in (LEGACY,) else LEGACY
    return {
        "protocolVersion": version,
        "capabilities": _capabilities(LEGACY),
        "serverInfo": _server_info(),
        "instructions": _instructions(d),
    }


def _discover(d: Deps, request: Request) -> dict[str, Any]:
    _validated(AnyParams, request.params)
    return {
        "supportedVersions": list(SUPPORTED_VERSIONS),
        "capabilities": _capabilities(MODERN),
        "instructions": _instructions(d),
        "ttlMs": LIST_TTL_MS,
        "cacheScope": "private",
    }


def _ping(d: Deps, request: Request) -> dict[str, Any]:
    return {}


def _tools_list(d: Deps, request: Request) -> dict[str, Any]:
    params = _validated(ListParams, request.params)
    if params.cursor:
        raise McpError(INVALID_PARAMS, "Invalid params: cursor: this list has one page")
    result: dict[str, Any] = {"tools": tools.list_tools(d, task_support=not request.modern)}
    if request.modern:
        result.update(ttlMs=LIST_TTL_MS, cacheScope="private")
    return result


def _negotiated(request: Request) -> None:
    # 2026-07-28: the tasks methods serve only a request that declares the extension (-32021 otherwise).
    if request.modern and not tasks.negotiated(request.params):
        raise tasks.missing_capability(request.method)


def _task_get(d: Deps, request: Request) -> dict[str, Any]:
    _negotiated(request)
    _, task = tasks.find(d, tasks.task_id_param(request.params), current_peer())
    return tasks.modern_task(d, task) if request.modern else tasks.legacy_task(d, task)


def _task_update(d: Deps, request: Request) -> dict[str, Any]:
    _negotiated(request)
    tasks.update(d, tasks.task_id_param(request.params), request.params.get("inputResponses"), current_peer())
    return {}


def _task_cancel(d: Deps, request: Request) -> dict[str, Any]:
    _negotiated(request)
    answer = tasks.cancel(d, tasks.task_id_param(request.params), current_peer(), request.modern)
    return answer or {}


def _task_result(d: Deps, request: Request) -> dict[str, Any]:
    return tasks.result(d, tasks.task_id_param(request.params), current_peer(), request.budget_ms)


# The methods each era serves (2026-07-28 removed ping and the handshake, added server/discover; its tasks
# extension has no tasks/result or tasks/list, and adds tasks/update).
_Method = Callable[[Deps, Request], dict[str, Any]]
METHODS: dict[str, dict[str, _Method]] = {
    MODERN: {
        "server/discover": _discover,
        "tools/list": _tools_list,
        "tasks/get": _task_get,
        "tasks/update": _task_update,
        "tasks/cancel": _task_cancel,
    },
    LEGACY: {
        "initialize": _initialize,
        "ping": _ping,
        "tools/list": _tools_list,
        "tasks/get": _task_get,
        "tasks/result": _task_result,
        "tasks/cancel": _task_cancel,
    },
}
CALL = "tools/call"


def _budget_ms(d: Deps, remaining_ms: int | None) -> int:
    budget = get_settings().mcp_wait_ms
    if remaining_ms is not None:
        budget = min(budget, max(0, remaining_ms - ANSWER_MARGIN_MS))
    return budget


def _progress_token(params: dict[str, Any]) -> Any:
    meta = params.get("_meta")
    token = meta.get("progressToken") if isinstance(meta, dict) else None
    return token if isinstance(token, (str, int)) and not isinstance(token, bool) else None


def _as_task(d: Deps, request: Request, name: str) -> bool:
    """Whether this call is taken as a task. 2026-07-28: the server decides, for a client that declared the
    extension on this request: a call that starts work is a task (a `task` param, 2025-11-25's, is ignored).
    2025-11-25: the client asks with a `task` param, for a tool whose taskSupport is optional (else -32601)."""
    if request.modern:
        return tasks.negotiated(request.params) and tools.starts_work(d, name)
    if "task" not in request.params:
        return False
    if not isinstance(request.params["task"], dict):
        raise McpError(INVALID_PARAMS, 'Invalid params: task: an object ({} or {"ttl": ms}) is required')
    if not tools.starts_work(d, name):
        raise McpError(METHOD_NOT_FOUND, f"Method not found: tool {name[:128]!r} is not called as a task")
    return True


def _call(d: Deps, request: Request) -> tuple[bool, Iterator[tools.Waiting | tools.TaskStarted | dict[str, Any]]]:
    params = _validated(CallParams, request.params)
    note(operation=f"mcp:tools/call:{params.name[:64]}")
    key = tools.request_key(request.mcp_session, request.id) if request.mcp_session else ""
    as_task = _as_task(d, request, params.name)
    steps = tools.call_tool(d, params.name, params.arguments or {}, current_peer(), request.budget_ms, key, as_task)
    return as_task, steps


def _run_call(
    d: Deps, request: Request, steps: Iterator[tools.Waiting | tools.TaskStarted | dict[str, Any]]
) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for step in steps:
        if isinstance(step, tools.TaskStarted):
            created = tasks.created(d, step, request.modern)
            if request.modern:
                created.setdefault("_meta", {})[META_SERVER_INFO] = _server_info()
            return created
        if isinstance(step, dict):
            result = step
    return _complete(request, result)


def _sse(
    request: Request,
    steps: Iterator[tools.Waiting | tools.TaskStarted | dict[str, Any]],
    token: Any,
    caller: str | None,
) -> Iterator[bytes]:
    """The call as SSE: a progress notification per wait step, then the response (which ends the stream).

    2026-07-28 makes closing this stream the request's cancellation (Streamable HTTP: "the server MUST treat
    a client disconnect as cancellation"): a stream closed before its response cancels the session the call
    started, as the cancel tool does. 2025-11-25 has notifications/cancelled for that: a disconnect there
    cancels nothing, and get_result finds the answer."""
    progress = 0
    session_id = ""
    answered = False
    try:
        for step in steps:
            if isinstance(step, tools.Waiting):
                progress += 1
                session_id = step.session_id
                yield frame(
                    {
                        "jsonrpc": "2.0",
                        "method": "notifications/progress",
                        "params": {
                            "progressToken": token,
                            "progress": progress,
                            "message": f"working ({step.elapsed_ms // 1000} s; session {step.session_id})",
                        },
                    }
                )
            elif isinstance(step, dict):
                answered = True
                yield frame({"jsonrpc": "2.0", "id": request.id, "result": _complete(request, step)})
    except GeneratorExit:
        if request.modern and session_id and not answered:
            _cancel_on_close(session_id, caller)
        raise
    except McpError as exc:
        yield frame({"jsonrpc": "2.0", "id": request.id, "error": {"code": exc.code, "message": exc.message}})
    except Exception:
        logger.exception("MCP call failed mid-stream")
        yield frame(
            {"jsonrpc": "2.0", "id": request.id, "error": {"code": INTERNAL_ERROR, "message": "Internal error"}}
        )


def _cancel_on_close(session_id: str, caller: str | None) -> None:
    try:
        if tools.cancel_stream_call(deps(), session_id, caller):
            count("McpCancellations")
    except Exception:  # noqa: BLE001 - a cancel that fails leaves the call running: its answer is kept
        logger.exception("the closed stream's call was not canceled", extra={"session_id": session_id})


def _notification(request: Request) -> dict[str, Any]:
    """202, nothing to answer. notifications/cancelled (2025-11-25, in an Mcp-Session-Id) cancels the session
    its tools/call started, found by derivation (no state); a malformed one, or one naming no such call, is
    ignored as the spec asks (docs/MCP.md, "Cancellation")."""
    request_id = request.params.get("requestId")
    if (
        request.method == "notifications/cancelled"
        and request.mcp_session
        and isinstance(request_id, (str, int))
        and not isinstance(request_id, bool)
        and len(str(request_id)) <= 256
    ):
        if tools.cancel_request(deps(), current_peer(), tools.request_key(request.mcp_session, request_id)):
            count("McpCancellations")
    return _body(None, 202)


def handle(event: dict[str, Any], context: Any) -> dict[str, Any] | StreamReply:
    """The answer to one request to /mcp."""
    method = str(event.get("httpMethod") or "")
    headers = _headers(event)
    if method != "POST":
        return _body(
            {
                "jsonrpc": "2.0",
                "id": None,
                "error": {"code": -32000, "message": f"Method not allowed: {method}; use POST"},
            },
            405,
            {"Allow": _ALLOW},
        )
    if not _origin_allowed(event, headers):
        count("McpOriginRefused")
        return _error(
            None, McpError(INVALID_REQUEST, "Forbidden: this Origin or Host may not call the endpoint", None, 403)
        )
    raw = event.get("body") or ""
    if event.get("isBase64Encoded"):
        raw = base64.b64decode(raw).decode("utf-8")  # not UTF-8 was refused before (resolver._not_json)
    request_id: Any = None
    notification = False
    try:
        body, request_id = _parse(raw)
        request = _check(body, request_id, headers)
        note(operation=f"mcp:{request.method[:64]}")
        tool = request.params.get("name") if request.method == CALL else None
        tracing.begin(tracing.mcp(request.method, "server", str(tool or ""), tracing.meta_traceparent(request.params)))
        if not request.has_id:
            notification = True
            return _notification(request)
        d = deps()
        getter = getattr(context, "get_remaining_time_in_millis", None)
        request.budget_ms = _budget_ms(d, int(getter()) if callable(getter) else None)
        if request.method == CALL:
            as_task, steps = _call(d, request)
            token = _progress_token(request.params)
            accepts_sse = "text/event-stream" in headers.get("accept", "")
            if token is not None and accepts_sse and not as_task and get_settings().streaming == "on":
                first = next(steps)  # refusals (-32602) come before anything is stored, as JSON
                stream = _sse(request, _chain(first, steps), token, current_peer())
                return StreamReply(stream, headers=dict(SSE_HEADERS))
            return _body({"jsonrpc": "2.0", "id": request.id, "result": _run_call(d, request, steps)})
        table = METHODS[request.version]
        implementation = table.get(request.method)
        if implementation is None:
            raise McpError(
                METHOD_NOT_FOUND,
                f"Method not found: {request.method[:64]}",
                None,
                404 if request.modern else 200,
            )
        result = _complete(request, implementation(d, request))
        minted = {"Mcp-Session-Id": uuid.uuid4().hex} if request.method == "initialize" else None
        return _body({"jsonrpc": "2.0", "id": request.id, "result": result}, 200, minted)
    except McpError as exc:
        return _error(request_id, exc)
    except ItemTooLargeError as exc:
        return _error(request_id, McpError(INVALID_PARAMS, f"Invalid params: too large to store ({exc})"))
    except Exception as exc:  # noqa: BLE001 - every answer of this door is JSON-RPC, never the REST shape
        return _error(request_id, _internal(exc, notification))


def _internal(exc: Exception, notification: bool) -> McpError:
    """-32603 for what nothing above maps, with the request's id (the log has the trace). A request's error is
    its response (HTTP 200, as every JSON-RPC error here); a notification not taken is HTTP 500 (Streamable
    HTTP: an error status, its body a JSON-RPC error without an id). DynamoDB or SQS failing is worth a retry."""
    status = 500 if notification else 200
    if isinstance(exc, (BotoCoreError, ClientError)):
        logger.exception("MCP request failed: AWS dependency failed")
        return McpError(
            INTERNAL_ERROR,
            "Internal error: a dependency is unavailable; retry later",
            {"retryAfterSeconds": 1},
            status,
        )
    logger.exception("MCP request failed")
    return McpError(
        INTERNAL_ERROR, "Internal error: the request could not be processed; it may be retried", None, status
    )


def _chain(first: Any, rest: Iterator[Any]) -> Iterator[Any]:
    yield first
    yield from rest
