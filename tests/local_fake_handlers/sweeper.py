from __future__ import annotations

import json
import os
from typing import Any


def handler(event: dict[str, Any], context: Any) -> None:
    print(
        json.dumps(
            {
                "timeline": "fake_sweep",
                "agent": os.environ.get("AGENT_NAME"),
                "detail_type": event["detail-type"],
                "resources": event["resources"],
            }
        ),
        flush=True,
    )
