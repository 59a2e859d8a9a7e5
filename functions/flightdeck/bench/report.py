"""The benchmark's one table: rows built from a result, rendered as Markdown (pastes into docs)."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

HOP_DESCRIPTIONS = {
    "ingest_and_think": "delegator: POST /api/chat -> async invoke -> think -> tool_use",
    "dispatch_to_peer": "delegator tool_use -> HTTP -> worker's /api/chat (inline in the turn worker, or through the "
    "dispatch queue and function)",
    "peer_turn": "worker: async invoke -> think -> answer_ready (only where answer_ready is logged before the delivery)",
    "delivery_and_callback": "worker answer_ready -> HTTP -> delegator's callback recorded (only where answer_ready is "
    "logged before the delivery)",
    "peer_turn_and_delivery": "worker: async invoke -> think -> its answer sent -> delegator's callback recorded",
    "resume_and_answer": "turn complete -> async invoke -> think -> final_answer",
    "total_logged": "delegator chat_received -> final_answer (log timestamps)",
}
COST_LABELS = (
    ("api_gateway", "API GW"),
    ("dynamodb_writes", "DynamoDB writes"),
    ("dynamodb_reads", "DynamoDB reads"),
    ("lambda_requests", "Lambda requests"),
    ("lambda_duration", "Lambda GB-s (local proxy)"),
    ("sqs", "SQS"),
    ("secrets_manager", "Secrets Manager"),
    ("cloudwatch_logs", "CloudWatch Logs"),
    ("step_functions", "Step Functions"),
    ("durable_operations", "durable operations"),
    ("durable_data", "durable data (ASSUMED price)"),
)


def num(value: float, digits: int = 1) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "n/a"
    if isinstance(value, float) and math.isinf(value):
        return "inf"
    if abs(value - round(value)) < 1e-9:
        return f"{int(round(value)):,}"
    return f"{value:,.{digits}f}"


def money(value: float) -> str:
    return f"${value:,.2f}"


def _ops(counts: dict[str, float], service: str) -> str:
    items = [(name.split(".", 1)[1], n) for name, n in counts.items() if name.startswith(service + ".")]
    return ", ".join(f"{op} {num(n)}" for op, n in items) or "none"


def _named(counts: dict[str, float]) -> str:
    return ", ".join(f"{name} {num(n)}" for name, n in counts.items()) or "none"


def _costs(costs: dict[str, float]) -> str:
    return " + ".join(f"{label} {money(costs[key])}" for key, label in COST_LABELS if costs.get(key))


def _round_trip_rows(rt: dict[str, Any]) -> list[list[str]]:
    k = rt["delegations_per_turn"]
    per = rt["per_turn"]
    label = "1 delegation/turn" if k == 1 else f"{k} delegations/turn"
    per_delegation: Callable[[float], str] = (lambda v: f" ({num(v / k)} per delegation)") if k > 1 else (lambda v: "")
    services = per["aws_requests_by_service"]
    sqs = per["sqs_billed_requests"]
    units = per["dynamodb_request_units"]
    excluded = per["excluded_from_cost"]
    basis = f"counted, mean of {rt['round_trips']} turns, both agents"
    if rt.get("turns_that_timed_out"):
        basis += f"; WARNING: {rt['turns_that_timed_out']} of them timed out (their counts include the timeout path)"
    return [
        [
            f"{label}: AWS requests per turn",
            f"{num(per['aws_requests_total'])}{per_delegation(per['aws_requests_total'])}",
            ", ".join(f"{s} {num(n)}" for s, n in services.items()) + f"; {basis}",
        ],
        [
            f"{label}: DynamoDB requests",
            _ops(per["aws_requests_by_operation"], "dynamodb"),
            "by item: " + _named(dict(list(per["dynamodb_requests_by_item_kind"].items())[:8])),
        ],
        [
            f"{label}: DynamoDB request units",
            f"{num(units.get('wru', 0))} WRU + {num(units.get('gsi_wru', 0))} index WRU, "
            f"{num(units.get('rru', 0))} RRU",
            "from item sizes; WRU by item: " + _named(per["dynamodb_wru_by_item_kind"]),
        ],
        [
            f"{label}: SQS requests",
            _ops(per["aws_requests_by_operation"], "sqs"),
            f"billed: {num(sqs.get('standard', 0))} standard + {num(sqs.get('fifo', 0))} FIFO; receives that returned messages only",
        ],
        [
            f"{label}: Secrets Manager requests",
            _ops(per["aws_requests_by_operation"], "secretsmanager"),
            f"after caching; {num(per['secrets_manager_failed_calls'])} of them the uncached AWSPREVIOUS miss",
        ],
        [
            f"{label}: Lambda invocations",
            f"{num(per['lambda_invocations_total'])}{per_delegation(per['lambda_invocations_total'])}",
            _named(per["lambda_invocations"])
            + f"; {num(per.get('lambda_async_invokes_total', 0))} of them started by an "
            "asynchronous Invoke (billed once, as the invocation)",
        ],
        [
            f"{label}: API Gateway requests",
            f"{num(per['api_gateway_requests_total'])}{per_delegation(per['api_gateway_requests_total'])}",
            _named(per["api_gateway_requests"]),
        ],
        [
            f"{label}: not per delegation (excluded)",
            _named(excluded),
            "local pollers' empty receives, poller set-up, control-plane calls (the local gateway's "
            "apigateway.GetApiKeys / GetUsagePlans), the scheduled sweeper: time-based, not per delegation",
        ],
    ]


def _cost_rows(rt: dict[str, Any]) -> list[list[str]]:
    k = rt["delegations_per_turn"]
    label = "1 delegation/turn" if k == 1 else f"{k} delegations/turn"
    ours = rt["cost_per_million_delegations_usd"]
    sfn = rt["step_functions_variant"]
    sfn_costs = sfn["cost_per_million_delegations_usd"]
    transitions = sfn["state_transitions_per_turn"]
    rows = [[f"Cost per 1M delegations, {label}", money(ours["total"]), _costs(ours)]]
    wait = rt.get("cost_at_model_latency")
    if wait:
        at = wait["total_usd_per_million_delegations"]
        memory = ", ".join(f"{agent} {mb} MB" for agent, mb in wait["think_memory_mb"].items())
        rows.append(
            [
                f"... same, with the model's latency: {' / '.join(at)} per think",
                " / ".join(money(v) for v in at.values()),
                f"{num(wait['thinks_per_delegation'])} thinks per delegation, each waiting on the model in its think "
                f"function ({memory}): {money(wait['model_second_usd_per_million_delegations'])} per 1M delegations "
                "per model-second, on top of the measured cost (the local model answers in 0 ms)",
            ]
        )
    door = rt.get("cost_by_front_door")
    if door:
        rest, lean = door["rest"], door["lean"]
        latency = " / ".join(rest.get("at_model_latency") or {})
        rows.append(
            [
                "... by front door: REST / lean" + (f" (and at {latency} per think)" if latency else ""),
                f"{money(rest['total'])} / {money(lean['total'])}"
                + (
                    " ("
                    + " / ".join(
                        f"{money(r)} / {money(lv)}"
                        for r, lv in zip(rest["at_model_latency"].values(), lean["at_model_latency"].values())
                    )
                    + ")"
                    if latency
                    else ""
                ),
                f"the same counts; API Gateway {money(rest['api_gateway_usd_per_million_delegations'])} on REST "
                f"({num(door['http_requests_per_turn'])} requests/turn at $3.50/M), "
                f"{money(lean['api_gateway_usd_per_million_delegations'])} on the lean door "
                f"({num(door['lean_http_api_requests_per_turn'])} HTTP API requests/turn at $1.00/M, "
                f"{num(door['lean_function_url_requests_per_turn'])} to function URLs at $0; docs/FRONT_DOORS.md)",
            ]
        )
    check = rt.get("moto_recorder_check")
    if check:
        differences = check["differences_by_operation"]
        rows.append(
            [
                "... its DynamoDB requests, counted / recorded by moto",
                f"{check['dynamodb_requests_counted']} / {check['dynamodb_requests_recorded_by_moto']}",
                "every agent's DynamoDB requests in the window, as the counting host counted them inside the functions "
                "and as moto's recorder saw them arrive (the bench's own reads left out): "
                + ("they agree" if not differences else f"moto - counted, by operation: {differences}"),
            ]
        )
    rows += [
        [
            "... same, Step Functions .waitForTaskToken, whole turn in the state machine (modelled)",
            money(sfn_costs["total"]),
            f"model: {transitions} state transitions/turn ({num(transitions / k)} per delegation); "
            + _costs(sfn_costs),
        ],
    ]
    lean = rt.get("step_functions_lean_variant")
    if lean:
        n = lean["state_transitions_per_turn"]
        rows.append(
            [
                "... same, Step Functions leanest: one .waitForTaskToken task per delegation, thinks outside "
                "(modelled)",
                money(lean["cost_per_million_delegations_usd"]["total"]),
                f"model: {n} state transition/turn ({num(n / k)} per delegation; +1 per timeout); measured "
                "but for the dispatch and timers queues and the deadline timer, which the task's timeout "
                "replaces; " + _costs(lean["cost_per_million_delegations_usd"]),
            ]
        )
    dur = rt.get("durable_functions_variant")
    if dur:
        rows.append(
            [
                "... same, Lambda durable functions: create_callback + SendDurableExecutionCallbackSuccess "
                "(modelled, assumed prices)",
                money(dur["cost_per_million_delegations_usd"]["total"]),
                f"model: {dur['durable_operations_per_turn']} durable operations/turn at the recorded $8/M "
                f"(third-party transcription), {dur['durable_invocations_per_turn']} invocations (ASSUMED: "
                f"one resume per callback), {num(dur['checkpoint_bytes_per_turn'], 0)} checkpoint bytes/turn "
                f"written and kept {dur['retention_days']} days at ASSUMED prices (none in the stored docs); "
                + _costs(dur["cost_per_million_delegations_usd"]),
            ]
        )
    return rows


def _at(values: dict[str, Any], digits: int = 1) -> str:
    return " / ".join(num(v, digits) for v in values.values())


def _conversation_rows(conv: dict[str, Any] | None) -> list[list[str]]:
    if not conv:
        return []
    at = " / ".join(conv["requests_per_think"])
    need = {k: max(1, math.ceil(b / 4096)) for k, b in conv["history_bytes"].items()}
    return [
        [
            f"Conversation: AWS requests per think at messages {at}",
            _at(conv["requests_per_think"]),
            f"one session on the delegator, {conv['messages']} user messages one at a time (no delegation: one think "
            f"each); the turn worker's own requests; the whole message (ingest, queue, think): "
            f"{_at(conv['requests_per_message'])}",
        ],
        [
            f"Conversation: DynamoDB read units per think at messages {at}",
            _at(conv["read_units_per_think"]) + " RRU",
            f"what the model is given: {_at(conv['history_bytes'], 0)} bytes of conversation, at least "
            f"{' / '.join(str(v) for v in need.values())} RRU to read (4 KB, strongly consistent)",
        ],
        [
            f"Conversation: DynamoDB write units per think at messages {at}",
            _at(conv["write_units_per_think"]) + " WRU",
            "table and index write units, from item sizes (a growing item is sized as it is after that message)",
        ],
    ]


def _inbox_rows(inbox: dict[str, Any] | None) -> list[list[str]]:
    if not inbox:
        return []
    queued, idle = inbox["queued"], inbox["idle"]
    return [
        [
            "Inbox: a queued follow-up, AWS requests to accept / to consume",
            f"{num(inbox['accept_requests'])} / {num(inbox['consume_requests'])}",
            f"accepting it: {_named(queued['accept']['by_operation'])}, {num(queued['accept']['wru'])} WRU (a follow-up "
            f"to an idle session: {num(idle['accept']['requests'])} requests, {_named(idle['accept']['by_operation'])}); "
            f"consuming it: the think that ends the turn before it makes {num(queued['ending_think']['requests'])} "
            f"requests, {num(queued['ending_think']['wru'])} WRU, its transaction {queued['ending_transaction_items']} "
            f"items, against {num(idle['ending_think']['requests'])} requests, {num(idle['ending_think']['wru'])} WRU, "
            f"{idle['ending_transaction_items']} items with nothing waiting ({num(inbox['consume_dynamodb_requests'])} "
            "more DynamoDB requests; the SQS send of the follow-up's think moves from its ingest to that think)",
        ],
    ]


def _load_rows(load: dict[str, Any] | None) -> list[list[str]]:
    if not load:
        return []
    total = load["sessions"] * load["delegations_per_session"]
    lat = load["session_latency_ms"]
    return [
        [
            f"Load: {load['sessions']} sessions at once, {load['delegations_per_session']} delegations each",
            f"{num(load['delegations_per_s'], 2)} delegations/s",
            f"{load['delegator']} of {load['config'].rsplit('/', 1)[-1]} -> {', '.join(load['delegates'])}, the file's "
            f"local stack as `flightdeck local up` runs it; wall {num(load['wall_s'], 1)} s from sending to the last "
            f"answer, session p50 {num(lat['p50'], 0)} ms, max {num(lat['max'], 0)} ms; moto served "
            f"{num(load['moto_requests_per_s'])} requests/s (2 cores, moto-bound)",
        ],
        [
            "Load: sessions completed, delegations timed out",
            f"{load['sessions_completed']} of {load['sessions']} completed, {load['timed_out']} of {total} timed out",
            f"{load['sessions_with_every_answer']} sessions with every answer, {load['delegations_failed']} delegations "
            f"failed otherwise; ASYNC_TOOL_TIMEOUT_MS={load['async_tool_timeout_ms']}"
            + (f"; rejected: {_named(load['rejected_by_status'])}" if load["rejected_by_status"] else ""),
        ],
    ]


def _structured_rows(one: dict[str, Any], structured: dict[str, Any] | None) -> list[list[str]]:
    """A structured call (a skill tool from the peer's card) beside the free-text delegation it replaces."""
    if structured is None:
        return []
    per, free = structured["per_turn"], one["per_turn"]
    return [
        [
            "Structured call (a skill tool from the card), 1/turn: AWS requests per turn",
            f"{num(per['aws_requests_total'])} (free text: {num(free['aws_requests_total'])})",
            ", ".join(f"{s} {num(n)}" for s, n in per["aws_requests_by_service"].items())
            + f"; counted, mean of {structured['round_trips']} turns, both agents; the card is read over HTTP "
            "once per warm function and TTL (no AWS request)",
        ]
    ]


def _mcp_rows(server: dict[str, Any] | None, client: dict[str, Any] | None) -> list[list[str]]:
    """MCP: a client's tools/call on an agent's /mcp (issue 26), and a turn calling an MCP server's tool (issue 28)."""
    rows: list[list[str]] = []
    for label, what in (("handler_skill", "a skill answered by its handler"), ("ask", "ask (the model)")):
        run = (server or {}).get(label)
        if run is None:
            continue
        per, cost = run["per_call"], run["cost_per_million_calls_usd"]
        rows.append(
            [
                f"MCP server: tools/call on /mcp, {what}: AWS requests per call",
                f"{num(per['aws_requests_total'])}, {money(sum(cost.values()))} per 1M calls",
                ", ".join(f"{o} {num(c)}" for o, c in per["aws_requests_by_operation"].items())
                + f"; {_costs(cost)}; counted, mean of {run['calls']} calls; client p50 {num(run['client_ms']['p50'])} ms",
            ]
        )
    if client is not None:
        with_call, plain = client["with_call"], client["plain"]
        call_ms, rt = client.get("call_ms"), client["client_round_trip_ms"]
        rows.append(
            [
                f"MCP client: a turn with 1 MCP tool call ({client['tool']}): AWS requests per turn",
                f"{num(with_call['per_call']['aws_requests_total'])} (no tool: "
                f"{num(plain['per_call']['aws_requests_total'])}), "
                f"{money(sum(with_call['cost_per_million_calls_usd'].values()))} per 1M turns",
                ", ".join(f"{o} {num(c)}" for o, c in with_call["per_call"]["aws_requests_by_operation"].items())
                + f"; the call on loopback p50 {num(call_ms['p50']) if call_ms else '?'} ms; turn p50 "
                f"{num(rt['with_call']['p50'])} ms (no tool {num(rt['plain']['p50'])} ms); mean of {with_call['calls']} turns",
            ]
        )
    return rows


def _a2a_rows(a2a: dict[str, Any] | None) -> list[list[str]]:
    """A blocking A2A send answered by the agent's model, in each version (flightdeck.bench.a2a_bench)."""
    rows: list[list[str]] = []
    for version, what in (("0.3", "message/send, blocking"), ("1.0", "SendMessage, A2A-Version: 1.0")):
        run = (a2a or {}).get(version)
        if run is None:
            continue
        per, cost = run["per_call"], run["cost_per_million_calls_usd"]
        rows.append(
            [
                f"A2A v{version} round trip on /a2a ({what}): AWS requests per round trip",
                f"{num(per['aws_requests_total'])}, {money(sum(cost.values()))} per 1M round trips",
                ", ".join(f"{o} {num(c)}" for o, c in per["aws_requests_by_operation"].items())
                + f"; {_costs(cost)}; counted, mean of {run['calls']} round trips; client p50 "
                f"{num(run['client_ms']['p50'])} ms",
            ]
        )
    return rows


def table_rows(result: dict[str, Any]) -> list[list[str]]:
    one, fan = result["round_trip_one"], result["round_trip_fan_out"]
    rows: list[list[str]] = [["Measure", "Result", "Basis / breakdown"]]
    rows += _round_trip_rows(one)
    rows += _round_trip_rows(fan)
    rows += _cost_rows(one)
    rows += _cost_rows(fan)
    rows += _structured_rows(one, result.get("round_trip_structured"))
    rows += _mcp_rows(result.get("mcp_server_calls"), result.get("mcp_client_turn"))
    rows += _a2a_rows(result.get("a2a_round_trips"))

    cb = result["callback_throughput"]
    single, batch = cb["single"], cb["batch"]
    rows += [
        [
            "Callback throughput, one per request (/api/tools/response)",
            f"{num(single['results_per_s'])} results/s",
            f"{single['callbacks']} callbacks of real turns, {single['http_requests']} requests, {num(single['wall_s'], 2)} s; "
            f"per callback {num(single['per_callback']['aws_requests_total'])} AWS requests",
        ],
        [
            f"Callback throughput, batches of {result['options']['stack']['batch_size']} (/api/tools/responses)",
            f"{num(batch['results_per_s'])} results/s",
            f"{batch['callbacks']} callbacks, {batch['http_requests']} requests, {num(batch['wall_s'], 2)} s; "
            f"per callback {num(batch['per_callback']['aws_requests_total'])} AWS requests",
        ],
        [
            "Callback throughput, batch : single",
            f"{num(cb['ratio_batch_to_single_results_per_s'], 2)}x results/s",
            f"{num(cb['ratio_requests_single_to_batch'])}x fewer API Gateway requests and Lambda invocations; "
            "same stack, moto-bound (moto serves one request at a time)",
        ],
    ]

    to = result["timeouts"]
    late = to["lateness_ms"]
    rows.append(
        [
            "Timeout lateness, deadline -> synthesized result",
            f"p50 {num(late['p50'])} ms, max {num(late['max'])} ms",
            f"{to['turns']} turns, ASYNC_TOOL_TIMEOUT_MS={to['timeout_ms']}, completed by "
            + _named(to["completed_by"])
            + "; timer message received p50 "
            f"{num(to['timer_received_after_deadline_ms']['p50'])} ms after the deadline (SQS delay, then moto "
            f"wakes a long poll for a delayed message within 1 s), result written p50 "
            f"{num(to['received_to_result_ms']['p50'])} ms later",
        ]
    )

    sw = result["sweep"]
    listed, scan = sw["list_overdue"], sw["scan_comparison"]
    rows += [
        [
            f"Sweep: items read with {sw['open_turns']:,} open / {sw['overdue']} overdue turns",
            f"{num(listed['items_scanned'])} items ({listed['queries']} index queries, {num(listed['read_request_units'])} RRU)",
            f"a table Scan would read {scan['items_scanned']:,} items ({num(scan['read_request_units'])} RRU): "
            f"{num(sw['items_read_ratio_scan_to_index'])}x more",
        ],
        [
            "Sweep: whole sweep, expiring the overdue turns",
            f"{num(sw['sweep']['requests'])} requests",
            f"{num(sw['sweep']['read_request_units'])} RRU, {num(sw['sweep']['write_request_units'])} WRU; "
            + _named(sw["sweep"]["requests_by_operation"]),
        ],
    ]

    rows += _conversation_rows(result.get("conversation"))
    rows += _inbox_rows(result.get("inbox"))
    rows += _load_rows(result.get("load"))
    rows += streaming_rows(result["streaming"]) if "streaming" in result else []

    rows += cold_start_rows(result["cold_start"])

    lat = result["latency_one_delegation_ms"]
    client = lat["client_round_trip"]
    rows.append(
        [
            "Local round trip, 1 delegation (moto, 0 ms think)",
            f"p50 {num(client['p50'])} ms, p95 {num(client['p95'])} ms",
            f"client POST -> final answer seen, {client['n']} turns; local only, moto-bound",
        ]
    )
    for hop in (
        "ingest_and_think",
        "dispatch_to_peer",
        "peer_turn",
        "delivery_and_callback",
        "peer_turn_and_delivery",
        "resume_and_answer",
    ):
        if hop in lat:
            rows.append(
                [
                    f"... hop {hop}",
                    f"p50 {num(lat[hop]['p50'])} ms, p95 {num(lat[hop]['p95'])} ms",
                    HOP_DESCRIPTIONS[hop],
                ]
            )
    fan_total = result["latency_fan_out_ms"]["client_round_trip"]
    rows.append(
        [
            f"Local round trip, {fan['delegations_per_turn']} delegations",
            f"p50 {num(fan_total['p50'])} ms, p95 {num(fan_total['p95'])} ms",
            f"{fan_total['n']} turns",
        ]
    )
    return rows


def cold_start_rows(cs: dict[str, Any]) -> list[list[str]]:
    """The cold start proxy's rows: ratios to `import boto3`, the floors, and each handler against its goal."""
    handlers = cs["handlers"]
    slow = cs["slowest"]
    rows: list[list[str]] = []
    rows.append(
        [
            "Cold start proxy: handler import / import boto3",
            f"{num(cs['ratio_range'][0], 2)}x - {num(cs['ratio_range'][1], 2)}x",
            f"boto3 {num(cs['boto3_import_ms'])} ms (best of {cs.get('boto3_samples', cs['repeats'])}, timed beside each handler); "
            + ", ".join(f"{h} {num(v['import_ms'])} ms" for h, v in handlers.items())
            + f" (.pyc present, fresh interpreter, best of {cs['repeats']}"
            + (f", Python {cs['python']})" if cs.get("python") else ")"),
        ]
    )
    if cs.get("no_pyc_ratio_range"):
        measured = [h for h, v in handlers.items() if "no_pyc_import_ms" in v]
        rows.append(
            [
                "... without .pyc for bundled code (as the asset ships)",
                f"{num(cs['no_pyc_ratio_range'][0], 2)}x - {num(cs['no_pyc_ratio_range'][1], 2)}x",
                ", ".join(f"{h} {num(handlers[h]['no_pyc_import_ms'])} ms" for h in measured),
            ]
        )
    if cs.get("library_floor"):
        floor = cs["library_floor"]
        rows.append(
            [
                "... the libraries alone, before any handler code (the floor)",
                " / ".join(f"{num(v['ratio_to_boto3'], 2)}x" for v in floor.values()),
                "; ".join(f"{kind}: {' + '.join(v['modules'])} {num(v['import_ms'])} ms" for kind, v in floor.items()),
            ]
        )
    if cs.get("goal"):
        goal = cs["goal"]
        rows.append(
            [
                f"... goal: handler import <= its kind's floor + {num(goal['excess_over_floor_max'], 1)}x boto3",
                f"{goal['within']}/{len(handlers)} within",
                "; ".join(
                    f"{h} {num(v['ratio_to_boto3'], 2)}x, {v['floor']} {num(v['floor_ratio_to_boto3'], 2)}x, "
                    f"excess {v['excess_over_floor']:+.2f}x" + ("" if v["within_goal"] else " (over)")
                    for h, v in handlers.items()
                    if "floor" in v
                ),
            ]
        )
    if cs.get("mcp_path"):
        mp = cs["mcp_path"]
        rows.append(
            [
                "... the MCP path in the a2a function (/mcp, loaded by its first request), on top of its A2A modules",
                f"{num(mp['import_ms'])} ms ({num(mp['ratio_to_boto3'], 3)}x boto3)",
                f"{' + '.join(mp['modules'])} imported after the a2a handler's other modules (fresh interpreter, "
                f"best of {cs['repeats']}); no MCP SDK",
            ]
        )
    if cs.get("tracing_on"):
        tr = cs["tracing_on"]
        per_function = ", ".join(
            f"{handler} {num(row['import_ms'])} ms"
            + (f" ({num(row['no_pyc_import_ms'])} ms without caches)" if "no_pyc_import_ms" in row else "")
            for handler, row in tr["handlers"].items()
        )
        rows.append(
            [
                "... tracing on (OTEL_EXPORTER_OTLP_ENDPOINT set): the first span, on top of each function's handler",
                f"{num(tr['range_ms'][0])} - {num(tr['range_ms'][1])} ms: {per_function}",
                "the OpenTelemetry SDK and OTLP/HTTP exporter (docs/TRACING.md), best of "
                f"{cs['repeats']}; off: nothing imported",
            ]
        )
    rows.append(
        [
            f"... {slow} import time by package (self time)",
            ", ".join(f"{name} {num(ms)} ms" for name, ms in cs["slowest_breakdown_ms"][:4]),
            "-X importtime",
        ]
    )
    return rows


def streaming_rows(st: dict[str, Any]) -> list[list[str]]:
    """What a streamed second and a streamed task cost (flightdeck.bench.streaming)."""
    rows = []
    for kind, label in (("message_stream", "message/stream"), ("session_events", "GET /api/sessions/{id}/events")):
        r = st[kind]
        second, task = r["per_streamed_second"], r["per_streamed_task"]
        rows += [
            [
                f"Streaming, {label}: a streamed second",
                f"{num(second['dynamodb_requests'])} DynamoDB reads",
                f"{num(second['rru'])} RRU + {num(second['lambda_gb_s'], 2)} Lambda GB-s (the function lives as long as "
                f"the stream), one poll per {num(st['poll_interval_s'], 1)} s: "
                + _ops(r["per_waiting_poll"]["requests_by_operation"], "dynamodb")
                + f"; {money(second['usd'] * 1e6)} per "
                "million streamed seconds",
            ],
            [
                f"Streaming, {label}: a streamed task ({num(r['streamed_s'])} s, waits {st['delegate_wait_s']} s on a "
                "delegate)",
                f"{num(task['dynamodb_requests'] - r.get('watch_marks', 0))} DynamoDB reads",
                f"1 API Gateway request, 1 Lambda invocation, {num(task['rru'])} RRU, {num(task['lambda_gb_s'], 1)} GB-s, "
                f"{r['events']} events, {r.get('watch_marks', 0)} write (the watch mark): "
                f"{money(task['usd_per_million'])} per million streamed tasks (Lambda duration "
                f"{money(task['usd']['lambda_duration'] * 1e6)})",
            ],
        ]
    relay = st.get("live_relay")
    if relay:
        second = relay["per_streamed_second"]
        rows += [
            [
                "Streaming, live relay: a streamed second of a watched think",
                f"{num(second['writes'], 2)} DynamoDB writes",
                f"the turn worker puts the text so far ({num(relay['last_text_bytes'])} bytes at the end) at most once per "
                f"{num(st['poll_interval_s'], 1)} s poll interval, and deletes it when the reply is in: a {relay['think_s']} s "
                f"think asked {relay['relay_requests']} requests more ("
                + _ops(relay["relay_requests_by_operation"], "dynamodb")
                + f"), {num(relay['wru'])} WRU; {money(second['usd'] * 1e6)} per million streamed seconds",
            ],
            [
                "Streaming, live relay: a think nobody watches",
                f"{relay['extra_requests_unwatched']} requests more",
                f"the same think unwatched: {relay['requests_unwatched']} requests, none of them the relay's (the watch mark "
                "is read in the session's one query)",
            ],
        ]
    return rows


def markdown(rows: list[list[str]]) -> str:
    def cell(text: str) -> str:
        return str(text).replace("|", "\\|").replace("\n", " ")

    header, *body = rows
    lines = ["| " + " | ".join(cell(c) for c in header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(cell(c) for c in row) + " |" for row in body]
    return "\n".join(lines)


def render(result: dict[str, Any]) -> str:
    m = result["machine"]
    head = (
        f"Flightdeck bench ({result['mode']}), {result['date']}, {m['cpus']} x {m['cpu']}, Python {m['python']}, "
        f"moto {m['moto']}; prices {result['prices']['region']} recorded {result['prices']['recorded']}; "
        f"took {result.get('duration_s', '?')} s; load average {m.get('load_average_at_start')} at start"
    )
    config = result.get("config")
    if config:
        head += (
            f"\nround trips by the agents of {config['file']}: {config['delegator']} (delegator) -> "
            f"{config['worker']} (worker)"
        )
    return head + "\n\n" + markdown(result["table"]) + "\n"
