"""The bench's price of a round trip by front door (flightdeck.bench.doors): the same counts, API Gateway's line
priced per door from the dated price table, and the function URL events counted as HTTP requests."""

from __future__ import annotations

import pytest

from flightdeck.bench import counter, doors, prices
from flightdeck.local.function_url import build_function_url_event

# One delegation's HTTP requests as the bench counts them (per turn): the user's chat and polls to the delegator,
# the delegator's dispatch to the worker, the worker's answer back.
ROUND_TRIP = {
    "orchestrator POST /api/chat": 1.0,
    "orchestrator GET /api/sessions/{session_id}": 3.0,
    "worker POST /api/chat": 1.0,
    "orchestrator POST /api/tools/response": 1.0,
}


@pytest.mark.parametrize(
    "agent, route, door",
    [
        ("orchestrator", "POST /api/chat", "http_api"),  # the user's own
        ("worker", "POST /api/chat", "function_url"),  # a peer's dispatch
        ("orchestrator", "POST /api/tools/response", "function_url"),  # a callback, whoever sends it
        ("orchestrator", "POST /api/tools/responses", "function_url"),
        ("orchestrator", "GET /api/sessions/{session_id}/events", "function_url"),  # streams: URL only
        ("worker", "POST /a2a", "function_url"),
        ("orchestrator", "GET /.well-known/agent-card.json", "http_api"),
        ("worker", "GET /api/sessions/{session_id}", "function_url"),  # a peer reading its delegate session
    ],
)
def test_which_requests_the_lean_door_sends_to_a_function_url(agent, route, door):
    assert doors.lean_door_of(agent, route, user_agents=["orchestrator"]) == door


def test_only_api_gateway_s_line_changes_between_the_doors():
    table = prices.load()
    assert (table.http_api_request, table.function_url_request) == (1.0e-6, 0.0)
    assert "lambda_function_url_per_million_requests" in table.assumed
    out = doors.by_front_door(
        ROUND_TRIP, 40.25, 1, table, user_agents=["orchestrator"], at_model_latency={"1s": 47.0, "5s": 74.0}
    )
    assert out["rest"] == {
        "api_gateway_usd_per_million_delegations": 21.0,  # 6 requests x $3.50/M
        "total": 40.25,
        "at_model_latency": {"1s": 47.0, "5s": 74.0},
    }
    # 4 HTTP API requests x $1.00/M; the dispatch and the callback at $0.
    assert out["lean"] == {
        "api_gateway_usd_per_million_delegations": 4.0,
        "total": 23.25,
        "at_model_latency": {"1s": 30.0, "5s": 57.0},
    }
    assert (out["lean_http_api_requests_per_turn"], out["lean_function_url_requests_per_turn"]) == (4.0, 2.0)
    # Five delegations in one turn share its user requests: per delegation, a fifth of the line.
    five = doors.by_front_door(ROUND_TRIP, 26.32, 5, table, user_agents=["orchestrator"])
    assert five["rest"]["api_gateway_usd_per_million_delegations"] == 4.2
    assert five["lean"]["api_gateway_usd_per_million_delegations"] == 0.8


def test_a_function_url_event_is_counted_as_an_http_request_on_its_route():
    event = build_function_url_event(
        method="GET",
        raw_path="/api/sessions/s-1",
        query_string="",
        headers=[],
        body=b"",
        source_ip="127.0.0.1",
        url_id="abc",
    )
    assert counter.event_source(event) == ("http", 1, "GET /api/sessions/{session_id}")
