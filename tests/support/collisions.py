"""DynamoDB's collision errors as AWS sends them, answered to chosen writes of a botocore client.

moto serializes requests, so it never answers a write that met a transaction under way. AWS does:
a TransactWriteItems is cancelled with reason `TransactionConflict` on the item another write holds
(`None` on the others), and a single-item write fails with `TransactionConflictException`. The hook
below (botocore's `before-call` event, ahead of the SDK's retry loop, which retries neither) answers
the write calls chosen by number with AWS's wire body, parsed by botocore's own JSON parser: the
adapter sees exactly what botocore makes of AWS's answer, and moto never sees the call.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from botocore.awsrequest import AWSResponse
from botocore.endpoint import convert_to_response_dict
from botocore.parsers import create_parser

WRITES = ("PutItem", "UpdateItem", "DeleteItem", "TransactWriteItems")
_TYPE = "com.amazonaws.dynamodb.v20120810#"
_HEADERS = {"Content-Type": "application/x-amz-json-1.0", "x-amzn-RequestId": "injected-collision"}


class RawBody:
    """An HTTP body botocore reads (AWSResponse's raw)."""

    def __init__(self, body: bytes):
        self.body = body

    def stream(self, **_: Any) -> Iterator[bytes]:
        yield self.body


def collision_body(operation: str, params: dict[str, Any]) -> dict[str, Any]:
    """AWS's answer to this write when another transaction holds its (first) item."""
    if operation != "TransactWriteItems":
        return {"__type": _TYPE + "TransactionConflictException", "message": "Transaction is ongoing for the item"}
    codes = ["TransactionConflict"] + ["None"] * (len(params.get("TransactItems", [])) - 1)
    reasons = [
        {"Code": c, "Message": "Transaction is ongoing for the item"} if c != "None" else {"Code": c} for c in codes
    ]
    return {
        "__type": _TYPE + "TransactionCanceledException",
        "CancellationReasons": reasons,
        "Message": f"Transaction cancelled, please refer cancellation reasons for specific reasons [{', '.join(codes)}]",
    }


def aws_answer(model: Any, body: dict[str, Any]) -> tuple[AWSResponse, dict[str, Any]]:
    """(http response, parsed) for `before-call`: a 400 with this JSON body, parsed as botocore's endpoint
    parses AWS's (botocore.endpoint: the error, then the modeled error's own fields, CancellationReasons)."""
    http = AWSResponse("https://dynamodb.us-east-1.amazonaws.com/", 400, _HEADERS, RawBody(json.dumps(body).encode()))
    response = convert_to_response_dict(http, model)
    parser = create_parser(model.service_model.protocol)
    parsed = parser.parse(response, model.output_shape)
    error_shape = model.service_model.shape_for_error_code(parsed["Error"]["Code"])
    parsed.update(parser.parse(response, error_shape))
    return http, parsed


class Collisions:
    """Counts a client's write calls (1, 2, ...) and answers those `hit(n, operation, params)` picks with
    a collision. `calls` lists every write call seen, `injected` the numbers answered so."""

    def __init__(self, hit: Callable[[int, str, dict[str, Any]], bool], body: Callable[..., dict[str, Any]] | None):
        self.hit = hit
        self.body = body or collision_body
        self.calls: list[str] = []
        self.injected: list[int] = []
        self._lock = threading.Lock()

    def __call__(self, model: Any, params: dict[str, Any], **_: Any) -> Any:
        if model.name not in WRITES:
            return None
        params = json.loads(params.get("body") or b"{}")  # before-call has the request: its body is the call's
        with self._lock:
            self.calls.append(model.name)
            n = len(self.calls)
            if not self.hit(n, model.name, params):
                return None
            self.injected.append(n)
        return aws_answer(model, self.body(model.name, params))


@contextmanager
def colliding(
    client: Any,
    hit: Callable[[int, str, dict[str, Any]], bool] = lambda n, op, params: False,
    body: Callable[..., dict[str, Any]] | None = None,
) -> Iterator[Collisions]:
    """Inject collisions at `client`'s writes for the block (default: none, only counted)."""
    hook = Collisions(hit, body)
    client.meta.events.register("before-call.dynamodb", hook)
    try:
        yield hook
    finally:
        client.meta.events.unregister("before-call.dynamodb", hook)
