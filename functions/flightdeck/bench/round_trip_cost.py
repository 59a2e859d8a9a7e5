"""A counted round trip's report: its requests and units per turn, its $ per 1M delegations, at stated model
latencies and by front door, and the comparison models (Step Functions, durable functions) over the same turns."""

from __future__ import annotations

from typing import Any

from flightdeck import topology
from flightdeck.bench import doors, durable, stepfunctions
from flightdeck.bench.accounting import Tally
from flightdeck.bench.prices import PriceTable
from flightdeck.bench.roles import DELEGATOR, MEMORY_MB, WORKER, StackOptions, memory_mb, think_memory_mb

# The model latencies the cost headline is stated at (issue 31): a think's function waits while the model answers.
MODEL_LATENCIES_S = (1, 5)


def at_model_latency(
    per_turn: dict[str, Any], total_per_million: float, delegations: int, prices: PriceTable, think_mb: dict[str, int]
) -> dict[str, Any]:
    """$ per 1M delegations when each think waits `latency` seconds on the model: the measured cost plus that wait's
    Lambda duration (thinks per delegation x seconds x the think function's GB x the GB-s price). The local model
    thinks in 0 ms, so the measured cost holds none of it."""
    thinks = {
        fn.split("/", 1)[0]: count
        for fn, count in per_turn["lambda_invocations"].items()
        if fn.endswith("/" + topology.THINK_HANDLER)
    }
    per_second = sum(count * think_mb.get(agent, MEMORY_MB) / 1024 for agent, count in thinks.items())
    per_second_usd = per_second * prices.lambda_gb_second * 1e6 / delegations
    return {
        "thinks_per_delegation": round(sum(thinks.values()) / delegations, 3),
        "think_memory_mb": think_mb,
        "model_second_usd_per_million_delegations": round(per_second_usd, 2),
        "total_usd_per_million_delegations": {
            f"{s}s": round(total_per_million + s * per_second_usd, 2) for s in MODEL_LATENCIES_S
        },
    }


def round_trip_report(
    run_: dict[str, Any], prices: PriceTable, delegations: int, opts: StackOptions | None = None
) -> dict[str, Any]:
    n = run_["round_trips"]
    per = run_["tally"].divided(n)
    opts = opts or StackOptions()
    peer = Tally.of(run_["records"], sizes=run_["sizes"], memory_mb=memory_mb(opts, WORKER), agents=[WORKER])
    peer.log_bytes = run_["log_bytes_by_agent"][WORKER]
    # The comparison models: the same measured turns, done another way.
    common: dict[str, Any] = dict(
        delegator=DELEGATOR,
        records=run_["records"],
        peer_tally=peer.divided(n),
        delegations=delegations,
        round_trips=n,
        sizes=run_["sizes"],
        memory_mb=memory_mb(opts, DELEGATOR),
        log_bytes_delegator=run_["log_bytes_by_agent"][DELEGATOR] / n,
        prices=prices,
    )
    sfn = stepfunctions.model(**common)
    lean = stepfunctions.lean_model(**common)
    durable_ = durable.model(**common, checkpoint_bytes=run_.get("conversation_bytes", 0.0))
    costs = per.cost(prices)
    per_turn = per.to_dict(prices)
    cost = {k: round(v * 1e6 / delegations, 2) for k, v in costs.items()}
    think_mb = {agent: think_memory_mb(opts, agent) for agent in (DELEGATOR, WORKER)}
    waiting = at_model_latency(per_turn, cost["total"], delegations, prices, think_mb)
    return {
        "round_trips": n,
        "delegations_per_turn": delegations,
        "turns_that_timed_out": run_["timed_out"],
        "per_turn": per_turn,
        "cost_per_million_delegations_usd": cost,
        "cost_at_model_latency": waiting,
        # The same counts on each front door: only API Gateway's line changes (the user talks to the delegator).
        "cost_by_front_door": doors.by_front_door(
            per.gateway,
            cost["total"],
            delegations,
            prices,
            user_agents=[DELEGATOR],
            at_model_latency=waiting["total_usd_per_million_delegations"],
        ),
        "moto_recorder_check": run_["moto_recorder_check"],
        "step_functions_variant": sfn,
        "step_functions_lean_variant": lean,
        "durable_functions_variant": durable_,
    }
