"""The readable local log (flightdeck.local.log_view) and what the functions log (flightdeck.observability)."""

from __future__ import annotations

import io
import json
import warnings

from flightdeck.local import log_view
from flightdeck.local.invocation import LocalLambdaContext


def test_a_timeline_record_is_one_line_with_time_agent_session_and_step():
    record = {
        "level": "DEBUG",
        "timeline": "tool_use",
        "message": "delegating to critic: review this",
        "session_id": "62c5a330-41de-4d75",
        "tool_use_id": "tooluse_abcdefgh12345678",
    }
    line = log_view.readable("orchestrator", record, agent_width=12, now=0.25)
    assert line.endswith("  orchestrator  62c5a330  delegating to critic: review this  [12345678]")
    assert line[:12].count(":") == 2 and line[8:12] == ".250"


def test_problems_are_shown_and_routine_records_are_not():
    warning = {"level": "WARNING", "message": "dispatch will be retried", "detail": "HTTP 503 from worker"}
    assert "WARNING: dispatch will be retried (HTTP 503 from worker)" in log_view.readable("orchestrator", warning)
    error = {"level": "ERROR", "message": "unhandled error", "exception": "Traceback...\nValueError: boom"}
    assert log_view.readable("worker", error).endswith("ERROR: unhandled error (ValueError: boom)")
    assert log_view.readable("worker", {"level": "INFO", "audit": True, "message": "audit inbound chat"}) is None
    assert log_view.readable("worker", {"_aws": {}, "Metric": [1.0]}) is None
    assert log_view.routine_text("2026-12-01 09:02:01,458 INFO agent worker serving on http://127.0.0.1:1")
    assert log_view.routine_text("moto server on 127.0.0.1:5000")
    assert not log_view.routine_text("Traceback (most recent call last):")


def test_a_function_logs_lean_lines_and_its_routine_steps_at_debug():
    from flightdeck import observability

    @observability.lambda_entry
    def handler(event, context):
        observability.timeline("chat_received", "task received", session_id="s-1")
        observability.timeline("dispatch_failed", "dispatch failed: HTTP 401", session_id="s-1")
        return {"ok": True}

    out = io.StringIO()
    # The logger writes to the stream it was created with: read this invocation's lines from it.
    previous = observability.logger.registered_handler.setStream(out)
    level = observability.logger.log_level
    observability.logger.setLevel("INFO")  # the deployed default (tests/conftest.py quiets to WARNING)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # Powertools' "No application metrics to publish" would fail here
            assert handler({}, LocalLambdaContext(function_name="agent-test")) == {"ok": True}
    finally:
        observability.logger.setLevel(level)
        observability.logger.registered_handler.setStream(previous)
    lines = [json.loads(line) for line in out.getvalue().splitlines() if line.startswith("{")]
    assert [r["timeline"] for r in lines] == ["dispatch_failed"]  # at INFO the routine step is not written
    [line] = lines
    assert {"function_arn", "function_name", "function_memory_size", "cold_start", "location", "agent"}.isdisjoint(line)
    assert line["function_request_id"] and line["service"] and line["session_id"] == "s-1"


def test_the_stack_relays_readable_lines(tmp_path):
    from flightdeck.local.stack import LocalStack

    out = io.StringIO()
    stack = LocalStack(relay=out, relay_format="readable", log_dir=tmp_path)
    stack._prefix_width = 12
    stack._write_relay("plain")
    assert out.getvalue() == "plain\n"
