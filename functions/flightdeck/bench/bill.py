"""The whole bill of a delegation (issue 37): the plumbing, the model's wait, and the model's tokens, per 1M delegations.

At messages N (the user's N-th message of one session, each delegating once to the worker) and a model latency of
L seconds per think, for two designs:

- baseline: today's before issue 37: no prompt cache, the think function at 512 MB, the whole history sent;
- default: what ships: cache points where the priced model takes them, the think function at its default memory.

infra is the measured plumbing of the REST door (round_trip_one); model_wait is each think's function waiting L s
(thinks per delegation x L x GB x the GB-s price); tokens are the round trip's three thinks at message N (the
delegator's two, the worker's one), as the local model bills the requests by Bedrock's rules
(flightdeck.domain.prompt_cache), priced at the named model's list prices (flightdeck.domain.model_prices). The
conversation is played through the local model itself, the delegator's and the worker's (their tool specs and
system prompts), one message after another, each think L s after the last: computed from the requests by the
published rules, not measured on Bedrock.
"""

from __future__ import annotations

from typing import Any

from flightdeck.bench.prices import PriceTable
from flightdeck.bench.roles import DELEGATOR, MEMORY_MB, WORKER
from flightdeck.config_models import DeploySection
from flightdeck.domain import prompt_cache
from flightdeck.domain.agent import AgentDefinition, DelegateTool, ModelConfig
from flightdeck.domain.model import Message
from flightdeck.domain.model_prices import BILLED_AS, ModelPrice, price_of
from flightdeck.domain.records import ResultSource, ToolResult
from flightdeck.domain.scripted_model import ScriptedModel
from flightdeck.domain.token_use import TokenUse
from flightdeck.domain.toolbox import tool_specs

MESSAGES = (1, 10, 50, 200)
LATENCIES_S = (1, 5)
THINKS_PER_DELEGATION = 3  # the delegator's two (delegate, answer), the worker's one
BASELINE_THINK_MB = MEMORY_MB
# Between a message's answer and the next message (the user reads, then writes): well inside the cache's 5 minutes.
USER_PAUSE_MS = 5_000


def billed_model() -> ModelPrice:
    """The model the bill plays the conversation as: the one the local model bills as, at its list prices."""
    price = price_of(BILLED_AS)
    if price is None:
        raise ValueError(f"the model price table has no {BILLED_AS}")
    return price


class _Clock:
    def __init__(self) -> None:
        self.ms = 1_700_000_000_000

    def __call__(self) -> int:
        return self.ms


def round_trips(
    model_id: str, caching: bool, latency_s: float, at: tuple[int, ...] = MESSAGES
) -> dict[int, list[dict[str, int]]]:
    """The usages of the three thinks of the round trip at each message in `at`: one session on the delegator, every
    message delegating once to the worker (a session of its own), played through the local model."""
    clock, ledger = _Clock(), prompt_cache.MemoryLedger()
    config = ModelConfig(model_id=model_id, prompt_cache=caching)
    delegator = AgentDefinition(name=DELEGATOR, delegates=[DelegateTool(agent=WORKER)])
    worker = AgentDefinition(name=WORKER)
    models = {a.name: ScriptedModel(config, a, ledger=ledger, clock_ms=clock) for a in (delegator, worker)}

    def think(agent: AgentDefinition, messages: list[Message]) -> Any:
        reply = models[agent.name].converse(system=agent.system_prompt, messages=messages, tools=tool_specs(agent))
        clock.ms += int(latency_s * 1000)
        return reply

    history: list[Message] = []
    out: dict[int, list[dict[str, int]]] = {}
    for n in range(1, max(at) + 1):
        history.append({"role": "user", "content": [{"text": f"@{WORKER} check the figures of report {n}"}]})
        asked = think(delegator, history)
        history.append(asked.message)
        use = asked.tool_uses[0]
        done = think(worker, [{"role": "user", "content": [{"text": str(use["input"]["task"])}]}])
        history.append(
            {
                "role": "user",
                "content": [ToolResult(use["toolUseId"], "success", done.text, ResultSource.CALLBACK).as_block()],
            }
        )
        answered = think(delegator, history)
        history.append(answered.message)
        if n in at:
            out[n] = [asked.usage, done.usage, answered.usage]
        clock.ms += USER_PAUSE_MS
    return out


def measure(
    round_trip_one: dict[str, Any], prices: PriceTable, think_rss_mb: float = 0.0, at: tuple[int, ...] = MESSAGES
) -> dict[str, Any]:
    """The `bill` section: round_trip_one is the bench's one-delegation round trip report (its infra); think_rss_mb
    the think sandboxes' peak resident memory the conversation measured (why the default memory suffices)."""
    model = billed_model()
    infra = float(round_trip_one["cost_per_million_delegations_usd"]["total"])
    memory = {"baseline": BASELINE_THINK_MB, "default": DeploySection.model_fields["think_memory_mb"].default}
    out: dict[str, Any] = {"model": model.model, "think_memory_mb": memory, "think_peak_rss_mb": think_rss_mb}
    # Uncached, the requests bill the same at any latency: one conversation for the baseline.
    uncached = round_trips(model.model, False, LATENCIES_S[0], at)
    tokens_at = {f"baseline.{latency}": uncached for latency in LATENCIES_S}
    tokens_at.update({f"default.{latency}": round_trips(model.model, True, latency, at) for latency in LATENCIES_S})
    for n in at:
        for latency in LATENCIES_S:
            row: dict[str, Any] = {}
            for design in ("baseline", "default"):
                usages = tokens_at[f"{design}.{latency}"][n]
                wait = THINKS_PER_DELEGATION * latency * memory[design] / 1024 * prices.lambda_gb_second * 1e6
                tokens = sum(model.usd(TokenUse.of_usage(u)) for u in usages) * 1e6
                row[design] = {
                    "infra": round(infra, 2),
                    "model_wait": round(wait, 2),
                    "tokens": round(tokens, 2),
                    "total": round(infra + wait + tokens, 2),
                    "token_counts": _summed(usages),
                }
            row["default_to_baseline"] = round(row["default"]["total"] / row["baseline"]["total"], 4)
            out.setdefault(f"message_{n}", {})[f"latency_{latency}s"] = row
    out["prices"] = {"model": model.model, "recorded": model.recorded, "per_million_tokens": model.per_million}
    out["note"] = _note(out, model)
    return out


def _summed(usages: list[dict[str, int]]) -> dict[str, int]:
    keys = {"input": "inputTokens", "output": "outputTokens"}
    keys.update(cache_read="cacheReadInputTokens", cache_write="cacheWriteInputTokens")
    return {k: sum(u.get(v, 0) for u in usages) for k, v in keys.items()}


def _note(bill: dict[str, Any], model: ModelPrice) -> str:
    at50 = bill.get("message_50", {}).get("latency_5s")
    head = (
        f"$ per 1M delegations; tokens at {model.name}'s Bedrock list prices "
        f"(${model.per_million['input']}/M input, ${model.per_million['cache_read']}/M cache read, "
        f"${model.per_million['cache_write']}/M cache write, ${model.per_million['output']}/M output; "
        f"recorded {model.recorded}), counted by the local model by Bedrock's published caching rules "
        "(estimated tokens: bytes / 4), not measured on Bedrock. "
    )
    if not at50:
        return head
    b, d = at50["baseline"], at50["default"]
    return head + (
        f"At message 50 and 5 s: the baseline sends {b['token_counts']['input']} input tokens a round trip, all at "
        f"the input price (${b['tokens']}); the default reads {d['token_counts']['cache_read']} of them from the "
        f"cache (the history up to the previous think's last message, and the delegator's first think's request in "
        f"its second), writes {d['token_counts']['cache_write']} and pays input for {d['token_counts']['input']} "
        f"(${d['tokens']}, output {d['token_counts']['output']} tokens the same in both); the think at "
        f"{bill['think_memory_mb']['default']} MB halves the wait (${b['model_wait']} -> ${d['model_wait']}). "
        f"default/baseline {at50['default_to_baseline']:.1%}."
    )
