"""A local stand-in for API Gateway (REST API, Lambda proxy integration).

It matches each request against flightdeck.topology.ROUTES, builds the same
version 1.0 proxy event API Gateway would send, invokes the route's handler and
writes the proxy response back, so the handlers run unchanged.

Where it deliberately differs from API Gateway (its own answers use the API's
error shape `{"error": {"code", "message"}}`):
- an unknown path answers 404 `not_found` (API Gateway: 403 "Missing
  Authentication Token"), a known path with another method 405
  `method_not_allowed` with an Allow header (API Gateway: 403 as well);
- a handler that raises or returns a malformed proxy response answers 502
  `bad_gateway` (API Gateway: 502 `{"message": "Internal server error"}`);
- no stage prefix in the URL: `http://host:port/api/chat`; the stage is named
  in requestContext only.
Like API Gateway REST APIs, `path` and `pathParameters` are passed as sent
(percent-encoded), query string values decoded, and the request body is text
unless it is not valid UTF-8, in which case it arrives base64-encoded.

A handler that answers a stream (flightdeck.api.sse.StreamReply: the streaming routes,
topology `stream`) has its chunks written as they come, with chunked transfer encoding,
as API Gateway's STREAM integration relays a streaming function's output on AWS; the
generator behind them is the one the deployed function's web server consumes (on the agent
host it runs in the function's sandbox, which produces each chunk when the gateway asks for
it: flightdeck.local.sandbox). A client that goes away closes the generator (its reads stop;
the task goes on).
"""

from __future__ import annotations

import base64
import http.server
import json
import logging
import re
import secrets
import socket
import threading
import time
import uuid
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from flightdeck import topology
from flightdeck.api.sse import StreamReply
from flightdeck.local.console_files import ConsoleFiles
from flightdeck.local.function_url import build_function_url_event
from flightdeck.local.invocation import LOCAL_ACCOUNT_ID, Function, FunctionRegistry, error_type, log_failure
from flightdeck.local.net import QuietDisconnects
from flightdeck.local.peer_gate import PeerGate

log = logging.getLogger("flightdeck.local")

# API Gateway's payload limit.
MAX_REQUEST_BYTES = 10 * 1024 * 1024

# Hop-by-hop and framing headers are the server's business, never the handler's.
_FRAMING_HEADERS = {"content-length", "transfer-encoding", "connection", "keep-alive"}


# --- routing ------------------------------------------------------------------------


@dataclass(frozen=True)
class CompiledRoute:
    route: topology.Route
    pattern: re.Pattern[str]
    param_names: tuple[str, ...]
    # Lower sorts first: API Gateway prefers literal segments, then {param}, then {proxy+}.
    specificity: tuple[int, ...]


def compile_route(route: topology.Route) -> CompiledRoute:
    parts: list[str] = []
    names: list[str] = []
    rank: list[int] = []
    segments = route.path.strip("/").split("/") if route.path.strip("/") else []
    for index, segment in enumerate(segments):
        if segment.startswith("{") and segment.endswith("+}"):
            if index != len(segments) - 1:
                raise ValueError(f"{route.path}: a greedy parameter must be the last segment")
            names.append(segment[1:-2])
            parts.append("(.+)")
            rank.append(2)
        elif segment.startswith("{") and segment.endswith("}"):
            names.append(segment[1:-1])
            parts.append("([^/]+)")
            rank.append(1)
        else:
            parts.append(re.escape(segment))
            rank.append(0)
    pattern = re.compile("/" + "/".join(parts))
    return CompiledRoute(route, pattern, tuple(names), tuple(rank))


@dataclass(frozen=True)
class RouteMatch:
    route: topology.Route
    path_parameters: dict[str, str]


class NoRoute(LookupError):
    """No resource has this path."""


class MethodNotAllowed(LookupError):
    def __init__(self, allowed: Sequence[str]):
        super().__init__(", ".join(allowed))
        self.allowed = tuple(allowed)


class Router:
    def __init__(self, routes: Iterable[topology.Route] = topology.ROUTES):
        self._routes = sorted((compile_route(r) for r in routes), key=lambda c: c.specificity)

    def match(self, method: str, path: str) -> RouteMatch:
        """The most specific route for this method and path; raises NoRoute or MethodNotAllowed."""
        path_matches: list[tuple[CompiledRoute, re.Match[str]]] = []
        for compiled in self._routes:
            m = compiled.pattern.fullmatch(path)
            if m:
                path_matches.append((compiled, m))
        if not path_matches:
            raise NoRoute(path)
        for compiled, m in path_matches:
            if compiled.route.method in (method, "ANY"):
                return RouteMatch(compiled.route, dict(zip(compiled.param_names, m.groups())))
        # Methods of the most specific resource this path matches.
        best = path_matches[0][0].specificity
        allowed = sorted({c.route.method for c, _ in path_matches if c.specificity == best})
        raise MethodNotAllowed(allowed)


# --- events ---------------------------------------------------------------------------


@dataclass(frozen=True)
class GatewayIdentity:
    """What names this API in events: API Gateway's ids, the stage, the account."""

    api_id: str = field(default_factory=lambda: secrets.token_hex(5))
    stage: str = "local"
    account_id: str = LOCAL_ACCOUNT_ID


def _multi_dict(pairs: Iterable[tuple[str, str]]) -> tuple[dict[str, str] | None, dict[str, list[str]] | None]:
    """API Gateway's (single, multi) views: the single view keeps the last value; both null when empty."""
    single: dict[str, str] = {}
    multi: dict[str, list[str]] = {}
    for key, value in pairs:
        single[key] = value
        multi.setdefault(key, []).append(value)
    return (single or None, multi or None)


def _encode_body(body: bytes) -> tuple[str | None, bool]:
    if not body:
        return None, False
    try:
        return body.decode("utf-8"), False
    except UnicodeDecodeError:
        return base64.b64encode(body).decode("ascii"), True


def _trace_id(now: float) -> str:
    return f"Root=1-{int(now):08x}-{secrets.token_hex(12)}"


def build_proxy_event(
    *,
    method: str,
    raw_path: str,
    query_string: str,
    headers: Sequence[tuple[str, str]],
    body: bytes,
    match: RouteMatch,
    source_ip: str,
    identity: GatewayIdentity,
    local_port: int,
    request_id: str | None = None,
    now: float | None = None,
) -> dict[str, Any]:
    """The REST API (v1) Lambda proxy integration event for one request."""
    now = time.time() if now is None else now
    request_id = request_id or str(uuid.uuid4())
    header_pairs = list(headers)
    lower = {k.lower(): v for k, v in header_pairs}
    # API Gateway adds its forwarding headers (appending to a client's X-Forwarded-For).
    forwarded_for = f"{lower['x-forwarded-for']}, {source_ip}" if "x-forwarded-for" in lower else source_ip
    header_pairs = [(k, v) for k, v in header_pairs if k.lower() != "x-forwarded-for"]
    header_pairs.append(("X-Forwarded-For", forwarded_for))
    header_pairs.append(("X-Forwarded-Port", str(local_port)))
    header_pairs.append(("X-Forwarded-Proto", "http"))
    if "x-amzn-trace-id" not in lower:
        header_pairs.append(("X-Amzn-Trace-Id", _trace_id(now)))
    single_headers, multi_headers = _multi_dict(header_pairs)
    single_query, multi_query = _multi_dict(parse_qsl(query_string, keep_blank_values=True))
    event_body, is_base64 = _encode_body(body)
    domain_name = lower.get("host", f"127.0.0.1:{local_port}")
    resource_id = base64.b32encode(match.route.path.encode()).decode()[:6].lower()
    return {
        "resource": match.route.path,
        "path": raw_path,
        "httpMethod": method,
        "headers": single_headers,
        "multiValueHeaders": multi_headers,
        "queryStringParameters": single_query,
        "multiValueQueryStringParameters": multi_query,
        "pathParameters": match.path_parameters or None,
        "stageVariables": None,
        "requestContext": {
            "resourceId": resource_id,
            "resourcePath": match.route.path,
            "httpMethod": method,
            "extendedRequestId": secrets.token_urlsafe(12),
            "requestTime": datetime.fromtimestamp(now, UTC).strftime("%d/%b/%Y:%H:%M:%S +0000"),
            # The path as the client sent it (on AWS it includes the stage).
            "path": raw_path,
            "accountId": identity.account_id,
            "protocol": "HTTP/1.1",
            "stage": identity.stage,
            "domainPrefix": domain_name.split(".")[0].split(":")[0],
            "requestTimeEpoch": int(now * 1000),
            "requestId": request_id,
            "identity": {
                "cognitoIdentityPoolId": None,
                "accountId": None,
                "cognitoIdentityId": None,
                "caller": None,
                "sourceIp": source_ip,
                "principalOrgId": None,
                "accessKey": None,
                "cognitoAuthenticationType": None,
                "cognitoAuthenticationProvider": None,
                "userArn": None,
                "userAgent": lower.get("user-agent"),
                "user": None,
                "apiKey": None,
                "apiKeyId": None,
                "clientCert": None,
            },
            "domainName": domain_name,
            "apiId": identity.api_id,
        },
        "body": event_body,
        "isBase64Encoded": is_base64,
    }


# --- responses ------------------------------------------------------------------------


class MalformedProxyResponse(ValueError):
    pass


@dataclass(frozen=True)
class HttpResponse:
    status: int
    headers: list[tuple[str, str]]
    body: bytes


def parse_proxy_response(result: Any) -> HttpResponse:
    """Turn a handler's proxy response into an HTTP response, as API Gateway does."""
    if not isinstance(result, dict):
        raise MalformedProxyResponse(f"handler returned {type(result).__name__}, not a proxy response object")
    try:
        status = int(result["statusCode"])
    except (KeyError, TypeError, ValueError):
        raise MalformedProxyResponse("proxy response has no integer statusCode") from None
    if not 100 <= status <= 599:
        raise MalformedProxyResponse(f"statusCode {status} is not an HTTP status")
    single = result.get("headers") or {}
    multi = result.get("multiValueHeaders") or {}
    if not isinstance(single, dict) or not isinstance(multi, dict):
        raise MalformedProxyResponse("headers and multiValueHeaders must be objects")
    # Both given: API Gateway merges them, multiValueHeaders winning for a name in both.
    headers: list[tuple[str, str]] = []
    multi_names = {name.lower() for name in multi}
    for name, values in multi.items():
        if not isinstance(values, list):
            raise MalformedProxyResponse(f"multiValueHeaders[{name!r}] must be a list")
        headers.extend((name, str(v)) for v in values)
    headers.extend((name, str(v)) for name, v in single.items() if name.lower() not in multi_names)
    headers = [(n, v) for n, v in headers if n.lower() not in _FRAMING_HEADERS]
    body = result.get("body")
    if body is None:
        data = b""
    elif not isinstance(body, str):
        raise MalformedProxyResponse("body must be a string")
    elif result.get("isBase64Encoded"):
        try:
            data = base64.b64decode(body, validate=True)
        except ValueError:
            raise MalformedProxyResponse("isBase64Encoded is set but body is not base64") from None
    else:
        data = body.encode("utf-8")
    return HttpResponse(status, headers, data)


@dataclass
class StreamingHttpResponse:
    """A response whose body is written chunk by chunk as the handler's stream produces it."""

    status: int
    headers: list[tuple[str, str]]
    chunks: Iterator[bytes]

    def close(self) -> None:
        close = getattr(self.chunks, "close", None)
        if callable(close):
            close()


def error_response(status: int, code: str, message: str, extra_headers: Sequence[tuple[str, str]] = ()) -> HttpResponse:
    body = json.dumps({"error": {"code": code, "message": message}}).encode()
    return HttpResponse(status, [("Content-Type", "application/json"), *extra_headers], body)


# --- the server -----------------------------------------------------------------------


class ApiGateway:
    """Routes requests to the agent's functions; independent of the HTTP server for testing."""

    def __init__(
        self,
        functions: FunctionRegistry,
        *,
        routes: Iterable[topology.Route] = topology.ROUTES,
        identity: GatewayIdentity | None = None,
        peer_gate: PeerGate | None = None,
        console: ConsoleFiles | None = None,
        url_handlers: Iterable[str] = (),
    ):
        self.functions = functions
        # The lean front door: these handlers' buffered routes get a function URL's event (payload 2.0).
        self.url_handlers = frozenset(url_handlers)
        # The console's static files under /console/ (the deployed stack's S3 route); None: not served.
        self.console = console
        self.router = Router(routes)
        self.identity = identity or GatewayIdentity()
        # The authorizer and usage plans in front of PEER_AUTH routes (None: straight to the function).
        self.peer_gate = peer_gate

    def handle(
        self,
        *,
        method: str,
        target: str,
        headers: Sequence[tuple[str, str]],
        body: bytes,
        source_ip: str,
        local_port: int,
    ) -> HttpResponse | StreamingHttpResponse:
        parts = urlsplit(target)
        path = parts.path or "/"
        if self.console is not None and self.console.handles(path):
            return HttpResponse(*self.console.answer(method, path))
        try:
            match = self.router.match(method, path)
        except NoRoute:
            return error_response(404, "not_found", f"no resource at {path}")
        except MethodNotAllowed as exc:
            return error_response(
                405, "method_not_allowed", f"{method} is not allowed on {path}", [("Allow", ", ".join(exc.allowed))]
            )
        if match.route.handler in self.url_handlers and not match.route.stream:
            event = build_function_url_event(
                method=method,
                raw_path=path,
                query_string=parts.query,
                headers=headers,
                body=body,
                source_ip=source_ip,
                url_id=self.identity.api_id,
            )
        else:
            event = build_proxy_event(
                method=method,
                raw_path=path,
                query_string=parts.query,
                headers=headers,
                body=body,
                match=match,
                source_ip=source_ip,
                identity=self.identity,
                local_port=local_port,
            )
        if self.peer_gate is not None and match.route.auth == topology.PEER_AUTH:
            refusal = self.peer_gate.admit(event)
            if refusal is not None:
                return error_response(refusal.status, refusal.code, refusal.message, list(refusal.headers.items()))
        function: Function = self.functions.function(match.route.handler)
        try:
            result = function.invoke(event)
            if isinstance(result, StreamReply):
                headers = [(n, v) for n, v in result.headers.items() if n.lower() not in _FRAMING_HEADERS]
                return StreamingHttpResponse(result.status, headers, result.chunks)
            return parse_proxy_response(result)
        except MalformedProxyResponse as exc:
            log.error("%s %s: malformed proxy response from %s: %s", method, path, function.module_name, exc)
            return error_response(502, "bad_gateway", f"malformed proxy response: {exc}")
        except Exception as exc:
            log_failure(log, exc, "%s %s: handler %s failed", method, path, function.module_name)
            return error_response(502, "bad_gateway", f"handler failed: {error_type(exc)}: {exc}")


class _RequestTooLarge(Exception):
    pass


class _GatewayRequestHandler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive for peers that reuse connections
    server: GatewayServer

    def _read_body(self) -> bytes:
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            chunks: list[bytes] = []
            total = 0
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass  # trailers
                    return b"".join(chunks)
                total += size
                if total > MAX_REQUEST_BYTES:
                    raise _RequestTooLarge
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
        length = int(self.headers.get("Content-Length") or 0)
        if length > MAX_REQUEST_BYTES:
            raise _RequestTooLarge
        return self.rfile.read(length) if length else b""

    def _serve(self) -> None:
        try:
            body = self._read_body()
        except _RequestTooLarge:
            self.close_connection = True
            self._write(error_response(413, "payload_too_large", f"request body exceeds {MAX_REQUEST_BYTES} bytes"))
            return
        except ValueError:
            self.close_connection = True
            self._write(error_response(400, "bad_request", "malformed request framing"))
            return
        response = self.server.gateway.handle(
            method=self.command,
            target=self.path,
            headers=[(k, v) for k, v in self.headers.items()],
            body=body,
            source_ip=self.client_address[0],
            local_port=self.server.server_address[1],
        )
        self._write(response)

    def _write(self, response: HttpResponse | StreamingHttpResponse) -> None:
        if isinstance(response, StreamingHttpResponse):
            self._stream(response)
            return
        try:
            self.send_response(response.status)
            for name, value in response.headers:
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(response.body)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(response.body)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True  # the client gave up waiting (a cold function): nothing to tell it

    def _stream(self, response: StreamingHttpResponse) -> None:
        chunked = self.request_version != "HTTP/1.0"
        try:
            self.send_response(response.status)
            for name, value in response.headers:
                self.send_header(name, value)
            if chunked:
                self.send_header("Transfer-Encoding", "chunked")
            else:
                self.close_connection = True  # HTTP/1.0: the end of the body is the end of the connection
            self.end_headers()
            self.wfile.flush()
            if self.command == "HEAD":
                return
            for chunk in response.chunks:
                if chunk:
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk) if chunked else chunk)
                    self.wfile.flush()
            if chunked:
                self.wfile.write(b"0\r\n\r\n")
                self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True  # the client went away: stop reading the state for it
        finally:
            response.close()

    # Every method, even one HTTP does not define, reaches the router, which answers
    # 405 for what a path does not serve (http.server would say 501 itself).
    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = do_OPTIONS = do_HEAD = _serve

    def __getattr__(self, name: str) -> Any:
        if name.startswith("do_"):
            return self._serve
        raise AttributeError(name)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
        log.debug("%s %s", self.address_string(), format % args)


class GatewayServer(QuietDisconnects, http.server.ThreadingHTTPServer):
    """The HTTP side: on a given address, or on an already listening socket (handed down by a parent)."""

    daemon_threads = True

    def __init__(
        self,
        gateway: ApiGateway,
        *,
        address: tuple[str, int] | None = None,
        listening_socket: socket.socket | None = None,
    ):
        self.gateway = gateway
        if listening_socket is None:
            if address is None:
                raise ValueError("give an address or a listening socket")
            host = address[0]
            if ":" in host:
                self.address_family = socket.AF_INET6
            super().__init__(address, _GatewayRequestHandler)
        else:
            self.address_family = listening_socket.family
            super().__init__(listening_socket.getsockname()[:2], _GatewayRequestHandler, bind_and_activate=False)
            self.socket.close()  # the one TCPServer made; use the inherited socket instead
            self.socket = listening_socket
            self.server_address = listening_socket.getsockname()[:2]
            self.server_name, self.server_port = str(self.server_address[0]), int(self.server_address[1])

    @property
    def port(self) -> int:
        return int(self.server_address[1])

    def start_background(self) -> threading.Thread:
        thread = threading.Thread(target=self.serve_forever, name="gateway", daemon=True)
        thread.start()
        return thread
