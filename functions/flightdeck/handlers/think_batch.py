"""A batch of thinks from the thinks queue, run concurrently in one invocation (THINK_GATHERING = "shared").

Each think is one SQS record with its own thread, its own time budget (what is left of the invocation, read
when it starts), its own Deps (deps_within: its HTTP calls bounded by its own budget) and its own outcome:
one that raises fails its record alone, which Powertools' batch processor reports as a batch item failure,
so only that think comes back (after topology.THINK_RETRY_S, as Lambda retries a failed invoke). A think
that meets a throttled model hands its retry to the turns queue and succeeds, as an invoked one does.

Shared across the threads only what the libraries say is safe: boto3 clients (made before the threads
start, since making one from the default session is not), the model client, the MCP client (its session
table behind a lock); each thread gets its own requests.Session (flightdeck.adapters.http_peers.SharedSession).

A crash of the function (Lambda kills it, a timeout) fails every record not yet reported: the batch comes
back after the visibility timeout; a think that finished re-runs as any duplicate start does (its reply
is stored once), and every think it held is also still owed, so the sweep re-sends it after the grace
(ARCHITECTURE §3).
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from flightdeck.handlers._sqs import process_batch
from flightdeck.observability import keys_per_thread

if TYPE_CHECKING:
    from aws_lambda_powertools.utilities.batch.types import PartialItemFailureResponse
    from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord


def process_concurrently(
    event: dict[str, Any],
    context: Any,
    record_handler: Callable[[SQSRecord], Any],
    *,
    threads: int,
    failed: Callable[[SQSRecord], None] = lambda record: None,
) -> PartialItemFailureResponse:
    """Run record_handler on every record, up to `threads` at once; then report each outcome through Powertools'
    batch processor. failed(record): called for each record that raised (its retry's delay)."""
    from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord

    records = [SQSRecord(raw) for raw in event.get("Records", [])]

    def run(record: SQSRecord) -> tuple[bool, Any]:
        try:
            return True, record_handler(record)
        except Exception as exc:  # noqa: BLE001 - this record's failure, reported below; the others go on
            return False, exc

    if threads <= 1 or len(records) <= 1:
        outcomes = [run(r) for r in records]
    else:
        # Each thread's log keys (its think's session) are its own.
        with ThreadPoolExecutor(
            max_workers=min(threads, len(records)), thread_name_prefix="think", initializer=keys_per_thread
        ) as pool:
            outcomes = list(pool.map(run, records))
    by_id = {record.message_id: outcome for record, outcome in zip(records, outcomes, strict=True)}
    for record, (ok, _) in zip(records, outcomes, strict=True):
        if not ok:
            failed(record)

    def replay(record: SQSRecord) -> Any:
        ok, value = by_id[record.message_id]
        if not ok:
            raise value
        return value

    return process_batch(event, context, replay)
