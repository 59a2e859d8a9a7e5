"""StateStore: the one object flightdeck.wiring hands in as every state port (flightdeck.domain.ports)."""

from __future__ import annotations

from flightdeck.adapters.dynamo.dispatch import DispatchStore
from flightdeck.adapters.dynamo.iterations import IterationStore
from flightdeck.adapters.dynamo.liveness import LivenessStore
from flightdeck.adapters.dynamo.sessions import SessionStore
from flightdeck.adapters.dynamo.turns import TurnStore


class StateStore(SessionStore, IterationStore, TurnStore, LivenessStore, DispatchStore):
    """All of one agent's DynamoDB state: each port's store over the one table (flightdeck.adapters.dynamo.table)."""
