"""An MCP client over Streamable HTTP, small and on `requests` (the `mcp` SDK is too heavy for a Lambda cold start).

Protocol versions: 2026-07-28 first (stateless: every request carries its `_meta` envelope and the
MCP-Protocol-Version, Mcp-Method and Mcp-Name headers); a server that refuses it (HTTP 400/404/405, or JSON-RPC
-32022 unsupported version) is spoken to in 2025-11-25 (initialize, notifications/initialized, then requests in the
Mcp-Session-Id it gave; a 404 on that session initializes again once). The version found is kept per URL for the
process. An answer may be JSON or an SSE stream (the response to our id is read from it); the whole exchange,
every request of it, is bounded by its timeout (flightdeck.adapters.http_deadline: SSE keep-alives and progress
notifications do not extend it) and its size by MAX_RESPONSE_BYTES. No redirect is followed: a server must
answer where the allowlist says.
"""

from __future__ import annotations

import itertools
import json
import threading
import time
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from flightdeck import tracing
from flightdeck.adapters import http_deadline
from flightdeck.adapters.http_peers import SharedSession, json_bytes
from flightdeck.domain.mcp_ports import McpExchange
from flightdeck.observability import payload_sha256

if TYPE_CHECKING:
    import requests

MODERN = "2026-07-28"
LEGACY = "2025-11-25"
# Versions of the initialize handshake a server may answer with, which we speak (their requests look alike).
HANDSHAKE_VERSIONS = frozenset({LEGACY, "2025-06-18", "2025-03-26"})
UNSUPPORTED_VERSION = -32022
# A response larger than this is not read (the tool result is then refused as too large anyway).
MAX_RESPONSE_BYTES = 2_000_000
CLIENT_INFO = {"name": "flightdeck", "version": "0.1.0"}
_META_VERSION = "io.modelcontextprotocol/protocolVersion"
_META_CAPABILITIES = "io.modelcontextprotocol/clientCapabilities"
_META_INFO = "io.modelcontextprotocol/clientInfo"


class _Refused(Exception):
    """The server does not speak this protocol version (its answer, for a server known to speak it)."""

    def __init__(self, exchange: McpExchange):
        super().__init__(exchange.detail)
        self.exchange = exchange


class McpHttp:
    def __init__(self, session: requests.Session | SharedSession | None = None):
        self._session = session if isinstance(session, SharedSession) else SharedSession(session)
        self._ids = itertools.count(1)
        self._lock = threading.Lock()
        self._versions: dict[str, str] = {}  # url -> the version it answered in
        self._sessions: dict[str, tuple[str, str]] = {}  # url -> (Mcp-Session-Id, negotiated version), 2025-11-25

    def list_tools(self, url: str, token: str | None, timeout_s: float) -> McpExchange:
        return self._request(url, token, "tools/list", {}, timeout_s)

    def call_tool(
        self, url: str, token: str | None, tool: str, arguments: dict[str, Any], timeout_s: float
    ) -> McpExchange:
        return self._request(url, token, "tools/call", {"name": tool, "arguments": arguments}, timeout_s, name=tool)

    def _request(
        self, url: str, token: str | None, method: str, params: dict[str, Any], timeout_s: float, name: str = ""
    ) -> McpExchange:
        host = urlsplit(url)
        with tracing.mcp(
            method, "client", tool=name, more={"server.address": host.hostname, "server.port": host.port}
        ) as current:
            exchange = self._exchange(url, token, method, tracing.with_meta(params), timeout_s, name)
            tracing.mcp_outcome(current, exchange.outcome, exchange.result)
        return exchange

    def _exchange(
        self, url: str, token: str | None, method: str, params: dict[str, Any], timeout_s: float, name: str
    ) -> McpExchange:
        deadline = time.monotonic() + timeout_s
        version = self._versions.get(url)
        if version != LEGACY:
            try:
                exchange = self._modern(url, token, method, params, deadline, name)
            except _Refused as exc:
                if version == MODERN:  # it spoke 2026-07-28 before: a refusal now is its answer
                    return exc.exchange
            else:
                self._versions[url] = MODERN
                return exchange
        exchange = self._legacy(url, token, method, params, deadline)
        if exchange.outcome in ("ok", "rpc_error"):
            self._versions[url] = LEGACY
        return exchange

    def _modern(
        self, url: str, token: str | None, method: str, params: dict[str, Any], deadline: float, name: str
    ) -> McpExchange:
        meta = {_META_VERSION: MODERN, _META_CAPABILITIES: {}, _META_INFO: CLIENT_INFO}
        body = {
            "jsonrpc": "2.0",
            "id": next(self._ids),
            "method": method,
            "params": {**params, "_meta": {**params.get("_meta", {}), **meta}},
        }
        headers = {"MCP-Protocol-Version": MODERN, "Mcp-Method": method, **({"Mcp-Name": name} if name else {})}
        exchange, _ = self._post(url, token, body, headers, deadline, MODERN)
        # A 2025-11-25 server answers a request without its session 400 (-32600 "Missing session ID"), or 404, 405.
        # Only a first contact falls back (_request): a server known to speak 2026-07-28 has its refusal returned.
        unknown = exchange.http_status in (400, 404, 405)
        unsupported = exchange.outcome == "rpc_error" and (exchange.result or {}).get("code") == UNSUPPORTED_VERSION
        if unknown or unsupported:
            raise _Refused(exchange)
        return exchange

    def _legacy(self, url: str, token: str | None, method: str, params: dict[str, Any], deadline: float) -> McpExchange:
        for attempt in (1, 2):
            started = self._sessions.get(url)
            if started is None:
                started_or_fail = self._initialize(url, token, deadline)
                if isinstance(started_or_fail, McpExchange):
                    return started_or_fail
                started = started_or_fail
            session_id, version = started
            body = {"jsonrpc": "2.0", "id": next(self._ids), "method": method, "params": params}
            headers = {"MCP-Protocol-Version": version, **({"Mcp-Session-Id": session_id} if session_id else {})}
            exchange, _ = self._post(url, token, body, headers, deadline, version)
            if exchange.http_status == 404 and session_id and attempt == 1:
                self._sessions.pop(url, None)  # the server forgot the session: a new one, once
                continue
            return exchange
        return exchange

    def _initialize(self, url: str, token: str | None, deadline: float) -> tuple[str, str] | McpExchange:
        body = {
            "jsonrpc": "2.0",
            "id": next(self._ids),
            "method": "initialize",
            "params": {"protocolVersion": LEGACY, "capabilities": {}, "clientInfo": CLIENT_INFO},
        }
        exchange, response_headers = self._post(url, token, body, {}, deadline, LEGACY)
        if exchange.outcome != "ok" or exchange.result is None:
            return exchange
        version = exchange.result.get("protocolVersion")
        if version not in HANDSHAKE_VERSIONS:
            return McpExchange("protocol", detail=f"the server offers protocol version {version!r}", version=LEGACY)
        session_id = response_headers.get("mcp-session-id", "")
        headers = {"MCP-Protocol-Version": version, **({"Mcp-Session-Id": session_id} if session_id else {})}
        note, _ = self._post(
            url, token, {"jsonrpc": "2.0", "method": "notifications/initialized"}, headers, deadline, version
        )
        if note.outcome not in ("ok", "accepted"):
            return note
        self._sessions[url] = (session_id, version)
        return session_id, version

    def _post(
        self,
        url: str,
        token: str | None,
        body: dict[str, Any],
        headers: dict[str, str],
        deadline: float,
        version: str,
    ) -> tuple[McpExchange, dict[str, str]]:
        """One POST and its JSON-RPC answer, read within the deadline: (the exchange, the response headers)."""
        data = json_bytes(body)
        sent = payload_sha256(data)
        all_headers = {
            "Content-Type": "application/json",
            "Accept": "application/json, text/event-stream",
            **headers,
            **({"Authorization": f"Bearer {token}"} if token else {}),
        }
        session = self._session.get()
        import requests  # loaded by the session above

        def failed(outcome: str, detail: str) -> tuple[McpExchange, dict[str, str]]:
            return McpExchange(outcome, detail=detail[:300], request_sha256=sent, version=version), {}

        try:
            with http_deadline.exchange(session, "POST", url, deadline, data=data, headers=all_headers) as sending:
                resp = sending.response
                response_headers = {k.lower(): v for k, v in resp.headers.items()}

                def out(outcome: str, result: dict[str, Any] | None = None, detail: str = "") -> McpExchange:
                    return McpExchange(outcome, result, detail[:500], resp.status_code, sent, version)

                if "id" not in body:  # a notification: 202 and no body
                    return out("accepted" if resp.status_code in (200, 202) else "http"), response_headers
                event_stream = response_headers.get("content-type", "").startswith("text/event-stream")
                try:
                    raw = sending.read_body(MAX_RESPONSE_BYTES, _SseAnswered() if event_stream else None)
                except http_deadline.OutOfTime:
                    return out("timeout", detail="the answer did not come within the timeout"), response_headers
                except requests.RequestException as exc:
                    detail = f"the connection broke mid-answer: {type(exc).__name__}"
                    return out("unreachable", detail=detail), response_headers
                except http_deadline.TooLarge:
                    return out("too_large", detail=f"the answer exceeds {MAX_RESPONSE_BYTES} bytes"), response_headers
                return out(*_answer(resp.status_code, response_headers, raw, body["id"])), response_headers
        except http_deadline.OutOfTime:
            return failed("timeout", "no answer within the timeout")
        except requests.Timeout as exc:
            return failed("timeout", type(exc).__name__)
        except requests.RequestException as exc:
            return failed("unreachable", f"{type(exc).__name__}: {exc}")


def _answer(
    status: int, headers: dict[str, str], raw: bytes, request_id: Any
) -> tuple[str, dict[str, Any] | None, str]:
    """(outcome, result, detail) of an answer read whole."""
    if 300 <= status < 400:
        return "http", None, "a redirect (not followed)"
    kind = headers.get("content-type", "").split(";")[0].strip().lower()
    message = _sse_answer(raw, request_id) if kind == "text/event-stream" else _json(raw)
    if not isinstance(message, dict) or message.get("jsonrpc") != "2.0":
        if status >= 400:
            return "http", None, _text(raw)
        return "protocol", None, "the answer is not a JSON-RPC message"
    if isinstance(message.get("error"), dict):
        error = message["error"]
        return "rpc_error", error, f"{error.get('code')}: {error.get('message', '')}"
    if status >= 400:
        return "http", None, _text(raw)
    if message.get("id") != request_id or not isinstance(message.get("result"), dict):
        return "protocol", None, "the answer is not the result of this request"
    return "ok", message["result"], ""


class _SseAnswered:
    """Whether an SSE stream's answer is in (the last event we wait for: reading stops there), each event parsed
    once: a server sending many small reads costs a scan of each, not of the whole stream so far."""

    def __init__(self) -> None:
        self._pending = bytearray()  # since the last event's end (appended in place: many small reads stay cheap)

    def __call__(self, chunk: bytes) -> bool:
        self._pending += chunk
        seam = self._pending[-len(chunk) - 3 :]  # an event's end may straddle two reads
        if b"\n\n" not in seam and b"\r\n\r\n" not in seam:
            return False
        *events, rest = bytes(self._pending).replace(b"\r\n", b"\n").split(b"\n\n")
        self._pending = bytearray(rest)
        return _sse_answer(b"\n\n".join(events), None, final_only=True) is not None


def _json(raw: bytes) -> Any:
    try:
        return json.loads(raw)
    except ValueError:
        return None


def _text(raw: bytes) -> str:
    return raw[:300].decode("utf-8", "replace")


def _sse_answer(raw: bytes, request_id: Any, final_only: bool = False) -> Any:
    """The JSON-RPC response among an SSE stream's events (notifications and pings skipped): the one for
    request_id, or with final_only any response at all (to stop reading)."""
    text = raw.decode("utf-8", "replace").replace("\r\n", "\n")
    for event in text.split("\n\n"):
        data = "\n".join(line[5:].lstrip() for line in event.split("\n") if line.startswith("data:"))
        if not data:
            continue
        message = _json(data.encode())
        if not isinstance(message, dict) or ("result" not in message and "error" not in message):
            continue
        if final_only or message.get("id") == request_id:
            return message
    return None
