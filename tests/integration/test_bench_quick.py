"""`flightdeck bench --quick` keeps working: it runs end to end and its figures have the right shape.

Never a timed test: nothing here compares a duration with a threshold. It checks
that every figure is there, counts are positive, ratios are finite, and a few
facts the design fixes (three API Gateway requests per one-delegation round trip,
a sweep that reads only the overdue turns, 6 + k state transitions), and that the
sections agree with each other (a conversation of one think per message, a load
whose delegations add up).
"""

from __future__ import annotations

import math
import platform

import pytest

from tests.support import bench_run

pytestmark = pytest.mark.slow


def finite_positive(value) -> bool:
    return isinstance(value, (int, float)) and math.isfinite(value) and value > 0


@pytest.fixture(scope="module")
def result(request):
    # `flightdeck bench --quick --json FILE`, started in the background at collection (tests.support.bench_run).
    return bench_run.result(request.config)


def test_prints_one_markdown_table_with_every_measure(result):
    table = [line for line in result["_stdout"].splitlines() if line.startswith("|")]
    assert table[0] == "| Measure | Result | Basis / breakdown |"
    assert len(table) == len(result["table"]) + 1  # header separator
    text = result["_stdout"]
    for measure in (
        "AWS requests per turn",
        "Cost per 1M delegations",
        "Step Functions",
        "Callback throughput",
        "Timeout lateness",
        "Sweep: items read",
        "Cold start proxy",
        "Local round trip",
        "Step Functions leanest",
        "Lambda durable functions",
        "Conversation: AWS requests per think",
        "Conversation: DynamoDB read units",
        "Load: ",
        "MCP server: tools/call on /mcp",
        "MCP client: a turn with 1 MCP tool call",
        "the MCP path in the a2a function",
        "A2A v0.3 round trip on /a2a",
        "A2A v1.0 round trip on /a2a",
    ):
        assert measure in text


def test_the_mcp_rows_are_counted_and_priced(result):
    for label in ("handler_skill", "ask"):
        run = result["mcp_server_calls"][label]
        # The key check, the ingest's transaction, the wait's reads: never free, never a delegation's worth.
        assert 2 <= run["per_call"]["aws_requests_total"] <= 10, run
        assert finite_positive(sum(run["cost_per_million_calls_usd"].values()))
    turn = result["mcp_client_turn"]
    # The MCP call is an HTTP request to the server, no AWS request; its result adds a think.
    assert turn["added_aws_requests"] > 0 and turn["call_ms"]["n"] == turn["with_call"]["calls"]
    assert finite_positive(result["cold_start"]["mcp_path"]["import_ms"])


READS = ("GetItem", "Query")


def test_the_a2a_rows_count_both_versions_alike(result):
    runs = result["a2a_round_trips"]
    for version in ("0.3", "1.0"):
        run = runs[version]
        # The key check, the task's writes, the think's invoke, the blocking wait's reads: never free.
        assert run["per_call"]["aws_requests_total"] >= 3, run
        assert finite_positive(sum(run["cost_per_million_calls_usd"].values()))
        assert run["client_ms"]["n"] == run["calls"]
    # v1.0 is the same core behind converters: the same writes (the blocking wait's reads, GetItem and Query
    # per poll, follow the think's time, so they may differ by a poll).
    writes = [
        {op: n for op, n in runs[v]["per_call"]["aws_requests_by_operation"].items() if op.split(".")[-1] not in READS}
        for v in ("0.3", "1.0")
    ]
    assert writes[0] == writes[1] and writes[0], writes


def test_round_trips_are_counted_by_service_and_priced(result):
    for key, k in (("round_trip_one", 1), ("round_trip_fan_out", 5)):
        rt = result[key]
        per = rt["per_turn"]
        assert rt["delegations_per_turn"] == k and rt["turns_that_timed_out"] >= 0
        # Secrets Manager answers are cached per warm function, so it may not appear per turn at all.
        assert {"dynamodb", "sqs"} <= set(per["aws_requests_by_service"])
        assert all(finite_positive(v) for v in per["aws_requests_by_operation"].values())
        assert finite_positive(per["lambda_invocations_total"]) and finite_positive(per["api_gateway_requests_total"])
        assert finite_positive(per["dynamodb_request_units"]["wru"]) and finite_positive(
            per["dynamodb_request_units"]["rru"]
        )
        assert finite_positive(per["log_bytes"]) and finite_positive(per["lambda_gb_seconds_local_proxy"])
        assert "empty_receive" in per["excluded_from_cost"]  # polling overhead, counted apart
        # The local gateway's API Gateway lookups are control plane: never per delegation.
        assert "apigateway" not in per["aws_requests_by_service"]
        assert not [
            op
            for op in per["aws_requests_by_operation"]
            if op.split(".")[1].startswith(("GetApiKeys", "GetUsagePlans"))
        ]
        costs = rt["cost_per_million_delegations_usd"]
        assert all(math.isfinite(v) and v >= 0 for v in costs.values()) and finite_positive(costs["total"])
        sfn = rt["step_functions_variant"]
        assert sfn["state_transitions_per_turn"] == 6 + k
        assert finite_positive(sfn["cost_per_million_delegations_usd"]["step_functions"])
        lean = rt["step_functions_lean_variant"]
        assert lean["state_transitions_per_turn"] == k
        dur = rt["durable_functions_variant"]
        assert dur["durable_operations_per_turn"] == 3 + 2 * k and dur["durable_invocations_per_turn"] == 1 + k
        assert finite_positive(dur["checkpoint_bytes_per_turn"]) and dur["assumed_prices"]
        for variant in (sfn, lean, dur):
            total = variant["cost_per_million_delegations_usd"]
            assert finite_positive(total["total"]) and all(math.isfinite(v) and v >= 0 for v in total.values())
        # What the lean variant drops is gone from its counts: no timer invocations on the delegator.
        assert not [f for f in lean["delegator_side"]["lambda_invocations"] if f.endswith("/deadline_timer")]
        # The counting host's DynamoDB requests are the ones moto's own recorder saw arrive in the window.
        check = rt["moto_recorder_check"]
        assert check["differences_by_operation"] == {}, check
        assert check["dynamodb_requests_counted"] == check["dynamodb_requests_recorded_by_moto"] > 0
        # The model's wait: each think of the turn waits on the model in its 512 MB think function.
        wait = rt["cost_at_model_latency"]
        thinks = sum(n for fn, n in per["lambda_invocations"].items() if fn.endswith("/turn_worker"))
        assert wait["thinks_per_delegation"] == round(thinks / k, 3)
        one_s, five_s = wait["total_usd_per_million_delegations"].values()
        assert costs["total"] < one_s < five_s
        # The same counts on each front door (docs/FRONT_DOORS.md): only API Gateway's line differs.
        door = rt["cost_by_front_door"]
        rest, lean_door = door["rest"], door["lean"]
        assert rest["total"] == costs["total"] and lean_door["total"] < rest["total"]
        saved = rest["api_gateway_usd_per_million_delegations"] - lean_door["api_gateway_usd_per_million_delegations"]
        assert rest["total"] - lean_door["total"] == pytest.approx(saved, abs=0.02)
        assert door["lean_http_api_requests_per_turn"] + door["lean_function_url_requests_per_turn"] == pytest.approx(
            per["api_gateway_requests_total"]
        )
    # chat to the delegator, the task to the worker, the answer back: always three requests; on the lean door the
    # user's chat goes through the HTTP API, the task and the answer to function URLs
    assert result["round_trip_one"]["per_turn"]["api_gateway_requests_total"] == 3
    door = result["round_trip_one"]["cost_by_front_door"]
    assert (door["lean_http_api_requests_per_turn"], door["lean_function_url_requests_per_turn"]) == (1, 2)
    # The peer tokens of both ingests are checked inside their transactions, not read before them:
    # the one GetItem a round trip may make is the deadline timer's read of its turn.
    by_item = result["round_trip_one"]["per_turn"]["dynamodb_requests_by_item_kind"]
    assert not [kind for kind in by_item if kind.startswith("GetItem PEER")]
    assert sum(n for kind, n in by_item.items() if "PEER" in kind and kind.startswith("TransactWriteItems")) == 2


def test_callback_throughput_compares_single_and_batch_requests(result):
    cb = result["callback_throughput"]
    for mode in ("single", "batch"):
        assert finite_positive(cb[mode]["results_per_s"]) and finite_positive(cb[mode]["wall_s"])
        assert finite_positive(cb[mode]["per_callback"]["aws_requests_total"])
    assert set(cb["single"]["outcomes"]) == {"202"} and set(cb["batch"]["outcomes"]) == {"accepted"}
    assert cb["single"]["http_requests"] == cb["single"]["callbacks"]
    assert cb["batch"]["http_requests"] < cb["single"]["http_requests"]
    assert finite_positive(cb["ratio_batch_to_single_results_per_s"]) and cb["ratio_requests_single_to_batch"] > 1


def test_timeouts_sweep_and_cold_start_have_their_figures(result):
    late = result["timeouts"]["lateness_ms"]
    assert late["n"] == result["timeouts"]["turns"] and all(math.isfinite(late[k]) for k in ("p50", "max"))
    sweep = result["sweep"]
    assert sweep["list_overdue"]["items_scanned"] == sweep["overdue"]  # the sparse index: only what is overdue
    assert sweep["scan_comparison"]["items_scanned"] >= sweep["open_turns"]
    assert sweep["sweep"]["expired"] == sweep["overdue"]
    cold = result["cold_start"]
    assert finite_positive(cold["boto3_import_ms"])
    assert all(finite_positive(h["ratio_to_boto3"]) for h in cold["handlers"].values())
    assert cold["slowest_breakdown_ms"]
    # What tracing on adds, for every function (issue 40).
    tracing_on = cold["tracing_on"]["handlers"]
    assert set(tracing_on) == set(cold["handlers"]) and all(
        finite_positive(h["import_ms"]) for h in tracing_on.values()
    )


def test_local_latency_is_broken_down_by_hop(result):
    lat = result["latency_one_delegation_ms"]
    for hop in (
        "ingest_and_think",
        "dispatch_to_peer",
        "peer_turn_and_delivery",
        "resume_and_answer",
        "client_round_trip",
    ):
        assert lat[hop]["n"] >= 1 and math.isfinite(lat[hop]["p50"]) and math.isfinite(lat[hop]["p95"])
    # The split of the worker's part depends on the order it logs answer_ready and delivers: each turn either
    # gives a non-negative span or is counted out of order, never a negative hop.
    turns = lat["client_round_trip"]["n"]
    for hop in ("peer_turn", "delivery_and_callback"):
        measured = lat.get(hop, {}).get("n", 0)
        assert measured + lat.get("events_out_of_order", {}).get(hop, 0) == turns
        assert measured == 0 or lat[hop]["min"] >= 0


def test_conversation_counts_one_think_per_message_at_1_2_10_and_50(result):
    conv = result["conversation"]
    assert conv["measured_at"] == [1, 2, 10, 50]
    for figure in (
        "requests_per_think",
        "read_units_per_think",
        "write_units_per_think",
        "requests_per_message",
        "history_bytes",
        "thinks",
    ):
        assert list(conv[figure]) == ["1", "2", "10", "50"]
        # Message 1 creates the session: its think starts from what its ingest wrote and reads nothing.
        assert all(finite_positive(v) for k, v in conv[figure].items() if (figure, k) != ("read_units_per_think", "1"))
    assert conv["read_units_per_think"]["1"] == 0
    assert conv["requests_per_think"]["1"] < conv["requests_per_think"]["2"]
    # From the first think that reads on, requests per think do not grow with the conversation.
    assert conv["requests_per_think"]["50"] <= conv["requests_per_think"]["2"]
    assert conv["requests_growth_last_to_second"] <= 1
    assert set(conv["thinks"].values()) == {1}  # no message delegates: one think each
    # a whole message costs more than its think; the model is given more at every message
    assert all(conv["requests_per_message"][k] > conv["requests_per_think"][k] for k in conv["thinks"])
    assert (
        conv["history_bytes"]["1"]
        < conv["history_bytes"]["2"]
        < conv["history_bytes"]["10"]
        < conv["history_bytes"]["50"]
    )
    assert math.isfinite(conv["requests_growth_last_to_first"]) and math.isfinite(
        conv["read_units_growth_last_to_second"]
    )


def test_load_sessions_and_their_delegations_add_up(result):
    load = result["load"]
    assert load["sessions"] == result["options"]["load_sessions"] >= 1
    assert load["delegations_per_session"] == 2 and load["delegator"] == "orchestrator"
    assert load["sessions_accepted"] + sum(load["rejected_by_status"].values()) == load["sessions"]
    assert 0 <= load["sessions_with_every_answer"] <= load["sessions_completed"] <= load["sessions_accepted"]
    outcomes = load["delegations_answered"] + load["timed_out"] + load["delegations_failed"]
    assert outcomes <= 2 * load["sessions_accepted"]
    if load["sessions_completed"] == load["sessions_accepted"]:
        assert outcomes == 2 * load["sessions_accepted"]  # every delegation of a finished session has a result
    assert isinstance(load["timed_out"], int) and load["timed_out"] >= 0
    assert finite_positive(load["delegations_per_s"]) and finite_positive(load["wall_s"])
    assert finite_positive(load["moto_requests_per_s"])


def test_cold_start_ratio_range_spans_the_handlers(result):
    cold = result["cold_start"]
    low, high = cold["ratio_range"]
    ratios = [h["ratio_to_boto3"] for h in cold["handlers"].values()]
    assert (low, high) == (min(ratios), max(ratios)) and finite_positive(low) and low <= high
    # The floor: the prescribed libraries alone, by kind of handler, each above boto3 on its own.
    assert cold["python"] == platform.python_version()  # the interpreter that imported (the bench's own here)
    floor = cold["library_floor"]
    assert set(floor) == {"every handler", "HTTP handlers", "SQS handlers"}
    # With the collector off first, as a function's init runs (flightdeck.handlers).
    assert all(
        finite_positive(f["ratio_to_boto3"]) and f["modules"][:2] == ["flightdeck.bench.collector_off", "boto3"]
        for f in floor.values()
    )


def test_inbox_counts_what_a_queued_follow_up_costs_to_accept_and_to_consume(result):
    inbox = result["inbox"]
    queued, idle = inbox["queued"], inbox["idle"]
    assert finite_positive(inbox["accept_requests"]) and inbox["accept_requests"] == queued["accept"]["requests"]
    # Accepting is one write (a transaction: META's count and the inbox item), and no think is sent for it yet.
    assert queued["accept"]["by_operation"].get("dynamodb.TransactWriteItems") == 1
    # A think starts as an asynchronous invoke (a Lambda request, counted with the invocations): no queue request.
    assert not any(op.startswith("sqs.") for op in queued["accept"]["by_operation"])
    assert not any(op.startswith("sqs.") for op in idle["accept"]["by_operation"])
    # Consuming rides in the transaction that ends the turn before it: one more item, no more requests;
    # the follow-up's think is started from there instead of from its ingest.
    assert inbox["consume_dynamodb_requests"] == 0
    assert queued["ending_transaction_items"] == idle["ending_transaction_items"] + 1
    assert inbox["consume_requests"] == 0
    assert finite_positive(inbox["consume_wru"])
    table = [line for line in result["_stdout"].splitlines() if line.startswith("| Inbox: a queued follow-up")]
    assert len(table) == 1


def test_the_whole_bill_has_every_cell_and_the_default_is_at_most_a_quarter_at_message_50(result):
    bill = result["bill"]
    assert bill["model"] and bill["think_memory_mb"] == {"baseline": 512, "default": 256}
    assert finite_positive(bill["think_peak_rss_mb"]) and bill["think_peak_rss_mb"] < 256
    for n in (1, 10, 50, 200):
        for latency in (1, 5):
            for design in ("baseline", "default"):
                cell = bill[f"message_{n}"][f"latency_{latency}s"][design]
                assert all(finite_positive(cell[k]) for k in ("infra", "model_wait", "tokens", "total"))
    at50 = bill["message_50"]["latency_5s"]
    assert at50["default"]["total"] <= 0.25 * at50["baseline"]["total"]
    # The infra is the measured round trip's.
    assert bill["message_1"]["latency_1s"]["default"]["infra"] == pytest.approx(
        result["round_trip_one"]["cost_per_million_delegations_usd"]["total"], abs=0.01
    )


def test_the_conversations_thinks_are_billed_by_the_caching_rules_through_the_stack(result):
    """The local model's tokens, stored with each think and summed by the session API (issue 37): past the
    priced model's minimum, a think reads the history its previous think sent from the cache."""
    tokens = result["conversation"]["tokens_per_think"]
    assert list(tokens) == ["1", "2", "10", "50"]
    assert all(t["thinks"] == 1 and t["output"] > 0 for t in tokens.values())
    assert tokens["1"]["cache_read"] == 0
    assert tokens["50"]["cache_read"] > tokens["50"]["input"] + tokens["50"]["cache_write"]


def test_the_thinks_phase_reports_both_modes_at_each_session_count(result):
    thinks = result["thinks"]
    keys = {
        "invocations_per_think",
        "function_s_per_think",
        "peak_concurrency",
        "added_latency_ms_p50",
        "added_latency_ms_p95",
    }
    for sessions in result["options"]["think_sessions"]:
        for mode in ("one_per_function", "shared"):
            got = thinks[f"sessions_{sessions}"][mode]
            assert keys <= set(got) and got["thinks"] >= 1, (sessions, mode)
            assert got["invocations_per_think"] <= 1 and got["peak_concurrency"] >= 1
            assert got["delegations_answered"] <= got["delegations"]
        # Per function, a think is an invocation: the baseline of every "added" figure.
        assert thinks[f"sessions_{sessions}"]["one_per_function"]["invocations_per_think"] == 1
        assert thinks[f"sessions_{sessions}"]["one_per_function"]["added_latency_ms_p50"] == 0
    for mode in ("one_per_function", "shared"):
        assert set(thinks["delegations_per_s_per_1000_concurrency"][mode]) == {"latency_1s", "latency_5s"}
