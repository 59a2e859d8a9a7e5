"""The bench's streaming section: the reads of the real stream generators on a scripted task, and its rows."""

from __future__ import annotations

from flightdeck.bench import prices, report, streaming


def test_a_streamed_second_and_a_streamed_task_in_requests():
    out = streaming.measure(prices.load(), lambda message: None, wait_s=6, poll_ms=1000, memory_mb=512)
    a2a, events = out["message_stream"], out["session_events"]
    for r in (a2a, events):
        # One poll a second, from the first read to the one that saw the end: bounded by time, not by events.
        assert r["streamed_s"] == 8.0 and r["polls"] == 9
        assert r["per_streamed_second"]["lambda_gb_s"] == 0.5 and r["per_streamed_task"]["lambda_gb_s"] == 4.0
        assert r["per_streamed_task"]["api_gateway_requests"] == 1
        assert r["per_streamed_task"]["usd"]["lambda_duration"] > r["per_streamed_task"]["usd"]["dynamodb_reads"]
    # message/stream: the task (GetItem), the session and its turn's results (Query x2) while it waits.
    assert a2a["per_waiting_poll"]["requests_by_operation"] == {"dynamodb.GetItem": 1, "dynamodb.Query": 2}
    assert a2a["requests"] <= 3 * a2a["polls"] and a2a["per_streamed_second"]["dynamodb_requests"] == 3
    # The session's events: the session and the results (Query x2).
    assert events["per_waiting_poll"]["requests_by_operation"] == {"dynamodb.Query": 2}
    assert events["events"] == 7  # message, thinking, delegating, callback_accepted, thinking, answer, idle
    rows = report.streaming_rows(out)
    assert len(rows) == 4 and rows[0][1] == "3 DynamoDB reads" and "per million streamed tasks" in rows[1][2]
