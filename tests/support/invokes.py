"""What the process's Lambda Invoke calls asked for, as Lambda (moto) accepted them.

In-process tests run the functions themselves (tests.support.harness, tests/e2e): an asynchronous
Invoke that the production adapter (flightdeck.adapters.lambda_thinks) sends to moto is answered
202 there and runs nothing (moto runs functions only in Docker). This recorder watches every
botocore client's Invoke calls, through botocore's own events, and keeps each accepted event
invocation so the test can run it through the real handler, as Lambda would. Nothing here
changes a request or a response.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from typing import Any

import botocore.handlers

_CONTEXT_KEY = "tests_invoke"


@dataclass
class Invocation:
    function_name: str
    event: Any
    attempts: int = 0  # how many times a test has run it (Lambda retries a failed one)


@dataclass
class InvokeRecorder:
    pending: list[Invocation] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def install(self) -> None:
        """Watch every botocore session created from now on (sessions read these handlers when created)."""
        for entry in self._entries():
            if entry not in botocore.handlers.BUILTIN_HANDLERS:
                botocore.handlers.BUILTIN_HANDLERS.append(entry)

    def _entries(self) -> list[tuple[str, Any]]:
        return [("before-parameter-build.lambda.Invoke", self._before), ("after-call.lambda.Invoke", self._after)]

    def _before(self, params: dict[str, Any], context: dict[str, Any], **_: Any) -> None:
        context[_CONTEXT_KEY] = (
            params.get("FunctionName"),
            params.get("InvocationType", "RequestResponse"),
            params.get("Payload"),
        )

    def _after(self, http_response: Any, context: dict[str, Any], **_: Any) -> None:
        name, kind, payload = context.get(_CONTEXT_KEY, (None, None, None))
        if kind != "Event" or getattr(http_response, "status_code", None) != 202:
            return  # not an asynchronous invocation that Lambda accepted
        if hasattr(payload, "read"):
            payload = payload.read()
        event = json.loads(payload or b"{}")
        with self._lock:
            self.pending.append(Invocation(str(name).rsplit(":function:", 1)[-1], event))

    def take(self, function_name: str) -> list[Invocation]:
        """The invocations of that function not yet run (they are the caller's to run now)."""
        with self._lock:
            mine = [i for i in self.pending if i.function_name == function_name]
            self.pending[:] = [i for i in self.pending if i.function_name != function_name]
        return mine

    def put_back(self, invocation: Invocation) -> None:
        """A failed run: Lambda queues it for another attempt."""
        with self._lock:
            self.pending.append(invocation)

    def clear(self) -> None:
        with self._lock:
            self.pending.clear()


RECORDER = InvokeRecorder()
