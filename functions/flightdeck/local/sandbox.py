"""Lambda's execution environments on a laptop: each function's invocations run in worker processes of its own.

A sandbox is one worker process serving one function, one invocation at a time, as a Lambda
execution environment does; a function has a small pool of them (SandboxPolicy), started when an
invocation finds none idle, kept warm afterwards. Production code therefore has each process to
itself, as on Lambda: its module globals (Powertools' Logger keys and Metrics, the request's
caller in flightdeck.api.auth) are never shared with another function or another invocation.

- Init: the sandbox gets the function's environment (this process's, which is the agent's Lambda
  environment, plus the variables Lambda sets per function), runs the host's sandbox initializer
  if it names one, then imports the handler module. A failed init fails the invocation
  (Runtime.ImportModuleError) and the sandbox ends: the next invocation starts a new one.
- Invocation: the event and the context go to the sandbox, the result (or the error as Lambda
  reports it: InvocationError) comes back. A stream (flightdeck.api.sse.StreamReply) is read from
  the sandbox chunk by chunk, each chunk produced when its reader asks for it; the sandbox is the
  stream's until the stream ends or its reader closes it.
- A sandbox whose process dies during an invocation fails it with Runtime.ExitError; one that
  overruns the function's timeout is killed (Sandbox.Timedout). Either is replaced by a new one on
  a later invocation.
- Output: each sandbox's stdout and stderr (its log stream) come through a pipe of its own and are
  written to this process's stdout a whole line at a time, so lines of two sandboxes never mix.

The initializer ("module:function", SandboxPolicy.initializer) is the host's hook, like a Lambda
internal extension: function(function_name, handler_module) runs in each sandbox before the
handler module is imported, and may return a wrapper, called as wrapper(event, invoke) around each
invocation (invoke() runs the handler and returns its result). The runtime knows nothing of what
it does (`flightdeck bench` counts requests with it: flightdeck.bench.counting_host).

Start method: forkserver. The host is multi-threaded (HTTP servers, pollers), so a plain fork
could copy a lock another thread holds; spawn would start a fresh interpreter per sandbox and
import boto3, pydantic, Powertools and flightdeck in each again (about a second on a loaded
laptop, for every function on a delegation's path). The fork server is a fresh, single-threaded
interpreter that imports them once (PRELOAD: flightdeck.local.sandbox_preload says what, and why
that is importing them in each sandbox) and forks every sandbox from itself; a sandbox's init is
then its handler module's own. Each sandbox also runs the host's main module as __mp_main__, as
multiprocessing does: the host guards its start with `if __name__ == "__main__"`.

This module is the host's side; what runs inside a sandbox is flightdeck.local.sandbox_process.
"""

from __future__ import annotations

import atexit
import logging
import multiprocessing
import multiprocessing.util
import os
import signal
import sys
import threading
import time
import uuid
import weakref
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

from flightdeck import topology
from flightdeck.api.sse import StreamReply
from flightdeck.local.invocation import (
    DEFAULT_MEMORY_MB,
    LOCAL_REGION,
    InvocationError,
    LocalLambdaContext,
)
from flightdeck.local.sandbox_process import Spec, serve

log = logging.getLogger("flightdeck.local")

START_METHOD = "forkserver"
# Imported once by the fork server, shared by every sandbox it forks (flightdeck.local.sandbox_preload).
PRELOAD = (__name__, "flightdeck.local.sandbox_preload")
DEFAULT_PER_FUNCTION = 2
# A stream holds its sandbox for as long as it lasts (up to minutes): the streaming functions get
# more, so that a few open streams leave room for their other requests.
DEFAULT_PER_STREAMING_FUNCTION = 8
# Lambda's limit on the init phase.
INIT_TIMEOUT_S = 10.0
# How long a stream's sandbox gets to close the stream when its reader goes away.
CLOSE_TIMEOUT_S = 5.0


@dataclass(frozen=True)
class SandboxPolicy:
    """How many sandboxes a function may have at once, and the host's sandbox initializer ("module:function")."""

    per_function: int = DEFAULT_PER_FUNCTION
    per_streaming_function: int = DEFAULT_PER_STREAMING_FUNCTION
    initializer: str | None = None

    def __post_init__(self) -> None:
        if self.per_function < 1 or self.per_streaming_function < 1:
            raise ValueError("a function needs at least one sandbox")
        if self.initializer is not None and ":" not in self.initializer:
            raise ValueError(f"initializer {self.initializer!r} is not module:function")


def lambda_variables(function_name: str, module_name: str, memory_mb: int, region: str) -> dict[str, str]:
    """The variables Lambda sets in a function's environment (the reserved ones that say what it runs)."""
    return {
        "AWS_LAMBDA_FUNCTION_NAME": function_name,
        "AWS_LAMBDA_FUNCTION_MEMORY_SIZE": str(memory_mb),
        "AWS_LAMBDA_FUNCTION_VERSION": "$LATEST",
        "AWS_LAMBDA_LOG_GROUP_NAME": f"/aws/lambda/{function_name}",
        "AWS_LAMBDA_LOG_STREAM_NAME": f"{time.strftime('%Y/%m/%d')}/[$LATEST]{uuid.uuid4().hex}",
        "AWS_REGION": region,
        "AWS_DEFAULT_REGION": region,
        "_HANDLER": f"{module_name}.handler",
    }


_output_lock = threading.Lock()
# Every function with sandboxes, stopped when this process exits. Registered after multiprocessing's
# own exit hook (imported above), so it runs first: that hook waits for its children, which ignore
# the stop signal it sends them.
_functions: weakref.WeakSet[SandboxedFunction] = weakref.WeakSet()


@atexit.register
def _close_all() -> None:
    for function in list(_functions):
        function.close()


def write_to_stdout(line: bytes) -> None:
    """One line of a sandbox's output, whole, on this process's stdout."""
    with _output_lock:
        stream = getattr(sys.stdout, "buffer", None)
        try:
            if stream is not None:
                stream.write(line)
            else:
                sys.stdout.write(line.decode("utf-8", errors="replace"))
            sys.stdout.flush()
        except (OSError, ValueError):
            pass  # stdout is gone (the host is stopping): the line has nowhere to go


class Sandboxes:
    """Makes an agent's functions sandboxed (FunctionRegistry(make=Sandboxes(...).function)).

    environment: the agent's Lambda environment (default: this process's, read when a sandbox starts).
    output: where each line a sandbox writes goes (default: this process's stdout).
    """

    def __init__(
        self,
        policy: SandboxPolicy | None = None,
        *,
        environment: Mapping[str, str] | None = None,
        output: Callable[[bytes], None] = write_to_stdout,
    ):
        self.policy = policy or SandboxPolicy()
        self.environment = dict(environment) if environment is not None else None
        self.output = output
        self._context = _forkserver_context()

    def function(
        self,
        module_name: str,
        function_name: str,
        *,
        memory_mb: int = DEFAULT_MEMORY_MB,
        timeout_s: float = topology.WORKER_TIMEOUT_S,
        region: str = LOCAL_REGION,
    ) -> SandboxedFunction:
        streaming = module_name.rsplit(".", 1)[-1] in topology.STREAMING_HANDLERS
        return SandboxedFunction(
            module_name,
            function_name,
            memory_mb=memory_mb,
            timeout_s=timeout_s,
            region=region,
            max_sandboxes=self.policy.per_streaming_function if streaming else self.policy.per_function,
            sandboxes=self,
        )

    def warm_up(self) -> threading.Thread:
        """Start the fork server in the background, so the first sandbox only has to be forked."""
        from multiprocessing import forkserver

        thread = threading.Thread(target=forkserver.ensure_running, name="sandbox-forkserver", daemon=True)
        thread.start()
        return thread

    def start(self, function: SandboxedFunction) -> _Sandbox:
        """A new sandbox for the function, its init done (raises InvocationError when init failed)."""
        environment = self.environment if self.environment is not None else dict(os.environ)
        spec = Spec(
            module_name=function.module_name,
            function_name=function.function_name,
            environment={
                **environment,
                **lambda_variables(function.function_name, function.module_name, function.memory_mb, function.region),
            },
            initializer=self.policy.initializer,
        )
        ours, theirs = self._context.Pipe()
        output_r, output_w = os.pipe()
        output = Connection(output_w, readable=False)  # a Connection, so that it is handed to the sandbox
        process = self._context.Process(
            target=serve,
            args=(theirs, output, spec),
            name=f"sandbox-{function.function_name}",
            daemon=True,
        )
        try:
            process.start()
        except BaseException:
            os.close(output_r)
            ours.close()
            raise
        finally:
            theirs.close()
            output.close()  # the sandbox holds its own copies now
        sandbox = _Sandbox(process, ours)
        relay = threading.Thread(
            target=_relay_output,
            args=(output_r, self.output),
            name=f"sandbox-output-{function.function_name}-{process.pid}",
            daemon=True,
        )
        relay.start()
        try:
            ready = sandbox.receive(time.monotonic() + INIT_TIMEOUT_S)
        except _Lost as lost:
            sandbox.dispose()
            if lost.timed_out:
                raise InvocationError(
                    "Sandbox.Timedout", f"Init timed out after {INIT_TIMEOUT_S:.2f} seconds"
                ) from None
            raise InvocationError(
                "Runtime.ExitError", f"Runtime exited during init with error: {sandbox.exit_status()}"
            ) from None
        init_error = ready[1]
        if init_error is not None:
            sandbox.dispose()
            raise _error(init_error)
        return sandbox


class SandboxedFunction:
    """One Lambda function whose invocations run in sandboxes of its own, at most max_sandboxes at once.

    An invocation that finds every sandbox busy and no room for another waits for one, for up to
    the function's timeout (Lambda would throttle it: TooManyRequestsException).
    """

    def __init__(
        self,
        module_name: str,
        function_name: str,
        *,
        memory_mb: int = DEFAULT_MEMORY_MB,
        timeout_s: float = topology.WORKER_TIMEOUT_S,
        region: str = LOCAL_REGION,
        max_sandboxes: int = DEFAULT_PER_FUNCTION,
        sandboxes: Sandboxes | None = None,
    ):
        if max_sandboxes < 1:
            raise ValueError("a function needs at least one sandbox")
        self.module_name = module_name
        self.function_name = function_name
        self.memory_mb = memory_mb
        self.timeout_s = timeout_s
        self.region = region
        self.max_sandboxes = max_sandboxes
        self.sandboxes = sandboxes or Sandboxes()
        self._ready = threading.Condition()
        self._idle: list[_Sandbox] = []  # the most recently used last: it is taken first (warmest)
        self._all: set[_Sandbox] = set()
        self._starting = 0
        self._closed = False
        _functions.add(self)

    def new_context(self) -> LocalLambdaContext:
        return LocalLambdaContext(
            self.function_name, memory_limit_in_mb=self.memory_mb, timeout_s=self.timeout_s, region=self.region
        )

    def pids(self) -> list[int]:
        """Process ids of its sandboxes (busy or idle)."""
        with self._ready:
            return sorted(s.pid for s in self._all)

    def invoke(self, event: dict[str, Any], context: LocalLambdaContext | None = None) -> Any:
        """Run the handler on one event in a sandbox; a failed invocation raises (InvocationError).

        A streaming handler's StreamReply comes back with chunks read from the sandbox as they are
        asked for; the sandbox is held until they end or are closed.
        """
        sandbox = self._acquire()
        # The timeout runs from the invocation's start, after any init (as on Lambda).
        context = context or self.new_context()
        reply = self._exchange(sandbox, ("invoke", event, context), context)
        kind = reply[0]
        if kind == "stream":
            _, status, headers, outcome = reply
            return StreamReply(_SandboxStream(self, sandbox, context), status=status, headers=headers, outcome=outcome)
        self._release(sandbox)
        if kind == "error":
            raise _error(reply[1])
        return reply[1]

    def close(self) -> None:
        """Stop every sandbox, busy or idle; later invocations fail."""
        with self._ready:
            self._closed = True
            idle, busy = list(self._idle), self._all - set(self._idle)
            self._all.clear()
            self._idle.clear()
            self._ready.notify_all()
        for sandbox in idle:
            sandbox.dispose()
        for sandbox in busy:
            sandbox.kill()  # the thread waiting on it sees it end; its connection is that thread's to close

    # --- the pool ---------------------------------------------------------------------------

    def _acquire(self) -> _Sandbox:
        deadline = time.monotonic() + self.timeout_s
        with self._ready:
            while True:
                if self._closed:
                    raise InvocationError("ResourceNotReadyException", f"{self.function_name} is stopped")
                while self._idle:
                    sandbox = self._idle.pop()
                    if sandbox.alive():
                        return sandbox
                    self._all.discard(sandbox)
                    log.warning("sandbox %d of %s had exited while idle", sandbox.pid, self.function_name)
                if len(self._all) + self._starting < self.max_sandboxes:
                    self._starting += 1
                    break
                left = deadline - time.monotonic()
                if left <= 0:
                    raise InvocationError(
                        "TooManyRequestsException",
                        f"Rate Exceeded: all {self.max_sandboxes} execution environments of "
                        f"{self.function_name} stayed busy for {self.timeout_s:g} s",
                    )
                self._ready.wait(left)
        try:
            sandbox = self.sandboxes.start(self)
        except BaseException:
            with self._ready:
                self._starting -= 1
                self._ready.notify()
            raise
        with self._ready:
            self._starting -= 1
            if self._closed:
                sandbox.dispose()
                raise InvocationError("ResourceNotReadyException", f"{self.function_name} is stopped")
            self._all.add(sandbox)
        return sandbox

    def _release(self, sandbox: _Sandbox) -> None:
        with self._ready:
            if sandbox in self._all:
                self._idle.append(sandbox)
                self._ready.notify()
                return
        sandbox.dispose()  # closed meanwhile

    def _discard(self, sandbox: _Sandbox) -> None:
        sandbox.dispose()
        with self._ready:
            self._all.discard(sandbox)
            self._ready.notify()

    def _exchange(self, sandbox: _Sandbox, message: tuple[Any, ...], context: LocalLambdaContext) -> tuple[Any, ...]:
        """Send one message, wait for the answer until the invocation's deadline; a lost sandbox is discarded."""
        try:
            sandbox.send(message)
            return sandbox.receive(time.monotonic() + context.get_remaining_time_in_millis() / 1000)
        except _Lost as lost:
            error = lost.as_error(context.aws_request_id, context.timeout_s)  # its exit status, before it is killed
            self._discard(sandbox)
            log.error("%s: sandbox %d: %s: %s", self.function_name, sandbox.pid, error.error_type, error)
            raise error from None
        except BaseException:
            self._discard(sandbox)  # whatever happened (an event that cannot be pickled), its state is unknown
            raise


class _SandboxStream(Iterator[bytes]):
    """A stream produced in a sandbox, a chunk per next(); the sandbox goes back to its pool at the end or on close()."""

    def __init__(self, function: SandboxedFunction, sandbox: _Sandbox, context: LocalLambdaContext):
        self._function = function
        self._sandbox: _Sandbox | None = sandbox
        self._context = context

    def __next__(self) -> bytes:
        sandbox = self._sandbox
        if sandbox is None:
            raise StopIteration
        try:
            reply = self._function._exchange(sandbox, ("next",), self._context)
        except InvocationError:
            self._sandbox = None  # discarded
            raise
        if reply[0] == "chunk":
            chunk: bytes = reply[1]
            return chunk
        self._sandbox = None
        self._function._release(sandbox)
        if reply[0] == "error":
            raise _error(reply[1])
        raise StopIteration  # "end"

    def close(self) -> None:
        """The reader went away: the handler's generator is closed in the sandbox (its finally blocks run)."""
        sandbox, self._sandbox = self._sandbox, None
        if sandbox is None:
            return
        try:
            sandbox.send(("close",))
            sandbox.receive(time.monotonic() + CLOSE_TIMEOUT_S)
        except _Lost:
            self._function._discard(sandbox)
            return
        self._function._release(sandbox)


# --- one sandbox, from the host's side ----------------------------------------------------------


class _Lost(Exception):
    """The sandbox did not answer: its process exited, or the deadline passed (it is then killed)."""

    def __init__(self, sandbox: _Sandbox, timed_out: bool):
        super().__init__(sandbox.pid)
        self.sandbox = sandbox
        self.timed_out = timed_out

    def as_error(self, request_id: str, timeout_s: float) -> InvocationError:
        """What Lambda reports for it."""
        if self.timed_out:
            return InvocationError(
                "Sandbox.Timedout", f"RequestId: {request_id} Error: Task timed out after {timeout_s:.2f} seconds"
            )
        return InvocationError(
            "Runtime.ExitError",
            f"RequestId: {request_id} Error: Runtime exited with error: {self.sandbox.exit_status()}",
        )


class _Sandbox:
    def __init__(self, process: Any, connection: Connection):
        self.process = process
        self.connection = connection
        self.pid: int = process.pid

    def alive(self) -> bool:
        return bool(self.process.is_alive())

    def send(self, message: tuple[Any, ...]) -> None:
        try:
            self.connection.send(message)
        except (OSError, EOFError):
            raise _Lost(self, timed_out=False) from None

    def receive(self, deadline: float) -> tuple[Any, ...]:
        try:
            if not self.connection.poll(max(0.0, deadline - time.monotonic())):
                self.kill()  # Lambda stops an environment whose invocation overran
                raise _Lost(self, timed_out=True)
            message: tuple[Any, ...] = self.connection.recv()
            return message
        except (OSError, EOFError):
            raise _Lost(self, timed_out=False) from None

    def exit_status(self) -> str:
        """As Lambda words it: "exit status 3", "signal: killed"."""
        self.process.join(1.0)
        code = self.process.exitcode
        if code is None:
            return "exit status unknown"
        if code < 0:
            name = signal.Signals(-code).name.removeprefix("SIG").lower()
            return f"signal: {'killed' if name == 'kill' else name}"
        return f"exit status {code}"

    def kill(self) -> None:
        if self.process.is_alive():
            self.process.kill()

    def dispose(self) -> None:
        """Kill it and close its connection (by the one thread using it)."""
        self.kill()
        self.connection.close()


def _relay_output(fd: int, output: Callable[[bytes], None]) -> None:
    with open(fd, "rb") as stream:
        for line in iter(stream.readline, b""):
            output(line if line.endswith(b"\n") else line + b"\n")


def _forkserver_context() -> Any:
    # Each sandbox also runs the host's main module as __mp_main__ (multiprocessing does, so that
    # what it pickles may name it): the host guards its start with `if __name__ == "__main__"`.
    context = multiprocessing.get_context(START_METHOD)
    context.set_forkserver_preload(list(PRELOAD))
    return context


def _error(payload: dict[str, Any]) -> InvocationError:
    return InvocationError(payload["errorType"], payload["errorMessage"], payload.get("stackTrace"))
