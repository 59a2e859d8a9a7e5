"""The console's domain (issue 29): what an A2A card says and which version the inspector talks
(flightdeck.domain.inspector), and which delegate sessions a lane may read (flightdeck.domain.delegate_lane)."""

from __future__ import annotations

import pytest

from flightdeck.domain.agent import AgentDefinition, DelegateTool
from flightdeck.domain.delegate_lane import LaneNotReadableError, delegate_lane
from flightdeck.domain.inspector import check_card
from flightdeck.domain.records import peer_session_id

SKILL = {"id": "echo", "name": "echo", "description": "echoes", "tags": ["echo"]}
COMMON = {
    "name": "echo1",
    "description": "an echo",
    "version": "1.0.0",
    "capabilities": {},
    "defaultInputModes": ["text/plain"],
    "defaultOutputModes": ["text/plain"],
    "skills": [SKILL],
}


def test_a_v1_card_is_talked_to_in_v1_at_its_jsonrpc_interface():
    card = {
        **COMMON,
        "url": "http://a.example/v03",  # also v0.3: v1.0 wins
        "supportedInterfaces": [
            {"url": "http://a.example/grpc", "protocolBinding": "GRPC", "protocolVersion": "1.0"},
            {"url": "http://a.example/a2a", "protocolBinding": "JSONRPC", "protocolVersion": "1.0"},
        ],
    }
    found = check_card(card)
    assert (found.version, found.rpc_url, found.problems) == ("1.0", "http://a.example/a2a", [])


def test_a_v03_card_is_talked_to_at_its_url_unless_it_prefers_another_transport():
    found = check_card({**COMMON, "url": "http://a.example/a2a", "protocolVersion": "0.3.0"})
    assert (found.version, found.rpc_url, found.problems) == ("0.3", "http://a.example/a2a", [])
    found = check_card({**COMMON, "url": "http://a.example/a2a", "preferredTransport": "GRPC"})
    assert found.version == "" and found.problems == ["no JSON-RPC interface of A2A v1.0 or v0.3 is offered"]


def test_what_a_card_lacks_is_named():
    card = {"name": 7, "skills": [{"id": "x"}, "nope"], "url": "http://a.example/a2a"}
    found = check_card(card)
    assert found.version == "0.3"
    assert found.problems == [
        "`name` is not a string",
        "`description` is missing",
        "`version` is missing",
        "`capabilities` is missing",
        "`defaultInputModes` is missing",
        "`defaultOutputModes` is missing",
        "skills[0].`name` is missing or not a string",
        "skills[0].`description` is missing or not a string",
        "skills[0].`tags` is missing or not a list",
        "skills[1] is not an object",
    ]
    assert check_card(["not", "a", "card"]).problems == ["the card is not a JSON object"]


def test_a_lane_is_the_session_derived_from_the_call_at_one_of_our_delegates_only():
    agent = AgentDefinition(
        name="orchestrator",
        delegates=[
            DelegateTool(agent="worker", service="workers"),
            DelegateTool(agent="echo", protocol="a2a", card_url="http://a.example/.well-known/agent-card.json"),
        ],
    )
    lane = delegate_lane(agent, "s-1", "tooluse_1", "worker")
    assert (lane.service, lane.peer_session_id) == ("workers", peer_session_id("orchestrator", "s-1", "tooluse_1"))
    assert delegate_lane(agent, "s-2", "tooluse_1", "worker").peer_session_id != lane.peer_session_id
    for other in ("echo", "critic"):
        with pytest.raises(LaneNotReadableError):
            delegate_lane(agent, "s-1", "tooluse_1", other)


def test_a_card_url_is_a_base_url_and_a_card_path_and_nothing_else():
    from flightdeck.domain.inspector import is_card_url

    for url in (
        "http://h/.well-known/agent-card.json",
        "https://h:8443/agents/echo/.well-known/agent-card.json",
        "http://h/.well-known/agent.json",
    ):
        assert is_card_url(url), url
    for url in (
        "http://h/",
        "http://h/admin",
        "http://h/.well-known/agent-card.json?x=1",
        "http://h/.well-known/agent-card.json#x",
        "http://h/a/../.well-known/agent-card.json",
        "http://h/a%2F..%2F/.well-known/agent-card.json",
        "http://h/admin;/.well-known/agent-card.json",
        "http://h/.well-known/agent-card.json/extra",
    ):
        assert not is_card_url(url), url
