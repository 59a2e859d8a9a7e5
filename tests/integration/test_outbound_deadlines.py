"""Every outbound HTTP exchange ends at its deadline, whatever the server trickles meanwhile (issue 36).

Each client here is given a short timeout and pointed at a real server on loopback that keeps its answer going for
30 s, a few bytes every 0.1 s. The call must end with its own timeout error, and the server must see the
connection closed. Whether the server was still trickling when the call returned is what says the client was
not held (an event the server sets when it finishes, not a clock)."""

from __future__ import annotations

import pytest

from flightdeck.adapters import peer_reads
from flightdeck.adapters.a2a_http import A2AHttp
from flightdeck.adapters.http_peers import Peers
from flightdeck.adapters.mcp_http import McpHttp
from tests.support.trickle import KEEP_ALIVE, PROGRESS, Trickle, trickling

DEADLINE_S = 1.0
HUNG_UP_S = 30.0  # how long a test waits for the server to see the hang-up (it comes at once)
JSON_SPACE = b" "  # whitespace before a JSON value: still a valid answer, were it ever to end


def _not_held(trickle: Trickle) -> None:
    assert not trickle.finished.is_set(), "the call lasted as long as the server's trickle"
    assert trickle.closed.wait(HUNG_UP_S), "the server never saw the connection closed"


@pytest.mark.parametrize(
    "trickle",
    [
        Trickle(beat=KEEP_ALIVE),  # SSE comments, the body ending only when the connection does
        Trickle(beat=PROGRESS, framing="chunked"),  # progress notifications, one chunk each
        Trickle(framing="chunk-size"),  # a chunk's size line, a digit at a time: a read waiting inside HTTP
        Trickle(framing="headers"),  # a header, a letter at a time: the answer's headers never end
    ],
    ids=["keep-alives", "progress-notifications", "slow-chunk-framing", "slow-headers"],
)
def test_an_mcp_server_cannot_hold_a_call_past_its_timeout(trickle):
    with trickling(trickle):
        exchange = McpHttp().list_tools(trickle.url + "/mcp", None, DEADLINE_S)
        assert exchange.outcome == "timeout", exchange
        _not_held(trickle)


def test_an_mcp_answer_amid_a_stream_that_stays_open_is_read_at_once():
    """The answer's event (its end in a later read than the rest) ends the read; what follows is not waited for."""
    answer = b'data: {"jsonrpc":"2.0","id":1,"result":{"tools":[]}}\r\n\r\n'
    opening = (PROGRESS, answer[:-1], answer[-1:])
    with trickling(Trickle(beat=KEEP_ALIVE, opening=opening)) as trickle:
        exchange = McpHttp().list_tools(trickle.url + "/mcp", None, timeout_s=10 * DEADLINE_S)
        assert (exchange.outcome, exchange.result) == ("ok", {"tools": []}), exchange
        _not_held(trickle)


def test_a_json_mcp_answer_trickled_as_whitespace_is_a_timeout():
    with trickling(Trickle(content_type="application/json", beat=JSON_SPACE)) as trickle:
        exchange = McpHttp().call_tool(trickle.url + "/mcp", None, "search", {"query": "owl"}, DEADLINE_S)
        assert exchange.outcome == "timeout", exchange
        _not_held(trickle)


@pytest.mark.parametrize("framing", ["close", "headers"])
def test_a_peer_cannot_hold_a_post_past_its_timeout(framing):
    """Peers.post_json carries every A2A client call, push delivery, callbacks and dispatch."""
    with trickling(Trickle(content_type="application/json", beat=JSON_SPACE, framing=framing)) as trickle:
        answer = Peers(DEADLINE_S).post_json(trickle.url + "/a2a", {"jsonrpc": "2.0", "id": 1, "method": "x"})
        assert (answer.status, answer.body) == (0, None) and answer.error.startswith("Timeout"), answer
        _not_held(trickle)


def test_a_card_served_as_a_trickle_is_a_timeout():
    with trickling(Trickle(content_type="application/json", beat=JSON_SPACE)) as trickle:
        answer = A2AHttp(DEADLINE_S).get_json(trickle.url + "/.well-known/agent-card.json")
        assert (answer.status, answer.body) == (0, None) and answer.error.startswith("Timeout"), answer
        _not_held(trickle)


def test_the_consoles_lane_read_of_a_delegate_that_streams_forever_is_a_timeout():
    """A delegate that follows its timeline (keep-alives) where the console asked for it as it stands."""
    with trickling(Trickle(beat=KEEP_ALIVE, framing="chunked")) as trickle:
        answer = peer_reads.get(trickle.url + "/api/sessions/s/events?follow=false", {}, timeout_s=DEADLINE_S)
        assert (answer.status, answer.body) == (0, None) and answer.error.startswith("Timeout"), answer
        _not_held(trickle)


def test_the_inspectors_relay_to_a_trickling_agent_is_a_timeout():
    with trickling(Trickle(content_type="application/json", beat=JSON_SPACE)) as trickle:
        answer = peer_reads.post_json(trickle.url + "/a2a", {"jsonrpc": "2.0"}, {}, timeout_s=DEADLINE_S)
        assert (answer.status, answer.body) == (0, None) and answer.error.startswith("Timeout"), answer
        _not_held(trickle)


def test_an_answer_that_comes_within_the_deadline_is_read_whole_and_its_connection_reused():
    """The deadline's reading leaves a prompt answer as it was: read to its end, the connection kept."""
    with trickling(Trickle(content_type="application/json", beat=b"[1, 2, 3]", beats=1, framing="chunked")) as t:
        peers = Peers(DEADLINE_S * 10)
        first = peers.post_json(t.url + "/a2a", {})
        second = peers.post_json(t.url + "/a2a", {})
        assert (first.status, first.body, second.body) == (200, [1, 2, 3], [1, 2, 3])
        [(_, port), (_, again)] = t.requests
        assert port == again and not t.closed.is_set()


def test_a_session_of_another_kind_is_still_cut_off_mid_body():
    """A requests.Session handed in (not flightdeck's own, whose connections join the exchange) is watched from
    its answer's headers on."""
    import requests

    with trickling(Trickle(beat=KEEP_ALIVE)) as trickle:
        exchange = McpHttp(requests.Session()).list_tools(trickle.url + "/mcp", None, DEADLINE_S)
        assert exchange.outcome == "timeout", exchange
        _not_held(trickle)
