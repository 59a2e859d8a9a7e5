"""Answers with the API Gateway event and Lambda context it was given.

Query flags steer the response: ?raise=1 raises, ?malformed=1 returns a
non-proxy value, ?binary=1 answers a base64-encoded body.
"""

from __future__ import annotations

import base64
import json
from typing import Any


def handler(event: dict[str, Any], context: Any) -> Any:
    flags = event.get("queryStringParameters") or {}
    if "raise" in flags:
        raise RuntimeError("asked to fail")
    if "malformed" in flags:
        return "not a proxy response"
    if "binary" in flags:
        return {
            "statusCode": 200,
            "headers": {"Content-Type": "application/octet-stream"},
            "body": base64.b64encode(b"\x00\xffbinary").decode(),
            "isBase64Encoded": True,
        }
    echo = {
        "event": event,
        "context": {
            "function_name": context.function_name,
            "memory_limit_in_mb": context.memory_limit_in_mb,
            "invoked_function_arn": context.invoked_function_arn,
            "aws_request_id": context.aws_request_id,
            "remaining_ms": context.get_remaining_time_in_millis(),
        },
    }
    return {
        "statusCode": 201 if event["httpMethod"] == "POST" else 200,
        "headers": {"Content-Type": "application/json", "X-Single": "one", "X-Both": "single"},
        "multiValueHeaders": {"X-Multi": ["a", "b"], "X-Both": ["multi"]},
        "body": json.dumps(echo),
    }
