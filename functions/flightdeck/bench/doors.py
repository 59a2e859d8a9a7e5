"""A round trip's cost by front door (deploy.front_door, docs/FRONT_DOORS.md): the counts are the same on both
doors; only who answers each HTTP request, and so API Gateway's line, changes.

REST door: every request is a REST API request ($3.50 per 1M). Lean door: a peer's request to a function with a
URL (topology.URL_HANDLERS), a callback whoever sends it and every stream go to a Lambda function URL (no charge
beyond the invocation, which is counted either way); the user's own requests to the other routes go through the
HTTP API ($1.00 per 1M).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from flightdeck import topology

from .prices import PriceTable


def lean_door_of(agent: str, route_key: str, user_agents: Iterable[str]) -> str:
    """ "function_url" or "http_api": where a request counted as `"<agent> <METHOD> <path>"` goes on the lean door.
    `user_agents`: the agents the user talks to (their non-callback requests come from the user, not a peer)."""
    method, _, path = route_key.partition(" ")
    route = topology.route_for(method, path) or topology.route_at(method, path)
    if route is None:
        return "http_api"
    if route.stream or route.auth == topology.CALLBACK_AUTH:
        return "function_url"
    if route.handler in topology.URL_HANDLERS and agent not in set(user_agents):
        return "function_url"
    return "http_api"


def by_front_door(
    gateway: Mapping[str, float],
    total_per_million: float,
    delegations: int,
    prices: PriceTable,
    user_agents: Iterable[str],
    at_model_latency: Mapping[str, float] | None = None,
) -> dict[str, Any]:
    """$ per 1M delegations on each door, from the per-turn HTTP requests (`"<agent> <METHOD> <path>"` -> count) and
    the measured total (which priced every request as a REST one)."""
    users = tuple(user_agents)
    split = {"http_api": 0.0, "function_url": 0.0}
    for key, count in gateway.items():
        agent, _, route_key = key.partition(" ")
        split[lean_door_of(agent, route_key, users)] += count
    per_million = 1e6 / delegations
    rest_line = sum(gateway.values()) * prices.apigateway_request * per_million
    lean_line = (
        split["http_api"] * prices.http_api_request + split["function_url"] * prices.function_url_request
    ) * per_million
    lean_total = total_per_million - rest_line + lean_line
    out: dict[str, Any] = {
        "http_requests_per_turn": round(sum(gateway.values()), 3),
        "lean_http_api_requests_per_turn": round(split["http_api"], 3),
        "lean_function_url_requests_per_turn": round(split["function_url"], 3),
        "rest": {"api_gateway_usd_per_million_delegations": round(rest_line, 2), "total": round(total_per_million, 2)},
        "lean": {"api_gateway_usd_per_million_delegations": round(lean_line, 2), "total": round(lean_total, 2)},
    }
    if at_model_latency:
        out["rest"]["at_model_latency"] = dict(at_model_latency)
        out["lean"]["at_model_latency"] = {k: round(v - rest_line + lean_line, 2) for k, v in at_model_latency.items()}
    return out
