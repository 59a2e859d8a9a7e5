"""Records each batch as a JSON log line; bodies steer the outcome.

A body "raise" makes the invocation fail; a body starting with "fail" is
reported in batchItemFailures.
"""

from __future__ import annotations

import json
import os
from typing import Any


def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    records = event["Records"]
    print(
        json.dumps(
            {
                "timeline": "fake_batch",
                "agent": os.environ.get("AGENT_NAME"),
                "function": context.function_name,
                "bodies": [r["body"] for r in records],
            }
        ),
        flush=True,
    )
    if any(r["body"] == "raise" for r in records):
        raise RuntimeError("asked to fail")
    return {"batchItemFailures": [{"itemIdentifier": r["messageId"]} for r in records if r["body"].startswith("fail")]}
