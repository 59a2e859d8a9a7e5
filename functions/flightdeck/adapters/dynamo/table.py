"""The shared table: client, clock, consistent reads that skip expired items, and transactions."""

from __future__ import annotations

import copy
import time
from collections.abc import Callable
from typing import Any, Self, cast

import boto3
from botocore.exceptions import ClientError

from flightdeck import topology
from flightdeck.adapters.dynamo.codec import attr_values, ddb_item, plain_item
from flightdeck.adapters.dynamo.conflicts import ConflictBackoff, ConflictRetryingClient, collided
from flightdeck.adapters.dynamo.keys import PK, SK, TTL
from flightdeck.domain.records import ItemTooLargeError
from flightdeck.domain.time_budget import TimeBudget

# A committed write that makes a think due (a new message, a completed turn) also marks it
# owed on the session, in the deadline index, due this long after: the sweep re-sends an
# owed think still unstarted by then (flightdeck.domain.liveness). The think's first write
# clears the mark, so on the happy path the recovery costs no request. Longer than a think can
# run (the turn worker's timeout): a think start has no deduplication, so a re-send must not
# overlap the think it stands in for, which would call the model a second time.
OWED_THINK_GRACE_MS = topology.WORKER_TIMEOUT_S * 1000 + 5_000


def is_condition_failure(exc: ClientError) -> bool:
    return exc.response.get("Error", {}).get("Code") == "ConditionalCheckFailedException"


def too_large(exc: ClientError) -> bool:
    error = exc.response.get("Error", {})
    return error.get("Code") == "ValidationException" and "size" in str(error.get("Message", "")).lower()


class Table:
    """One agent's table: what every store on it shares. `clock` returns epoch milliseconds."""

    def __init__(
        self,
        table_name: str,
        client: Any = None,
        clock: Callable[[], int] | None = None,
        owed_think_grace_ms: int = OWED_THINK_GRACE_MS,
        owed_in_index: bool = True,
        conflicts: ConflictBackoff | None = None,
    ):
        self.table = table_name
        self._client = client
        self.conflicts = conflicts or ConflictBackoff()
        self._retrying: ConflictRetryingClient | None = None
        self._clock = clock or (lambda: int(time.time() * 1000))
        self.owed_think_grace_ms = owed_think_grace_ms
        # False: the table's stream starts owed thinks, and a mark enters the index only on a recovery path
        # (StateOps._owed_actions writes the mark for the mode).
        self.owed_in_index = owed_in_index

    @property
    def client(self) -> Any:
        """The table's client: every write on it retries a collision with a transaction (adapters.dynamo.conflicts)."""
        if self._client is None:
            self._client = boto3.client("dynamodb")
        if self._retrying is None or self._retrying.raw is not self._client:
            self._retrying = ConflictRetryingClient(self._client, self.conflicts)
        return self._retrying

    def within(self, budget: TimeBudget) -> Self:
        """This store for one invocation: its writes retry a collision only within what `budget` has left."""
        bounded = copy.copy(self)
        bounded.conflicts, bounded._retrying = self.conflicts.within(budget), None
        return bounded

    def now_ms(self) -> int:
        return self._clock()

    def expiry(self, ttl_ms: int) -> int:
        return (self.now_ms() + ttl_ms) // 1000

    def alive(self, item: dict[str, Any]) -> bool:
        exp = item.get(TTL)
        return exp is None or int(exp) > self.now_ms() // 1000

    def read_item(self, pk: str, sk: str) -> dict[str, Any] | None:
        """One item, read consistently; None when absent or past its TTL."""
        resp = self.client.get_item(TableName=self.table, Key=ddb_item(**{PK: pk, SK: sk}), ConsistentRead=True)
        item = resp.get("Item")
        if not item:
            return None
        plain = plain_item(item)
        return plain if self.alive(plain) else None

    def query_prefix(self, pk: str, prefix: str) -> list[dict[str, Any]]:
        """A partition's live items whose sort key starts with prefix (every one: ""), all pages."""
        items: list[dict[str, Any]] = []
        kwargs: dict[str, Any] = {
            "TableName": self.table,
            "KeyConditionExpression": "#pk = :pk AND begins_with(#sk, :prefix)",
            "ExpressionAttributeNames": {"#pk": PK, "#sk": SK},
            "ExpressionAttributeValues": attr_values(pk=pk, prefix=prefix),
            "ConsistentRead": True,
        }
        if not prefix:
            kwargs.update(
                KeyConditionExpression="#pk = :pk",
                ExpressionAttributeNames={"#pk": PK},
                ExpressionAttributeValues=attr_values(pk=pk),
            )
        while True:
            resp = self.client.query(**kwargs)
            items.extend(p for p in map(plain_item, resp.get("Items", [])) if self.alive(p))
            if "LastEvaluatedKey" not in resp:
                return items
            kwargs["ExclusiveStartKey"] = resp["LastEvaluatedKey"]

    def transact(self, items: list[dict[str, Any]]) -> list[dict[str, Any]] | None:
        """Run a transaction; None on success, else the cancellation reasons (a failed condition among
        them: the caller's to interpret). A collision with another write is retried by the client."""
        try:
            self.client.transact_write_items(TransactItems=items)
            return None
        except ClientError as exc:
            if too_large(exc):
                raise ItemTooLargeError(str(exc.response.get("Error", {}).get("Message", ""))) from exc
            if exc.response.get("Error", {}).get("Code") != "TransactionCanceledException" or collided(exc):
                raise  # a collision past the retry budget: the caller's 503, like any AWS failure
            # botocore-stubs types the reasons as TypedDicts; callers read them as plain dicts.
            reasons = cast(list[dict[str, Any]], exc.response.get("CancellationReasons") or [])
            if any(r.get("Code") == "ValidationError" and "size" in str(r.get("Message", "")).lower() for r in reasons):
                raise ItemTooLargeError(
                    next(str(r.get("Message")) for r in reasons if r.get("Code") == "ValidationError")
                ) from exc
            return reasons or [{"Code": "ConditionalCheckFailed"}]
