"""A Lambda function of the local runtime: what invokes it, and the context its handler gets.

Every entry point is `<package>.<name>.handler(event, context)`. On Lambda a handler module is
imported once per execution environment (the init phase) and each environment serves one
invocation at a time, so handlers keep per-invocation state in module globals (Powertools'
Logger keys, buffered Metrics, the request's caller). Two ways to run one here:

- flightdeck.local.sandbox.SandboxedFunction: in worker processes of its own, one invocation at a
  time each, as Lambda's execution environments; what the agent host runs;
- InProcessFunction: in the caller's process, invocations of one function serialized; for tests
  that run handlers on moto's in-process mock. The functions of one process share those module
  globals, which production code assumes it has to itself: a test that runs two invocations at
  once in one process must not depend on them.
"""

from __future__ import annotations

import importlib
import logging
import threading
import time
import traceback
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any, Protocol

from flightdeck import topology

# moto's default account: every ARN the local runtime makes up uses it, so ARNs
# in events match the ones moto itself returns.
LOCAL_ACCOUNT_ID = "123456789012"
LOCAL_REGION = "us-east-1"
HANDLERS_PACKAGE = "flightdeck.handlers"
DEFAULT_MEMORY_MB = 512

log = logging.getLogger("flightdeck.local")

Handler = Callable[[dict[str, Any], Any], Any]


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


class InvocationError(RuntimeError):
    """An invocation that failed outside the caller's process, as Lambda reports it: the error's type
    and message, and its stack trace. str() is the message, as it is of the exception raised."""

    def __init__(self, error_type: str, message: str, stack_trace: list[str] | None = None):
        super().__init__(message)
        self.error_type = error_type
        self.stack_trace = list(stack_trace or [])


def error_type(error: BaseException) -> str:
    """The errorType Lambda reports for a failed invocation."""
    return error.error_type if isinstance(error, InvocationError) else type(error).__name__


def error_payload(error: BaseException) -> dict[str, Any]:
    """The Python runtime's answer for an unhandled exception (an InvocationError: the one it gave)."""
    stack = error.stack_trace if isinstance(error, InvocationError) else traceback.format_tb(error.__traceback__)
    return {"errorMessage": str(error), "errorType": error_type(error), "stackTrace": stack}


def log_failure(logger: logging.Logger, error: BaseException, message: str, *args: Any) -> None:
    """Log a failed invocation: with its traceback when it failed here; an InvocationError's is in its sandbox's output."""
    if isinstance(error, InvocationError):
        logger.error(message + ": %s: %s", *args, error.error_type, error)
    else:
        logger.error(message, *args, exc_info=error)


class Function(Protocol):
    """What the gateway, the pollers and the Invoke API invoke."""

    module_name: str
    function_name: str

    def new_context(self) -> LocalLambdaContext: ...

    def invoke(self, event: dict[str, Any], context: LocalLambdaContext | None = None) -> Any:
        """The handler's result (a StreamReply: its stream); a failed invocation raises."""
        ...

    def close(self) -> None:
        """Stop its execution environments."""
        ...


# (module_name, function_name, memory_mb=, timeout_s=, region=) -> the function (FunctionRegistry's make).
FunctionFactory = Callable[..., Function]


class InProcessFunction:
    """One Lambda function in this process: a handler module, imported lazily, invoked one at a time."""

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
        which its caller then reads outside the lock (in this process a stream cannot have the
        module to itself for as long as it lasts, as it has its execution environment on Lambda).
        """
        with self._lock:
            entry = self._entry_point()
            return entry(event, context or self.new_context())

    def close(self) -> None:
        """Nothing to stop: the module stays imported in this process."""


class FunctionRegistry:
    """The functions of one agent, one per handler module, created on demand.

    make: how a function runs (default InProcessFunction; the agent host's is
    flightdeck.local.sandbox.Sandboxes(...).function: worker processes).
    """

    def __init__(
        self,
        agent: str,
        *,
        package: str = HANDLERS_PACKAGE,
        memory_mb: int = DEFAULT_MEMORY_MB,
        region: str = LOCAL_REGION,
        make: FunctionFactory = InProcessFunction,
    ):
        self.agent = agent
        self.package = package
        self.memory_mb = memory_mb
        self.region = region
        self.make = make
        self._functions: dict[str, Function] = {}
        self._lock = threading.Lock()

    def function(self, handler: str) -> Function:
        with self._lock:
            if handler not in self._functions:
                self._functions[handler] = self.make(
                    f"{self.package}.{handler}",
                    topology.function_name(self.agent, handler),
                    # The owed-think starter's memory is its own (infra/functions.py).
                    memory_mb=topology.STREAM_CONSUMER.memory_mb
                    if handler == topology.STREAM_CONSUMER.handler
                    else self.memory_mb,
                    region=self.region,
                    # A streaming function's invocation lasts as long as its stream (infra/functions.py).
                    timeout_s=topology.STREAM_TIMEOUT_S
                    if handler in topology.STREAMING_HANDLERS
                    else topology.WORKER_TIMEOUT_S,
                )
            return self._functions[handler]

    def by_name(self, function_name: str) -> Function | None:
        """The function of that name (one of topology.HANDLERS), or None."""
        handler = next((h for h in topology.HANDLERS if topology.function_name(self.agent, h) == function_name), None)
        return self.function(handler) if handler is not None else None

    def close(self) -> None:
        """Stop every function's execution environments (in-flight invocations end with them)."""
        with self._lock:
            functions = list(self._functions.values())
        for function in functions:
            function.close()
