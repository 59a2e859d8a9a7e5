"""LOCAL ONLY: the table's DynamoDB stream, read from moto as Lambda's event source mapping reads it.

With THINK_START = "stream" the owed-think starter (flightdeck.handlers.owed_thinks) is fed by the table's
stream. moto serves DynamoDB Streams (DescribeStream, GetShardIterator, GetRecords); this reader keeps each
shard's position, applies the mapping's event filters (topology.OWED_THINK_FILTERS, the subset of Lambda's
filter syntax they use: exact values and `exists`), and hands the matching records over in the event shape
Lambda delivers ({"Records": [...]}, each with its eventSourceARN).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from flightdeck import topology
from flightdeck.local.invocation import Function, log_failure

log = logging.getLogger("flightdeck.local")


def enable_stream(dynamodb: Any, table: str) -> str:
    """The table's stream ARN, turning the stream on (NEW_AND_OLD_IMAGES) if it is off."""
    described = dynamodb.describe_table(TableName=table)["Table"]
    if not described.get("StreamSpecification", {}).get("StreamEnabled"):
        described = dynamodb.update_table(
            TableName=table, StreamSpecification={"StreamEnabled": True, "StreamViewType": topology.STREAM_VIEW}
        )["TableDescription"]
    return str(described["LatestStreamArn"])


def _matches(pattern: Any, value: Any, present: bool) -> bool:
    if isinstance(pattern, Mapping):
        if not present or not isinstance(value, Mapping):
            # A missing object matches only patterns that ask for absent fields.
            return all(_matches(p, None, False) for p in pattern.values())
        return all(_matches(p, value.get(k), k in value) for k, p in pattern.items())
    if isinstance(pattern, Sequence) and not isinstance(pattern, str):
        for option in pattern:
            if isinstance(option, Mapping) and "exists" in option:
                if bool(option["exists"]) == present:
                    return True
            elif present and option == value:
                return True
        return False
    raise ValueError(f"not a filter pattern: {pattern!r}")


def matches(record: Mapping[str, Any], filters: Sequence[Mapping[str, Any]] = topology.OWED_THINK_FILTERS) -> bool:
    """Whether any of the filters lets the record through (Lambda ORs a mapping's filters)."""
    return any(_matches(f, record, True) for f in filters)


class StreamReader:
    """Reads the records written since the last read, from every shard of one table's stream."""

    def __init__(self, streams: Any, stream_arn: str):
        self.streams = streams
        self.stream_arn = stream_arn
        self._after: dict[str, str] = {}  # shard id -> the last sequence number read

    def _iterator(self, shard: str) -> str:
        if shard in self._after:
            it = self.streams.get_shard_iterator(
                StreamArn=self.stream_arn,
                ShardId=shard,
                ShardIteratorType="AFTER_SEQUENCE_NUMBER",
                SequenceNumber=self._after[shard],
            )
        else:
            it = self.streams.get_shard_iterator(
                StreamArn=self.stream_arn, ShardId=shard, ShardIteratorType="TRIM_HORIZON"
            )
        return str(it["ShardIterator"])

    def read(self, filters: Sequence[Mapping[str, Any]] = topology.OWED_THINK_FILTERS) -> list[dict[str, Any]]:
        """The new records that pass the filters (the others are read past, as Lambda drops them)."""
        shards = self.streams.describe_stream(StreamArn=self.stream_arn)["StreamDescription"]["Shards"]
        out: list[dict[str, Any]] = []
        for shard in (s["ShardId"] for s in shards):
            while records := self.streams.get_records(ShardIterator=self._iterator(shard), Limit=1000)["Records"]:
                for record in records:
                    self._after[shard] = record["dynamodb"]["SequenceNumber"]
                    if matches(record, filters):
                        out.append({**record, "eventSourceARN": self.stream_arn})
        return out


# Lambda polls a DynamoDB stream's shard about four times a second.
POLL_INTERVAL_S = 0.25


class StreamPoller(threading.Thread):
    """The owed-think starter's event source mapping (topology.STREAM_CONSUMER), on moto's stream.

    Each poll hands the new records that pass the filters to the function in batches of the mapping's size.
    Records the function reports as failed (ReportBatchItemFailures), or a whole batch whose invocation
    failed, are handed over again on the next polls, up to the mapping's retries; then, as the mapping's
    on-failure destination does, a record of them goes to the dead-letter queue and the shard moves on.
    """

    def __init__(
        self,
        *,
        reader: StreamReader,
        function: Function,
        stop: threading.Event,
        on_failure: Callable[[dict[str, Any]], None],
        spec: topology.StreamConsumerSpec = topology.STREAM_CONSUMER,
        interval_s: float = POLL_INTERVAL_S,
    ):
        super().__init__(name="poller-stream", daemon=True)
        self.reader = reader
        self.function = function
        self.stop_event = stop
        self.on_failure = on_failure
        self.spec = spec
        self.interval_s = interval_s
        self._retry: list[tuple[int, dict[str, Any]]] = []  # (attempts so far, record)

    def run(self) -> None:
        while not self.stop_event.wait(self.interval_s):
            try:
                self.poll_once()
            except Exception:
                log.exception("stream poller: reading the stream failed")

    def poll_once(self) -> int:
        """One poll: the records to retry, then the new ones. Returns how many records were handed over."""
        pending = self._retry + [(0, r) for r in self.reader.read()]
        self._retry = []
        for start in range(0, len(pending), self.spec.batch_size):
            self._hand_over(pending[start : start + self.spec.batch_size])
        return len(pending)

    def _hand_over(self, batch: list[tuple[int, dict[str, Any]]]) -> None:
        records = [r for _, r in batch]
        try:
            result = self.function.invoke({"Records": records})
            failed = {f["itemIdentifier"] for f in (result or {}).get("batchItemFailures") or []}
        except Exception as exc:
            log_failure(log, exc, "stream poller: %s failed on %d records", self.function.module_name, len(records))
            failed = {r["dynamodb"]["SequenceNumber"] for r in records}
        for attempts, record in batch:
            if record["dynamodb"]["SequenceNumber"] not in failed:
                continue
            if attempts < self.spec.retry_attempts:
                self._retry.append((attempts + 1, record))
            else:
                log.error("stream poller: record %s given up after its retries", record["dynamodb"]["SequenceNumber"])
                self.on_failure(
                    {
                        "requestContext": {"condition": "RetryAttemptsExhausted"},
                        "DDBStreamBatchInfo": {
                            "shardId": record.get("shardId", ""),
                            "startSequenceNumber": record["dynamodb"]["SequenceNumber"],
                            "endSequenceNumber": record["dynamodb"]["SequenceNumber"],
                            "streamArn": record["eventSourceARN"],
                            "batchSize": 1,
                        },
                    }
                )
