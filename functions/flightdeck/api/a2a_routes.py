"""POST /a2a: A2A v0.3 over JSON-RPC 2.0 (A2A peers' push notifications to us: flightdeck.api.a2a_push_routes).

JSON-RPC answers always go out with HTTP 200 and a JSON-RPC response object,
errors included (never the REST error shape). The body is parsed here, not by
the resolver's validation, so malformed JSON is -32700, not a REST 400.
`message/stream` and `tasks/resubscribe` answer Server-Sent Events when STREAMING is on
(flightdeck.api.a2a_stream_routes, ahead of the resolver); with it off they answer -32004.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from aws_lambda_powertools.event_handler import Response, content_types
from aws_lambda_powertools.event_handler.api_gateway import Router
from pydantic import BaseModel, ValidationError

from flightdeck import tracing
from flightdeck.api import a2a_v1, strict_json
from flightdeck.api.a2a_version import V03, V10, version_asked, wire_version
from flightdeck.api.auth import current_peer, note
from flightdeck.api.payloads import NOT_UNICODE, ErrorResponse
from flightdeck.api.sse import event_schema
from flightdeck.domain.a2a import from_v03, push
from flightdeck.domain.a2a import tasks as a2a
from flightdeck.domain.a2a import wire_v1 as v1
from flightdeck.domain.a2a.protocol import (
    EXTENDED_CARD_NOT_CONFIGURED,
    INTERNAL_ERROR,
    INVALID_PARAMS,
    INVALID_REQUEST,
    METHOD_NOT_FOUND,
    PARSE_ERROR,
    UNSUPPORTED_OPERATION,
    A2AError,
)
from flightdeck.domain.a2a.reliable import IDEMPOTENCY_HEADER, with_header_key
from flightdeck.domain.a2a.wire import (
    DeleteTaskPushNotificationConfigParams,
    GetTaskPushNotificationConfigParams,
    JSONRPCRequest,
    ListTaskPushNotificationConfigParams,
    MessageSendParams,
    TaskIdParams,
    TaskPushNotificationConfig,
    TaskQueryParams,
)
from flightdeck.domain.ports import Deps
from flightdeck.domain.records import ItemTooLargeError
from flightdeck.observability import logger
from flightdeck.settings import get_settings
from flightdeck.wiring import deps

router = Router()  # type: ignore[no-untyped-call]  # Powertools' Router.__init__ has no annotations

NO_STREAMING = (
    "streaming is off on this deployment (STREAMING=off: its HTTP front does not stream responses); "
    "use message/send and tasks/get or push notifications"
)
DEFAULT_PUSH_CONFIG_ID = "default"
# The streaming methods: answered as Server-Sent Events by flightdeck.api.a2a_stream_routes.
STREAM_METHODS = frozenset({"message/stream", "tasks/resubscribe"}) | a2a_v1.STREAM_METHODS


def _not_streamed(deps: Deps, params: Any, remaining_ms: int | None, caller: str | None = None) -> Any:
    """A streaming method on the one-response path: only when streaming is off (the Lambda entry streams
    them otherwise, ahead of the resolver)."""
    if get_settings().streaming == "on":
        raise A2AError(
            UNSUPPORTED_OPERATION,
            "this path answers one JSON response; message/stream and "
            "tasks/resubscribe are served as Server-Sent Events by POST /a2a",
        )
    raise A2AError(UNSUPPORTED_OPERATION, NO_STREAMING)


def _no_extended_card(deps: Deps, params: Any, remaining_ms: int | None, caller: str | None = None) -> Any:
    raise A2AError(EXTENDED_CARD_NOT_CONFIGURED, "Authenticated Extended Card is not configured")


Core = Callable[[Deps, Any, "int | None", "str | None"], Any]


def _adapted(call: Core, to_core: Callable[[Any], Any]) -> Core:
    """A v0.3 method: its validated params converted to the core's request (flightdeck.domain.a2a.from_v03), then
    the core's implementation, whose answer is v0.3's JSON already."""

    def method(deps: Deps, params: Any, remaining_ms: int | None, caller: str | None = None) -> Any:
        return call(deps, to_core(params), remaining_ms, caller)

    return method


def _get_push_v03(
    deps: Deps, params: GetTaskPushNotificationConfigParams, remaining_ms: int | None, caller: str | None = None
) -> Any:
    """tasks/pushNotificationConfig/get; the id "default", when no config has it, names the task's default config
    (the one set without an id), as a2a-sdk 0.3 and the TCK 0.3.x name it."""
    request = from_v03.get_push_request(params)
    try:
        return push.get_push_config(deps, request, remaining_ms, caller)
    except A2AError:
        if request.id != DEFAULT_PUSH_CONFIG_ID:
            raise
        return push.get_push_config(deps, request.model_copy(update={"id": None}), remaining_ms, caller)


class _AnyParams(BaseModel):
    pass


# method -> (params model, implementation(deps, params, remaining_ms, caller)); the streaming methods' params
# reach the core through STREAM_TO_CORE (flightdeck.api.a2a_stream_routes).
METHODS: dict[str, tuple[type[BaseModel], Core]] = {
    "message/send": (MessageSendParams, _adapted(a2a.send_message, from_v03.send_request)),
    "message/stream": (MessageSendParams, _not_streamed),
    "tasks/get": (TaskQueryParams, _adapted(a2a.get_task, from_v03.get_task_request)),
    "tasks/cancel": (TaskIdParams, _adapted(a2a.cancel_task, from_v03.cancel_request)),
    "tasks/resubscribe": (TaskIdParams, _not_streamed),
    "tasks/pushNotificationConfig/set": (
        TaskPushNotificationConfig,
        _adapted(push.set_push_config, from_v03.create_push_request),
    ),
    "tasks/pushNotificationConfig/get": (GetTaskPushNotificationConfigParams, _get_push_v03),
    "tasks/pushNotificationConfig/list": (
        ListTaskPushNotificationConfigParams,
        _adapted(push.list_push_configs, from_v03.list_push_request),
    ),
    "tasks/pushNotificationConfig/delete": (
        DeleteTaskPushNotificationConfigParams,
        _adapted(push.delete_push_config, from_v03.delete_push_request),
    ),
    "agent/getAuthenticatedExtendedCard": (_AnyParams, _no_extended_card),
}
STREAM_TO_CORE: dict[str, Callable[[Any], Any]] = {
    "message/stream": from_v03.send_request,
    "tasks/resubscribe": from_v03.subscribe_request,
}


def _error(request_id: Any, code: int, message: str, data: Any = None, version: str = V03) -> dict[str, Any]:
    """A JSON-RPC error response; in v1.0's shape `data` is an array of typed objects, an ErrorInfo first."""
    error: dict[str, Any] = {"code": code, "message": message}
    if version == V10:
        error["data"] = v1.error_details(code, data)
    elif data is not None:
        error["data"] = data
    return {"jsonrpc": "2.0", "id": request_id, "error": error}


rpc_error = _error  # for the streaming routes (flightdeck.api.a2a_stream_routes)

MAX_ERROR_DETAILS = 20


def _first_problem(exc: ValidationError, prefix: str = "") -> tuple[str, list[dict[str, Any]]]:
    errors = exc.errors()
    details = [
        {"loc": list(e.get("loc", ())), "msg": e.get("msg", ""), "type": e.get("type", "")}
        for e in errors[:MAX_ERROR_DETAILS]
    ]
    first = details[0] if details else {"loc": [], "msg": "invalid"}
    where = ".".join(map(str, [prefix, *first["loc"]] if prefix else first["loc"])) or "params"
    more = f" (and {len(errors) - 1} more problems)" if len(errors) > 1 else ""
    return f"{where}: {first['msg']}{more}", details


def _valid_id(body: dict[str, Any]) -> Any:
    raw_id = body.get("id")
    return raw_id if isinstance(raw_id, (str, int)) and not isinstance(raw_id, bool) else None


@dataclass(frozen=True)
class RpcCall:
    """A JSON-RPC request that passed every check: its id, method and params (v0.3's params model, which its
    table's methods convert for the core; a v1.0 request converted to the core's already), and the protocol
    version it speaks."""

    id: Any
    method: str
    params: Any
    version: str = V03


def validate_rpc(raw: str, asked_version: str = "") -> RpcCall | dict[str, Any]:
    """The request, checked; or the JSON-RPC error response that refuses it.

    The checks run in this order, each answering with the spec's code: the body parses as JSON
    within strict_json's bounds (-32700); it is one Request object: "jsonrpc": "2.0", a string
    method, an id of a valid type, params absent or structured, no other members (-32600); the
    A2A-Version asked for (`asked_version`: header or query parameter) is one this endpoint serves
    (-32009); the method exists in v0.3's table or v1.0's (-32601); it is of the version asked for
    (-32009: a v0.3 name under A2A-Version 1.0, a v1.0 name under an explicit 0.3; a v1.0 name without
    the header is taken as v1.0: no name is shared); its params are an object of the method's shape,
    all text valid Unicode (-32602); only then whether it has an id (below). Errors are in the shape of
    the version asked for, else of the method's.
    """
    wire = wire_version(asked_version)
    shape = V10 if wire == V10 else V03
    try:
        body = strict_json.loads(raw)
    except strict_json.JsonRefused as exc:
        return _error(None, PARSE_ERROR, f"Parse error: {exc.message}", version=shape)
    if isinstance(body, list):
        return _error(None, INVALID_REQUEST, "Invalid Request: batch requests are not supported", version=shape)
    if not isinstance(body, dict):
        return _error(None, INVALID_REQUEST, "Invalid Request: a request is a JSON object", version=shape)
    request_id = _valid_id(body)
    try:
        request = JSONRPCRequest.model_validate(body)
    except ValidationError as exc:
        message, details = _first_problem(exc)
        return _error(request_id, INVALID_REQUEST, f"Invalid Request: {message}", details, version=shape)
    if not strict_json.is_unicode(request.method) or (
        isinstance(request.id, str) and not strict_json.is_unicode(request.id)
    ):
        return _error(None, INVALID_REQUEST, "Invalid Request: method and id must be valid Unicode text", version=shape)
    if wire is None:
        return _error(
            request_id,
            v1.VERSION_NOT_SUPPORTED,
            f"Version not supported: A2A-Version {asked_version.strip()!r}; this endpoint serves 0.3 and 1.0",
            {"requestedVersion": asked_version.strip(), "supportedVersions": "0.3, 1.0"},
            version=V10,
        )
    entry = METHODS.get(request.method)
    v1_entry = a2a_v1.METHODS.get(request.method)
    note(operation=f"a2a:{request.method}" if entry is not None or v1_entry is not None else "a2a:unknown")
    if v1_entry is not None:
        shape = V10
    if entry is None and v1_entry is None:
        return _error(request_id, METHOD_NOT_FOUND, f"Method not found: {request.method}", version=shape)
    explicit = bool(asked_version.strip())
    if entry is not None and wire == V10:
        return _error(
            request_id,
            v1.VERSION_NOT_SUPPORTED,
            f"Version not supported: {request.method} is an A2A 0.3 method, the request says A2A-Version "
            f"{asked_version.strip()} (send it without the header or with 0.3, or use its 1.0 name)",
            {"method": request.method, "requestedVersion": asked_version.strip(), "methodVersion": V03},
            version=V10,
        )
    if v1_entry is not None and explicit and wire == V03:
        return _error(
            request_id,
            v1.VERSION_NOT_SUPPORTED,
            f"Version not supported: {request.method} is an A2A 1.0 method, the request says A2A-Version "
            f"{asked_version.strip()} (send A2A-Version: 1.0)",
            {"method": request.method, "requestedVersion": asked_version.strip(), "methodVersion": V10},
            version=V10,
        )
    params_model = v1_entry.params if v1_entry is not None else METHODS[request.method][0]
    if request.params is not None and not isinstance(request.params, dict):
        # JSON-RPC allows by-position params (an array); every A2A method takes an object.
        return _error(
            request_id, INVALID_PARAMS, f"Invalid params: {request.method} takes params as an object", version=shape
        )
    where = strict_json.lone_surrogate_at(request.params or {})
    if where is not None:
        return _error(
            request_id,
            INVALID_PARAMS,
            f"Invalid params: params.{strict_json.dotted(where)}: {NOT_UNICODE}",
            {"field": f"params.{strict_json.dotted(where)}"},
            version=shape,
        )
    try:
        params = params_model.model_validate(request.params or {})
        if v1_entry is not None:
            params = v1_entry.to_core(params)
    except ValidationError as exc:
        message, details = _first_problem(exc, "params")
        return _error(request_id, INVALID_PARAMS, f"Invalid params: {message}", details, version=shape)
    if "id" not in body:
        # JSON-RPC 2.0 says a notification (no id) gets no response at all. Every A2A method is a
        # request that answers something, so one without an id is refused, and, as issue 14 asks,
        # only after its method and params were checked: a client that forgot the id learns of a
        # wrong method or params too. Over HTTP a response is sent in any case.
        return _error(
            None,
            INVALID_REQUEST,
            "Invalid Request: id is required (A2A methods are requests, not notifications)",
            version=shape,
        )
    return RpcCall(request.id, request.method, params, V10 if v1_entry is not None else V03)


def run_rpc(d: Deps, call: RpcCall, remaining_ms: int | None = None, caller: str | None = None) -> dict[str, Any]:
    """Run a checked request's method: its JSON-RPC response (A2A errors as error responses). A v1.0
    method runs the core's implementation on its converted params, and its answer is converted back.
    Its span: the A2A convention's server span."""
    with tracing.a2a(call.method, "server") as current:
        response = _run_rpc(d, call, remaining_ms, caller)
        tracing.a2a_outcome(current, response.get("result"), (response.get("error") or {}).get("code"))
    return response


def _run_rpc(d: Deps, call: RpcCall, remaining_ms: int | None, caller: str | None) -> dict[str, Any]:
    v1_method = a2a_v1.METHODS[call.method] if call.version == V10 else None
    method = v1_method.call if v1_method is not None else METHODS[call.method][1]
    try:
        if method is None:  # a v1.0 streaming method reached the one-response path
            method = _not_streamed
        result = method(d, call.params, remaining_ms, caller)
        if v1_method is not None:
            result = v1_method.to_wire(result)
    except A2AError as exc:
        return _error(call.id, exc.code, exc.message, exc.data, version=call.version)
    except ItemTooLargeError as exc:
        return _error(
            call.id,
            INVALID_PARAMS,
            f"Invalid params: the message is too large to store ({exc})",
            version=call.version,
        )
    except Exception:
        logger.exception("A2A method failed", extra={"method": call.method})
        return _error(
            call.id, INTERNAL_ERROR, "Internal error: the request could not be processed", version=call.version
        )
    return {"jsonrpc": "2.0", "id": call.id, "result": result}


_SENDS = frozenset({"message/send", "message/stream", "SendMessage", "SendStreamingMessage"})


def with_idempotency(call: RpcCall, headers: Mapping[str, Any] | None) -> RpcCall:
    """A send's Idempotency-Key header, carried in its params' metadata (flightdeck.domain.a2a.reliable)."""
    header = next(
        (v for k, v in (headers or {}).items() if k.lower() == IDEMPOTENCY_HEADER.lower() and isinstance(v, str)),
        None,
    )
    if header is None or call.method not in _SENDS:
        return call
    params = call.params.model_copy(update={"metadata": with_header_key(call.params.metadata, header)})
    return RpcCall(call.id, call.method, params, call.version)


def handle_rpc(
    d: Deps,
    raw: str,
    remaining_ms: int | None = None,
    caller: str | None = None,
    version: str = "",
    headers: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """One JSON-RPC request in, one JSON-RPC response out (as a dict): validate_rpc, then run_rpc.

    caller: the authenticated peer; tasks and contexts of other peers do not exist for it (-32001).
    version: the request's A2A-Version ("": none sent). headers: the request's (its Idempotency-Key).
    """
    call = validate_rpc(raw, version)
    return call if isinstance(call, dict) else run_rpc(d, with_idempotency(call, headers), remaining_ms, caller)


# JSON-RPC 2.0 response object: exactly one of result and error.
JSONRPC_RESPONSE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["jsonrpc", "id"],
    "properties": {
        "jsonrpc": {"const": "2.0"},
        "id": {"type": ["string", "integer", "null"]},
        "result": {"description": "The method's result (a Task, a TaskPushNotificationConfig, a list, or null)"},
        "error": {
            "type": "object",
            "required": ["code", "message"],
            "properties": {"code": {"type": "integer"}, "message": {"type": "string"}, "data": {}},
        },
    },
}


def refusal(status: int, code: str, message: str) -> dict[str, Any]:
    """A proxy response with a JSON-RPC error for an answer given before (or instead of) a method: a body over
    MAX_BODY_BYTES or not JSON-typed (-32600), not UTF-8 (-32700), as HTTP 200; and, keeping their HTTP
    status (and the resolver's Allow or Retry-After), what is not a request's fault or not a request at all:
    no route or method here (404, 405: -32600), a dependency down or a failure (503, 500: -32603)."""
    if code == "malformed_json":
        payload = _error(None, PARSE_ERROR, f"Parse error: {message}")
    elif code == "payload_too_large":
        payload = _error(None, INVALID_REQUEST, f"Invalid Request: payload too large ({message})")
    elif status >= 500:
        payload = _error(None, INTERNAL_ERROR, f"Internal error: {message}")
    else:
        payload = _error(None, INVALID_REQUEST, f"Invalid Request: {message}")
    return {
        "statusCode": status if status in (404, 405) or status >= 500 else 200,
        "headers": {"Content-Type": "application/json"},
        "body": json.dumps(payload),
        "isBase64Encoded": False,
    }


def _raw_body() -> str:
    event = router.current_event
    body = event.body or ""
    if event.is_base64_encoded:
        # Not UTF-8 was refused before the route ran (resolver._not_json).
        body = base64.b64decode(body).decode("utf-8")
    return body


def _remaining_ms() -> int | None:
    context = getattr(router, "lambda_context", None)
    getter = getattr(context, "get_remaining_time_in_millis", None)
    return int(getter()) if callable(getter) else None


@router.post(
    "/a2a",
    summary="A2A v0.3 JSON-RPC endpoint",
    description=(
        "JSON-RPC 2.0 requests of the A2A protocol v0.3: message/send, message/stream, tasks/get, tasks/cancel, "
        "tasks/resubscribe, tasks/pushNotificationConfig/{set,get,list,delete}. message/stream and "
        "tasks/resubscribe answer text/event-stream (where the agent card says streaming: true; -32004 otherwise): "
        "each `data:` line a JSON-RPC response with the request's id whose result is the Task first, then "
        "status-update events (working: each step of the agent), the answer as artifact-update chunks, and last a "
        "status-update with final: true; a refusal of the method is the stream's one event (a JSON-RPC error). "
        "A dropped connection does not cancel the task. "
        "A task may wait in input-required, the agent's question its status message (its stream ends there, "
        "final: true): the next message/send or message/stream with its taskId, or its contextId alone, answers "
        "it and continues the task. "
        "Requires a peer bearer token (HTTP 401/403 otherwise); a task or context of another "
        "peer is -32001. Every other answer is HTTP 200 with a JSON-RPC response object, errors included, "
        "checked in this order: -32700 not JSON (or nested deeper than 32, too wide, a number out of range, "
        "not UTF-8; too large or not JSON-typed: -32600); -32600 not one Request object; -32601 unknown method; "
        "-32602 params not an object of the method's shape or holding text that is not valid Unicode; -32600 no "
        "id (checked last). "
        "A message may carry text parts, data parts (given to the model as JSON text) and file parts with "
        "inline bytes of text/* or application/json; anything else is -32005. "
        "A structured call to a skill (docs/SKILLS.md) is a data part {skill, arguments} or the text "
        "`skill:<id> {json}`, its arguments checked against the skill's input schema before anything is stored "
        "(-32602 lists what is wrong); metadata.responseSchema (params' or the message's; JSON Schema or the "
        "shorthand) holds the answer to a schema, and timeout_seconds bounds the request. A task held to a schema "
        "answers with an artifact of a data part (the JSON) and the text, or the text and a data part marking "
        "schema_mismatch with its errors."
    ),
    responses={
        200: {
            "description": "A JSON-RPC response: result or error; for message/stream and tasks/resubscribe "
            "Server-Sent Events, each data line a JSON-RPC response",
            "content": {
                "application/json": {"schema": JSONRPC_RESPONSE_SCHEMA},
                "text/event-stream": {
                    "schema": event_schema(
                        "an event of message/stream or tasks/resubscribe: data is a JSON-RPC response "
                        "whose result is a Task, a status-update or an artifact-update"
                    )
                },
            },
        },
        401: {
            "description": "No peer bearer token, or a malformed one (WWW-Authenticate: Bearer)",
            "content": {"application/json": {"model": ErrorResponse}},
        },
        403: {
            "description": "The token is unknown, wrong or revoked",
            "content": {"application/json": {"model": ErrorResponse}},
        },
    },
)
def post_a2a() -> Response[dict[str, Any]]:
    event = router.current_event
    asked = version_asked(event.headers, event.query_string_parameters)
    payload = handle_rpc(deps(), _raw_body(), _remaining_ms(), current_peer(), asked, event.headers)
    return Response(status_code=200, content_type=content_types.APPLICATION_JSON, body=payload)


_NOT_ALLOWED = {
    405: {
        "description": "Only POST takes JSON-RPC requests: a JSON-RPC error (-32600); Allow: POST",
        "content": {"application/json": {"schema": JSONRPC_RESPONSE_SCHEMA}},
    }
}


@router.get("/a2a", summary="A2A JSON-RPC endpoint: 405 (POST only)", responses=_NOT_ALLOWED)  # type: ignore[arg-type]
def get_a2a() -> Response[str]:
    # A browser or a probe on the card's URL: told in JSON-RPC, as every answer of this endpoint is.
    reply = refusal(405, "method_not_allowed", "GET is not allowed on /a2a: POST a JSON-RPC request")
    return Response(
        status_code=405, content_type=content_types.APPLICATION_JSON, body=reply["body"], headers={"Allow": "POST"}
    )
