"""The dated price table (prices-us-east-1.json next to this module)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from importlib import resources
from typing import Any

PRICE_FILE = "prices-us-east-1.json"
REQUIRED = (
    "apigateway_rest_per_million_requests",
    "apigateway_http_per_million_requests",
    "lambda_function_url_per_million_requests",
    "lambda_per_million_requests",
    "lambda_arm64_per_gb_second",
    "sqs_standard_per_million_requests",
    "sqs_fifo_per_million_requests",
    "dynamodb_on_demand_per_million_write_request_units",
    "dynamodb_on_demand_per_million_read_request_units",
    "secretsmanager_per_10k_api_calls",
    "stepfunctions_standard_per_1k_state_transitions",
    "cloudwatch_logs_ingestion_per_gb",
    "lambda_durable_per_million_operations",
    "lambda_durable_data_written_per_gb",
    "lambda_durable_data_retained_per_gb_month",
)


@dataclass(frozen=True)
class PriceTable:
    region: str
    recorded: str
    prices: dict[str, float]
    raw: dict[str, Any]

    def __getitem__(self, name: str) -> float:
        return self.prices[name]

    # Dollars for one unit of each thing the benchmark counts.
    @property
    def apigateway_request(self) -> float:
        return self["apigateway_rest_per_million_requests"] / 1e6

    @property
    def http_api_request(self) -> float:
        return self["apigateway_http_per_million_requests"] / 1e6

    @property
    def function_url_request(self) -> float:
        return self["lambda_function_url_per_million_requests"] / 1e6

    @property
    def lambda_request(self) -> float:
        return self["lambda_per_million_requests"] / 1e6

    @property
    def lambda_gb_second(self) -> float:
        return self["lambda_arm64_per_gb_second"]

    @property
    def sqs_standard_request(self) -> float:
        return self["sqs_standard_per_million_requests"] / 1e6

    @property
    def sqs_fifo_request(self) -> float:
        return self["sqs_fifo_per_million_requests"] / 1e6

    @property
    def dynamodb_wru(self) -> float:
        return self["dynamodb_on_demand_per_million_write_request_units"] / 1e6

    @property
    def dynamodb_rru(self) -> float:
        return self["dynamodb_on_demand_per_million_read_request_units"] / 1e6

    @property
    def secrets_call(self) -> float:
        return self["secretsmanager_per_10k_api_calls"] / 1e4

    @property
    def sfn_transition(self) -> float:
        return self["stepfunctions_standard_per_1k_state_transitions"] / 1e3

    @property
    def log_byte(self) -> float:
        return self["cloudwatch_logs_ingestion_per_gb"] / 1024**3

    @property
    def durable_operation(self) -> float:
        return self["lambda_durable_per_million_operations"] / 1e6

    @property
    def durable_byte_written(self) -> float:
        return self["lambda_durable_data_written_per_gb"] / 1024**3

    @property
    def durable_byte_month(self) -> float:
        return self["lambda_durable_data_retained_per_gb_month"] / 1024**3

    @property
    def assumed(self) -> tuple[str, ...]:
        """Prices the file marks as modelled assumptions rather than recorded list prices."""
        return tuple(self.raw.get("assumed") or ())


def parse(data: dict[str, Any]) -> PriceTable:
    prices = data.get("prices") or {}
    missing = [name for name in REQUIRED if not isinstance(prices.get(name), (int, float))]
    if missing:
        raise ValueError(f"price table lacks {', '.join(missing)}")
    if not data.get("recorded"):
        raise ValueError("price table has no 'recorded' date")
    unknown = [name for name in data.get("assumed") or () if name not in prices]
    if unknown:
        raise ValueError(f"price table marks unknown prices as assumed: {', '.join(unknown)}")
    return PriceTable(
        region=str(data.get("region", "")),
        recorded=str(data["recorded"]),
        prices={k: float(v) for k, v in prices.items()},
        raw=data,
    )


def load() -> PriceTable:
    text = resources.files("flightdeck.bench").joinpath(PRICE_FILE).read_text(encoding="utf-8")
    return parse(json.loads(text))
