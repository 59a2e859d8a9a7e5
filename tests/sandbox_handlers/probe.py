"""Binds log keys, a caller and a metric through the production modules, then says what it sees.

Event: {"name": ..., "signal": path, "wait_for": path}. It binds session_id=name, notes peer=name
and counts the metric Probe<name>, creates `signal`, waits (up to 10 s) for `wait_for` to exist,
and answers with the session_id on its log lines, its request's peer and its pending metrics:
what another function running meanwhile (in another sandbox) must not have changed.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from flightdeck.api import auth
from flightdeck.observability import bind, count, lambda_entry, logger, metrics


@lambda_entry
def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    name = event["name"]
    auth.begin({})
    bind(session_id=name)
    auth.note(peer=name)
    count(f"Probe{name}")
    logger.warning("probe bound its keys")  # the tests log at WARNING
    if event.get("signal"):
        Path(event["signal"]).touch()
    if event.get("wait_for"):
        deadline = time.monotonic() + 10
        while not os.path.exists(event["wait_for"]) and time.monotonic() < deadline:
            time.sleep(0.01)
    return {
        "session_id": logger.get_current_keys().get("session_id"),
        "peer": auth.current_peer(),
        "metrics": sorted(metrics.metric_set),
        "pid": os.getpid(),
    }
