"""In-process moto, one request at a time: DynamoDB's per-request atomicity for tests that use threads.

moto's backends are not thread-safe (flightdeck.local.moto_app says how: a TransactWriteItems whose
condition fails puts back deep copies of the tables it touched, wiping what other threads wrote
meanwhile). The loopback moto server serializes its requests for that reason; tests that drive an
agent's gateway and its queue pumps from threads on the in-process mock (tests.support.inprocess)
need the same, or a refused transaction in one thread can undo a committed one in another, which
DynamoDB never does. As there, SQS ReceiveMessage stays outside the lock: a long poll waits inside
moto on the queue's own lock. Nothing here changes a request or a response.
"""

from __future__ import annotations

import threading
from typing import Any

from moto.core.botocore_stubber import BotocoreStubber

_LOCK = threading.RLock()  # re-entrant: a moto backend may call another through the stubber
_original = BotocoreStubber.process_request


def _is_receive(request: Any) -> bool:
    target = request.headers.get("X-Amz-Target") or b""
    target = target.decode() if isinstance(target, bytes) else target
    body = request.body if isinstance(request.body, (bytes, str)) else b""
    body = body.encode() if isinstance(body, str) else body
    return target == "AmazonSQS.ReceiveMessage" or b"Action=ReceiveMessage" in body


def _serialized(self: BotocoreStubber, request: Any) -> Any:
    if _is_receive(request):
        return _original(self, request)
    with _LOCK:
        return _original(self, request)


def install() -> None:
    BotocoreStubber.process_request = _serialized  # type: ignore[method-assign]
