"""From counted records (flightdeck.bench.counter) to requests, request units and dollars.

Which counted calls are billed per delegation, and which are not:

- calls made inside a handler (fn = the handler module): billed, per delegation;
- calls made by the pollers that stand in for Lambda's SQS event source
  mappings (fn null): a ReceiveMessage that returned messages and the
  DeleteMessageBatch after it are billed per delegation (on AWS the mapping
  makes the same requests, and SQS bills them to the queue owner);
  a ReceiveMessage that returned nothing is polling overhead: on AWS the
  mapping's pollers long-poll (20 s) around the clock whether or not anything
  is delegated, so that cost grows with time and queue count, not with
  delegations, and the local pollers' 1 s polls say nothing about it. It is
  counted, reported separately and left out of the per-delegation cost;
  GetQueueAttributes (a poller learning its queue's ARN once) is set-up;
- control-plane calls (any operation outside DATA_PLANE_OPERATIONS), such as
  the local gateway's apigateway.GetApiKeys / GetUsagePlans: the local stand-in
  for API Gateway's own key and usage-plan checks, made once per process and
  cache period (on AWS, API Gateway does this itself, unbilled). Counted and
  reported apart, never per delegation;
- the scheduled sweeper's invocations and calls: a fixed cost per schedule
  tick (at most one a minute on AWS), reported separately;
- a Lambda Invoke call (a think started asynchronously): Lambda bills it as the
  invocation it starts, one request, and that invocation is counted where the
  local runtime runs it. The call itself is reported apart (async_invokes), never
  added to the AWS requests or to the Lambda requests a second time.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from flightdeck import topology
from flightdeck.bench.dynamo_units import read_units, write_units
from flightdeck.bench.prices import PriceTable

SQS_CHUNK_BYTES = 64 * 1024
DEFAULT_MEMORY_MB = 512
BILLED = ("handler", "event_source_mapping")
# The requests AWS bills one by one (the data plane), by service. Any other call is control plane.
DATA_PLANE_OPERATIONS = {
    "dynamodb": frozenset(
        {
            "GetItem",
            "PutItem",
            "UpdateItem",
            "DeleteItem",
            "Query",
            "Scan",
            "BatchGetItem",
            "BatchWriteItem",
            "TransactWriteItems",
            "TransactGetItems",
        }
    ),
    "sqs": frozenset(
        {
            "SendMessage",
            "SendMessageBatch",
            "ReceiveMessage",
            "DeleteMessage",
            "DeleteMessageBatch",
            "ChangeMessageVisibility",
            "ChangeMessageVisibilityBatch",
        }
    ),
    "secretsmanager": frozenset({"GetSecretValue", "BatchGetSecretValue"}),
}

SizeLookup = Callable[[str, str, str], "int | None"]


def load_records(directory: str | Path) -> list[dict[str, Any]]:
    records: list[dict[str, Any]] = []
    for path in sorted(Path(directory).glob("*.jsonl")):
        with open(path, encoding="utf-8") as handle:
            for line in handle:
                line = line.strip()
                if line:
                    try:
                        records.append(json.loads(line))
                    except ValueError:
                        pass  # a line cut short by a process being stopped
    records.sort(key=lambda r: r.get("t", 0.0))
    return records


def between(records: Iterable[dict[str, Any]], start: float, end: float) -> list[dict[str, Any]]:
    return [r for r in records if start <= r.get("t", 0.0) <= end]


def category(record: dict[str, Any]) -> str:
    """AWS calls: handler | event_source_mapping | empty_receive | setup | control_plane | schedule | async_invoke;
    invocations: handler | schedule."""
    fn = record.get("fn")
    if record.get("k") != "inv" and (record.get("svc"), record.get("op")) == ("lambda", "Invoke"):
        return "async_invoke"  # billed as the invocation it starts (counted there)
    if fn == topology.SWEEPER_HANDLER:
        return "schedule"
    if record.get("k") == "inv":
        return "handler"
    if fn is None and record.get("op") == "GetQueueAttributes":
        return "setup"
    if record.get("op") not in DATA_PLANE_OPERATIONS.get(record.get("svc", ""), ()):
        return "control_plane"
    if fn is None:
        if record.get("op") == "ReceiveMessage" and not record.get("n"):
            return "empty_receive"
        return "event_source_mapping"
    return "handler"


def update_keys(records: Iterable[dict[str, Any]]) -> set[tuple[str, str, str]]:
    """(table, pk, sk) of every item an UpdateItem / transactional Update touched (their sizes are looked up)."""
    keys = set()
    for r in records:
        for w in r.get("writes", ()):
            if "size" not in w and w.get("table"):
                keys.add((w["table"], w["pk"], w["sk"]))
    return keys


@dataclass
class Tally:
    """Billed usage of a set of records, optionally divided by a number of round trips."""

    aws_requests: Counter[str] = field(default_factory=Counter)  # "service.Operation" -> requests
    by_function: Counter[str] = field(default_factory=Counter)  # "agent/function" -> AWS requests
    invocations: Counter[str] = field(default_factory=Counter)  # "agent/function" -> Lambda invocations
    gateway: Counter[str] = field(default_factory=Counter)  # "agent METHOD /path" -> API Gateway requests
    sqs_requests: Counter[str] = field(default_factory=Counter)  # "standard" | "fifo" -> billed requests (64 KB chunks)
    dynamodb: Counter[str] = field(default_factory=Counter)  # wru, gsi_wru, rru
    wru_by_item: Counter[str] = field(default_factory=Counter)  # item kind -> table + index WRU
    dynamodb_by_item: Counter[str] = field(default_factory=Counter)  # "Operation ITEMKIND" -> requests
    excluded: Counter[str] = field(
        default_factory=Counter
    )  # empty_receive, setup, control_plane, schedule_calls, ..._invocations
    async_invokes: Counter[str] = field(default_factory=Counter)  # "agent/function" -> Lambda Invoke calls it made
    handler_ms: Counter[str] = field(default_factory=Counter)  # "agent/function" -> measured local milliseconds
    gb_seconds: float = 0.0
    secrets_failed: float = 0.0
    log_bytes: float = 0.0
    per: float = 1.0

    # --- building ---------------------------------------------------------------------

    @classmethod
    def of(
        cls,
        records: Iterable[dict[str, Any]],
        *,
        sizes: dict[tuple[str, str, str], int] | None = None,
        memory_mb: int = DEFAULT_MEMORY_MB,
        agents: Iterable[str] | None = None,
    ) -> Tally:
        wanted = set(agents) if agents is not None else None
        tally = cls()
        for r in records:
            if wanted is not None and r.get("agent") not in wanted:
                continue
            if r.get("k") == "inv":
                tally._add_invocation(r, memory_mb)
            elif r.get("k") == "aws":
                tally._add_call(r, sizes or {})
            elif r.get("k") == "gsi":
                tally._add_index_writes(r)
        return tally

    def _add_invocation(self, r: dict[str, Any], memory_mb: int) -> None:
        if category(r) == "schedule":
            self.excluded["schedule_invocations"] += 1
            return
        name = f"{r.get('agent')}/{r.get('fn')}"
        self.invocations[name] += 1
        ms = float(r.get("ms") or 0.0)
        self.handler_ms[name] += ms  # type: ignore[assignment]  # a Counter of floats: typeshed types Counter values as int
        # Lambda bills duration rounded up to the millisecond; the owed-think starter has its own memory.
        if r.get("fn") == topology.STREAM_CONSUMER.handler:
            memory_mb = topology.STREAM_CONSUMER.memory_mb
        self.gb_seconds += math.ceil(ms) / 1000 * memory_mb / 1024
        if r.get("src") == "http":
            self.gateway[f"{r.get('agent')} {r.get('route')}"] += 1

    def _add_call(self, r: dict[str, Any], sizes: dict[tuple[str, str, str], int]) -> None:
        kind = category(r)
        if kind == "async_invoke":
            self.async_invokes[f"{r.get('agent')}/{r.get('fn') or 'local-runtime'}"] += 1
            return
        if kind not in BILLED:
            key = "schedule_calls" if kind == "schedule" else kind
            self.excluded[key] += 1
            return
        service, op = r.get("svc", "?"), r.get("op", "?")
        self.aws_requests[f"{service}.{op}"] += 1
        self.by_function[f"{r.get('agent')}/{r.get('fn') or 'event-source-mapping'}"] += 1
        if service == "sqs":
            chunks = max(1, math.ceil(int(r.get("bytes") or 0) / SQS_CHUNK_BYTES))
            self.sqs_requests["fifo" if str(r.get("queue", "")).endswith(".fifo") else "standard"] += chunks
        elif service == "dynamodb":
            self._add_dynamodb(r, sizes)
        elif service == "secretsmanager" and (r.get("status") or 200) >= 300:
            self.secrets_failed += 1

    def _add_index_writes(self, r: dict[str, Any]) -> None:
        """A write's index units, read off the table's stream (flightdeck.bench.index_units)."""
        units = sum(r.get("units", {}).values())
        self.dynamodb["gsi_wru"] += units
        self.wru_by_item[r.get("kind", "?")] += units

    def _add_dynamodb(self, r: dict[str, Any], sizes: dict[tuple[str, str, str], int]) -> None:
        kinds = sorted({w.get("kind", "?") for w in r.get("writes", ())}) or [
            r.get("kind") or ("index" if r.get("index") else "")
        ]
        self.dynamodb_by_item[f"{r.get('op')} {'+'.join(k for k in kinds if k)}".strip()] += 1
        for w in r.get("writes", ()):
            size = w.get("size")
            if size is None:
                size = sizes.get((w.get("table"), w.get("pk"), w.get("sk")), 1)
            if w.get("op") == "ConditionCheck":
                # Billed as a transactional read of the item it checks (2 RRU per 4 KB), not a write.
                self.dynamodb["rru"] += read_units(size, consistent=True, transactional=True)  # type: ignore[assignment]  # a Counter of floats: typeshed types Counter values as int
                continue
            units = write_units(size, transactional=bool(w.get("txn")))
            # A write whose condition fails is billed all the same.
            self.dynamodb["wru"] += units
            self.wru_by_item[w.get("kind", "?")] += units
        op = r.get("op")
        if op in ("GetItem", "Query", "Scan"):
            # GSI reads are always eventually consistent.
            consistent = bool(r.get("consistent")) and not r.get("index")
            self.dynamodb["rru"] += read_units(int(r.get("bytes") or 0), consistent=consistent)  # type: ignore[assignment]  # a Counter of floats: typeshed types Counter values as int

    # --- reading ----------------------------------------------------------------------

    def divided(self, n: float) -> Tally:
        """The same usage per round trip (n round trips)."""
        out = Tally(per=n)
        for name in (
            "aws_requests",
            "by_function",
            "invocations",
            "gateway",
            "sqs_requests",
            "dynamodb",
            "wru_by_item",
            "dynamodb_by_item",
            "excluded",
            "async_invokes",
            "handler_ms",
        ):
            setattr(out, name, Counter({k: v / n for k, v in getattr(self, name).items()}))
        out.gb_seconds = self.gb_seconds / n
        out.secrets_failed = self.secrets_failed / n
        out.log_bytes = self.log_bytes / n
        return out

    def plus(self, other: Tally) -> Tally:
        out = Tally(per=self.per)
        for name in (
            "aws_requests",
            "by_function",
            "invocations",
            "gateway",
            "sqs_requests",
            "dynamodb",
            "wru_by_item",
            "dynamodb_by_item",
            "excluded",
            "async_invokes",
            "handler_ms",
        ):
            setattr(out, name, getattr(self, name) + getattr(other, name))
        out.gb_seconds = self.gb_seconds + other.gb_seconds
        out.secrets_failed = self.secrets_failed + other.secrets_failed
        out.log_bytes = self.log_bytes + other.log_bytes
        return out

    def by_service(self) -> dict[str, float]:
        out: Counter[str] = Counter()
        for name, n in self.aws_requests.items():
            out[name.split(".", 1)[0]] += n
        return dict(out)

    @property
    def total_aws_requests(self) -> float:
        return sum(self.aws_requests.values())

    @property
    def total_invocations(self) -> float:
        return sum(self.invocations.values())

    @property
    def total_gateway(self) -> float:
        return sum(self.gateway.values())

    @property
    def secrets_calls(self) -> float:
        return sum(n for name, n in self.aws_requests.items() if name.startswith("secretsmanager."))

    def cost(self, prices: PriceTable) -> dict[str, float]:
        """Dollars for this usage, by service (per round trip once divided)."""
        costs = {
            "api_gateway": self.total_gateway * prices.apigateway_request,
            "lambda_requests": self.total_invocations * prices.lambda_request,
            "lambda_duration": self.gb_seconds * prices.lambda_gb_second,
            "sqs": self.sqs_requests["standard"] * prices.sqs_standard_request
            + self.sqs_requests["fifo"] * prices.sqs_fifo_request,
            "dynamodb_writes": (self.dynamodb["wru"] + self.dynamodb["gsi_wru"]) * prices.dynamodb_wru,
            "dynamodb_reads": self.dynamodb["rru"] * prices.dynamodb_rru,
            "secrets_manager": self.secrets_calls * prices.secrets_call,
            "cloudwatch_logs": self.log_bytes * prices.log_byte,
        }
        costs["total"] = sum(costs.values())
        return costs

    def to_dict(self, prices: PriceTable | None = None) -> dict[str, Any]:
        def rounded(counter: Counter[str]) -> dict[str, float]:
            return {k: round(v, 3) for k, v in sorted(counter.items(), key=lambda kv: (-kv[1], kv[0]))}

        out: dict[str, Any] = {
            "per_round_trips": self.per,
            "aws_requests_total": round(self.total_aws_requests, 3),
            "aws_requests_by_service": rounded(Counter(self.by_service())),
            "aws_requests_by_operation": rounded(self.aws_requests),
            "aws_requests_by_function": rounded(self.by_function),
            "lambda_invocations_total": round(self.total_invocations, 3),
            "lambda_invocations": rounded(self.invocations),
            # Of those invocations, the ones a function started with Lambda's Invoke API (by caller): the
            # same Lambda requests, not more of them.
            "lambda_async_invokes_total": round(sum(self.async_invokes.values()), 3),
            "lambda_async_invokes": rounded(self.async_invokes),
            "api_gateway_requests_total": round(self.total_gateway, 3),
            "api_gateway_requests": rounded(self.gateway),
            "sqs_billed_requests": rounded(self.sqs_requests),
            "dynamodb_request_units": rounded(self.dynamodb),
            "dynamodb_wru_by_item_kind": rounded(self.wru_by_item),
            "dynamodb_requests_by_item_kind": rounded(self.dynamodb_by_item),
            "secrets_manager_calls": round(self.secrets_calls, 3),
            "secrets_manager_failed_calls": round(self.secrets_failed, 3),
            "lambda_gb_seconds_local_proxy": round(self.gb_seconds, 6),
            "handler_ms_local": rounded(self.handler_ms),
            "log_bytes": round(self.log_bytes, 1),
            "excluded_from_cost": rounded(self.excluded),
        }
        if prices is not None:
            out["cost_per_round_trip_usd"] = {k: v for k, v in self.cost(prices).items()}
            out["cost_per_million_round_trips_usd"] = {k: round(v * 1e6, 2) for k, v in self.cost(prices).items()}
        return out
