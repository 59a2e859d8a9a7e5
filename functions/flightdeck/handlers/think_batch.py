"""A batch of thinks from the thinks queue, run concurrently in one invocation (THINK_GATHERING = "shared").

Each think is one SQS record with its own thread, its own time budget (what is left of the invocation less
BATCH_RESERVE_MS, read when it starts), its own Deps (deps_within: its HTTP calls bounded by its own budget)
and its own outcome: one that raises fails its record alone, which Powertools' batch processor reports as a
batch item failure, so only that think comes back (after topology.THINK_RETRY_S, as Lambda retries a failed
invoke). A think that meets a throttled model hands its retry to the turns queue and succeeds, as an invoked
one does.

A batch lasts as long as its slowest think, and Lambda ending it at its timeout fails every record, the
finished ones too, and hands the others back only after the visibility timeout (minutes, past any
delegation's deadline). So the batch stops waiting BATCH_RESERVE_MS before its deadline and reports: a think
still running then (or never started) fails its record alone, visible again once its claim has lapsed
(its lease is its budget, which ends before the deadline); its thread may still store its reply, which is
stored once whichever run is first.

Shared across the threads only what the libraries say is safe: boto3 clients (made before the threads
start, since making one from the default session is not), the model client, the MCP client (its session
table behind a lock); each thread gets its own requests.Session (flightdeck.adapters.http_peers.SharedSession).

A crash of the function (Lambda kills it) fails every record not yet reported: the batch comes back after
the visibility timeout; a think that finished re-runs as any duplicate start does (its reply is stored
once), and every think it held is also still owed, so the sweep re-sends it after the grace
(ARCHITECTURE §3).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from typing import TYPE_CHECKING, Any

from flightdeck.domain.time_budget import OUT_OF_TIME_RETRY_S, TimeBudget
from flightdeck.handlers._sqs import process_batch
from flightdeck.observability import count, keys_per_thread, logger

if TYPE_CHECKING:
    from aws_lambda_powertools.utilities.batch.types import PartialItemFailureResponse
    from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord


# Kept back before the invocation's deadline: the batch's report after it stops waiting for its thinks (a
# visibility change per record handed back, one after another, while the threads left running still
# compete for the process; 2 s was not enough at 100 sessions on a loaded machine).
BATCH_RESERVE_MS = 5_000
# How often the batch re-reads its deadline while thinks run (a context's deadline is fixed; a test's moves).
DEADLINE_POLL_S = 0.25


class OutOfTime(Exception):
    """The think was still running, or not started, when the batch had to report."""


def process_concurrently(
    event: dict[str, Any],
    context: Any,
    record_handler: Callable[[SQSRecord, TimeBudget | None], Any],
    *,
    threads: int,
    failed: Callable[[list[SQSRecord], int | None], None] = lambda records, delay_s: None,
) -> PartialItemFailureResponse:
    """Run record_handler(record, its budget) on every record, up to `threads` at once, until BATCH_RESERVE_MS
    before the invocation's deadline; then report each outcome through Powertools' batch processor.
    failed(records, delay_s): called for the records that raised (delay_s None: a failed think's own retry),
    and once for those that ran out of time (delay_s: until their claims have lapsed)."""
    from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord

    records = [SQSRecord(raw) for raw in event.get("Records", [])]
    remaining = getattr(context, "get_remaining_time_in_millis", None)
    left_ms: Callable[[], float] = (lambda: remaining() - BATCH_RESERVE_MS) if callable(remaining) else lambda: math.inf
    budget = TimeBudget(lambda: int(left_ms())) if callable(remaining) else None

    def run(record: SQSRecord) -> tuple[bool, Any]:
        try:
            return True, record_handler(record, budget)
        except Exception as exc:  # noqa: BLE001 - this record's failure, reported below; the others go on
            return False, exc

    outcomes: dict[str, tuple[bool, Any]] = {}
    if threads <= 1 or len(records) <= 1:
        # One after another in this thread; one not started by the time the batch must report is handed back.
        pending = set()
        for record in records:
            if left_ms() > 0:
                outcomes[record.message_id] = run(record)
            else:
                pending.add(record.message_id)
    else:
        # Each thread's log keys (its think's session) are its own.
        pool = ThreadPoolExecutor(
            max_workers=min(threads, len(records)), thread_name_prefix="think", initializer=keys_per_thread
        )
        futures = {pool.submit(run, r): r.message_id for r in records}
        running = set(futures)
        while running and left_ms() > 0:
            _, running = wait(running, timeout=min(DEADLINE_POLL_S, left_ms() / 1000), return_when=FIRST_COMPLETED)
        # A thread still running is left to end on its own (Lambda freezes it with the environment).
        pool.shutdown(wait=False, cancel_futures=True)
        pending = {futures[f] for f in running}
        outcomes.update((futures[f], f.result()) for f in futures if f not in running)
    if pending:
        count("ThinksOutOfTime", len(pending))
        logger.warning("a batch of thinks reached its deadline", extra={"handed_back": len(pending)})
        late = [r for r in records if r.message_id in pending]
        for record in late:
            outcomes[record.message_id] = (False, OutOfTime("the batch reached its deadline first"))
        # Visible again once the invocation's deadline has passed: the thinks' claims have lapsed by then.
        failed(late, math.ceil(max(0.0, left_ms() + BATCH_RESERVE_MS) / 1000) + OUT_OF_TIME_RETRY_S)
    raised = [r for r in records if r.message_id not in pending and not outcomes[r.message_id][0]]
    if raised:
        failed(raised, None)

    def replay(record: SQSRecord) -> Any:
        ok, value = outcomes[record.message_id]
        if not ok:
            raise value
        return value

    return process_batch(event, context, replay)
