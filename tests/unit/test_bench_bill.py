"""The bench's whole bill (issue 37): its shape, its sums, and the target the issue sets."""

from __future__ import annotations

import pytest

from flightdeck.bench import bill
from flightdeck.bench.prices import load
from flightdeck.domain.token_use import TokenUse

INFRA = {"cost_per_million_delegations_usd": {"total": 30.4}}


@pytest.fixture(scope="module")
def section():
    return bill.measure(INFRA, load(), think_rss_mb=90.0, at=(1, 50))


def test_the_named_models_prices_price_a_request():
    prices = bill.billed_model()
    assert prices.model == "anthropic.claude-sonnet-4-20250514-v1:0" and prices.recorded
    usage = {"inputTokens": 1000, "outputTokens": 100, "cacheReadInputTokens": 10_000, "cacheWriteInputTokens": 200}
    # $3/M input, $15/M output, $0.30/M cache read, $3.75/M cache write
    assert prices.usd(TokenUse.of_usage(usage)) == pytest.approx((3_000 + 1_500 + 3_000 + 750) / 1e6)


def test_every_cell_is_its_parts_summed(section):
    assert (section["model"], section["think_memory_mb"]) == (
        bill.billed_model().model,
        {"baseline": 512, "default": 256},
    )
    for n in ("message_1", "message_50"):
        for latency in ("latency_1s", "latency_5s"):
            for design in ("baseline", "default"):
                cell = section[n][latency][design]
                assert cell["total"] == pytest.approx(cell["infra"] + cell["model_wait"] + cell["tokens"], abs=0.02)
                assert cell["infra"] == 30.4
    # The wait: 3 thinks x 5 s x 0.5 GB (baseline) or 0.25 GB at $0.0000133334 per GB-s, per 1M delegations.
    assert section["message_50"]["latency_5s"]["baseline"]["model_wait"] == pytest.approx(100.0, abs=0.01)
    assert section["message_50"]["latency_5s"]["default"]["model_wait"] == pytest.approx(50.0, abs=0.01)


def test_the_baseline_caches_nothing_and_message_1_is_under_the_minimum(section):
    for n in ("message_1", "message_50"):
        assert section[n]["latency_5s"]["baseline"]["token_counts"]["cache_read"] == 0
    first = section["message_1"]["latency_5s"]
    assert first["default"]["token_counts"] == first["baseline"]["token_counts"]


def test_at_message_50_and_5_s_the_default_costs_at_most_a_quarter_of_the_baseline(section):
    cell = section["message_50"]["latency_5s"]
    assert cell["default"]["total"] <= 0.25 * cell["baseline"]["total"]
    counts = cell["default"]["token_counts"]
    # The history is read, not re-bought: most of the round trip's input comes from the cache.
    assert counts["cache_read"] > 10 * (counts["input"] + counts["cache_write"])
    assert "cache" in section["note"] and "message 50" in section["note"]
