"""The bench's counts checked against moto's own request recorder (issue 31: "keep bench honest").

The counting host (flightdeck.bench.counting_host) counts every AWS request an agent's functions make, from inside
them. moto's recorder (its /moto-api/recorder/ endpoints) writes down every request moto's server receives, from
outside. Over the same window the two must agree: a request the host missed, or one it counted that never reached
AWS, would show as a difference. The recorder needs a file to write to: MOTO_RECORDER_FILEPATH in moto's process
environment (set by the bench before its stack starts).
"""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

import requests

FILE_VARIABLE = "MOTO_RECORDER_FILEPATH"
_API = "/moto-api/recorder"
# The bench's own reads (item sizes, lateness checks) carry this header: moto records them, no agent made them.
BENCH_HEADER = "x-flightdeck-bench"


def mark(client: Any) -> Any:
    """Tag every request of one of the bench's own boto3 clients, so that the comparison leaves them out."""

    def tag(request: Any, **_: Any) -> None:
        request.headers[BENCH_HEADER] = "1"

    client.meta.events.register("before-sign.*.*", tag)
    return client


def _target(entry: dict[str, Any]) -> str:
    """The request's operation (X-Amz-Target), or "" for one the bench made itself."""
    headers = {str(k).lower(): str(v) for k, v in (entry.get("headers") or {}).items()}
    return "" if BENCH_HEADER in headers else headers.get("x-amz-target", "")


class Recording:
    """Start, then stop and read: the DynamoDB operations moto received in between, by name."""

    def __init__(self, endpoint: str, http: requests.Session):
        self.base = endpoint.rstrip("/") + _API
        self.http = http

    def start(self) -> None:
        self.http.post(f"{self.base}/reset-recording", timeout=10).raise_for_status()
        self.http.post(f"{self.base}/start-recording", timeout=10).raise_for_status()

    def stop(self) -> Counter[str]:
        self.http.post(f"{self.base}/stop-recording", timeout=10).raise_for_status()
        answer = self.http.get(f"{self.base}/download-recording", timeout=30)
        answer.raise_for_status()
        operations: Counter[str] = Counter()
        for line in answer.text.splitlines():
            try:
                target = _target(json.loads(line))
            except ValueError:
                continue
            if target.startswith("DynamoDB_"):
                operations[target.split(".", 1)[1]] += 1
        return operations


def compare(counted: Counter[str], recorded: Counter[str]) -> dict[str, Any]:
    """The two counts of DynamoDB requests, by operation, and where they differ."""
    differences = {
        op: recorded[op] - counted[op] for op in sorted(set(counted) | set(recorded)) if recorded[op] != counted[op]
    }
    return {
        "dynamodb_requests_counted": sum(counted.values()),
        "dynamodb_requests_recorded_by_moto": sum(recorded.values()),
        "differences_by_operation": differences,
    }
