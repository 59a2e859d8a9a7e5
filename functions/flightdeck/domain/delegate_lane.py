"""A delegate's own session, read for the owner of the session that delegated (the console's lanes).

The delegate's session belongs to this agent (the delegator), never to the user, so the user's token opens
nothing at the delegate. This agent reads it with its own peer token, for the owner of the delegating session
only: the session the call ran in is derived from this agent, that session and the call
(flightdeck.domain.records.peer_session_id), so a caller can only ever name a delegate session that one of
its own sessions started. Nothing is granted that the two owners do not already hold.
"""

from __future__ import annotations

from dataclasses import dataclass

from flightdeck.domain.agent import AgentDefinition
from flightdeck.domain.records import peer_session_id


class LaneNotReadableError(LookupError):
    """The delegate is not one of our agents of this agent's definition: only its answer shows."""


@dataclass(frozen=True)
class Lane:
    service: str  # the delegate's name in ALLOWED_HOST_MAPPING (where its API lives, and our token's key)
    peer_session_id: str


def delegate_lane(agent: AgentDefinition, session_id: str, tool_use_id: str, delegate_agent: str) -> Lane:
    """Where the delegate of this call keeps its session; LaneNotReadableError for an agent this one does not
    delegate to, or one reached by another protocol (an A2A peer's task is not ours to read)."""
    delegate = next((d for d in agent.delegates if d.agent == delegate_agent), None)
    if delegate is None or delegate.protocol != "flightdeck":
        raise LaneNotReadableError(delegate_agent)
    return Lane(delegate.peer_service, peer_session_id(agent.name, session_id, tool_use_id))
