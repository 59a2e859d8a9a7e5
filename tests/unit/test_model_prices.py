"""The one model price table (flightdeck.domain.model_prices) and the timeline's cost per think and per task."""

from __future__ import annotations

import pytest

from flightdeck.domain.agent import AgentDefinition, DelegateTool, ModelConfig
from flightdeck.domain.model_prices import BILLED_AS, price_of, priced_model, table
from flightdeck.domain.records import Session, Stamp
from flightdeck.domain.timeline import derive
from flightdeck.domain.token_use import TokenUse

SONNET_4 = "anthropic.claude-sonnet-4-20250514-v1:0"


def test_every_price_is_dated_and_sourced():
    assert table() and SONNET_4 in table()
    for price in table().values():
        assert price.recorded and price.region == "us-east-1"
        assert set(price.per_million) == {"input", "output", "cache_read", "cache_write"}


def test_a_think_costs_its_tokens_at_the_list_price():
    # Claude Sonnet 4: $3/M input, $15/M output, $0.30/M cache read, $3.75/M cache write.
    price = price_of(SONNET_4)
    assert price is not None
    used = TokenUse(input=1000, output=100, cache_read=10_000, cache_write=200)
    assert price.usd(used) == 0.00825  # (3,000 + 1,500 + 3,000 + 750) / 1M


@pytest.mark.parametrize(
    ("model_id", "priced"),
    [
        (SONNET_4, True),
        ("us." + SONNET_4, True),  # a geographic profile: standard pricing
        ("eu." + SONNET_4, True),
        ("global." + SONNET_4, False),  # priced otherwise: not in the table
        ("anthropic.claude-3-5-haiku-20241022-v1:0", False),
        (f"arn:aws:bedrock:us-east-1::foundation-model/{SONNET_4}", False),
    ],
)
def test_which_model_ids_have_a_price(model_id, priced):
    assert (price_of(model_id) is not None) is priced


def test_the_local_model_is_priced_as_the_model_it_bills_as():
    assert priced_model(ModelConfig()) == BILLED_AS == SONNET_4
    assert priced_model(ModelConfig(provider="local", model_id="us." + SONNET_4)) == "us." + SONNET_4
    assert priced_model(ModelConfig(provider="bedrock", model_id="amazon.nova-pro-v1:0")) == "amazon.nova-pro-v1:0"


def _delegating_turn(model: ModelConfig) -> dict[str, dict]:
    """A completed turn: a think that delegates (100 in, 20 out, 1,000 written to the cache), the answer, and a
    think that answers (50 in, 30 out, 1,000 read from the cache)."""
    agent = AgentDefinition(name="a", model=model, delegates=[DelegateTool(agent="worker")])
    use = {"toolUseId": "t0", "name": "ask_worker", "input": {"task": "x"}}
    result = {"toolResult": {"toolUseId": "t0", "status": "success", "content": [{"text": "done"}]}}
    messages = [
        {"role": "user", "content": [{"text": "go"}]},
        {"role": "assistant", "content": [{"toolUse": use}]},
        {"role": "user", "content": [result]},
        {"role": "assistant", "content": [{"text": "all done"}]},
    ]
    stamps = (
        Stamp(at=1_000),
        Stamp(at=1_900, started=1_100, tokens_in=100, tokens_out=20, cache_write=1_000, dispatched=2_000),
        Stamp(at=3_000),
        Stamp(at=3_900, started=3_100, tokens_in=50, tokens_out=30, cache_read=1_000),
    )
    session = Session("s", "idle", 2, messages, stamps=stamps, updated_at=4_000)
    return {"idle" if e.kind == "idle" else e.id: e.data for e in derive(session, [], agent)}


def test_the_timeline_carries_each_thinks_cost_and_the_tasks():
    events = _delegating_turn(ModelConfig())
    price = {"model": SONNET_4, "region": "us-east-1", "recorded": table()[SONNET_4].recorded}
    first, second = events["think.1"], events["think.2"]
    # 100 x $3 + 20 x $15 + 1,000 x $3.75 = $0.00435; 50 x $3 + 30 x $15 + 1,000 x $0.30 = $0.0009 (per 1M).
    assert (first["model"], first["cost_usd"], first["price"]) == (SONNET_4, 0.00435, price)
    assert (second["cost_usd"], second["price"]) == (0.0009, price)
    # The task (the answer: its turn's thinks) and the session (idle): the thinks summed.
    assert (events["answer.2"]["cost_usd"], events["answer.2"]["model"]) == (0.00525, SONNET_4)
    assert events["idle"]["cost_usd"] == 0.00525 and events["idle"]["price"] == price


def test_a_model_the_table_lacks_is_named_without_a_cost():
    events = _delegating_turn(ModelConfig(provider="bedrock", model_id="amazon.nova-pro-v1:0"))
    for key in ("think.1", "think.2", "answer.2", "idle"):
        assert events[key]["model"] == "amazon.nova-pro-v1:0"
        assert "cost_usd" not in events[key] and "price" not in events[key]
