"""Invoking Lambda handlers in-process, the way the Lambda runtime would.

Every entry point is `<package>.<name>.handler(event, context)`. A handler
module is imported on its first invocation (Lambda's init phase) and reused
afterwards (a warm execution environment). Invocations of one handler are
serialized: on Lambda, concurrent invocations never share an execution
environment, so handlers may keep per-invocation state in module globals
(Powertools' Logger keys, buffered Metrics); running two of them at once in
one process would mix that state.
"""

from __future__ import annotations

import importlib
import logging
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

from flightdeck import topology

# moto's default account: every ARN the local runtime makes up uses it, so ARNs
# in events match the ones moto itself returns.
LOCAL_ACCOUNT_ID = "123456789012"
LOCAL_REGION = "us-east-1"
HANDLERS_PACKAGE = "flightdeck.handlers"
DEFAULT_MEMORY_MB = 512

log = logging.getLogger("flightdeck.local")

Handler = Callable[[dict[str, Any], Any], Any]

# When set, every invocation goes through it: observer(function, event, call) runs call()
# and returns its result (`flightdeck bench` counts invocations this way; see flightdeck.bench.counter).
invocation_observer: Callable[[LocalFunction, dict[str, Any], Callable[[], Any]], Any] | None = None


@dataclass
class LocalLambdaContext:
    """The attributes and method of the Lambda Python runtime's context object."""

    function_name: str
    memory_limit_in_mb: int = DEFAULT_MEMORY_MB
    timeout_s: float = topology.WORKER_TIMEOUT_S
    region: str = LOCAL_REGION
    aws_request_id: str = field(default_factory=lambda: str(uuid.uuid4()))
    function_version: str = "$LATEST"
    identity: Any = None
    client_context: Any = None
    _deadline: float = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self._deadline = time.monotonic() + self.timeout_s

    @property
    def invoked_function_arn(self) -> str:
        return f"arn:aws:lambda:{self.region}:{LOCAL_ACCOUNT_ID}:function:{self.function_name}"

    @property
    def log_group_name(self) -> str:
        return f"/aws/lambda/{self.function_name}"

    @property
    def log_stream_name(self) -> str:
        return f"{time.strftime('%Y/%m/%d')}/[{self.function_version}]local"

    def get_remaining_time_in_millis(self) -> int:
        return max(0, int((self._deadline - time.monotonic()) * 1000))


class HandlerImportError(RuntimeError):
    """The handler module could not be imported (Lambda: Runtime.ImportModuleError)."""


class LocalFunction:
    """One Lambda function: a handler module, imported lazily, invoked one at a time."""

    def __init__(
        self,
        module_name: str,
        function_name: str,
        *,
        memory_mb: int = DEFAULT_MEMORY_MB,
        timeout_s: float = topology.WORKER_TIMEOUT_S,
        region: str = LOCAL_REGION,
    ):
        self.module_name = module_name
        self.function_name = function_name
        self.memory_mb = memory_mb
        self.timeout_s = timeout_s
        self.region = region
        self._module: ModuleType | None = None
        self._import_failures = 0
        # One execution environment: invocations wait for each other.
        self._lock = threading.Lock()

    def new_context(self) -> LocalLambdaContext:
        return LocalLambdaContext(
            self.function_name, memory_limit_in_mb=self.memory_mb, timeout_s=self.timeout_s, region=self.region
        )

    def _entry_point(self) -> Handler:
        if self._module is None:
            try:
                self._module = importlib.import_module(self.module_name)
            except Exception as exc:
                # Like Lambda, a failed init is retried on the next invocation; the
                # traceback is logged once, later failures in one line.
                self._import_failures += 1
                if self._import_failures == 1:
                    log.exception("cannot import handler module %s", self.module_name)
                raise HandlerImportError(f"cannot import {self.module_name}: {type(exc).__name__}: {exc}") from exc
        entry: Callable[[dict[str, Any], Any], Any] | None = getattr(self._module, "handler", None)
        if not callable(entry):
            raise HandlerImportError(f"{self.module_name} has no callable 'handler'")
        return entry

    def invoke(self, event: dict[str, Any], context: LocalLambdaContext | None = None) -> Any:
        """Run the handler on one event; its exceptions propagate (a failed invocation).

        A streaming handler returns at once with the stream (flightdeck.api.sse.StreamReply),
        which its caller then reads outside the lock: on Lambda a streaming invocation has its
        execution environment to itself for as long as it streams, while other requests get
        other environments; here they share the module, whose per-request state is thread-local.
        """
        with self._lock:
            entry = self._entry_point()
            observer = invocation_observer
            if observer is not None:
                return observer(self, event, lambda: entry(event, context or self.new_context()))
            return entry(event, context or self.new_context())


class FunctionRegistry:
    """The functions of one agent, one per handler module, created on demand."""

    def __init__(
        self,
        agent: str,
        *,
        package: str = HANDLERS_PACKAGE,
        memory_mb: int = DEFAULT_MEMORY_MB,
        region: str = LOCAL_REGION,
    ):
        self.agent = agent
        self.package = package
        self.memory_mb = memory_mb
        self.region = region
        self._functions: dict[str, LocalFunction] = {}
        self._lock = threading.Lock()

    def function(self, handler: str) -> LocalFunction:
        with self._lock:
            if handler not in self._functions:
                self._functions[handler] = LocalFunction(
                    f"{self.package}.{handler}",
                    topology.function_name(self.agent, handler),
                    memory_mb=self.memory_mb,
                    region=self.region,
                    # A streaming function's invocation lasts as long as its stream (infra/functions.py).
                    timeout_s=topology.STREAM_TIMEOUT_S
                    if handler in topology.STREAMING_HANDLERS
                    else topology.WORKER_TIMEOUT_S,
                )
            return self._functions[handler]

    def by_name(self, function_name: str) -> LocalFunction | None:
        """The function of that name (one of topology.HANDLERS), or None."""
        handler = next((h for h in topology.HANDLERS if topology.function_name(self.agent, h) == function_name), None)
        return self.function(handler) if handler is not None else None
