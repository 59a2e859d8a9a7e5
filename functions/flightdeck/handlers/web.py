"""The web server of a streaming function on AWS (topology.STREAMING_HANDLERS: a2a, session_events).

A Python Lambda function cannot stream its response through the managed runtime, so these
functions run the AWS Lambda Web Adapter (its layer; AWS_LAMBDA_EXEC_WRAPPER=/opt/bootstrap,
AWS_LWA_INVOKE_MODE=response_stream; infra/functions.py). The adapter starts this server
(flightdeck/handlers/web.sh, the function's handler) and forwards each invocation to it over
loopback HTTP: API Gateway (STREAM integration) -> InvokeWithResponseStream -> the adapter ->
here -> the function's own Lambda entry (flightdeck.handlers.<handler>.handler), with the API
Gateway proxy event put back together from what the adapter forwards: method, path, query,
headers, body, the request context (x-amzn-request-context) and the invocation's deadline
(x-amzn-lambda-context). A StreamReply is written as its generator produces it (the same
generator the local gateway reads); a proxy response as one body. The adapter relays the bytes
to API Gateway in Lambda's streaming format.

    python -m flightdeck.handlers.web        (listens on 127.0.0.1:$AWS_LWA_PORT, default 8080)
"""

from __future__ import annotations

import base64
import importlib
import json
import os
import re
import time
from typing import Any
from urllib.parse import parse_qsl

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from flightdeck import topology
from flightdeck.api.sse import StreamReply

DEFAULT_PORT = 8080
# Headers the adapter adds for the app; never part of the event's own headers.
_ADAPTER_HEADERS = ("x-amzn-request-context", "x-amzn-lambda-context")
_FRAMING = ("content-length", "transfer-encoding", "connection")
_PARAM = re.compile(r"\{([A-Za-z0-9_]+)\+?\}")


class AdapterContext:
    """The Lambda context of the invocation the adapter forwarded (from x-amzn-lambda-context)."""

    def __init__(self, data: dict[str, Any]):
        self.aws_request_id = str(data.get("request_id") or "")
        self.invoked_function_arn = str(data.get("invoked_function_arn") or "")
        self.function_name = os.environ.get("AWS_LAMBDA_FUNCTION_NAME", "")
        self.function_version = os.environ.get("AWS_LAMBDA_FUNCTION_VERSION", "$LATEST")
        self.memory_limit_in_mb = int(os.environ.get("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "0") or 0)
        deadline = data.get("deadline")
        # Unknown deadline: the streaming functions' timeout from now (never longer than Lambda allows).
        self._deadline_ms = (
            int(deadline)
            if isinstance(deadline, (int, float)) and deadline > 0
            else int(time.time() * 1000) + topology.STREAM_TIMEOUT_S * 1000
        )

    def get_remaining_time_in_millis(self) -> int:
        return max(0, self._deadline_ms - int(time.time() * 1000))


def _multi(pairs: list[tuple[str, str]]) -> tuple[dict[str, str] | None, dict[str, list[str]] | None]:
    single: dict[str, str] = {}
    multi: dict[str, list[str]] = {}
    for key, value in pairs:
        single[key] = value
        multi.setdefault(key, []).append(value)
    return single or None, multi or None


def path_parameters(resource: str, path: str) -> dict[str, str] | None:
    """{session_id: ...} of a path matched against its resource template ("/api/sessions/{session_id}/events")."""
    names = _PARAM.findall(resource)
    if not names:
        return None
    pattern = (
        "^"
        + _PARAM.sub(
            lambda m: "(.+)" if m.group(0).endswith("+}") else "([^/]+)",
            re.escape(resource).replace(r"\{", "{").replace(r"\}", "}"),
        )
        + "$"
    )
    match = re.match(pattern, path)
    return dict(zip(names, match.groups())) if match else None


def proxy_event(
    method: str, path: str, query: str, headers: list[tuple[str, str]], body: bytes, request_context: dict[str, Any]
) -> dict[str, Any]:
    """The API Gateway REST proxy event the adapter was invoked with, from the request it forwarded."""
    own = [(k, v) for k, v in headers if k.lower() not in _ADAPTER_HEADERS]
    single_headers, multi_headers = _multi(own)
    single_query, multi_query = _multi(parse_qsl(query, keep_blank_values=True))
    resource = str(request_context.get("resourcePath") or path)
    try:
        text, is_base64 = (body.decode("utf-8"), False) if body else (None, False)
    except UnicodeDecodeError:
        text, is_base64 = base64.b64encode(body).decode("ascii"), True
    return {
        "resource": resource,
        "path": path,
        "httpMethod": method,
        "headers": single_headers,
        "multiValueHeaders": multi_headers,
        "queryStringParameters": single_query,
        "multiValueQueryStringParameters": multi_query,
        "pathParameters": path_parameters(resource, path),
        "stageVariables": None,
        "requestContext": request_context,
        "body": text,
        "isBase64Encoded": is_base64,
    }


def _handler_for(event: dict[str, Any]) -> Any:
    route = topology.route_for(event["httpMethod"], event["resource"])
    if route is None or route.handler not in topology.STREAMING_HANDLERS:
        return None
    return importlib.import_module(f"flightdeck.handlers.{route.handler}").handler


def _json_header(request: Request, name: str) -> dict[str, Any]:
    try:
        value = json.loads(request.headers.get(name) or "{}")
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


async def serve(request: Request) -> Response:
    body = await request.body()
    event = proxy_event(
        request.method,
        request.url.path,
        request.url.query,
        request.headers.items(),
        body,
        _json_header(request, "x-amzn-request-context"),
    )
    handler = _handler_for(event)
    if handler is None:  # the adapter's readiness check (GET /), or a route this function does not serve
        return Response(
            json.dumps({"error": {"code": "not_found", "message": f"no route for {request.url.path}"}}),
            status_code=404,
            media_type="application/json",
        )
    result = await run_in_threadpool(handler, event, AdapterContext(_json_header(request, "x-amzn-lambda-context")))
    if isinstance(result, StreamReply):
        headers = {k: v for k, v in result.headers.items() if k.lower() not in _FRAMING}
        # A sync iterator: Starlette reads it in its thread pool, one chunk at a time, and stops (closing
        # it) when the client goes away.
        return StreamingResponse(result.chunks, status_code=result.status, headers=headers)
    raw = result.get("body") or ""
    data = base64.b64decode(raw) if result.get("isBase64Encoded") else raw.encode("utf-8")
    headers = {k: str(v) for k, v in (result.get("headers") or {}).items() if k.lower() not in _FRAMING}
    response = Response(data, status_code=int(result.get("statusCode", 502)), headers=headers)
    for name, values in (result.get("multiValueHeaders") or {}).items():
        if name.lower() not in _FRAMING and name not in headers:
            for value in values:
                response.headers.append(name, str(value))
    return response


_METHODS = ["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"]
app = Starlette(routes=[Route("/{path:path}", serve, methods=_METHODS)])


def main() -> None:  # pragma: no cover - run by the Lambda Web Adapter (web.sh)
    import uvicorn

    port = int(os.environ.get("AWS_LWA_PORT") or os.environ.get("PORT") or DEFAULT_PORT)
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning", lifespan="off", access_log=False)


if __name__ == "__main__":  # pragma: no cover
    main()
