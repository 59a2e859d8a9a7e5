"""Sweep cost: what one backstop sweep reads with many open turns and a few overdue ones.

Seeds a table (moto, in this process, created from flightdeck.topology like the
local stack's) through StateStore.seed_turn, then runs the real
StateStore.list_overdue and domain.deadlines.sweep against it and counts what
their requests read: Count and ScannedCount of every Query, the bytes of the
items returned (-> read request units). For comparison, it counts what one
full-table Scan (the design the sparse index replaces) would read.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

from flightdeck.bench.accounting import Tally
from flightdeck.bench.counter import ListSink, attach
from flightdeck.bench.dynamo_units import item_size, read_units
from flightdeck.bench.index_units import index_write_units
from flightdeck.bench.prices import PriceTable
from flightdeck.domain.ports import state_ports

RETENTION_MS = 7 * 86_400_000
SWEEPS_PER_MONTH_AT_ONE_A_MINUTE = 30 * 24 * 60


class _Thinks:
    """Stands in for the thinks adapter: the sweep's only effect outside the table is the next think."""

    def __init__(self) -> None:
        self.started: list[tuple[str, int]] = []

    def start(self, session_id: str, turn: int, traceparent: str = "", snapshot: str = "") -> None:
        self.started.append((session_id, turn))

    def resend(self, session_id: str, turn: int, traceparent: str = "") -> None:
        self.started.append((session_id, turn))


def _queries(records: list[dict[str, Any]]) -> dict[str, Any]:
    queries = [r for r in records if r.get("op") == "Query"]
    return {
        "queries": len(queries),
        "items_returned": sum(int(r.get("count") or 0) for r in queries),
        "items_scanned": sum(int(r.get("scanned") or 0) for r in queries),
        "bytes_read": sum(int(r.get("bytes") or 0) for r in queries),
        "read_request_units": sum(
            read_units(int(r.get("bytes") or 0), consistent=bool(r.get("consistent")) and not r.get("index"))
            for r in queries
        ),
    }


def _copy_sessions(ddb: Any, table: str, template: str, session_ids: list[str]) -> None:
    """Put a copy of every item of session `template` for each of session_ids (its keys and index shard its own)."""
    from flightdeck import topology
    from flightdeck.adapters.dynamo.keys import deadline_shard

    items = list(_items(ddb, table, [f"S#{template}"]).values())
    puts = []
    for sid in session_ids:
        for item in items:
            copy = {**item, "pk": {"S": f"S#{sid}"}}
            if topology.DEADLINE_SHARD_ATTRIBUTE in copy:
                copy[topology.DEADLINE_SHARD_ATTRIBUTE] = {"S": deadline_shard(sid)}
            puts.append({"PutRequest": {"Item": copy}})
    for start in range(0, len(puts), 25):  # BatchWriteItem takes at most 25 items
        request = {table: puts[start : start + 25]}
        while request:
            request = ddb.batch_write_item(RequestItems=request).get("UnprocessedItems") or {}


def _items(ddb: Any, table: str, partitions: list[str]) -> dict[tuple[str, str], dict[str, Any]]:
    """Every item of these partitions (DynamoDB JSON), by (pk, sk), read with the bench's uncounted client."""
    items = {}
    for pk in partitions:
        for item in ddb.query(
            TableName=table, KeyConditionExpression="pk = :pk", ExpressionAttributeValues={":pk": {"S": pk}}
        )["Items"]:
            items[(pk, item["sk"]["S"])] = item
    return items


def measure(open_turns: int, overdue: int, prices: PriceTable, progress: Callable[[str], None]) -> dict[str, Any]:
    import boto3
    from moto import mock_aws

    from flightdeck.adapters.dynamo.store import StateStore
    from flightdeck.domain import deadlines
    from flightdeck.local.resources import create_table
    from flightdeck.observability import logger

    if overdue > open_turns:
        raise ValueError("more overdue turns than open turns")
    progress(
        f"sweep cost: seeding {open_turns:,} open turns ({overdue} overdue) through StateStore.seed_turn (one, copied)"
    )
    saved_endpoint = os.environ.pop("AWS_ENDPOINT_URL", None)  # the in-process moto, never a server
    saved_level = logger.log_level
    try:
        with mock_aws():
            ddb = boto3.client(
                "dynamodb", region_name="us-east-1", aws_access_key_id="bench", aws_secret_access_key="bench"
            )
            table = create_table(ddb, "bench-sweep")
            store = StateStore(table, client=ddb)
            now = store.now_ms()
            started = time.perf_counter()
            for i in range(overdue):
                sid = f"overdue-{i:05d}"
                # An overdue turn has its session (the sweep advances it) and a deadline in the past.
                store.start_turn_with_message(sid, {"role": "user", "content": [{"text": f"task {i}"}]}, RETENTION_MS)
                # Its think ran (storing the reply clears the session's owed-think mark) and delegated.
                store.append_message(
                    sid,
                    {
                        "role": "assistant",
                        "content": [{"toolUse": {"toolUseId": f"tooluse_overdue_{i:05d}", "name": "ask", "input": {}}}],
                    },
                    1,
                    RETENTION_MS,
                )
                store.seed_turn(sid, 1, [f"tooluse_overdue_{i:05d}"], now - 5_000, RETENTION_MS)
            # One open turn through the store; the others are copies of its items under their own keys. Seeding
            # each through the store makes moto copy the whole table per transaction (quadratic, and a full
            # run's 10,000 turns outgrew the machine's memory); the copies are the same items all the same.
            template = "open-000000"
            store.start_turn_with_message(template, {"role": "user", "content": [{"text": "task 0"}]}, RETENTION_MS)
            store.seed_turn(template, 1, ["tooluse_open_000000"], now + 3_600_000, RETENTION_MS)
            _copy_sessions(ddb, table, template, [f"open-{i:06d}" for i in range(1, open_turns - overdue)])
            seed_s = time.perf_counter() - started

            uncounted = boto3.client(
                "dynamodb", region_name="us-east-1", aws_access_key_id="bench", aws_secret_access_key="bench"
            )
            sink = ListSink("sweep")
            attach(ddb, sink)
            found = store.list_overdue(store.now_ms())
            listed = _queries(sink.records)
            listed["overdue_found"] = len(found)

            sink.records.clear()
            logger.setLevel("ERROR")  # the sweep's timeline lines are not this command's output
            deps = SimpleNamespace(
                **state_ports(store),  # the sweep reads each expired turn's iteration (its calls to stop)
                thinks=_Thinks(),
                settings=SimpleNamespace(
                    tool_agg_tombstone_ttl_ms=60_000,
                    session_retention_ms=RETENTION_MS,
                    tool_agg_punctuate_interval_ms=15_000,
                    agent=SimpleNamespace(max_concurrent_tasks=None),  # no load to recount
                ),
            )
            overdue_keys = [f"S#overdue-{i:05d}" for i in range(overdue)]
            before = _items(uncounted, table, overdue_keys)
            expired = deadlines.sweep(deps)  # type: ignore[arg-type]
            sweep_records = list(sink.records)
            # The sweep's index units: what its writes did to the overdue sessions' items (no stream in process).
            after = _items(uncounted, table, overdue_keys)
            sweep_records += [
                {"k": "gsi", "kind": key[1].split("#", 1)[0], "units": units}
                for key in before.keys() | after.keys()
                if (units := index_write_units(before.get(key), after.get(key)))
            ]
            swept = Tally.of(sweep_records)
            full_sweep = {
                "expired": expired,
                "requests": round(swept.total_aws_requests),
                "requests_by_operation": dict(swept.aws_requests),
                "read_request_units": swept.dynamodb["rru"],
                "write_request_units": swept.dynamodb["wru"] + swept.dynamodb["gsi_wru"],
                **{f"index_{k}": v for k, v in _queries([r for r in sweep_records if r.get("index")]).items()},
            }

            sink.records.clear()
            scanned = scanned_bytes = pages = 0
            scan_rru = 0.0
            kwargs: dict[str, Any] = {"TableName": table}
            while True:
                resp = ddb.scan(**kwargs)
                pages += 1
                page_bytes = sum(item_size(i) for i in resp.get("Items", []))
                scanned += int(resp.get("ScannedCount", 0))
                scanned_bytes += page_bytes
                scan_rru += read_units(page_bytes, consistent=False)
                if "LastEvaluatedKey" not in resp:
                    break
                kwargs["ExclusiveStartKey"] = resp["LastEvaluatedKey"]
    finally:
        logger.setLevel(saved_level)
        if saved_endpoint is not None:
            os.environ["AWS_ENDPOINT_URL"] = saved_endpoint

    per_sweep_usd = listed["read_request_units"] * prices.dynamodb_rru
    return {
        "open_turns": open_turns,
        "overdue": overdue,
        "seed_s": round(seed_s, 2),
        "list_overdue": listed,
        "sweep": full_sweep,
        "scan_comparison": {
            "items_scanned": scanned,
            "bytes": scanned_bytes,
            "pages_of_1mb": pages,
            "read_request_units": scan_rru,
        },
        "items_read_ratio_scan_to_index": round(scanned / listed["items_scanned"], 1)
        if listed["items_scanned"]
        else None,
        "index_read_usd_per_month_at_one_sweep_a_minute": round(per_sweep_usd * SWEEPS_PER_MONTH_AT_ONE_A_MINUTE, 4),
        "scan_read_usd_per_month_at_one_sweep_a_minute": round(
            scan_rru * prices.dynamodb_rru * SWEEPS_PER_MONTH_AT_ONE_A_MINUTE, 4
        ),
    }
