"""Whether a think started now is lone: the agent's first start in its window, counted in the agent's table.

THINK_GATHERING = "shared" (flightdeck.adapters.lambda_thinks): a lone think is invoked at once, the others go
to the thinks queue, whose batching window gathers them. Which start is lone is a property of the whole
agent's traffic, not of one execution environment's: a burst of sessions spreads over as many writers'
environments as there are sessions, each seeing one start. So each start adds one to a counter item per
window (`THINKS#STARTS`, sort key the window's number; one UpdateItem, a write unit, kept an hour by the
TTL); the start that makes it 1 is lone if the window before had none (one eventually consistent GetItem,
half a read unit, for that start alone): under steady traffic every window has starts, and none is lone. A
counter that cannot be written (throttled: traffic is high) sends its think to the queue.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from flightdeck import topology

COUNTER_PK = "THINKS#STARTS"
KEEP_S = 3600


class ThinkStarts:
    def __init__(self, table: str, client: Callable[[], Any], window_ms: int, clock: Callable[[], float] = time.time):
        self.table = table
        self.client = client
        self.window_ms = window_ms
        self.clock = clock

    def lone(self) -> bool:
        if self.window_ms <= 0:
            return False  # every think through the queue
        now = self.clock()
        window = int(now * 1000) // self.window_ms
        try:
            got = self.client().update_item(
                TableName=self.table,
                Key={topology.PARTITION_KEY: {"S": COUNTER_PK}, topology.SORT_KEY: {"S": str(window)}},
                UpdateExpression=f"ADD starts :one SET {topology.TTL_ATTRIBUTE} = if_not_exists({topology.TTL_ATTRIBUTE}, :ttl)",
                ExpressionAttributeValues={":one": {"N": "1"}, ":ttl": {"N": str(int(now) + KEEP_S)}},
                ReturnValues="UPDATED_NEW",
            )
            if got["Attributes"]["starts"]["N"] != "1":
                return False
            # The window's first start: lone unless the window before had starts too (traffic goes on).
            before = self.client().get_item(
                TableName=self.table,
                Key={topology.PARTITION_KEY: {"S": COUNTER_PK}, topology.SORT_KEY: {"S": str(window - 1)}},
                ProjectionExpression="starts",
            )
        except Exception:  # noqa: BLE001 - not counted (throttled, most likely under load): the queue takes it
            return False
        return "Item" not in before
