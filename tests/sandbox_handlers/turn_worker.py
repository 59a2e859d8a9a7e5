"""Misbehaves on request: {"exit": n} ends its process with status n, {"sleep": s} sleeps s seconds.

Otherwise it answers with its process id and the Lambda variables of its environment.
"""

from __future__ import annotations

import os
import time
from typing import Any


def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    if "exit" in event:
        os._exit(event["exit"])
    if "sleep" in event:
        time.sleep(event["sleep"])
    return {
        "pid": os.getpid(),
        "environment": {k: v for k, v in os.environ.items() if k.startswith(("AWS_LAMBDA_", "_HANDLER", "SANDBOX_"))},
        "remaining_ms": context.get_remaining_time_in_millis(),
    }
