"""What a model's tokens cost at its list price: the one price table (model_prices.json beside this module: per
model id, its prices per million tokens, the date they were recorded and their sources).

The console's and the chat client's cost per think and per task (the timeline's `cost_usd`) and the bench's
bill (flightdeck.bench.bill) price tokens here. An estimate: the list price of on-demand tokens in the table's
region, not what an account is billed (no discount, no free tier, no other region).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

from flightdeck.domain.agent import ModelConfig
from flightdeck.domain.token_use import TokenUse

PRICE_FILE = "model_prices.json"
# The Bedrock model the local model bills as when its model_id names none (its caching rules and its prices).
BILLED_AS = "anthropic.claude-sonnet-4-20250514-v1:0"
KINDS = ("input", "output", "cache_read", "cache_write")
# A geographic cross-Region inference profile ("us.anthropic..."): standard pricing, the model's own (Bedrock's
# docs); a global profile ("global.") is priced otherwise and is not in the table.
_GEOGRAPHIC_PROFILE = re.compile(r"^(us|us-gov|eu|apac|jp|au|ca)\.")


@dataclass(frozen=True)
class ModelPrice:
    model: str
    name: str
    region: str
    recorded: str
    per_million: dict[str, float]  # dollars per million tokens of each of KINDS

    def usd(self, used: TokenUse) -> float:
        """The tokens' dollars (rounded to 10 decimals: no float noise in what the API sends)."""
        dollars = (
            used.input * self.per_million["input"]
            + used.output * self.per_million["output"]
            + used.cache_read * self.per_million["cache_read"]
            + used.cache_write * self.per_million["cache_write"]
        ) / 1e6
        return round(dollars, 10)

    def basis(self) -> dict[str, str]:
        """Which prices: the timeline's `price` next to each `cost_usd`."""
        return {"model": self.model, "region": self.region, "recorded": self.recorded}


def parse(data: dict[str, Any]) -> dict[str, ModelPrice]:
    table: dict[str, ModelPrice] = {}
    for entry in data["models"]:
        per_million = {k: float(entry["per_million_tokens"][k]) for k in KINDS}
        if not entry.get("recorded"):
            raise ValueError(f"{entry['model']}: no 'recorded' date")
        table[entry["model"]] = ModelPrice(
            entry["model"], entry.get("name", entry["model"]), data["region"], entry["recorded"], per_million
        )
    return table


@cache
def table() -> dict[str, ModelPrice]:
    text = resources.files("flightdeck.domain").joinpath(PRICE_FILE).read_text(encoding="utf-8")
    return parse(json.loads(text))


def price_of(model_id: str) -> ModelPrice | None:
    """The model's list price, or a geographic profile's of it; None for any other id (an ARN, a global profile,
    a model the table lacks)."""
    prices = table()
    return prices.get(model_id) or prices.get(_GEOGRAPHIC_PROFILE.sub("", model_id, count=1))


def priced_model(config: ModelConfig) -> str:
    """The model id an agent's tokens are priced as: its Bedrock model, or the one the local model bills as."""
    if config.provider == "local":
        return config.model_id or BILLED_AS
    return config.model_id
