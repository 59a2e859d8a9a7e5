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
    # Each stream marks its session watched once: the task is shorter than half the mark's time.
    assert a2a["watch_marks"] == 1 and events["watch_marks"] == 1
    # The live relay: a watched 10 s think puts its text about once a second, then deletes it; unwatched,
    # the same think asks nothing more.
    relay = out["live_relay"]
    assert relay["extra_requests_unwatched"] == 0 and relay["relay_requests"] == relay["text_writes"] + 1
    assert relay["relay_requests_by_operation"] == {"dynamodb.PutItem": relay["text_writes"], "dynamodb.DeleteItem": 1}
    assert 8 <= relay["text_writes"] <= 10 and relay["per_streamed_second"]["writes"] <= 1
    rows = report.streaming_rows(out)
    assert len(rows) == 6 and rows[0][1] == "3 DynamoDB reads" and "per million streamed tasks" in rows[1][2]
    assert rows[-1][1] == "0 requests more" and "DynamoDB writes" in rows[-2][1]
