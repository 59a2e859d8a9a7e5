"""Writes that collide with a DynamoDB transaction are retried here, and only here.

On DynamoDB, a TransactWriteItems touching an item that another transaction or write is changing at
the same moment is cancelled (`TransactionCanceledException`, reason `TransactionConflict` on that
item), and a PutItem/UpdateItem/DeleteItem on an item inside a transaction under way fails with
`TransactionConflictException`. Nothing was written; the same request a moment later normally
succeeds. botocore retries neither (no retry mode lists them: its standard mode reads the error code,
never the cancellation reasons), and moto serializes requests, so it never answers either.

Every write through the table's client (flightdeck.adapters.dynamo.table.Table.client) goes through
`ConflictRetryingClient`: a collision is retried with full-jitter exponential backoff for at most
CONFLICT_BUDGET_MS, and in a worker's invocation no longer than it has left (wiring.deps_within); past that the last error is raised, which the API answers 503 with `Retry-After`
(flightdeck.api.resolver) and a worker's invocation fails and is retried by its owner. A cancellation
that names any other reason (a failed condition, above all) is never retried: it is the caller's to
interpret.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from typing import Any

from botocore.exceptions import ClientError

from flightdeck.domain.time_budget import TimeBudget

# How long one write keeps retrying a collision: a transaction holds its items for milliseconds, and
# this stays well inside what every caller waits (a peer's HTTP timeout, 10 s by default; a worker's
# 30 s), with room for the request's other writes.
CONFLICT_BUDGET_MS = 2_000
# Full jitter (sleep uniform in [0, min(cap, base * 2^attempt)]): callers that collided together do
# not retry together.
BACKOFF_BASE_MS = 20
BACKOFF_CAP_MS = 400
# Reasons of a cancelled transaction that say only "not now": every other reason (None excepted, the
# code of an item that was fine) is the answer, and ends the write.
RETRYABLE_REASONS = frozenset({"TransactionConflict", "ThrottlingError"})
WRITES = frozenset({"put_item", "update_item", "delete_item", "transact_write_items"})


def collided(exc: ClientError) -> bool:
    """True when the write failed only because another write held its items (or throttled it)."""
    code = exc.response.get("Error", {}).get("Code")
    if code == "TransactionConflictException":
        return True
    if code != "TransactionCanceledException":
        return False
    reasons = {str(r.get("Code")) for r in exc.response.get("CancellationReasons") or []} - {"None"}
    return bool(reasons) and reasons <= RETRYABLE_REASONS


class ConflictBackoff:
    """Runs a write again while it collides, within `budget_ms` (and, given the invocation's TimeBudget, within
    what it has left before its reserve); then raises its last error."""

    def __init__(
        self,
        budget_ms: int = CONFLICT_BUDGET_MS,
        sleep: Callable[[float], None] = time.sleep,
        monotonic: Callable[[], float] = time.monotonic,
        time_budget: TimeBudget | None = None,
    ):
        self.budget_ms = budget_ms
        self._sleep = sleep
        self._monotonic = monotonic
        self.time_budget = time_budget

    def within(self, time_budget: TimeBudget) -> ConflictBackoff:
        """The same backoff, for writes of an invocation with `time_budget` left."""
        return ConflictBackoff(self.budget_ms, self._sleep, self._monotonic, time_budget)

    def limit_ms(self) -> int:
        """How long a write that collides now may keep retrying."""
        if self.time_budget is None:
            return self.budget_ms
        return max(0, min(self.budget_ms, self.time_budget.remaining_ms() - self.time_budget.reserve_ms))

    def run(self, write: Callable[[], Any]) -> Any:
        started = self._monotonic()
        limit_ms = None
        attempt = 0
        while True:
            try:
                return write()
            except ClientError as exc:
                if not collided(exc):
                    raise
                limit_ms = self.limit_ms() if limit_ms is None else limit_ms
                delay_s = random.uniform(0, min(BACKOFF_CAP_MS, BACKOFF_BASE_MS * 2**attempt)) / 1000
                if (self._monotonic() - started + delay_s) * 1000 > limit_ms:
                    raise
                self._sleep(delay_s)
                attempt += 1


class ConflictRetryingClient:
    """A DynamoDB client whose writes go through `backoff`; everything else is the client's own."""

    def __init__(self, client: Any, backoff: ConflictBackoff):
        self.raw = client
        self._backoff = backoff

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self.raw, name)
        if name not in WRITES:
            return attr
        return lambda **kwargs: self._backoff.run(lambda: attr(**kwargs))
