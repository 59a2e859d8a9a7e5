"""Lambda's Invoke API for one agent's functions, on loopback, as the functions call it on AWS.

    POST /2015-03-31/functions/{name}/invocations
      X-Amz-Invocation-Type: Event            -> 202 at once; the function runs on the asynchronous pool
      X-Amz-Invocation-Type: RequestResponse  -> the function runs now: 200 with its result
                                                 (X-Amz-Function-Error: Unhandled when it raised)
      X-Amz-Invocation-Type: DryRun           -> 204

Production code reaches this only through boto3's standard AWS_ENDPOINT_URL_LAMBDA, which
flightdeck.local.stack sets for each agent. Hand-written because nothing else does it in-process:
moto's Lambda runs a function only in Docker (without it an invoke returns a canned answer and runs
nothing), and no library puts the Invoke API in front of Python handlers in this process.

Asynchronous invocations run as Lambda runs them: queued, then run on a bounded pool of workers; a
failed run (the handler raised) is run again after a delay, `retry_attempts` times (Lambda's default
2), then the event goes, as Lambda's invocation record, to the function's on-failure destination
queue (flightdeck.topology.ASYNC_INVOKES), or is dropped with an error log when it has none. An event
older than its maximum age is not run but sent there too. Lambda waits about one and then two
minutes between attempts; here the waits are seconds (RETRY_DELAYS_S), so a failure shows up
while one watches. The queue lives in this process: events not yet run when it stops are lost.
"""

from __future__ import annotations

import heapq
import http.server
import itertools
import json
import logging
import re
import socket
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any
from urllib.parse import unquote

from flightdeck import topology
from flightdeck.api.sse import StreamReply
from flightdeck.local.invocation import Function, FunctionRegistry, error_payload, log_failure
from flightdeck.local.net import QuietDisconnects

log = logging.getLogger("flightdeck.local")

INVOKE_PATH = re.compile(r"^/2015-03-31/functions/(?P<name>[^/?]+)/invocations(?:\?.*)?$")
# Lambda's defaults for a function without an EventInvokeConfig.
DEFAULT_RETRY_ATTEMPTS = 2
DEFAULT_MAX_EVENT_AGE_S = 21_600
# Seconds before the first and the second retry (Lambda: about 60 and 120).
RETRY_DELAYS_S = (1.0, 2.0)
ASYNC_WORKERS = 4

# (queue URL, message body) -> None: where an on-failure destination record is sent.
SendToQueue = Callable[[str, str], None]


@dataclass(frozen=True)
class AsyncConfig:
    retry_attempts: int = DEFAULT_RETRY_ATTEMPTS
    max_event_age_s: float = DEFAULT_MAX_EVENT_AGE_S
    on_failure_queue_url: str = ""


@dataclass(order=True)
class _Job:
    due: float
    seq: int
    function: Function = field(compare=False)
    event: Any = field(compare=False)
    config: AsyncConfig = field(compare=False)
    request_id: str = field(compare=False)
    queued_at: float = field(compare=False)
    attempts: int = field(default=0, compare=False)


class AsyncInvoker:
    """Lambda's asynchronous invocation: an event queue, a bounded worker pool, retries, a destination."""

    def __init__(
        self,
        send_to_queue: SendToQueue,
        *,
        workers: int = ASYNC_WORKERS,
        retry_delays_s: tuple[float, ...] = RETRY_DELAYS_S,
        clock: Callable[[], float] = time.monotonic,
    ):
        if workers < 1:
            raise ValueError("at least one worker")
        self.send_to_queue = send_to_queue
        self.retry_delays_s = retry_delays_s
        self.clock = clock
        self._heap: list[_Job] = []
        self._seq = itertools.count()
        self._ready = threading.Condition()
        self._running = 0
        self._stopped = False
        self._threads = [
            threading.Thread(target=self._work, name=f"lambda-async-{i}", daemon=True) for i in range(workers)
        ]
        for thread in self._threads:
            thread.start()

    def submit(self, function: Function, event: Any, config: AsyncConfig) -> str:
        """Queue one event for the function; returns its request id."""
        now = self.clock()
        job = _Job(now, next(self._seq), function, event, config, str(uuid.uuid4()), now)
        self._push(job)
        return job.request_id

    def idle(self) -> bool:
        """Nothing queued, nothing running (tests and the bench wait for it)."""
        with self._ready:
            return not self._heap and not self._running

    def stop(self, timeout_s: float = 0.0) -> int:
        """Stop taking work; wait up to timeout_s for the runs in progress. Returns the events never run."""
        with self._ready:
            self._stopped = True
            left = len(self._heap)
            self._ready.notify_all()
        deadline = time.monotonic() + timeout_s
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        return left

    def _push(self, job: _Job) -> None:
        with self._ready:
            heapq.heappush(self._heap, job)
            self._ready.notify()

    def _next(self) -> _Job | None:
        with self._ready:
            while not self._stopped:
                if self._heap:
                    wait = self._heap[0].due - self.clock()
                    if wait <= 0:
                        self._running += 1
                        return heapq.heappop(self._heap)
                    self._ready.wait(wait)
                else:
                    self._ready.wait()
            return None

    def _work(self) -> None:
        while (job := self._next()) is not None:
            try:
                self._run(job)
            finally:
                with self._ready:
                    self._running -= 1

    def _run(self, job: _Job) -> None:
        if self.clock() - job.queued_at > job.config.max_event_age_s:
            self._give_up(job, "EventAgeExceeded", None)
            return
        job.attempts += 1
        try:
            job.function.invoke(job.event)
            return
        except Exception as exc:  # a failed invocation, as Lambda sees it
            log_failure(
                log,
                exc,
                "async invocation %s of %s failed (attempt %d of %d)",
                job.request_id,
                job.function.function_name,
                job.attempts,
                1 + job.config.retry_attempts,
            )
            error = exc
        if job.attempts <= job.config.retry_attempts:
            delay = self.retry_delays_s[min(job.attempts, len(self.retry_delays_s)) - 1] if self.retry_delays_s else 0.0
            job.due, job.seq = self.clock() + delay, next(self._seq)
            self._push(job)
            return
        self._give_up(job, "RetriesExhausted", error)

    def _give_up(self, job: _Job, condition: str, error: BaseException | None) -> None:
        url = job.config.on_failure_queue_url
        if not url:
            log.error(
                "async invocation %s of %s dropped (%s): no on-failure destination",
                job.request_id,
                job.function.function_name,
                condition,
            )
            return
        record = invocation_record(job.function, job.request_id, job.event, condition, job.attempts, error)
        try:
            self.send_to_queue(url, json.dumps(record))
        except Exception:
            log.exception(
                "async invocation %s of %s: its on-failure record could not be sent",
                job.request_id,
                job.function.function_name,
            )


def invocation_record(
    function: Function, request_id: str, event: Any, condition: str, attempts: int, error: BaseException | None
) -> dict[str, Any]:
    """What Lambda sends an on-failure destination for an asynchronous invocation it gave up on."""
    now = datetime.now(UTC)
    record: dict[str, Any] = {
        "version": "1.0",
        "timestamp": now.strftime("%Y-%m-%dT%H:%M:%S.") + f"{now.microsecond // 1000:03d}Z",
        "requestContext": {
            "requestId": request_id,
            "functionArn": f"{function.new_context().invoked_function_arn}:$LATEST",
            "condition": condition,
            "approximateInvokeCount": attempts,
        },
        "requestPayload": event,
    }
    if error is not None:
        record["responseContext"] = {"statusCode": 200, "executedVersion": "$LATEST", "functionError": "Unhandled"}
        record["responsePayload"] = error_payload(error)
    return record


def async_configs(registry: FunctionRegistry, queue_url: Callable[[topology.QueueSpec], str]) -> dict[str, AsyncConfig]:
    """Function name -> its asynchronous invocation settings, from topology.ASYNC_INVOKES."""
    configs = {}
    for spec in topology.ASYNC_INVOKES:
        configs[registry.function(spec.handler).function_name] = AsyncConfig(
            retry_attempts=spec.retry_attempts,
            max_event_age_s=spec.max_event_age_s,
            on_failure_queue_url=queue_url(topology.QUEUES_BY_KEY[spec.on_failure_queue]),
        )
    return configs


class LambdaApi:
    """The Invoke operation over the functions of one registry."""

    def __init__(self, registry: FunctionRegistry, invoker: AsyncInvoker, configs: dict[str, AsyncConfig]):
        self.registry = registry
        self.invoker = invoker
        self.configs = configs

    def function(self, name_or_arn: str) -> Function | None:
        # A name, or a (partial) ARN ending in function:<name>[:qualifier].
        name = name_or_arn.split(":function:", 1)[1].split(":", 1)[0] if ":function:" in name_or_arn else name_or_arn
        return self.registry.by_name(name)

    def invoke(self, name: str, invocation_type: str, body: bytes) -> tuple[int, dict[str, str], bytes]:
        function = self.function(name)
        if function is None:
            return error_answer(404, "ResourceNotFoundException", f"Function not found: {name}")
        if invocation_type not in ("Event", "RequestResponse", "DryRun"):
            return error_answer(
                400,
                "InvalidParameterValueException",
                f"X-Amz-Invocation-Type must be Event, RequestResponse or DryRun, not {invocation_type!r}",
            )
        try:
            event = json.loads(body) if body.strip() else {}
        except ValueError as exc:
            return error_answer(400, "InvalidRequestContentException", f"Could not parse request body into json: {exc}")
        if invocation_type == "DryRun":
            return 204, {}, b""
        if invocation_type == "Event":
            request_id = self.invoker.submit(function, event, self.configs.get(function.function_name, AsyncConfig()))
            return 202, {"x-amzn-RequestId": request_id}, b""
        try:
            result = function.invoke(event)
        except Exception as exc:
            log_failure(log, exc, "invocation of %s failed", function.function_name)
            return (
                200,
                {"X-Amz-Function-Error": "Unhandled", "X-Amz-Executed-Version": "$LATEST"},
                json.dumps(error_payload(exc)).encode(),
            )
        if isinstance(result, StreamReply):
            # A streaming function's stream is served by the gateway (InvokeWithResponseStream on
            # AWS), not here: closing it gives its sandbox back.
            getattr(result.chunks, "close", lambda: None)()
            return error_answer(400, "InvalidParameterValueException", f"{function.function_name} streams its response")
        return 200, {"X-Amz-Executed-Version": "$LATEST"}, json.dumps(result, default=str).encode()


def error_answer(status: int, code: str, message: str) -> tuple[int, dict[str, str], bytes]:
    """A Lambda API error, as botocore reads it (the code in x-amzn-ErrorType)."""
    return status, {"x-amzn-ErrorType": code}, json.dumps({"Type": "User", "message": message}).encode()


class _Handler(http.server.BaseHTTPRequestHandler):
    server: LambdaApiServer
    protocol_version = "HTTP/1.1"

    def do_POST(self) -> None:  # noqa: N802 - the http.server interface
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        match = INVOKE_PATH.match(self.path)
        if match is None:
            self._answer(*error_answer(404, "UnknownOperationException", f"no operation at POST {self.path}"))
            return
        invocation_type = self.headers.get("X-Amz-Invocation-Type") or "RequestResponse"
        self._answer(*self.server.api.invoke(unquote(match.group("name")), invocation_type, body))

    def do_GET(self) -> None:  # noqa: N802
        self._answer(*error_answer(404, "UnknownOperationException", f"no operation at GET {self.path}"))

    def _answer(self, status: int, headers: dict[str, str], body: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        for name, value in headers.items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - quiet: one line per think is noise
        log.debug("lambda api: " + format, *args)


class LambdaApiServer(QuietDisconnects, http.server.ThreadingHTTPServer):
    """The Invoke API on an already listening loopback socket."""

    daemon_threads = True

    def __init__(self, api: LambdaApi, listening_socket: socket.socket):
        self.api = api
        self.address_family = listening_socket.family
        super().__init__(listening_socket.getsockname()[:2], _Handler, bind_and_activate=False)
        self.socket.close()  # the one TCPServer made; use the given socket instead
        self.socket = listening_socket
        self.server_address = listening_socket.getsockname()[:2]

    @property
    def port(self) -> int:
        return int(self.server_address[1])

    def start_background(self) -> threading.Thread:
        thread = threading.Thread(
            target=self.serve_forever, kwargs={"poll_interval": 0.1}, name="lambda-api", daemon=True
        )
        thread.start()
        return thread
