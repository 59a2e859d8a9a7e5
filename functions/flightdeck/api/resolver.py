"""The HTTP resolver every API function uses: validation, one error shape, 404/405/413.

Each Lambda includes only its own routers; `openapi_resolver()` includes them all
so one OpenAPI document describes the whole API.
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Callable
from typing import Any

from aws_lambda_powertools.event_handler import (
    APIGatewayRestResolver,
    LambdaFunctionUrlResolver,
    Response,
    content_types,
)
from aws_lambda_powertools.event_handler.api_gateway import ApiGatewayResolver, Router
from aws_lambda_powertools.event_handler.exceptions import NotFoundError
from aws_lambda_powertools.event_handler.openapi.exceptions import RequestUnsupportedContentType, RequestValidationError
from botocore.exceptions import BotoCoreError, ClientError

from flightdeck import topology
from flightdeck.api import strict_json
from flightdeck.domain.records import ItemTooLargeError, ResultSource, error_result
from flightdeck.observability import logger
from flightdeck.settings import get_settings


class ApiError(Exception):
    """An answer other than success, raised by routes and rendered in the one error shape."""

    def __init__(self, status: int, code: str, message: str, headers: dict[str, str] | None = None):
        super().__init__(message)
        self.status, self.code, self.message, self.headers = status, code, message, headers or {}


def error_response(
    status: int,
    code: str,
    message: str,
    headers: dict[str, str] | None = None,
    details: list[dict[str, Any]] | None = None,
) -> Response[Any]:
    error: dict[str, Any] = {"code": code, "message": message}
    if details:
        error["details"] = details
    return Response(
        status_code=status, content_type=content_types.APPLICATION_JSON, body={"error": error}, headers=headers or {}
    )


# A refusal before any route runs: (HTTP status, error code, message) -> a proxy response.
Refusal = Callable[[int, str, str], dict[str, Any]]


def proxy_error(status: int, code: str, message: str) -> dict[str, Any]:
    """A proxy response in the one error shape (for answers given outside the resolver)."""
    return {
        "statusCode": status,
        "headers": {"Content-Type": "application/json"},
        "body": json.dumps({"error": {"code": code, "message": message}}),
        "isBase64Encoded": False,
    }


def _not_json(event: dict[str, Any], refuse: Refusal) -> dict[str, Any] | None:
    """415 for a body declared as anything but JSON: every route here takes JSON only
    (Powertools would otherwise try to parse forms and multipart itself)."""
    headers = {k.lower(): v for k, v in (event.get("headers") or {}).items()}
    content_type = (headers.get("content-type") or "").split(";")[0].strip().lower()
    body = event.get("body")
    if not body:
        return None
    if content_type and content_type != "application/json" and not content_type.endswith("+json"):
        return refuse(415, "unsupported_media_type", "send the body as application/json")
    if event.get("isBase64Encoded"):
        # Bytes that are not UTF-8 cannot be JSON: say so rather than fail decoding later.
        try:
            base64.b64decode(body, validate=True).decode("utf-8")
        except (ValueError, UnicodeDecodeError):
            return refuse(400, "malformed_json", "request body is not valid UTF-8 JSON")
    return None


def _too_large(event: dict[str, Any], refuse: Refusal) -> dict[str, Any] | None:
    """413 before any parsing: validation would otherwise read the whole body first. A callback whose header
    token is good has its call recorded as a result_too_large error (never its body: it is not read), so the
    caller's turn goes on at once rather than at the call's deadline."""
    from flightdeck.api import auth

    body = event.get("body") or ""
    limit = get_settings().max_body_bytes
    if len(body) <= limit and len(body.encode("utf-8", "surrogatepass")) <= limit:
        return None
    message = f"request body exceeds {limit} bytes"
    claims = auth.callback_claims()
    if claims is not None:
        from flightdeck.domain.callbacks import record_too_large
        from flightdeck.wiring import deps

        result = error_result(
            claims.tool_use_id, "result_too_large", ResultSource.CALLBACK, f"the callback's {message}"
        )
        record_too_large(deps(), claims, result)
    return refuse(413, "payload_too_large", message)


# A body wrong in every field gets the first few problems, not a response as large as itself.
MAX_ERROR_DETAILS = 20
_REFUSED_JSON_CODES = {
    "malformed": "malformed_json",
    "too_deep": "json_too_deep",
    "too_wide": "json_too_wide",
    "bad_number": "bad_number",
}


class FunctionUrlResolver(LambdaFunctionUrlResolver):
    """A function URL's resolver that takes /a2a/ for /a2a, as APIGatewayRestResolver does (a function URL
    passes the path as sent)."""

    @staticmethod
    def _compile_regex(rule: str, base_regex: str = "^{}/*$") -> re.Pattern[str]:
        return ApiGatewayResolver._compile_regex(rule, base_regex)  # type: ignore[no-any-return]


def build_resolver(
    *routers: Router, kind: type[ApiGatewayResolver] = APIGatewayRestResolver, refuse: Refusal | None = None
) -> ApiGatewayResolver:
    """A resolver of `kind`: the REST proxy event's (the REST door, and the lean door's HTTP API, whose payload
    1.0 is the same event), or FunctionUrlResolver (the lean door's function URLs, payload 2.0). `refuse`
    renders its own answers (no route, no such method, a failure) in a protocol's shape (default: the one
    error shape)."""
    # Every JSON body is parsed by strict_json: bounded depth, finite numbers (a 400, never a 500).
    app = kind(enable_validation=True, json_body_deserializer=strict_json.loads)
    for router in routers:
        app.include_router(router)

    def answer(status: int, code: str, message: str, headers: dict[str, str] | None = None) -> Response[Any]:
        if refuse is None:
            return error_response(status, code, message, headers)
        proxy = refuse(status, code, message)
        return Response(
            status_code=proxy["statusCode"],
            content_type=content_types.APPLICATION_JSON,
            body=proxy["body"],
            headers={**proxy["headers"], **(headers or {})},
        )

    @app.exception_handler(ApiError)  # type: ignore[untyped-decorator]  # unannotated in Powertools
    def _api_error(exc: ApiError) -> Response[Any]:
        return answer(exc.status, exc.code, exc.message, exc.headers)

    @app.exception_handler(strict_json.JsonRefused)  # type: ignore[untyped-decorator]  # unannotated in Powertools
    def _refused_json(exc: strict_json.JsonRefused) -> Response[Any]:
        return answer(
            400, _REFUSED_JSON_CODES.get(exc.reason, "malformed_json"), f"request body is not valid JSON: {exc.message}"
        )

    @app.exception_handler(RequestValidationError)  # type: ignore[untyped-decorator]  # unannotated in Powertools
    def _invalid(exc: RequestValidationError) -> Response[Any]:
        errors = exc.errors()
        if any(e.get("type") == "json_invalid" for e in errors):
            return answer(400, "malformed_json", "request body is not valid JSON")
        details = [
            {"loc": list(e.get("loc", ())), "msg": e.get("msg", ""), "type": e.get("type", "")}
            for e in errors[:MAX_ERROR_DETAILS]
        ]
        first = details[0] if details else {"loc": [], "msg": "invalid request"}
        where = ".".join(str(p) for p in first["loc"][1:]) or "body"
        more = f" (and {len(errors) - 1} more problems)" if len(errors) > 1 else ""
        message = f"{where}: {first['msg']}{more}"
        if refuse is not None:
            return answer(422, "invalid_request", message)
        return error_response(422, "invalid_request", message, details=details)

    @app.not_found
    def _not_found(exc: NotFoundError) -> Response[Any]:
        path = app.current_event.path
        allowed = topology.methods_at(path)
        # A method another function serves (a function URL takes any path) is not this one's to allow.
        if allowed and app.current_event.http_method not in allowed:
            return answer(
                405,
                "method_not_allowed",
                f"{app.current_event.http_method} is not allowed on {path}",
                headers={"Allow": ", ".join(allowed)},
            )
        return answer(404, "not_found", f"no route for {path}")

    @app.exception_handler(RequestUnsupportedContentType)  # type: ignore[untyped-decorator]  # unannotated in Powertools
    def _unsupported_type(exc: RequestUnsupportedContentType) -> Response[Any]:
        return answer(415, "unsupported_media_type", "send the body as application/json")

    @app.exception_handler(ItemTooLargeError)  # type: ignore[untyped-decorator]  # unannotated in Powertools
    def _too_large_to_store(exc: ItemTooLargeError) -> Response[Any]:
        # Retrying would fail the same way: a 4xx, never a 503.
        return answer(413, "too_large", f"the request is too large to store: {exc}")

    @app.exception_handler([BotoCoreError, ClientError])  # type: ignore[untyped-decorator]  # unannotated in Powertools
    def _aws_unavailable(exc: Exception) -> Response[Any]:
        # DynamoDB or SQS failed or throttled beyond the SDK's own retries: nothing
        # half-done is lost (every write is conditional), so the caller should retry.
        logger.exception("AWS dependency failed")
        return answer(
            503, "service_unavailable", "a dependency is unavailable; retry later", headers={"Retry-After": "1"}
        )

    @app.exception_handler(Exception)  # type: ignore[untyped-decorator]  # unannotated in Powertools
    def _unexpected(exc: Exception) -> Response[Any]:
        # Never a stack trace to the caller; the log has it.
        logger.exception("unhandled error")
        return answer(500, "internal_error", "the request could not be processed; it may be retried")

    return app


def _served_handlers(app: ApiGatewayResolver) -> frozenset[str]:
    """The topology handlers whose routes this resolver serves (a route's path with each {param} filled)."""
    served = set()
    for route in topology.ROUTES:
        sample = re.sub(r"\{[^/]+?\}", "x", route.path)
        for candidate in (*app._static_routes, *app._dynamic_routes):
            if route.method == candidate.method and candidate.rule.match(sample):
                served.add(route.handler)
    return frozenset(served)


# A streaming route's answer ahead of the resolver: a StreamReply, a proxy response, or None (the
# resolver answers). See flightdeck.api.sse.
StreamHook = Callable[[dict[str, Any], Any], Any]


def _streamed(stream: StreamHook, event: dict[str, Any], context: Any, render: Refusal) -> Any:
    """The hook's answer; its failures answered as the resolver answers a route's (503, 500)."""
    try:
        return stream(event, context)
    except (BotoCoreError, ClientError):
        logger.exception("AWS dependency failed")
        response = render(503, "service_unavailable", "a dependency is unavailable; retry later")
        response["headers"]["Retry-After"] = "1"
        return response
    except Exception:
        logger.exception("unhandled error")
        return render(500, "internal_error", "the request could not be processed; it may be retried")


def http_handler(
    *routers: Router, refuse: Refusal | None = None, stream: StreamHook | None = None
) -> Callable[[dict[str, Any], Any], Any]:
    """A Lambda entry point serving these routers, with logging, tracing and metrics.

    Per request, in this order: the caller is authenticated (routes whose topology auth is
    "peer", and callback routes with a header token: 401/403 before anything else is looked
    at), the body size (413) and type (415, not UTF-8: 400) are checked, `stream` answers if
    it will (a StreamReply: Server-Sent Events, written by the server as they come), else the
    route runs (its body parsed by strict_json); then a delegation call gets its one audit line
    (flightdeck.api.auth). `refuse` renders the size and type refusals and every answer the resolver
    gives itself (default: the REST error shape; /a2a answers them in JSON-RPC).
    """
    from aws_lambda_powertools.utilities.typing import LambdaContext

    from flightdeck.api import auth
    from flightdeck.observability import lambda_entry

    get_settings()  # fail at cold start, naming the variable, if the configuration is bad
    app = build_resolver(*routers, refuse=refuse)
    served = _served_handlers(app)
    url_app: list[ApiGatewayResolver] = []  # built on the first function URL event: the REST door never needs it
    render = refuse or proxy_error

    def resolve(event: dict[str, Any], context: LambdaContext) -> Any:
        chosen = app
        if event.get("version") == "2.0":
            if not url_app:
                url_app.append(build_resolver(*routers, kind=FunctionUrlResolver, refuse=refuse))
            chosen = url_app[0]
        for router in routers:
            # A router reads current_event through the last resolver that included it: point it at this one.
            router.api_resolver = chosen
        return chosen.resolve(event, context)

    @lambda_entry
    def handler(event: dict[str, Any], context: LambdaContext) -> Any:
        route = auth.begin(event, served)
        response: Any = {"statusCode": 500}
        try:
            response = auth.authenticate(event, route) or _too_large(event, render) or _not_json(event, render)
            if response is None and stream is not None:
                response = _streamed(stream, event, context, render)
            if response is None:
                response = resolve(event, context)
            response = auth.settle(response)
            return response
        finally:
            auth.audit_inbound(event, route, getattr(response, "outcome", response))

    handler.app = app  # type: ignore[attr-defined]
    return handler
