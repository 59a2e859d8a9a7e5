"""Committed steps of the in-process functions, seen through botocore's own events; and the crash.

A committed step is a request that changed something outside the function and succeeded: a
DynamoDB write, an SQS send (or visibility change), a Lambda invoke. (Outbound HTTP is the fourth
kind: tests.support.explorer.world counts it at its fake peers.) The explorer counts them while a
function runs, and can end that function right after step N: it raises `Crash`, a BaseException,
so no `except Exception` in production code takes it for an error it may handle. Once dead, the
function commits nothing more: any further request it makes raises Crash before it is sent (a
`finally` that writes does not run in a process that died).

Installed once per process (tests/conftest.py), like tests.support.invokes: it does nothing while no
explorer is watching.
"""

from __future__ import annotations

from typing import Any, Protocol

import botocore.handlers

COMMITTING = {
    "dynamodb": {"PutItem", "UpdateItem", "DeleteItem", "TransactWriteItems", "BatchWriteItem"},
    "sqs": {"SendMessage", "SendMessageBatch", "ChangeMessageVisibility", "DeleteMessage"},
    "lambda": {"Invoke"},
}


class Crash(BaseException):
    """The function's process ended right after a committed step (and before the next one)."""


class Observer(Protocol):
    def before_call(self, service: str, operation: str) -> None: ...
    def committed(self, service: str, operation: str) -> None: ...
    def send_params(self, operation: str, params: dict[str, Any]) -> None: ...


class StepWatch:
    def __init__(self) -> None:
        self.observer: Observer | None = None

    def install(self) -> None:
        """Watch every botocore session created from now on (sessions read these handlers when created)."""
        for entry in self._entries():
            if entry not in botocore.handlers.BUILTIN_HANDLERS:
                botocore.handlers.BUILTIN_HANDLERS.append(entry)

    def _entries(self) -> list[tuple[str, Any]]:
        return [
            ("before-parameter-build.sqs.SendMessage", self._send_params),
            ("before-parameter-build.sqs.ChangeMessageVisibility", self._send_params),
            ("before-call", self._before_call),
            ("after-call", self._after_call),
        ]

    @staticmethod
    def _names(event_name: str) -> tuple[str, str]:
        parts = event_name.split(".")
        return (parts[1], parts[2]) if len(parts) >= 3 else ("", "")

    def _send_params(self, params: dict[str, Any], event_name: str, **_: Any) -> None:
        if self.observer is not None:
            self.observer.send_params(self._names(event_name)[1], params)

    def _before_call(self, event_name: str, **_: Any) -> None:
        if self.observer is not None:
            self.observer.before_call(*self._names(event_name))

    def _after_call(self, event_name: str, http_response: Any, **_: Any) -> None:
        if self.observer is None or getattr(http_response, "status_code", 500) >= 300:
            return  # nothing watches, or the request changed nothing (a failed condition, an error)
        service, operation = self._names(event_name)
        if operation in COMMITTING.get(service, ()):
            self.observer.committed(service, operation)


WATCH = StepWatch()
