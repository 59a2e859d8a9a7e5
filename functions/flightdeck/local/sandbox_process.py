"""What runs inside a sandbox process (flightdeck.local.sandbox): its init (the host's initializer, then the
handler module, failing as Lambda's runtime reports it), then one invocation at a time until the host goes away,
a stream handed over chunk by chunk as the host asks for each; an unhandled error logged with its traceback.
"""

from __future__ import annotations

import importlib
import os
import signal
import sys
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

from flightdeck.api.sse import StreamReply
from flightdeck.local.invocation import LocalLambdaContext, error_payload

# (event, invoke) -> invoke()'s result: what an initializer may return.
Wrapper = Callable[[dict[str, Any], Callable[[], Any]], Any]


@dataclass(frozen=True)
class Spec:
    module_name: str
    function_name: str
    environment: dict[str, str]
    initializer: str | None


def serve(connection: Connection, output: Connection, spec: Spec) -> None:
    """A sandbox's life: init, then one invocation at a time until the host goes away."""
    # The host ends its sandboxes itself (close(), or at its exit), once in-flight invocations had
    # their grace period: a stop signal to the host's process group reaches them too.
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, signal.SIG_IGN)
    for fd in (1, 2):
        os.dup2(output.fileno(), fd)
    output.close()
    os.environ.clear()
    os.environ.update(spec.environment)
    try:
        wrapper = _initializer(spec)
        entry = _entry_point(spec.module_name)
    except _InitError as failure:
        print(f"[ERROR] {failure.payload['errorType']}: {failure.payload['errorMessage']}", file=sys.stderr)
        traceback.print_exception(failure.__cause__ or failure, file=sys.stderr)
        sys.stderr.flush()
        connection.send(("ready", failure.payload))
        return
    connection.send(("ready", None))
    while True:
        try:
            message = connection.recv()
        except (EOFError, OSError):
            return  # the host is gone
        if message[0] == "invoke":
            _invoke(connection, entry, wrapper, message[1], message[2])
        sys.stdout.flush()
        sys.stderr.flush()


class _InitError(Exception):
    def __init__(self, error_type: str, message: str, cause: BaseException | None):
        super().__init__(message)
        self.payload = {
            "errorType": error_type,
            "errorMessage": message,
            "stackTrace": traceback.format_tb(cause.__traceback__) if cause else [],
        }


def _initializer(spec: Spec) -> Wrapper | None:
    if spec.initializer is None:
        return None
    module_name, _, name = spec.initializer.partition(":")
    try:
        initializer = getattr(importlib.import_module(module_name), name)
        wrapper: Wrapper | None = initializer(spec.function_name, spec.module_name)
    except Exception as exc:
        raise _InitError("Runtime.InitError", f"sandbox initializer {spec.initializer} failed: {exc!r}", exc) from exc
    return wrapper


def _entry_point(module_name: str) -> Callable[[dict[str, Any], Any], Any]:
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:
        raise _InitError(
            "Runtime.ImportModuleError", f"Unable to import module '{module_name}': {type(exc).__name__}: {exc}", exc
        ) from exc
    entry = getattr(module, "handler", None)
    if not callable(entry):
        raise _InitError("Runtime.HandlerNotFound", f"Handler 'handler' missing on module '{module_name}'", None)
    return entry  # type: ignore[no-any-return]


def _invoke(
    connection: Connection,
    entry: Callable[[dict[str, Any], Any], Any],
    wrapper: Wrapper | None,
    event: dict[str, Any],
    context: LocalLambdaContext,
) -> None:
    def call() -> Any:
        return entry(event, context)

    try:
        result = wrapper(event, call) if wrapper is not None else call()
    except Exception as exc:
        connection.send(("error", _logged(exc)))
        return
    if isinstance(result, StreamReply):
        _stream(connection, result)
        return
    try:
        connection.send(("result", result))
    except Exception as exc:  # not picklable: Lambda cannot serialize it either
        connection.send(
            ("error", {"errorType": "Runtime.MarshalError", "errorMessage": f"Unable to marshal response: {exc}"})
        )


def _stream(connection: Connection, reply: StreamReply) -> None:
    """Hand the stream over chunk by chunk, each produced when the host asks for it."""
    chunks = iter(reply.chunks)
    connection.send(("stream", reply.status, dict(reply.headers), reply.outcome))
    try:
        while True:
            try:
                request = connection.recv()
            except (EOFError, OSError):
                return  # the host is gone: the generator is closed below
            if request[0] == "close":
                _close(chunks)
                connection.send(("closed",))
                return
            try:
                chunk = next(chunks)
            except StopIteration:
                connection.send(("end",))
                return
            except Exception as exc:
                connection.send(("error", _logged(exc)))
                return
            connection.send(("chunk", chunk))
    finally:
        _close(chunks)


def _close(chunks: Iterator[bytes]) -> None:
    close = getattr(chunks, "close", None)
    if callable(close):
        try:
            close()
        except Exception as exc:
            _logged(exc)


def _logged(exc: BaseException) -> dict[str, Any]:
    """An unhandled error as the Lambda runtime reports it: a log line with its traceback, and its payload."""
    print(f"[ERROR] {type(exc).__name__}: {exc}", file=sys.stderr)
    traceback.print_exception(exc, file=sys.stderr)
    sys.stderr.flush()
    return error_payload(exc)
