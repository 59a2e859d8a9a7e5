"""DynamoDB item sizes and on-demand request units, computed the way DynamoDB bills them.

moto does not bill: its ConsumedCapacity is a placeholder (a Scan of 1,000 items
reports 1.0), so the benchmark computes units from the items it sees:

- item size: attribute names (UTF-8 bytes) plus values; a number takes about
  one byte per two significant digits plus one; a list or map 3 bytes plus
  one per element; booleans and nulls one byte (DynamoDB developer guide,
  "Item sizes and formats");
- a write: 1 write request unit (WRU) per started KB of the item (for an
  update: the larger of the item before and after; here the item as found
  afterwards), 2 per KB inside TransactWriteItems;
- a read: 1 read request unit (RRU) per started 4 KB when strongly consistent,
  0.5 when eventually consistent (every GSI query); a Query pays for the total
  size of the items it evaluated, rounded up once per request, at least one
  4 KB unit;
- a global secondary index's writes are read off the table's stream, from each
  write's old and new item (flightdeck.bench.index_units).
"""

from __future__ import annotations

import base64
import math
from decimal import Decimal
from typing import Any

WRITE_UNIT_BYTES = 1024
READ_UNIT_BYTES = 4096


def _number_size(text: str) -> int:
    digits = str(Decimal(text).normalize()).lstrip("-").replace(".", "")
    if "E" in digits:
        digits = digits.split("E")[0]
    significant = digits.strip("0") or "0"
    return (len(significant) + 1) // 2 + 1


def value_size(value: dict[str, Any]) -> int:
    """Size in bytes of one attribute value in DynamoDB JSON ({"S": ...}, {"N": ...}, ...)."""
    ((kind, data),) = value.items()
    if kind == "S":
        return len(data.encode("utf-8"))
    if kind == "N":
        return _number_size(data)
    if kind == "B":
        return len(data) if isinstance(data, (bytes, bytearray)) else len(base64.b64decode(data))
    if kind == "BOOL" or kind == "NULL":
        return 1
    if kind == "SS":
        return sum(len(s.encode("utf-8")) for s in data)
    if kind == "NS":
        return sum(_number_size(n) for n in data)
    if kind == "BS":
        return sum(len(b) if isinstance(b, (bytes, bytearray)) else len(base64.b64decode(b)) for b in data)
    if kind == "L":
        return 3 + sum(1 + value_size(v) for v in data)
    if kind == "M":
        return 3 + sum(1 + len(k.encode("utf-8")) + value_size(v) for k, v in data.items())
    raise ValueError(f"unknown DynamoDB type {kind!r}")


def item_size(item: dict[str, Any] | None) -> int:
    """Size in bytes of an item in DynamoDB JSON (0 for no item)."""
    if not item:
        return 0
    return sum(len(name.encode("utf-8")) + value_size(value) for name, value in item.items())


def write_units(size_bytes: int, *, transactional: bool = False) -> int:
    units = max(1, math.ceil(size_bytes / WRITE_UNIT_BYTES))
    return 2 * units if transactional else units


def read_units(size_bytes: int, *, consistent: bool, transactional: bool = False) -> float:
    units = max(1, math.ceil(size_bytes / READ_UNIT_BYTES))
    if transactional:
        return 2.0 * units
    return float(units) if consistent else units / 2
