"""The turn worker stand-in: an SQS batch (its retry queue), or the event of an asynchronous invoke.

An invoke's event is recorded as a JSON log line and in INVOKED (in-process tests); an event with
"raise" makes the invocation fail.
"""

from __future__ import annotations

import json
import os
from typing import Any

from ._queue_recorder import handler as queue_handler

INVOKED: list[dict[str, Any]] = []


def handler(event: dict[str, Any], context: Any) -> Any:
    if "Records" in event:
        return queue_handler(event, context)
    INVOKED.append(event)
    print(
        json.dumps(
            {
                "timeline": "fake_invoke",
                "agent": os.environ.get("AGENT_NAME"),
                "function": context.function_name,
                "event": event,
            }
        ),
        flush=True,
    )
    if event.get("raise"):
        raise RuntimeError("asked to fail")
    return {"echo": event}
