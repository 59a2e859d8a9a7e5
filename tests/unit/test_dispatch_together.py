"""A think's delegations are dispatched together (issue 37), each recorded once, as one alone is."""

from __future__ import annotations

import threading

from flightdeck.domain.dispatch import peer_session_id
from tests.fakes.model import call, calls
from tests.fakes.outbound import PeerReply
from tests.fakes.world import AGENT, WORKER_URL, world

K = 20


def test_twenty_delegations_of_one_think_are_in_flight_together_and_each_is_sent_once():
    w = world(max_tools_per_turn=K)
    # The worker answers none of them until every one has arrived: sent one after another, the first would
    # wait alone (the barrier breaks on its timeout, a failed send) and the test fails.
    arrived = threading.Barrier(K, timeout=60)

    def together(post):
        arrived.wait()
        return PeerReply(202, {"status": "accepted"})

    w.peers.answer(f"{WORKER_URL}/api/chat", together)
    uses = [call("ask_worker", f"tu-{i:02d}", task=f"part {i}") for i in range(K)]
    w.model.says(calls(*uses))
    sid = w.message("do it in twenty parts").session_id
    assert w.think(sid, 1) == "tool_use"
    sessions = sorted(p.body["session_id"] for p in w.peers.to(f"{WORKER_URL}/api/chat"))
    assert sessions == sorted(peer_session_id(AGENT, sid, f"tu-{i:02d}") for i in range(K))
    assert not arrived.broken
    assert w.queues.dispatches == []  # none failed over to the queue
    # A redelivered think sends them again with the same sessions and tokens (each a replay at the peer).
    assert w.think(sid, 1) == "tool_use"
    again = [p.body for p in w.peers.to(f"{WORKER_URL}/api/chat")][K:]
    first = {p.body["session_id"]: p.body["reply"]["bearerToken"] for p in w.peers.to(f"{WORKER_URL}/api/chat")[:K]}
    assert {b["session_id"]: b["reply"]["bearerToken"] for b in again} == first
