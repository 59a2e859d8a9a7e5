"""LOCAL ONLY: the table's DynamoDB stream, read from moto as Lambda's event source mapping reads it.

With THINK_START = "stream" the owed-think starter (flightdeck.handlers.owed_thinks) is fed by the table's
stream. moto serves DynamoDB Streams (DescribeStream, GetShardIterator, GetRecords); this reader keeps each
shard's position, applies the mapping's event filters (topology.OWED_THINK_FILTERS, the subset of Lambda's
filter syntax they use: exact values and `exists`), and hands the matching records over in the event shape
Lambda delivers ({"Records": [...]}, each with its eventSourceARN).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from flightdeck import topology


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
            records = self.streams.get_records(ShardIterator=self._iterator(shard), Limit=1000)["Records"]
            for record in records:
                self._after[shard] = record["dynamodb"]["SequenceNumber"]
                if matches(record):
                    out.append({**record, "eventSourceARN": self.stream_arn})
        return out
