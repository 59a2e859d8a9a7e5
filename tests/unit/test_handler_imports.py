"""What importing each handler module loads (its cold start), in a fresh interpreter with a valid
handler environment: a function imports what its invocations use, and leaves what they seldom need
for its first use (flightdeck.wiring; the cost itself is measured by the bench's cold start proxy)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from flightdeck import topology
from flightdeck.bench.coldstart import handler_environment

# Importing a handler, then which of these were loaded, and whether an AWS client was made.
_PROBE = r"""
import importlib, json, sys
importlib.import_module(sys.argv[1])
import boto3
watched = sys.argv[2].split(",")
print(json.dumps({"loaded": [m for m in watched if m in sys.modules], "aws_session": boto3.DEFAULT_SESSION is not None}))
"""

A2A_SERVER = ("flightdeck.domain.a2a.tasks", "flightdeck.domain.a2a.wire")
A2A_CLIENT = "flightdeck.domain.a2a.client"  # our delegations to A2A peers: loaded by the first one
OPENAPI = "aws_lambda_powertools.event_handler.openapi"
BATCH = "aws_lambda_powertools.utilities.batch"
WATCHED = (
    "requests",
    *A2A_SERVER,
    A2A_CLIENT,
    "aws_lambda_powertools.event_handler",
    OPENAPI,
    BATCH,
    # Powertools' parser models (every event source's), loaded by the batch utility when pydantic was first.
    "aws_lambda_powertools.utilities.parser",
    "aws_xray_sdk",  # the tracer's SDK: tracing is off here (POWERTOOLS_TRACE_DISABLED)
    "opentelemetry",  # no OTLP endpoint set: flightdeck.tracing imports none of it (docs/TRACING.md)
    "flightdeck.adapters.secrets",
    "flightdeck.adapters.a2a_state",
    "flightdeck.domain.delegation_cancel",
)

HTTP_HANDLERS = {r.handler for r in topology.ROUTES}
# Every invocation POSTs to a peer (a delegation, its cancel, an answer), or most do (a think that
# delegates or answers an agent): they load the HTTP client at init. The others load it on first use.
HTTP_CLIENT_AT_INIT = {"dispatch_worker", "delivery_worker", "turn_worker"}
# SQS batches only: the turn worker's events are asynchronous invokes but for its delayed retries.
BATCH_AT_INIT = {"dispatch_worker", "delivery_worker", "deadline_timer", topology.OWED_THINKS_HANDLER}
# They mint or check a callback token (or present a peer token) in every, or nearly every, invocation.
SECRETS_AT_INIT = {"dispatch_worker", "turn_worker", "callback"}
# Cancels at peers: the dispatch queue's retries carry them, the turn loop closes canceled sessions,
# and the cancel routes (a session's, an A2A task's) stop its delegations.
CANCELS_AT_INIT = {"dispatch_worker", "turn_worker", "chat_ingest", "a2a"}


def _expected(handler: str) -> set[str]:
    out = set()
    if handler in HTTP_CLIENT_AT_INIT:
        out.add("requests")
    if handler == "a2a":  # the A2A server: its one route is A2A
        out.update(A2A_SERVER)
    if handler in HTTP_HANDLERS:
        out.update({"aws_lambda_powertools.event_handler", OPENAPI})  # the resolver validates requests
    if handler in BATCH_AT_INIT:
        out.add(BATCH)
    if handler in SECRETS_AT_INIT:
        out.add("flightdeck.adapters.secrets")
    if handler == "a2a":
        out.add("flightdeck.adapters.a2a_state")  # the A2A server's task records
    if handler in CANCELS_AT_INIT:
        out.add("flightdeck.domain.delegation_cancel")
    return out


def _loaded(handler: str) -> dict[str, object]:
    done = subprocess.run(
        [sys.executable, "-c", _PROBE, f"flightdeck.handlers.{handler}", ",".join(WATCHED)],
        env=handler_environment(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    result: dict[str, object] = json.loads(done.stdout.splitlines()[-1])
    return result


@pytest.mark.parametrize("handler", topology.HANDLERS)
def test_a_handler_imports_only_what_its_invocations_use(handler):
    seen = _loaded(handler)
    assert set(seen["loaded"]) == _expected(handler)  # type: ignore[arg-type]
    assert seen["aws_session"] is False  # AWS clients are made by the first call that needs one


def test_the_probe_sees_what_a_module_imports():
    # The watched names are real modules: importing them is seen (a typo would make every check pass).
    done = subprocess.run(
        [sys.executable, "-c", _PROBE, "requests", ",".join(WATCHED)],
        env=handler_environment(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert json.loads(done.stdout)["loaded"] == ["requests"]
    for module in WATCHED:
        __import__(module)
