"""Counts one process's AWS requests and Lambda invocations, for `flightdeck bench`.

The agents of a local stack are separate processes, and each runs its functions in sandboxes of
their own (flightdeck.local.sandbox), so the counting lives in them (flightdeck.bench.counting_host):
with FLIGHTDECK_COUNT_AWS_CALLS=<dir> in its environment, an agent host calls `install(<dir>, agent)`
at start, and each of its sandboxes `install(<dir>, agent, function=...)` before its handler is
imported. From then on every botocore client created in the process (any session: the adapters',
Powertools' SecretsProvider's, the pollers') reports each API call (`before-parameter-build` and
`after-call` events), and in a sandbox `observe_invocation` wraps each invocation. Each becomes one
JSON line in <dir>/<agent>-<pid>.jsonl. An AWS call made in a sandbox names its function ("fn");
one made by the host (the pollers standing in for Lambda's event source mappings) has fn null.
Nothing here changes a request or a response.
"""

from __future__ import annotations

import functools
import json
import os
import resource
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from flightdeck import topology
from flightdeck.bench.dynamo_units import item_size

ENV = "FLIGHTDECK_COUNT_AWS_CALLS"
_CONTEXT_KEY = "flightdeck_bench"
# The function whose sandbox this process is (None: the agent host, or an in-process measurement).
_function: str | None = None


class FileSink:
    """Appends one JSON line per record; safe to share between threads."""

    def __init__(self, path: Path, agent: str):
        self.path = path
        self.agent = agent
        self._lock = threading.Lock()
        self._file = open(path, "a", buffering=1, encoding="utf-8")  # noqa: SIM115 - lives as long as the process

    def write(self, record: dict[str, Any]) -> None:
        line = json.dumps({"agent": self.agent, **record}, separators=(",", ":"))
        with self._lock:
            self._file.write(line + "\n")


class ListSink:
    """Keeps records in memory (in-process measurements)."""

    def __init__(self, agent: str = ""):
        self.agent = agent
        self.records: list[dict[str, Any]] = []
        self._lock = threading.Lock()

    def write(self, record: dict[str, Any]) -> None:
        with self._lock:
            self.records.append({"agent": self.agent, **record})


Sink = Any  # anything with .write(record)


def install(directory: str | os.PathLike[str], agent: str, function: str | None = None) -> FileSink:
    """Count every AWS call of this process into <directory>/<agent>-<pid>.jsonl; returns the sink.

    function: the handler this process is a sandbox of, named by each of its AWS calls.
    """
    global _function
    Path(directory).mkdir(parents=True, exist_ok=True)
    sink = FileSink(Path(directory) / f"{agent}-{os.getpid()}.jsonl", agent)
    _function = function
    _patch_client_creation(sink)
    return sink


def _patch_client_creation(sink: Sink) -> None:
    import botocore.session

    original = botocore.session.Session.create_client
    if getattr(original, "_flightdeck_bench", False):
        return

    @functools.wraps(original)
    def create_client(self: Any, *args: Any, **kwargs: Any) -> Any:
        client = original(self, *args, **kwargs)
        attach(client, sink)
        return client

    create_client._flightdeck_bench = True  # type: ignore[attr-defined]
    botocore.session.Session.create_client = create_client  # type: ignore[method-assign]


def attach(client: Any, sink: Sink) -> Any:
    """Report every API call of one botocore client to sink; returns the client."""
    client.meta.events.register("before-parameter-build", _before_call)
    client.meta.events.register("after-call", functools.partial(_after_call, sink))
    return client


# --- invocations ------------------------------------------------------------------------


def event_source(event: Any) -> tuple[str, int, str]:
    """(kind, records, route) of a Lambda event: http (API Gateway proxy), sqs, schedule, or invoke (any
    other event: one passed to Lambda's Invoke API, as the thinks' asynchronous invokes are)."""
    if isinstance(event, dict):
        if "httpMethod" in event:
            return "http", 1, f"{event.get('httpMethod')} {event.get('resource')}"
        if event.get("version") == "2.0" and isinstance(event.get("requestContext"), dict):
            # A function URL's event (the lean front door): no resource template, the route from the path.
            method = (event["requestContext"].get("http") or {}).get("method")
            route = topology.route_at(method, event.get("rawPath"))
            return "http", 1, f"{method} {route.path if route else event.get('rawPath')}"
        records = event.get("Records")
        if isinstance(records, list) and records and records[0].get("eventSource") == "aws:sqs":
            return "sqs", len(records), records[0].get("eventSourceARN", "").rsplit(":", 1)[-1]
        if event.get("source") == "aws.events":
            return "schedule", 1, ""
    return "invoke", 1, ""


def observe_invocation(sink: Sink, fn: str, event: dict[str, Any], call: Callable[[], Any]) -> Any:
    """Run one invocation of handler fn (call()) and record it: when, how long, whether it failed."""
    kind, records, route = event_source(event)
    started = time.perf_counter()
    status: int | None = None
    ok = False
    streamed = False
    try:
        result = call()
        ok = True
        if kind == "http" and isinstance(result, dict):
            status = result.get("statusCode")
        if hasattr(result, "chunks"):  # a stream (flightdeck.api.sse): the invocation lasts as long as it
            streamed = True
            result.chunks = _streaming(
                sink, result.chunks, lambda: _record(fn, kind, records, route, started, True, result.status, event)
            )
        return result
    finally:
        if not streamed:
            sink.write(_record(fn, kind, records, route, started, ok, status, event))


def _record(
    fn: str, kind: str, records: int, route: str, started: float, ok: bool, status: Any, event: dict[str, Any]
) -> dict[str, Any]:
    record = {
        "k": "inv",
        "t": time.time(),
        "fn": fn,
        "src": kind,
        "n": records,
        "route": route,
        "ms": round((time.perf_counter() - started) * 1000, 3),
        "ok": ok,
        "status": status,
        # The sandbox's peak resident memory so far (Linux: KB), the shared preload it was forked with included.
        "rss_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
    }
    if kind == "sqs" and route.endswith("-timers"):
        record["timers"] = _timer_messages(event)
    return record


def _streaming(sink: Sink, chunks: Any, record: Callable[[], dict[str, Any]]) -> Iterator[bytes]:
    """The stream's chunks; its invocation recorded when it ends."""
    try:
        yield from chunks
    finally:
        getattr(chunks, "close", lambda: None)()
        sink.write({**record(), "stream": True})


def _timer_messages(event: dict[str, Any]) -> list[dict[str, Any]]:
    """When each deadline-timer message was sent and first received (timeout lateness is read from them)."""
    out = []
    for message in event.get("Records", []):
        try:
            body = json.loads(message.get("body") or "{}")
        except ValueError:
            body = {}
        attributes = message.get("attributes") or {}
        out.append(
            {
                "session_id": body.get("session_id"),
                "turn": body.get("turn"),
                "deadline_ms": body.get("deadline_ms"),
                "sent_ms": int(attributes.get("SentTimestamp") or 0),
                "first_received_ms": int(attributes.get("ApproximateFirstReceiveTimestamp") or 0),
            }
        )
    return out


# --- AWS calls --------------------------------------------------------------------------


def _key_of(key: dict[str, Any] | None) -> tuple[str, str]:
    key = key or {}
    pk = next(iter(key.get("pk", {}).values()), "")
    sk = next(iter(key.get("sk", {}).values()), "")
    return str(pk), str(sk)


def _kind(sk: str) -> str:
    return sk.split("#", 1)[0] or "?"


def _dynamodb_write(op: str, body: dict[str, Any], transactional: bool) -> dict[str, Any]:
    item = body.get("Item")
    pk, sk = _key_of(item if item is not None else body.get("Key"))
    entry: dict[str, Any] = {
        "op": op,
        "table": body.get("TableName"),
        "pk": pk,
        "sk": sk,
        "kind": _kind(sk),
        "txn": transactional,
    }
    if item is not None:
        entry["size"] = item_size(item)
    return entry


def summarize_request(service: str, operation: str, params: dict[str, Any]) -> dict[str, Any]:
    """What the accounting needs to know about one request, from its API parameters."""
    if service == "dynamodb":
        if operation == "TransactWriteItems":
            writes = []
            for entry in params.get("TransactItems", []):
                ((op, body),) = entry.items()
                writes.append(_dynamodb_write(op, body, transactional=True))
            return {"writes": writes}
        if operation in ("PutItem", "UpdateItem", "DeleteItem"):
            return {"writes": [_dynamodb_write(operation[:-4], params, transactional=False)]}
        if operation in ("GetItem", "Query", "Scan"):
            pk, sk = _key_of(params.get("Key"))
            return {
                "table": params.get("TableName"),
                "index": params.get("IndexName"),
                "consistent": bool(params.get("ConsistentRead")),
                "kind": _kind(sk) if sk else None,
            }
        return {}
    if service == "sqs":
        summary: dict[str, Any] = {"queue": str(params.get("QueueUrl", "")).rsplit("/", 1)[-1]}
        if "Entries" in params:
            summary["entries"] = len(params["Entries"])
        if "MessageBody" in params:
            summary["bytes"] = len(str(params["MessageBody"]).encode("utf-8"))
        return summary
    return {}


def _before_call(params: dict[str, Any], model: Any, context: dict[str, Any], **_: Any) -> None:
    started = time.perf_counter()
    try:
        context[_CONTEXT_KEY] = summarize_request(model.service_model.service_name, model.name, params)
    except Exception as exc:  # counting must never break a request
        context[_CONTEXT_KEY] = {"summary_error": repr(exc)}
    context[_CONTEXT_KEY + "_t0"] = started


def _after_call(
    sink: Sink, http_response: Any, parsed: dict[str, Any], model: Any, context: dict[str, Any], **_: Any
) -> None:
    try:
        service, operation = model.service_model.service_name, model.name
        record: dict[str, Any] = {
            "k": "aws",
            "t": time.time(),
            "fn": _function,
            "svc": service,
            "op": operation,
            "status": getattr(http_response, "status_code", None),
            "err": (parsed.get("Error") or {}).get("Code"),
            "ms": round((time.perf_counter() - context.get(_CONTEXT_KEY + "_t0", time.perf_counter())) * 1000, 3),
            **context.get(_CONTEXT_KEY, {}),
        }
        if service == "dynamodb":
            if operation == "GetItem":
                record["bytes"] = item_size(parsed.get("Item"))
            elif operation in ("Query", "Scan"):
                record["bytes"] = sum(item_size(i) for i in parsed.get("Items", []))
                record["count"] = parsed.get("Count")
                record["scanned"] = parsed.get("ScannedCount")
            if record["err"] == "TransactionCanceledException":
                record["reasons"] = [r.get("Code") for r in parsed.get("CancellationReasons", [])]
        elif service == "sqs" and operation == "ReceiveMessage":
            record["n"] = len(parsed.get("Messages", []))
        sink.write(record)
    except Exception as exc:  # counting must never break a request
        sink.write({"k": "error", "t": time.time(), "detail": repr(exc)})
