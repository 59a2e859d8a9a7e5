"""The same delegation done with Lambda durable functions: an explicit cost model.

Nothing here runs a durable function (neither moto nor the local runtime has them); the variant is
priced from this model, counts measured on the local stack, and prices-us-east-1.json (whose
durable data prices are marked as assumptions: the stored documentation has none).

The delegating agent A's turn becomes one durable execution (the AWS-native way, since December
2025, to wait for an external callback), started by chat-ingest with an asynchronous Invoke named
after the turn (idempotent start):

    think = context.step(think)                          step: one model call, tool uses or the answer
    for each tool use:
        callback = context.create_callback(timeout=ASYNC_TOOL_TIMEOUT)   callback: its id goes in the task
        context.step(dispatch(task, callback.callback_id))              step: POST the task to the peer
    results = [callback.result() for each]               suspends: no compute while waiting
    context.step(think)                                  step: the model reads the results, the answer is
                                                         stored on the session record (one UpdateItem)

The peer's answer reaches A's callback endpoint as now; the callback function verifies the HMAC token
and calls SendDurableExecutionCallbackSuccess with the result; Lambda then invokes the function again,
which replays from its checkpoint log (completed steps are not re-run) and goes on. A callback's own
timeout replaces the deadline timer and the sweep. (`wait_for_callback` wraps the callback and the
submitting step in a child context: one more operation per delegation than modelled here.)

Counted as durable operations per turn with k delegations: the execution, 2 steps (the thinks),
and per delegation one callback and one dispatch step: 3 + 2k. Lambda invocations of the durable
function: the start plus one resume per callback, 1 + k (an ASSUMPTION: callbacks that arrive while
the execution is already resuming may share one; 2 is the lower bound). Duration: what the turn
worker and the dispatch function measured (the same work, in-process), without replay overhead.
Checkpoint data written: the turn's conversation (the user's message, the model's replies, the
results), as read back through the API; kept for the default retention of 14 days.

Kept on A, measured: API Gateway requests, chat-ingest (its DynamoDB requests; its Invoke of the turn
worker becomes the durable execution's), the callback function, Secrets Manager reads, log bytes. Dropped: the turns, dispatch and
timers queues, the deadline timer and sweep, every DynamoDB request outside chat-ingest (the execution
carries the conversation), but the one end-of-turn UpdateItem. The peer B is unchanged (measured).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from flightdeck.bench.accounting import Tally
from flightdeck.bench.prices import PriceTable

OPERATIONS_PER_TURN = ("execution", "step think", "step think")
OPERATIONS_PER_DELEGATION = ("callback", "step dispatch")
# A's functions the durable function stands for (their measured invocations' durations are its duration).
REPLACED_FUNCTIONS = ("turn_worker", "dispatch_worker")
KEPT_FUNCTIONS = ("chat_ingest", "callback")
END_OF_TURN_WRITES = 1  # one UpdateItem: final answer + idle
RETENTION_DAYS = 14  # RetentionPeriodInDays' default (documented)
DAYS_PER_MONTH = 30


def operations(delegations: int) -> int:
    return len(OPERATIONS_PER_TURN) + delegations * len(OPERATIONS_PER_DELEGATION)


def invocations(delegations: int) -> int:
    """The start, and one resume per callback (assumed)."""
    return 1 + delegations


def model(
    *,
    delegator: str,
    records: Iterable[dict[str, Any]],
    peer_tally: Tally,
    delegations: int,
    round_trips: int,
    sizes: dict[tuple[str, str, str], int],
    memory_mb: int,
    log_bytes_delegator: float,
    checkpoint_bytes: float,
    prices: PriceTable,
) -> dict[str, Any]:
    """Cost of one turn with `delegations` delegations, done the durable-function way.

    checkpoint_bytes: the data the execution checkpoints per turn (measured: the turn's conversation).
    """
    records = [r for r in records if r.get("agent") == delegator]
    kept = [r for r in records if r.get("k") == "inv" and r.get("fn") in KEPT_FUNCTIONS]
    calls = [r for r in records if r.get("k") == "aws" and r.get("fn") == "chat_ingest" and r.get("svc") == "dynamodb"]
    secrets = [r for r in records if r.get("k") == "aws" and r.get("svc") == "secretsmanager"]
    a = Tally.of([*kept, *calls, *secrets], sizes=sizes, memory_mb=memory_mb).divided(round_trips)
    # The durable function: its invocations, and the replaced functions' measured durations.
    replaced = Tally.of(
        [r for r in records if r.get("k") == "inv" and r.get("fn") in REPLACED_FUNCTIONS], memory_mb=memory_mb
    ).divided(round_trips)
    a.invocations[f"{delegator}/durable_turn"] += invocations(delegations)
    a.handler_ms[f"{delegator}/durable_turn"] += sum(replaced.handler_ms.values())
    a.gb_seconds += replaced.gb_seconds
    a.dynamodb["wru"] += END_OF_TURN_WRITES
    a.aws_requests["dynamodb.UpdateItem"] += END_OF_TURN_WRITES
    a.aws_requests["lambda.Invoke"] += 1  # the start: billed as the first invocation
    a.aws_requests["lambda.SendDurableExecutionCallbackSuccess"] += delegations
    a.log_bytes = log_bytes_delegator
    both = a.plus(peer_tally)
    both.per = round_trips
    n_operations = operations(delegations)
    costs = both.cost(prices)
    costs["durable_operations"] = n_operations * prices.durable_operation
    costs["durable_data"] = checkpoint_bytes * (
        prices.durable_byte_written + prices.durable_byte_month * RETENTION_DAYS / DAYS_PER_MONTH
    )
    costs["total"] += costs["durable_operations"] + costs["durable_data"]
    return {
        "durable_operations_per_turn": n_operations,
        "operations": {"per_turn": list(OPERATIONS_PER_TURN), "per_delegation": list(OPERATIONS_PER_DELEGATION)},
        "durable_invocations_per_turn": invocations(delegations),
        "checkpoint_bytes_per_turn": round(checkpoint_bytes, 1),
        "retention_days": RETENTION_DAYS,
        "assumed_prices": [name for name in prices.assumed if name.startswith("lambda_durable")],
        "assumptions": [
            "1 + k invocations of the durable function per turn (one resume per callback)",
            "duration: the turn worker's and the dispatch function's measured durations, no replay overhead",
            "checkpoint data: the turn's conversation; data written and retained priced at the assumed prices",
        ],
        "delegator_side": a.to_dict(),
        "usage": both.to_dict(),
        "cost_per_turn_usd": costs,
        "cost_per_million_delegations_usd": {k: round(v * 1e6 / delegations, 2) for k, v in costs.items()},
    }
