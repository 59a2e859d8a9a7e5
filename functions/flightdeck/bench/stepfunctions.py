"""The same delegation done with Step Functions' `.waitForTaskToken` callback pattern: an explicit cost model.

Nothing here runs Step Functions (moto cannot run Lambda tasks without Docker);
the variant is priced from this model plus counts measured on the local stack.

The delegating agent A becomes one Standard workflow execution per turn
(Express workflows cannot wait for a task token):

    Think      Task  lambda:invoke           one model call: tool uses, or the final answer
    Route      Choice                        tool uses -> Delegate; end of turn -> Done
    Delegate   Map   (inline, one item per tool use)
      Dispatch Task  lambda:invoke.waitForTaskToken, TimeoutSeconds = ASYNC_TOOL_TIMEOUT
                     the function POSTs the task to the peer, with the task token sealed
                     inside the HMAC callback token, and returns; the state waits
      TimedOut Pass  (Catch States.Timeout) {"status": "error", "reason": "timeout"}
    Think      Task  lambda:invoke           the model reads the results
    Route      Choice
    Done       Succeed

State transitions per turn with k delegations: Think, Route, Delegate, k x Dispatch,
Think, Route, Done = 6 + k (plus one TimedOut per delegation that times out, and
one per retry). The peer B is unchanged (its /api/chat, turn, delivery), so its
counts are the measured ones. What A keeps and drops:

- kept (measured on the local stack): API Gateway requests to A (the user's chat,
  the callbacks), chat-ingest (session record, busy check), the callback function
  (verifies the HMAC token, then SendTaskSuccess), the dispatch function, the
  think function's invocations and durations, Secrets Manager reads, log bytes;
- dropped: A's SQS queues (turns, dispatch, timers) and their event source
  mappings, the deadline timer and sweep, and every DynamoDB request A makes
  outside chat-ingest (iterations, aggregation records, results, dispatch claims):
  the execution carries the conversation and the results. One UpdateItem is added
  at the end (the final answer on the session record, session idle).

That makes the variant a lower bound: it is as cheap as Step Functions can make
this delegation. StartExecution and SendTaskSuccess are API requests Step
Functions does not bill for Standard workflows (transitions only).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from flightdeck.bench.accounting import Tally
from flightdeck.bench.prices import PriceTable

STATES_PER_TURN = ("Think", "Route", "Delegate", "Think", "Route", "Done")
STATES_PER_DELEGATION = ("Dispatch",)
# The functions the variant keeps, by handler module.
KEPT_FUNCTIONS = ("chat_ingest", "turn_worker", "dispatch_worker", "callback")
END_OF_TURN_WRITES = 1  # one UpdateItem: final answer + idle


def _priced(
    a: Tally, peer_tally: Tally, round_trips: int, n_transitions: int, prices: PriceTable
) -> tuple[Tally, dict[str, float]]:
    """Both agents' usage per round trip, and its cost with the state transitions priced in."""
    both = a.plus(peer_tally)
    both.per = round_trips
    costs = both.cost(prices)
    costs["step_functions"] = n_transitions * prices.sfn_transition
    costs["total"] += costs["step_functions"]
    return both, costs


def transitions(delegations: int, timed_out: int = 0) -> int:
    return len(STATES_PER_TURN) + delegations * len(STATES_PER_DELEGATION) + timed_out


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
    prices: PriceTable,
) -> dict[str, Any]:
    """Cost of one turn with `delegations` delegations, done the Step Functions way.

    records: the counted records of the measured window; peer_tally: B's measured
    usage per round trip; log_bytes_delegator: A's log bytes per round trip.
    """
    records = [r for r in records if r.get("agent") == delegator]
    kept = [r for r in records if r.get("k") == "inv" and r.get("fn") in KEPT_FUNCTIONS]
    # chat-ingest's DynamoDB requests (session record, peer check); its SendMessage becomes StartExecution.
    calls = [r for r in records if r.get("k") == "aws" and r.get("fn") == "chat_ingest" and r.get("svc") == "dynamodb"]
    secrets = [r for r in records if r.get("k") == "aws" and r.get("svc") == "secretsmanager"]
    a = Tally.of([*kept, *calls, *secrets], sizes=sizes, memory_mb=memory_mb).divided(round_trips)
    a.dynamodb["wru"] += END_OF_TURN_WRITES
    a.aws_requests["dynamodb.UpdateItem"] += END_OF_TURN_WRITES
    a.aws_requests["states.StartExecution"] += 1
    a.aws_requests["states.SendTaskSuccess"] += delegations
    a.log_bytes = log_bytes_delegator
    n_transitions = transitions(delegations)
    both, costs = _priced(a, peer_tally, round_trips, n_transitions, prices)
    return {
        "state_transitions_per_turn": n_transitions,
        "states": {"per_turn": list(STATES_PER_TURN), "per_delegation": list(STATES_PER_DELEGATION)},
        "delegator_side": a.to_dict(),
        "usage": both.to_dict(),
        "cost_per_turn_usd": costs,
        "cost_per_million_delegations_usd": {k: round(v * 1e6 / delegations, 2) for k, v in costs.items()},
    }


# --- the leanest variant: one .waitForTaskToken task per delegation, thinks outside ------------------
#
# The state machine only waits: one Standard execution per delegation, started by the turn worker
# (StartExecution instead of the dispatch queue), whose one state dispatches and waits:
#
#     Dispatch  Task  lambda:invoke.waitForTaskToken, TimeoutSeconds = ASYNC_TOOL_TIMEOUT,
#                     Catch States.Timeout -> TimedOut
#     TimedOut  Task  lambda:invoke (only on a timeout): writes the timeout result, completes the turn
#
# Everything else stays as measured: ingest, the thinks (turn worker, started by asynchronous invokes),
# the callback function, which records the result, completes the turn and starts the next think as now,
# then calls SendTaskSuccess so the execution ends at once; the DynamoDB conditions settle a callback
# racing the timeout. What goes: the dispatch queue (its send, receive, delete), the deadline timer
# (the timers queue and the timer function with its reads: the task's timeout replaces it).

LEAN_STATES_PER_DELEGATION = ("Dispatch",)
LEAN_STATES_PER_TIMEOUT = ("TimedOut",)
# Queues the lean variant drops (their names end so: flightdeck.topology's queue names).
LEAN_DROPPED_QUEUES = ("-dispatch", "-timers")
LEAN_DROPPED_FUNCTIONS = ("deadline_timer",)


def lean_transitions(delegations: int, timed_out: int = 0) -> int:
    return delegations * len(LEAN_STATES_PER_DELEGATION) + timed_out * len(LEAN_STATES_PER_TIMEOUT)


def _lean_keeps(record: dict[str, Any]) -> bool:
    if record.get("fn") in LEAN_DROPPED_FUNCTIONS:
        return False
    if record.get("k") == "aws" and record.get("svc") == "sqs":
        return not str(record.get("queue", "")).endswith(LEAN_DROPPED_QUEUES)
    return True


def lean_model(
    *,
    delegator: str,
    records: Iterable[dict[str, Any]],
    peer_tally: Tally,
    delegations: int,
    round_trips: int,
    sizes: dict[tuple[str, str, str], int],
    memory_mb: int,
    log_bytes_delegator: float,
    prices: PriceTable,
) -> dict[str, Any]:
    """Cost of one turn with `delegations` delegations, each waited for by its own one-state execution."""
    kept = [r for r in records if r.get("agent") == delegator and _lean_keeps(r)]
    a = Tally.of(kept, sizes=sizes, memory_mb=memory_mb).divided(round_trips)
    a.aws_requests["states.StartExecution"] += delegations
    a.aws_requests["states.SendTaskSuccess"] += delegations
    a.log_bytes = log_bytes_delegator
    n_transitions = lean_transitions(delegations)
    both, costs = _priced(a, peer_tally, round_trips, n_transitions, prices)
    return {
        "state_transitions_per_turn": n_transitions,
        "states": {"per_delegation": list(LEAN_STATES_PER_DELEGATION), "per_timeout": list(LEAN_STATES_PER_TIMEOUT)},
        "dropped": {"queues": list(LEAN_DROPPED_QUEUES), "functions": list(LEAN_DROPPED_FUNCTIONS)},
        "delegator_side": a.to_dict(),
        "usage": both.to_dict(),
        "cost_per_turn_usd": costs,
        "cost_per_million_delegations_usd": {k: round(v * 1e6 / delegations, 2) for k, v in costs.items()},
    }
