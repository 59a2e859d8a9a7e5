"""Two bench results side by side: the before/after table of docs/PERFORMANCE.md.

    python -m flightdeck.bench.compare BEFORE.json AFTER.json   # prints the Markdown table
    flightdeck bench --quick --json after.json --compare BEFORE.json   # runs, then prints it too

Each row reads one figure from both results; a figure a result does not have (an older bench, a
phase that was not run) reads "not measured". Requests are the data plane only (DynamoDB, SQS,
Secrets Manager): an older result that counted the local gateway's control-plane calls per round
trip is compared without them.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from flightdeck.bench.report import markdown, money, num

DATA_PLANE = ("dynamodb", "sqs", "secretsmanager")
NOT_MEASURED = "not measured"

Getter = Callable[[dict[str, Any]], Any]


def _get(data: Any, *path: str) -> Any:
    for key in path:
        if not isinstance(data, dict) or key not in data:
            return None
        data = data[key]
    return data


def _per_turn(result: dict[str, Any], key: str = "round_trip_one") -> dict[str, Any] | None:
    per_turn: dict[str, Any] | None = _get(result, key, "per_turn")
    return per_turn


def data_plane_requests(result: dict[str, Any], key: str = "round_trip_one") -> float | None:
    services = _get(_per_turn(result, key), "aws_requests_by_service")
    if services is None:
        return None
    total: float = sum(services.get(s, 0) for s in DATA_PLANE)
    return total


def _service(name: str, key: str = "round_trip_one") -> Getter:
    return lambda r: (
        None if _per_turn(r, key) is None else _get(_per_turn(r, key), "aws_requests_by_service").get(name, 0)
    )


def _operations(service: str) -> Getter:
    def get(r: dict[str, Any]) -> str | None:
        ops = _get(_per_turn(r), "aws_requests_by_operation")
        if ops is None:
            return None
        return (
            ", ".join(f"{op.split('.', 1)[1]} {num(n)}" for op, n in ops.items() if op.startswith(service + "."))
            or "none"
        )

    return get


def _units(r: dict[str, Any]) -> str | None:
    units = _get(_per_turn(r), "dynamodb_request_units")
    if units is None:
        return None
    return f"{num(units.get('wru', 0))} WRU + {num(units.get('gsi_wru', 0))} index WRU, {num(units.get('rru', 0))} RRU"


def _cost(key: str, *path: str) -> Getter:
    return lambda r: _get(r, key, *path, "cost_per_million_delegations_usd", "total")


def _at(section: str, figure: str, suffix: str = "") -> Getter:
    def get(r: dict[str, Any]) -> str | None:
        values = _get(r, section, figure)
        if not values:
            return None
        return " / ".join(num(v) for v in values.values()) + suffix

    return get


def _range(key: str) -> Getter:
    def get(r: dict[str, Any]) -> str | None:
        low_high = _get(r, "cold_start", key)
        return None if not low_high else f"{num(low_high[0], 2)}x - {num(low_high[1], 2)}x"

    return get


def _load(r: dict[str, Any]) -> str | None:
    load = r.get("load")
    if not load:
        return None
    total = load["sessions"] * load["delegations_per_session"]
    return (
        f"{load['sessions_completed']} of {load['sessions']} sessions completed, {load['timed_out']} of {total} "
        f"delegations timed out, {num(load['delegations_per_s'], 2)} delegations/s, wall {num(load['wall_s'])} s"
    )


SERVICE_LABELS = (
    ("api_gateway", "API GW"),
    ("dynamodb_writes", "writes"),
    ("dynamodb_reads", "reads"),
    ("lambda_requests", "Lambda requests"),
    ("lambda_duration", "GB-s"),
    ("sqs", "SQS"),
    ("secrets_manager", "Secrets Manager"),
    ("cloudwatch_logs", "logs"),
)


def _by_service(key: str) -> Getter:
    """The $ per 1M delegations of each service, in the order of the cost line."""

    def get(r: dict[str, Any]) -> str | None:
        costs = _get(r, key, "cost_per_million_delegations_usd")
        if not costs:
            return None
        return ", ".join(f"{label} {money(costs[name])}" for name, label in SERVICE_LABELS if costs.get(name)) or None

    return get


def _units_of(key: str) -> Getter:
    def get(r: dict[str, Any]) -> str | None:
        units = _get(_per_turn(r, key), "dynamodb_request_units")
        return None if units is None else f"{num(units.get('wru', 0))} WRU + {num(units.get('gsi_wru', 0))} index WRU"

    return get


def _lean(key: str) -> Getter:
    return lambda r: _get(r, key, "cost_by_front_door", "lean", "total")


def _model_latency(key: str) -> Getter:
    def get(r: dict[str, Any]) -> str | None:
        totals = _get(r, key, "cost_at_model_latency", "total_usd_per_million_delegations")
        return None if not totals else " / ".join(money(v) for v in totals.values())

    return get


def _money(getter: Getter) -> Getter:
    return lambda r: None if getter(r) is None else money(getter(r))


def _number(getter: Getter, digits: int = 1) -> Getter:
    return lambda r: None if getter(r) is None else num(getter(r), digits)


ROWS: tuple[tuple[str, Getter], ...] = (
    ("1 delegation: data-plane requests per round trip (both agents, timer included)", _number(data_plane_requests)),
    ("... DynamoDB requests", _number(_service("dynamodb"))),
    ("... by operation", _operations("dynamodb")),
    ("... SQS requests", _number(_service("sqs"))),
    ("... Secrets Manager requests", _number(_service("secretsmanager"))),
    ("... DynamoDB request units", _units),
    ("... Lambda invocations", _number(lambda r: _get(_per_turn(r), "lambda_invocations_total"))),
    ("... API Gateway requests", _number(lambda r: _get(_per_turn(r), "api_gateway_requests_total"))),
    ("Cost per 1M delegations, 1 per turn (REST front door)", _money(_cost("round_trip_one"))),
    ("... by service", _by_service("round_trip_one")),
    ("... lean front door", _money(_lean("round_trip_one"))),
    ("... with the model answering in 1 s / 5 s per think (REST)", _model_latency("round_trip_one")),
    (
        "5 delegations/turn: data-plane requests per delegation",
        _number(
            lambda r: (
                None
                if data_plane_requests(r, "round_trip_fan_out") is None
                else data_plane_requests(r, "round_trip_fan_out") / r["round_trip_fan_out"]["delegations_per_turn"]
            )
        ),
    ),
    ("... DynamoDB write units per turn", _units_of("round_trip_fan_out")),
    ("Cost per 1M delegations, 5 per turn", _money(_cost("round_trip_fan_out"))),
    ("... by service", _by_service("round_trip_fan_out")),
    ("... lean front door", _money(_lean("round_trip_fan_out"))),
    ("... with the model answering in 1 s / 5 s per think (REST)", _model_latency("round_trip_fan_out")),
    (
        "... Step Functions, whole turn in the state machine (modelled)",
        _money(_cost("round_trip_one", "step_functions_variant")),
    ),
    (
        "... Step Functions leanest, one task per delegation (modelled)",
        _money(_cost("round_trip_one", "step_functions_lean_variant")),
    ),
    (
        "... Lambda durable functions (modelled, assumed data prices)",
        _money(_cost("round_trip_one", "durable_functions_variant")),
    ),
    ("Conversation: requests per think at messages 1 / 10 / 50", _at("conversation", "requests_per_think")),
    ("Conversation: read units per think at 1 / 10 / 50", _at("conversation", "read_units_per_think", " RRU")),
    ("Conversation: write units per think at 1 / 10 / 50", _at("conversation", "write_units_per_think", " WRU")),
    ("Load: concurrent sessions on the example config, 2 delegations each", _load),
    ("Timeout lateness p50 (deadline -> result)", _number(lambda r: _get(r, "timeouts", "lateness_ms", "p50"))),
    ("Cold start: handler import / import boto3", _range("ratio_range")),
    ("... without .pyc (as the asset ships)", _range("no_pyc_ratio_range")),
    (
        "Local round trip p50, 1 delegation (ms, moto)",
        _number(lambda r: _get(r, "latency_one_delegation_ms", "client_round_trip", "p50")),
    ),
)


def _cell(getter: Getter, result: dict[str, Any]) -> str:
    try:
        value = getter(result)
    except (KeyError, TypeError, ZeroDivisionError):
        value = None
    return NOT_MEASURED if value is None else str(value)


def describe(result: dict[str, Any]) -> str:
    machine = result.get("machine", {})
    return (
        f"{result.get('command', 'flightdeck bench')}, {result.get('date', '?')}, load average "
        f"{machine.get('load_average_at_start')} at start"
    )


def table(before: dict[str, Any], after: dict[str, Any]) -> str:
    rows = [["Measure", "Before", "After"]]
    rows += [[label, _cell(getter, before), _cell(getter, after)] for label, getter in ROWS]
    return f"Before: {describe(before)}. After: {describe(after)}.\n\n" + markdown(rows) + "\n"


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2:
        print("usage: python -m flightdeck.bench.compare BEFORE.json AFTER.json", file=sys.stderr)
        return 2
    before, after = (json.loads(Path(p).read_text(encoding="utf-8")) for p in args)
    print(table(before, after), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
