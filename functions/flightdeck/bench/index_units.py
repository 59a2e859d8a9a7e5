"""Global secondary index write units, read off the table's stream: what DynamoDB bills each index a write touches.

An item's old and new images (the stream's NEW_AND_OLD_IMAGES record of each write) say exactly what the write
did to each index, by the rules of the developer guide ("Provisioned throughput considerations for global
secondary indexes"):

- the item enters an index (the write gives it both of the index's key attributes): one index write;
- it leaves the index (one of them removed, or the item deleted): one;
- it stays and an index key attribute changes: two (the old entry deleted, the new one put);
- it stays and nothing projected changes: none; a projected attribute changes: one (for ALL, any attribute).

Each index write costs one unit per started KB of the index entry: the item's key attributes and the index's,
plus its projected attributes (the whole item for ALL). A write whose condition fails writes no index.
The stream is the bench's instrument only: the deployed tables have none unless THINK_START = "stream".
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from flightdeck import topology
from flightdeck.bench.dynamo_units import item_size, write_units


def _entry(image: Mapping[str, Any] | None, spec: topology.IndexSpec) -> dict[str, Any] | None:
    """The item's entry in the index (DynamoDB JSON), or None when the item is not in it."""
    if not image:
        return None
    keys = (spec.partition_key[0], spec.sort_key[0])
    if any(k not in image for k in keys):
        return None
    if spec.projection == "ALL":
        return dict(image)
    named = (topology.PARTITION_KEY, topology.SORT_KEY, *keys)
    return {k: image[k] for k in named if k in image}


def index_write_units(
    old: Mapping[str, Any] | None,
    new: Mapping[str, Any] | None,
    indexes: Sequence[topology.IndexSpec] = topology.INDEXES,
) -> dict[str, int]:
    """Write units by index name of one write that turned the item `old` into `new` (DynamoDB JSON; None: absent)."""
    units: dict[str, int] = {}
    for spec in indexes:
        before, after = _entry(old, spec), _entry(new, spec)
        keys = (spec.partition_key[0], spec.sort_key[0])
        if before is None and after is None:
            continue
        if before is None or after is None:
            n = write_units(item_size(after or before))
        elif any(before[k] != after[k] for k in keys):
            n = write_units(item_size(before)) + write_units(item_size(after))
        elif before != after:
            n = write_units(item_size(after))
        else:
            continue
        units[spec.name] = n
    return units


def records_of(stream_records: Iterable[Mapping[str, Any]], agent: str) -> list[dict[str, Any]]:
    """The bench's records (k "gsi") of a table's stream records: when, which item kind, how many index units."""
    out = []
    for record in stream_records:
        change = record["dynamodb"]
        units = index_write_units(change.get("OldImage"), change.get("NewImage"))
        if not units:
            continue
        sk = next(iter(change["Keys"].get(topology.SORT_KEY, {"S": ""}).values()), "")
        at = change.get("ApproximateCreationDateTime")
        out.append(
            {
                "k": "gsi",
                "agent": agent,
                "t": at.timestamp() if hasattr(at, "timestamp") else float(at or 0),
                "kind": str(sk).split("#", 1)[0] or "?",
                "units": units,
            }
        )
    return out
