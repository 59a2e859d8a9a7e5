"""POST /a2a ahead of the resolver: message/stream and tasks/resubscribe as Server-Sent Events.

With STREAMING on, the a2a function's entry point hands every request that passed
authentication and the size and type checks here first (flightdeck.api.resolver.http_handler's
`stream` hook). The body is parsed once (a2a_routes.validate_rpc):

- a refused request, or any other method: its JSON-RPC response, as the route would give it;
- message/stream, tasks/resubscribe: `text/event-stream`, each event's `id:` the stream's position after it
  (Last-Event-ID resumes there: flightdeck.domain.resume), each `data:` line a JSON-RPC
  response with the request's id whose result is an A2A event (flightdeck.domain.a2a.stream),
  as a2a-sdk's client reads them; numbered, and shown to a client that asks for the stream-resumption
  extension (flightdeck.domain.a2a.resumption). A refusal of the method itself (a task of another peer,
  bad parts, a busy context, v1.0's SubscribeToTask on a finished task) is, in v0.3, the one event of
  its stream: a JSON-RPC error response; in v1.0 that response alone, as JSON.

With STREAMING off this hook answers nothing and the resolver's route answers -32004.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from typing import Any

from flightdeck.api.a2a_routes import (
    STREAM_METHODS,
    STREAM_TO_CORE,
    RpcCall,
    rpc_error,
    run_rpc,
    validate_rpc,
    with_idempotency,
)
from flightdeck.api.a2a_version import V10, version_asked
from flightdeck.api.auth import current_peer
from flightdeck.api.sse import StreamReply, comment, frame, last_event_id
from flightdeck.domain import resume
from flightdeck.domain.a2a import resumption
from flightdeck.domain.a2a import stream as a2a_stream
from flightdeck.domain.a2a.protocol import INTERNAL_ERROR, INVALID_PARAMS, A2AError
from flightdeck.domain.a2a.wire_v1 import event_to_wire
from flightdeck.domain.records import ItemTooLargeError
from flightdeck.domain.streaming import Note, Pace
from flightdeck.observability import count, logger
from flightdeck.settings import get_settings
from flightdeck.wiring import deps


def _json(payload: dict[str, Any]) -> dict[str, Any]:
    return {
        "statusCode": 200,
        "headers": {"Content-Type": "application/json"},
        "body": json.dumps(payload),
        "isBase64Encoded": False,
    }


def _raw_body(event: dict[str, Any]) -> str:
    body = event.get("body") or ""
    if event.get("isBase64Encoded"):
        # Not UTF-8 was refused before (flightdeck.api.resolver._not_json).
        body = base64.b64decode(body).decode("utf-8")
    return body


def _remaining_ms(context: Any) -> int | None:
    getter = getattr(context, "get_remaining_time_in_millis", None)
    return int(getter()) if callable(getter) else None


def _frames(request_id: Any, events: Iterator[Any], version: str) -> Iterator[bytes]:
    try:
        for item in events:
            if isinstance(item, Note):
                yield comment(item.text)
            else:
                result = event_to_wire(item.event) if version == V10 else item.event
                yield frame({"jsonrpc": "2.0", "id": request_id, "result": result}, event_id=item.id)
    except Exception:  # a read failed mid-stream: say so in the stream's own terms, then end it
        logger.exception("A2A stream failed")
        yield frame(
            rpc_error(
                request_id,
                INTERNAL_ERROR,
                "Internal error: the stream could not go on; subscribe to the task again to follow it",
                version=version,
            )
        )


def _refused(payload: dict[str, Any], version: str) -> StreamReply | dict[str, Any]:
    """A refusal before the stream opens: in v1.0 one JSON-RPC response (as a2a-sdk 1.x answers it; its client and
    the TCK read it so), in v0.3 the stream's one event (a2a-sdk 0.3's client reads only Server-Sent Events)."""
    if version == V10:
        return _json(payload)
    code = payload.get("error", {}).get("code")
    return StreamReply(
        iter([frame(payload)]), outcome={"statusCode": 200, "body": json.dumps({"error": {"code": code}})}
    )


def open_stream(event: dict[str, Any], context: Any) -> StreamReply | dict[str, Any] | None:
    """The answer to one POST /a2a: a stream, a JSON-RPC response (proxy response), or None when off."""
    d = deps()
    http = (event.get("requestContext") or {}).get("http") or {}
    if get_settings().streaming != "on" or (event.get("httpMethod") or http.get("method")) != "POST":
        return None  # the resolver's route answers (a GET: 405)
    call = validate_rpc(_raw_body(event), version_asked(event.get("headers"), event.get("queryStringParameters")))
    remaining_ms = _remaining_ms(context)
    if isinstance(call, dict):
        return _json(call)
    call = with_idempotency(call, event.get("headers"))
    if call.method not in STREAM_METHODS:
        return _json(run_rpc(d, call, remaining_ms, current_peer()))
    headers, metadata = event.get("headers"), getattr(call.params, "metadata", None)
    given = resumption.cursor_given(last_event_id(headers), metadata)
    return _stream(d, call, remaining_ms, given, shown=resumption.asked(headers, metadata))


def _stream(
    d: Any, call: RpcCall, remaining_ms: int | None, given: str | None, shown: bool
) -> StreamReply | dict[str, Any]:
    """given: the cursor the request resumes from; shown: it asked for the stream-resumption extension."""
    cursor = resume.decode(given)
    pace = Pace.of(d.settings, remaining_ms)
    caller = current_peer()
    try:
        params = call.params if call.version == V10 else STREAM_TO_CORE[call.method](call.params)
        if call.method in ("message/stream", "SendStreamingMessage"):
            events = a2a_stream.message_stream(d, params, pace, remaining_ms, caller, cursor)
        else:
            events = a2a_stream.resubscribe(d, params, pace, caller, cursor, refuse_finished=call.version == V10)
    except A2AError as exc:
        return _refused(rpc_error(call.id, exc.code, exc.message, exc.data, version=call.version), call.version)
    except ItemTooLargeError as exc:
        message = f"Invalid params: the message is too large to store ({exc})"
        return _refused(rpc_error(call.id, INVALID_PARAMS, message, version=call.version), call.version)
    except Exception:
        logger.exception("A2A stream could not start", extra={"method": call.method})
        return _refused(
            rpc_error(
                call.id, INTERNAL_ERROR, "Internal error: the request could not be processed", version=call.version
            ),
            call.version,
        )
    count("A2AStreamsOpened")
    reply = StreamReply(_frames(call.id, resumption.numbered(events, cursor, given is not None, shown), call.version))
    if shown:
        reply.headers["A2A-Extensions"] = resumption.STREAM_RESUMPTION_URI
    return reply
