"""The composition root's smallest part: the agent's DynamoDB table (one store, one client) and the peer
registry on it.

flightdeck.wiring builds every other port on top of these. A function that reads the registry alone (the
peer authorizer, flightdeck.handlers.peer_authorizer) imports this module instead of the whole wiring, so its
cold start loads none of the queues', peers' or cards' adapters (issue 42).
"""

from __future__ import annotations

import functools

from flightdeck.adapters.dynamo.store import StateStore
from flightdeck.adapters.peer_registry import PeerRegistry
from flightdeck.settings import get_settings


@functools.lru_cache(maxsize=1)
def state_store() -> StateStore:
    """The agent's DynamoDB state (one table, one client): every state port of flightdeck.wiring.deps(), and the
    index and registry adapters that share its table."""
    settings = get_settings()
    # The stream starts owed thinks: their marks stay out of the deadline index (ARCHITECTURE §3).
    return StateStore(settings.state_table, owed_in_index=settings.think_start == "writer")


@functools.lru_cache(maxsize=1)
def peer_registry() -> PeerRegistry:
    """Peers that may call us: hashes in the same table, through the same client (flightdeck.domain.peers)."""
    store = state_store()
    return PeerRegistry(get_settings().state_table, client_factory=lambda: store.client, clock=store.now_ms)


def reset() -> None:
    """Forget the store and the registry (tests change the environment between cases)."""
    peer_registry.cache_clear()
    state_store.cache_clear()
