"""The local API Gateway: routing, proxy events, proxy responses, and the HTTP server around them."""

from __future__ import annotations

import base64
import http.client
import json
import sys
import threading
import time
import types
from collections.abc import Iterator
from typing import Any

import pytest

from flightdeck import topology
from flightdeck.local.gateway import (
    ApiGateway,
    GatewayIdentity,
    GatewayServer,
    MalformedProxyResponse,
    MethodNotAllowed,
    NoRoute,
    RouteMatch,
    Router,
    build_proxy_event,
    parse_proxy_response,
)
from flightdeck.local.invocation import FunctionRegistry, InProcessFunction

FAKES = "tests.local_fake_handlers"
Route = topology.Route

# The keys of a REST API (v1) Lambda proxy event and of its requestContext.
EVENT_KEYS = {
    "resource",
    "path",
    "httpMethod",
    "headers",
    "multiValueHeaders",
    "queryStringParameters",
    "multiValueQueryStringParameters",
    "pathParameters",
    "stageVariables",
    "requestContext",
    "body",
    "isBase64Encoded",
}
REQUEST_CONTEXT_KEYS = {
    "resourceId",
    "resourcePath",
    "httpMethod",
    "extendedRequestId",
    "requestTime",
    "path",
    "accountId",
    "protocol",
    "stage",
    "domainPrefix",
    "requestTimeEpoch",
    "requestId",
    "identity",
    "domainName",
    "apiId",
}


# --- routing ----------------------------------------------------------------------------


def test_every_topology_route_matches_its_own_path():
    router = Router()
    for route in topology.ROUTES:
        concrete = route.path.replace("{session_id}", "s-1")
        assert router.match(route.method, concrete).route == route


def test_path_parameters_come_from_the_template_and_stay_percent_encoded():
    match = Router().match("GET", "/api/sessions/s%2F1%20x")
    assert match.route == Route("GET", "/api/sessions/{session_id}", "chat_ingest")
    assert match.path_parameters == {"session_id": "s%2F1%20x"}


def test_a_parameter_is_one_segment():
    with pytest.raises(NoRoute):
        Router().match("GET", "/api/sessions/a/b")
    with pytest.raises(NoRoute):
        Router().match("GET", "/api/sessions/")


def test_literal_segments_win_over_parameters_and_greedy_parameters_take_the_rest():
    router = Router(
        [
            Route("GET", "/items/{proxy+}", "greedy"),
            Route("GET", "/items/{id}", "param"),
            Route("GET", "/items/special", "literal"),
        ]
    )
    assert router.match("GET", "/items/special").route.handler == "literal"
    assert router.match("GET", "/items/42").route.handler == "param"
    greedy = router.match("GET", "/items/a/b/c")
    assert greedy.route.handler == "greedy" and greedy.path_parameters == {"proxy": "a/b/c"}


def test_unknown_path_and_wrong_method_are_told_apart():
    router = Router()
    with pytest.raises(NoRoute):
        router.match("GET", "/nope")
    with pytest.raises(MethodNotAllowed) as info:
        router.match("DELETE", "/api/chat")
    assert info.value.allowed == ("POST",)
    # Paths match exactly: no trailing-slash folding.
    with pytest.raises(NoRoute):
        router.match("POST", "/api/chat/")


# --- events -------------------------------------------------------------------------------


def _event(**overrides: Any) -> dict[str, Any]:
    args: dict[str, Any] = dict(
        method="GET",
        raw_path="/api/sessions/s-1",
        query_string="",
        headers=[("Host", "127.0.0.1:8080"), ("User-Agent", "pytest")],
        body=b"",
        match=RouteMatch(Route("GET", "/api/sessions/{session_id}", "chat_ingest"), {"session_id": "s-1"}),
        source_ip="127.0.0.1",
        identity=GatewayIdentity(api_id="abc123defg", stage="local"),
        local_port=8080,
        request_id="req-1",
        now=1_700_000_000.123,
    )
    args.update(overrides)
    return build_proxy_event(**args)


def test_event_is_a_complete_rest_v1_proxy_event():
    event = _event()
    assert set(event) == EVENT_KEYS
    assert set(event["requestContext"]) == REQUEST_CONTEXT_KEYS
    assert event["resource"] == "/api/sessions/{session_id}"
    assert event["path"] == "/api/sessions/s-1"
    assert event["httpMethod"] == "GET"
    assert event["pathParameters"] == {"session_id": "s-1"}
    assert event["stageVariables"] is None
    ctx = event["requestContext"]
    assert ctx["resourcePath"] == "/api/sessions/{session_id}"
    assert ctx["httpMethod"] == "GET"
    assert ctx["stage"] == "local"
    assert ctx["requestId"] == "req-1"
    assert ctx["requestTimeEpoch"] == 1_700_000_000_123
    assert ctx["requestTime"] == "14/Nov/2023:22:13:20 +0000"
    assert ctx["identity"]["sourceIp"] == "127.0.0.1"
    assert ctx["identity"]["userAgent"] == "pytest"
    assert ctx["accountId"] == "123456789012"
    assert ctx["apiId"] == "abc123defg"
    assert ctx["protocol"] == "HTTP/1.1"
    assert ctx["domainName"] == "127.0.0.1:8080"


def test_no_query_no_body_no_params_are_nulls_as_in_api_gateway():
    event = _event(raw_path="/api/chat", method="POST", match=RouteMatch(Route("POST", "/api/chat", "chat_ingest"), {}))
    assert event["queryStringParameters"] is None
    assert event["multiValueQueryStringParameters"] is None
    assert event["pathParameters"] is None
    assert event["body"] is None
    assert event["isBase64Encoded"] is False


def test_query_string_single_view_keeps_the_last_value_and_values_are_decoded():
    event = _event(query_string="a=1&a=2&b=hello%20world&c=&d=x+y")
    assert event["queryStringParameters"] == {"a": "2", "b": "hello world", "c": "", "d": "x y"}
    assert event["multiValueQueryStringParameters"] == {"a": ["1", "2"], "b": ["hello world"], "c": [""], "d": ["x y"]}


def test_repeated_headers_and_forwarding_headers():
    event = _event(headers=[("Host", "h"), ("X-Tag", "one"), ("X-Tag", "two"), ("X-Forwarded-For", "10.0.0.1")])
    assert event["headers"]["X-Tag"] == "two"
    assert event["multiValueHeaders"]["X-Tag"] == ["one", "two"]
    assert event["headers"]["X-Forwarded-For"] == "10.0.0.1, 127.0.0.1"
    assert event["headers"]["X-Forwarded-Proto"] == "http"
    assert event["headers"]["X-Forwarded-Port"] == "8080"
    assert event["headers"]["X-Amzn-Trace-Id"].startswith("Root=1-")


def test_text_body_is_passed_as_a_string():
    event = _event(body='{"content": "héllo"}'.encode())
    assert event["body"] == '{"content": "héllo"}'
    assert event["isBase64Encoded"] is False


def test_a_body_that_is_not_utf8_arrives_base64_encoded():
    raw = b"\x00\xff\xfebinary"
    event = _event(body=raw)
    assert event["isBase64Encoded"] is True
    assert base64.b64decode(event["body"]) == raw


# --- responses ----------------------------------------------------------------------------


def test_proxy_response_headers_merge_with_multi_value_headers_winning():
    response = parse_proxy_response(
        {
            "statusCode": 202,
            "headers": {"Content-Type": "application/json", "x-both": "single", "Content-Length": "999"},
            "multiValueHeaders": {"Set-Cookie": ["a=1", "b=2"], "X-Both": ["multi"]},
            "body": '{"ok": true}',
        }
    )
    assert response.status == 202
    assert sorted(response.headers) == sorted(
        [
            ("Set-Cookie", "a=1"),
            ("Set-Cookie", "b=2"),
            ("X-Both", "multi"),
            ("Content-Type", "application/json"),
        ]
    )  # framing headers are the server's own
    assert response.body == b'{"ok": true}'


def test_base64_proxy_response_is_decoded():
    response = parse_proxy_response(
        {"statusCode": 200, "body": base64.b64encode(b"\x00\x01").decode(), "isBase64Encoded": True}
    )
    assert response.body == b"\x00\x01"


def test_missing_body_is_empty():
    assert parse_proxy_response({"statusCode": 204}).body == b""


@pytest.mark.parametrize(
    "result",
    [
        None,
        "text",
        {"body": "no status"},
        {"statusCode": "abc"},
        {"statusCode": 700},
        {"statusCode": 200, "body": 5},
        {"statusCode": 200, "multiValueHeaders": {"a": "not a list"}},
        {"statusCode": 200, "body": "%%%", "isBase64Encoded": True},
    ],
)
def test_malformed_proxy_responses_are_refused(result):
    with pytest.raises(MalformedProxyResponse):
        parse_proxy_response(result)


# --- the HTTP server with stand-in handlers ------------------------------------------------


@pytest.fixture(scope="module")
def server() -> Iterator[GatewayServer]:
    gateway = ApiGateway(
        FunctionRegistry("tester", package=FAKES, memory_mb=256), identity=GatewayIdentity(api_id="localapi01")
    )
    srv = GatewayServer(gateway, address=("127.0.0.1", 0))
    srv.start_background()
    yield srv
    srv.shutdown()
    srv.server_close()


def _request(
    srv: GatewayServer, method: str, target: str, body: bytes | None = None, headers: dict[str, str] | None = None
) -> tuple[int, dict[str, str], bytes, http.client.HTTPResponse]:
    conn = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=10)
    try:
        conn.request(method, target, body=body, headers=headers or {})
        response = conn.getresponse()
        data = response.read()
        return response.status, dict(response.getheaders()), data, response
    finally:
        conn.close()


def test_server_invokes_the_route_handler_with_event_and_context(server):
    status, headers, data, _ = _request(
        server, "POST", "/api/chat?trace=1", b'{"content": "hi"}', {"Content-Type": "application/json"}
    )
    assert status == 201
    echo = json.loads(data)
    event, context = echo["event"], echo["context"]
    assert set(event) == EVENT_KEYS
    assert event["resource"] == "/api/chat"
    assert event["body"] == '{"content": "hi"}'
    assert event["queryStringParameters"] == {"trace": "1"}
    assert event["headers"]["Content-Type"] == "application/json"
    assert event["requestContext"]["apiId"] == "localapi01"
    assert context["function_name"] == "tester-chat-ingest"
    assert context["memory_limit_in_mb"] == 256
    assert context["invoked_function_arn"] == "arn:aws:lambda:us-east-1:123456789012:function:tester-chat-ingest"
    assert 0 < context["remaining_ms"] <= topology.WORKER_TIMEOUT_S * 1000
    assert context["aws_request_id"]
    assert headers["X-Single"] == "one"
    assert headers["Content-Type"] == "application/json"


def test_server_passes_path_parameters_and_repeated_query_values(server):
    _, _, data, _ = _request(server, "GET", "/api/sessions/s-42?tag=a&tag=b")
    event = json.loads(data)["event"]
    assert event["pathParameters"] == {"session_id": "s-42"}
    assert event["resource"] == "/api/sessions/{session_id}"
    assert event["multiValueQueryStringParameters"] == {"tag": ["a", "b"]}
    assert event["body"] is None


def test_server_writes_multi_value_headers(server):
    _, _, _, response = _request(server, "GET", "/api/sessions/s-1")
    assert response.headers.get_all("X-Multi") == ["a", "b"]
    assert response.headers.get_all("X-Both") == ["multi"]


def test_server_sends_a_binary_body_base64_encoded_and_decodes_a_base64_response(server):
    status, _, data, _ = _request(server, "POST", "/api/chat", b"\x00\xffraw")
    event = json.loads(data)["event"]
    assert status == 201
    assert event["isBase64Encoded"] is True and base64.b64decode(event["body"]) == b"\x00\xffraw"
    status, headers, data, _ = _request(server, "GET", "/api/sessions/s-1?binary=1")
    assert status == 200 and data == b"\x00\xffbinary"
    assert headers["Content-Type"] == "application/octet-stream"


def test_server_reads_a_chunked_body(server):
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
    try:
        conn.request(
            "POST",
            "/api/chat",
            body=iter([b'{"content": ', b'"chunked"}']),
            encode_chunked=True,
            headers={"Transfer-Encoding": "chunked"},
        )
        event = json.loads(conn.getresponse().read())["event"]
    finally:
        conn.close()
    assert event["body"] == '{"content": "chunked"}'


@pytest.mark.parametrize(
    "target, method, status, code",
    [
        ("/nope", "GET", 404, "not_found"),
        ("/api/chat", "GET", 405, "method_not_allowed"),
        ("/api/sessions/s-1?raise=1", "GET", 502, "bad_gateway"),
        ("/api/sessions/s-1?malformed=1", "GET", 502, "bad_gateway"),
    ],
)
def test_server_own_answers_use_the_api_error_shape(server, target, method, status, code):
    got, headers, data, _ = _request(server, method, target)
    assert got == status
    assert headers["Content-Type"] == "application/json"
    error = json.loads(data)["error"]
    assert error["code"] == code and error["message"]
    if status == 405:
        assert headers["Allow"] == "POST"


def test_a_missing_handler_module_answers_502_and_names_it():
    gateway = ApiGateway(FunctionRegistry("tester", package="tests.no_such_package"))
    response = gateway.handle(
        method="GET", target="/.well-known/agent-card.json", headers=[], body=b"", source_ip="127.0.0.1", local_port=1
    )
    assert response.status == 502
    assert "tests.no_such_package.agent_card" in json.loads(response.body)["error"]["message"]


# --- functions: lazy import, one invocation at a time ------------------------------------------


@pytest.fixture
def counting_module(monkeypatch) -> types.ModuleType:
    module = types.ModuleType("fake_counting_handler")
    state = {"active": 0, "max_active": 0, "calls": 0}

    def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
        state["active"] += 1
        state["max_active"] = max(state["max_active"], state["active"])
        time.sleep(0.02)
        state["calls"] += 1
        state["active"] -= 1
        return {"statusCode": 200}

    module.handler = handler  # type: ignore[attr-defined]
    module.state = state  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "fake_counting_handler", module)
    return module


def test_invocations_of_one_function_never_overlap(counting_module):
    function = InProcessFunction("fake_counting_handler", "fn")
    threads = [threading.Thread(target=function.invoke, args=({},)) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert counting_module.state["calls"] == 8
    assert counting_module.state["max_active"] == 1


def test_the_handler_module_is_imported_on_first_invocation(monkeypatch):
    monkeypatch.delitem(sys.modules, f"{FAKES}.sweeper", raising=False)
    function = FunctionRegistry("tester", package=FAKES).function("sweeper")
    assert f"{FAKES}.sweeper" not in sys.modules
    assert function.function_name == "tester-sweeper"
    function.invoke({"detail-type": "Scheduled Event", "resources": []})
    assert f"{FAKES}.sweeper" in sys.modules


# --- streams: chunks as they come ---------------------------------------------------------------


@pytest.fixture
def streaming_server(monkeypatch) -> Iterator[tuple[GatewayServer, dict[str, Any]]]:
    """A gateway whose session_events handler streams: it waits for `go` after its first chunk."""
    from flightdeck.api.sse import StreamReply

    state: dict[str, Any] = {"go": threading.Event(), "closed": threading.Event(), "sent": 0}

    def chunks():
        try:
            yield b"data: 1\n\n"
            state["sent"] = 1
            state["go"].wait(5)
            for n in (2, 3):
                yield f"data: {n}\n\n".encode()
                state["sent"] = n
            while state.get("endless"):  # a stream that only its client's going away can end
                yield b": keep-alive\n\n"
                time.sleep(0.01)
        finally:
            state["closed"].set()

    package = types.ModuleType("fake_stream_pkg")
    package.__path__ = []  # type: ignore[attr-defined]
    module = types.ModuleType("fake_stream_pkg.session_events")
    module.handler = lambda event, context: StreamReply(chunks())  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "fake_stream_pkg", package)
    monkeypatch.setitem(sys.modules, "fake_stream_pkg.session_events", module)
    srv = GatewayServer(ApiGateway(FunctionRegistry("tester", package="fake_stream_pkg")), address=("127.0.0.1", 0))
    srv.start_background()
    yield srv, state
    state["go"].set()
    srv.shutdown()
    srv.server_close()


def test_a_stream_is_written_chunk_by_chunk_as_it_comes(streaming_server):
    srv, state = streaming_server
    conn = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=10)
    conn.request("GET", "/api/sessions/s1/events")
    response = conn.getresponse()
    assert response.status == 200 and response.getheader("Content-Type").startswith("text/event-stream")
    assert response.getheader("Transfer-Encoding") == "chunked" and response.getheader("Content-Length") is None
    assert response.read1(100) == b"data: 1\n\n"  # before the handler's generator went on
    deadline = time.monotonic() + 5
    while state["sent"] != 1 and time.monotonic() < deadline:  # it resumes after the write, then waits for go
        time.sleep(0.01)
    assert state["sent"] == 1
    state["go"].set()
    assert response.read() == b"data: 2\n\ndata: 3\n\n"
    assert state["closed"].wait(10)
    conn.close()


def test_a_client_that_goes_away_closes_the_stream(streaming_server):
    srv, state = streaming_server
    state["endless"] = True
    conn = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=10)
    conn.request("GET", "/api/sessions/s1/events")
    response = conn.getresponse()
    assert response.read1(100) == b"data: 1\n\n"
    conn.sock.close()  # the client hangs up mid-stream
    response.close()
    state["go"].set()
    assert state["closed"].wait(5)  # a write fails and the generator is closed: its reads stop


def test_an_http_1_0_client_gets_the_stream_up_to_the_connection_s_end(streaming_server):
    srv, state = streaming_server
    state["go"].set()
    import socket

    with socket.create_connection(("127.0.0.1", srv.port), timeout=10) as sock:
        sock.sendall(b"GET /api/sessions/s1/events HTTP/1.0\r\n\r\n")
        data = b""
        while chunk := sock.recv(4096):
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    assert b"Transfer-Encoding" not in head and body == b"data: 1\n\ndata: 2\n\ndata: 3\n\n"


def test_a_client_that_hangs_up_is_no_traceback_but_a_real_error_still_is(capsys):
    """Issue 41: local logs printed ConnectionResetError tracebacks whenever a client disconnected."""
    import socketserver

    from flightdeck.local.net import QuietDisconnects

    class Server(QuietDisconnects, socketserver.BaseServer):
        pass

    server = Server(("127.0.0.1", 0), socketserver.BaseRequestHandler)
    for error in (ConnectionResetError(104, "reset"), BrokenPipeError(32, "pipe")):
        try:
            raise error
        except ConnectionError:
            server.handle_error(None, ("127.0.0.1", 1))
    assert capsys.readouterr().err == ""
    try:
        raise ValueError("a real bug")
    except ValueError:
        server.handle_error(None, ("127.0.0.1", 1))
    assert "ValueError: a real bug" in capsys.readouterr().err
