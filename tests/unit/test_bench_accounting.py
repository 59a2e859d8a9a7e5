"""From counted records to billed requests, request units and dollars; the price table; the Step Functions model."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from flightdeck import topology
from flightdeck.bench import prices, stepfunctions
from flightdeck.bench.accounting import Tally, category, update_keys


def aws(op, svc="dynamodb", fn="turn_worker", agent="a", status=200, **extra):
    return {"k": "aws", "t": 1.0, "agent": agent, "fn": fn, "svc": svc, "op": op, "status": status, **extra}


def inv(fn, agent="a", src="sqs", ms=10.4, route=""):
    return {"k": "inv", "t": 1.0, "agent": agent, "fn": fn, "src": src, "ms": ms, "route": route, "n": 1}


def test_categories_separate_what_is_billed_per_delegation_from_time_based_overhead():
    assert category(aws("Query")) == "handler"
    assert category(aws("ReceiveMessage", svc="sqs", fn=None, n=2)) == "event_source_mapping"
    assert category(aws("DeleteMessageBatch", svc="sqs", fn=None)) == "event_source_mapping"
    assert category(aws("ReceiveMessage", svc="sqs", fn=None, n=0)) == "empty_receive"
    assert category(aws("GetQueueAttributes", svc="sqs", fn=None)) == "setup"
    assert category(aws("Query", fn="sweeper")) == "schedule"
    assert category(inv("sweeper", src="schedule")) == "schedule"
    # The local gateway's key and usage-plan lookups (API Gateway does them itself on AWS): not per delegation.
    assert category(aws("GetApiKeys", svc="apigateway", fn=None)) == "control_plane"
    assert category(aws("GetUsagePlans", svc="apigateway", fn="peer_authorizer")) == "control_plane"
    assert category(aws("DescribeTable", fn="turn_worker")) == "control_plane"


def test_an_asynchronous_invoke_is_billed_once_as_the_invocation_it_starts():
    records = [aws("Invoke", svc="lambda", fn="chat_ingest", status=202), inv("turn_worker", src="invoke", ms=5.0)]
    assert category(records[0]) == "async_invoke"
    t = Tally.of(records)
    assert t.aws_requests == {} and t.by_service() == {}  # not a DynamoDB/SQS/Secrets Manager request
    assert t.invocations == {"a/turn_worker": 1} and t.async_invokes == {"a/chat_ingest": 1}
    assert t.excluded == {}
    per = t.divided(2).to_dict()
    assert per["lambda_invocations_total"] == 0.5 and per["lambda_async_invokes_total"] == 0.5
    assert per["aws_requests_total"] == 0


def test_control_plane_calls_are_reported_apart_and_cost_nothing_per_delegation():
    records = [
        aws("GetApiKeys", svc="apigateway", fn=None),
        aws("GetUsagePlans", svc="apigateway", fn=None),
        aws("GetItem", fn="chat_ingest", consistent=True, bytes=100),
    ]
    t = Tally.of(records)
    assert t.aws_requests == {"dynamodb.GetItem": 1}
    assert t.excluded == {"control_plane": 2}
    assert "apigateway" not in t.by_service()


def test_tally_counts_requests_invocations_gateway_and_excludes_overhead():
    records = [
        inv("chat_ingest", src="http", route="POST /api/chat", ms=3.2),
        inv("turn_worker", ms=10.0),
        inv("sweeper", src="schedule"),
        aws("SendMessage", svc="sqs", queue="a-other.fifo", bytes=100),
        aws("SendMessage", svc="sqs", queue="a-dispatch", bytes=70_000),  # two 64 KB chunks
        aws("ReceiveMessage", svc="sqs", fn=None, queue="a-dispatch", n=1),
        aws("ReceiveMessage", svc="sqs", fn=None, queue="a-dispatch", n=0),
        aws("Query", fn="sweeper", index="deadline-index", bytes=0),
        aws("GetSecretValue", svc="secretsmanager", fn="callback", status=400),
    ]
    t = Tally.of(records)
    assert t.aws_requests == {"sqs.SendMessage": 2, "sqs.ReceiveMessage": 1, "secretsmanager.GetSecretValue": 1}
    assert t.sqs_requests == {"fifo": 1, "standard": 3}
    assert t.invocations == {"a/chat_ingest": 1, "a/turn_worker": 1}
    assert t.gateway == {"a POST /api/chat": 1}
    assert t.excluded == {"schedule_invocations": 1, "empty_receive": 1, "schedule_calls": 1}
    assert t.secrets_calls == 1 and t.secrets_failed == 1
    # 4 ms and 10 ms billed at 512 MB
    assert t.gb_seconds == pytest.approx((4 + 10) / 1000 * 0.5)
    half = t.divided(2)
    assert half.total_aws_requests == 2 and half.per == 2 and half.gb_seconds == pytest.approx(t.gb_seconds / 2)


def test_write_units_double_in_transactions_and_a_failed_write_is_billed():
    seed = aws(
        "PutItem",
        writes=[
            {
                "op": "Put",
                "table": "t",
                "pk": "S#1",
                "sk": "TURN#1",
                "kind": "TURN",
                "txn": False,
                "size": 300,
            }
        ],
    )
    record = aws(
        "TransactWriteItems",
        writes=[
            {
                "op": "Put",
                "table": "t",
                "pk": "S#1",
                "sk": "RESULT#1#x",
                "kind": "RESULT",
                "txn": True,
                "size": 1500,
            },
            {
                "op": "Update",
                "table": "t",
                "pk": "S#1",
                "sk": "TURN#1",
                "kind": "TURN",
                "txn": True,
            },
        ],
    )
    failed = aws(
        "UpdateItem",
        status=400,
        writes=[
            {
                "op": "Update",
                "table": "t",
                "pk": "S#1",
                "sk": "META",
                "kind": "META",
                "txn": False,
            }
        ],
    )
    reads = [
        aws("GetItem", consistent=True, bytes=5000),
        aws("Query", consistent=False, index="deadline-index", bytes=10),
        aws("Query", consistent=True, bytes=100),
    ]
    sizes = {("t", "S#1", "TURN#1"): 2048}
    t = Tally.of([seed, record, failed, *reads], sizes=sizes)
    # seed 1; result 2x2; turn update 2x2 (2 KB); failed update still billed, 1 (unknown size: 1 KB)
    assert t.dynamodb["wru"] == 1 + 4 + 4 + 1
    assert t.dynamodb["gsi_wru"] == 0  # index units come from the table's stream (index_units), not the requests
    assert t.dynamodb["rru"] == 2 + 0.5 + 1
    assert update_keys([seed, record, failed]) == {("t", "S#1", "TURN#1"), ("t", "S#1", "META")}
    assert t.wru_by_item["TURN"] == 1 + 4


def test_a_condition_check_in_a_transaction_is_billed_as_a_transactional_read_not_a_write():
    write = {"op": "Put", "table": "t", "pk": "S#1", "sk": "META", "kind": "META", "txn": True, "size": 300}
    check = {"op": "ConditionCheck", "table": "t", "pk": "PEER#p", "sk": "PEER", "kind": "PEER", "txn": True}
    t = Tally.of(
        [aws("TransactWriteItems", fn="chat_ingest", writes=[write, check])], sizes={("t", "PEER#p", "PEER"): 200}
    )
    assert t.aws_requests == {"dynamodb.TransactWriteItems": 1}
    assert t.dynamodb["wru"] == 2 and t.dynamodb["rru"] == 2  # the Put 2x1 KB; the check 2x4 KB of reads
    assert t.dynamodb_by_item == {"TransactWriteItems META+PEER": 1}


def test_cost_is_count_times_list_price():
    table = prices.load()
    records = [
        inv("callback", src="http", route="POST /api/tools/response", ms=1.0),
        aws("SendMessage", svc="sqs", fn="callback", queue="a-turns.fifo"),
    ]
    t = Tally.of(records)
    t.log_bytes = 1024**3
    cost = t.cost(table)
    assert cost["api_gateway"] == pytest.approx(3.5e-6)
    assert cost["lambda_requests"] == pytest.approx(0.2e-6)
    assert cost["lambda_duration"] == pytest.approx(0.0005 * table.lambda_gb_second)
    assert cost["sqs"] == pytest.approx(0.5e-6)
    assert cost["cloudwatch_logs"] == pytest.approx(0.5)
    assert cost["total"] == pytest.approx(sum(v for k, v in cost.items() if k != "total"))
    data = t.to_dict(table)
    assert data["cost_per_million_round_trips_usd"]["api_gateway"] == 3.5
    json.dumps(data)  # JSON-ready


def test_the_price_table_is_dated_complete_and_validated():
    table = prices.load()
    assert table.region == "us-east-1" and table.recorded
    free = "lambda_function_url_per_million_requests"  # the lean door's function URLs: $0 beyond the invocation
    assert all(table[name] > 0 for name in prices.REQUIRED if name != free) and table[free] == 0
    raw = dict(table.raw)
    raw["prices"] = {k: v for k, v in raw["prices"].items() if k != "lambda_arm64_per_gb_second"}
    with pytest.raises(ValueError, match="lambda_arm64_per_gb_second"):
        prices.parse(raw)
    with pytest.raises(ValueError, match="recorded"):
        prices.parse({**table.raw, "recorded": ""})


def test_the_step_functions_model_counts_transitions_and_keeps_only_what_the_variant_keeps():
    assert stepfunctions.transitions(1) == 7
    assert stepfunctions.transitions(5) == 11
    assert stepfunctions.transitions(2, timed_out=1) == 9
    table = prices.load()
    records = [
        inv("chat_ingest", agent="A", src="http", route="POST /api/chat"),
        inv("turn_worker", agent="A"),
        inv("turn_worker", agent="A"),
        inv("dispatch_worker", agent="A"),
        inv("callback", agent="A", src="http", route="POST /api/tools/response"),
        inv("deadline_timer", agent="A"),
        aws("TransactWriteItems", agent="A", fn="chat_ingest", writes=[]),
        aws("SendMessage", svc="sqs", agent="A", fn="chat_ingest", queue="A-turns.fifo"),  # -> StartExecution
        aws("Query", agent="A", fn="turn_worker", consistent=True, bytes=10),
        aws("SendMessage", svc="sqs", agent="A", fn="turn_worker", queue="A-dispatch"),
        aws("GetSecretValue", svc="secretsmanager", agent="A", fn="dispatch_worker"),
    ]
    out = stepfunctions.model(
        delegator="A",
        records=records,
        peer_tally=Tally(),
        delegations=1,
        round_trips=1,
        sizes={},
        memory_mb=512,
        log_bytes_delegator=0,
        prices=table,
    )
    side = out["delegator_side"]
    assert side["lambda_invocations"] == {
        "A/turn_worker": 2,
        "A/callback": 1,
        "A/chat_ingest": 1,
        "A/dispatch_worker": 1,
    }
    assert side["aws_requests_by_operation"] == {
        "dynamodb.TransactWriteItems": 1,
        "dynamodb.UpdateItem": 1,
        "secretsmanager.GetSecretValue": 1,
        "states.SendTaskSuccess": 1,
        "states.StartExecution": 1,
    }
    assert out["state_transitions_per_turn"] == 7
    assert out["cost_per_turn_usd"]["step_functions"] == pytest.approx(7 * 0.025 / 1000)
    assert out["cost_per_million_delegations_usd"]["step_functions"] == 175.0


def test_the_price_table_records_durable_function_prices_and_marks_the_assumed_ones():
    table = prices.load()
    assert table.durable_operation == pytest.approx(8e-6)
    assert set(table.assumed) == {
        "lambda_durable_data_written_per_gb",
        "lambda_durable_data_retained_per_gb_month",
        "lambda_function_url_per_million_requests",
    }
    assert "lambda_durable" in table.raw["sources"]
    assert all("ASSUMPTION" in table.raw["notes"][name] for name in table.assumed)
    with pytest.raises(ValueError, match="assumed"):
        prices.parse({**table.raw, "assumed": ["no_such_price"]})


def _delegator_turn(agent="A"):
    """One measured one-delegation turn of the delegator A, as the counter records it."""
    return [
        inv("chat_ingest", agent=agent, src="http", route="POST /api/chat", ms=5.0),
        aws("TransactWriteItems", agent=agent, fn="chat_ingest", writes=[]),
        aws("SendMessage", svc="sqs", agent=agent, fn="chat_ingest", queue=f"{agent}-turns.fifo"),
        inv("turn_worker", agent=agent, ms=20.0),
        inv("turn_worker", agent=agent, ms=30.0),
        aws("Query", agent=agent, fn="turn_worker", consistent=True, bytes=10),
        aws("SendMessage", svc="sqs", agent=agent, fn="turn_worker", queue=f"{agent}-dispatch"),
        aws("SendMessage", svc="sqs", agent=agent, fn="turn_worker", queue=f"{agent}-timers"),
        aws("ReceiveMessage", svc="sqs", agent=agent, fn=None, queue=f"{agent}-dispatch", n=1),
        aws("DeleteMessageBatch", svc="sqs", agent=agent, fn=None, queue=f"{agent}-dispatch"),
        aws("ReceiveMessage", svc="sqs", agent=agent, fn=None, queue=f"{agent}-turns.fifo", n=1),
        inv("dispatch_worker", agent=agent, ms=50.0),
        inv("callback", agent=agent, src="http", route="POST /api/tools/response", ms=4.0),
        aws("TransactWriteItems", agent=agent, fn="callback", writes=[]),
        inv("deadline_timer", agent=agent),
        aws("GetItem", agent=agent, fn="deadline_timer", consistent=True, bytes=10),
    ]


def test_the_lean_step_functions_model_drops_the_dispatch_and_timer_paths_and_keeps_the_rest():
    assert stepfunctions.lean_transitions(1) == 1 and stepfunctions.lean_transitions(5) == 5
    assert stepfunctions.lean_transitions(2, timed_out=1) == 3
    out = stepfunctions.lean_model(
        delegator="A",
        records=_delegator_turn(),
        peer_tally=Tally(),
        delegations=1,
        round_trips=1,
        sizes={},
        memory_mb=512,
        log_bytes_delegator=0,
        prices=prices.load(),
    )
    side = out["delegator_side"]
    assert "A/deadline_timer" not in side["lambda_invocations"]
    assert side["lambda_invocations"] == {
        "A/turn_worker": 2,
        "A/chat_ingest": 1,
        "A/dispatch_worker": 1,
        "A/callback": 1,
    }
    ops = side["aws_requests_by_operation"]
    # the turns queue stays (thinks are outside the state machine); dispatch and timers queues go
    assert ops["sqs.SendMessage"] == 1 and ops["sqs.ReceiveMessage"] == 1 and "sqs.DeleteMessageBatch" not in ops
    assert "dynamodb.GetItem" not in ops and ops["dynamodb.TransactWriteItems"] == 2 and ops["dynamodb.Query"] == 1
    assert ops["states.StartExecution"] == 1 and ops["states.SendTaskSuccess"] == 1
    assert out["cost_per_million_delegations_usd"]["step_functions"] == 25.0


def test_the_durable_functions_model_counts_operations_invocations_and_checkpoint_data():
    from flightdeck.bench import durable

    assert durable.operations(1) == 5 and durable.operations(5) == 13
    assert durable.invocations(1) == 2 and durable.invocations(5) == 6
    table = prices.load()
    out = durable.model(
        delegator="A",
        records=_delegator_turn(),
        peer_tally=Tally(),
        delegations=1,
        round_trips=1,
        sizes={},
        memory_mb=512,
        log_bytes_delegator=0,
        checkpoint_bytes=1024**3,
        prices=table,
    )
    side = out["delegator_side"]
    # the durable function stands for the thinks and the dispatch: 2 invocations, their measured durations
    assert side["lambda_invocations"] == {"A/durable_turn": 2, "A/chat_ingest": 1, "A/callback": 1}
    assert side["handler_ms_local"]["A/durable_turn"] == pytest.approx(100.0)
    ops = side["aws_requests_by_operation"]
    assert not any(name.startswith("sqs.") for name in ops)  # no queues on the delegator
    assert ops["dynamodb.TransactWriteItems"] == 1  # chat-ingest's; the callback's is gone
    assert ops["dynamodb.UpdateItem"] == 1 and ops["lambda.SendDurableExecutionCallbackSuccess"] == 1
    costs = out["cost_per_turn_usd"]
    assert costs["durable_operations"] == pytest.approx(5 * 8e-6)
    # 1 GB written once and kept 14 of 30 days, at the (assumed) prices
    assert costs["durable_data"] == pytest.approx(0.25 + 0.15 * 14 / 30)
    assert set(out["assumed_prices"]) == {n for n in table.assumed if n.startswith("lambda_durable")}
    assert costs["total"] == pytest.approx(sum(v for k, v in costs.items() if k != "total"))


def _image(**attrs):
    return {k: {"N": str(v)} if isinstance(v, int) else {"S": v} for k, v in attrs.items()}


def test_index_units_follow_the_developer_guide_rules_from_the_items_old_and_new_images():
    from flightdeck.bench.index_units import index_write_units, records_of

    plain = _image(pk="S#1", sk="META", status="busy")
    owed = {**plain, **_image(due_shard="open#1", due_at=1000)}
    new_session = {**owed, **_image(owner="bench", created_at=5)}
    # a new session: into the deadline index and the owner's sessions index
    assert index_write_units(None, new_session) == {"deadline-index": 1, "owner-sessions-index": 1}
    # the deadline moves: the old entry deleted, the new one put
    assert index_write_units(owed, {**owed, **_image(due_at=2000)}) == {"deadline-index": 2}
    # it leaves the index: one write; keys only, nothing else it changes writes there
    assert index_write_units(owed, plain) == {"deadline-index": 1}
    assert index_write_units(owed, {**owed, **_image(status="idle")}) == {}
    assert index_write_units(plain, {**plain, **_image(status="idle")}) == {}
    # a keys-only entry is small whatever the item's size; an entry of projection ALL is billed by the item's
    all_projected = (replace(topology.INDEXES[0], projection="ALL"),)
    big = {**owed, **_image(reply="x" * 1500)}
    assert index_write_units(None, big) == {"deadline-index": 1}
    assert index_write_units(None, big, all_projected) == {"deadline-index": 2}
    assert index_write_units(owed, {**owed, **_image(status="idle")}, all_projected) == {"deadline-index": 1}
    # the bench's records of a stream: only the writes that touched an index, with their item kind
    stream = [
        {"dynamodb": {"Keys": _image(pk="S#1", sk="META"), "NewImage": owed, "ApproximateCreationDateTime": 7.5}},
        {"dynamodb": {"Keys": _image(pk="S#1", sk="ITER#000001"), "NewImage": _image(pk="S#1", sk="ITER#000001")}},
    ]
    [record] = records_of(stream, "A")
    assert record == {"k": "gsi", "agent": "A", "t": 7.5, "kind": "META", "units": {"deadline-index": 1}}
    t = Tally.of([record, {**record, "units": {"deadline-index": 2}}])
    assert t.dynamodb["gsi_wru"] == 3 and t.wru_by_item["META"] == 3


def test_the_model_wait_is_priced_per_think_at_each_stated_latency():
    from flightdeck.bench.round_trip_cost import at_model_latency

    table = prices.load()
    per_turn = {
        "lambda_invocations": {"delegator/turn_worker": 2.0, "worker/turn_worker": 1.0, "delegator/callback": 1.0}
    }
    out = at_model_latency(per_turn, 40.0, 1, table, {"delegator": 512, "worker": 128})
    # 2 thinks at 0.5 GB and 1 at 0.125 GB: 1.125 GB-s per model-second per delegation.
    per_second = round(1.125 * table.lambda_gb_second * 1e6, 2)
    assert out["thinks_per_delegation"] == 3.0 and out["model_second_usd_per_million_delegations"] == per_second
    assert out["total_usd_per_million_delegations"] == {
        "1s": round(40.0 + per_second, 2),
        "5s": round(40.0 + 5 * per_second, 2),
    }
    # Five delegations a turn share its thinks.
    fan = at_model_latency(per_turn, 30.0, 5, table, {"delegator": 512, "worker": 128})
    assert fan["thinks_per_delegation"] == 0.6
