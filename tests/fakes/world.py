"""One agent's Deps on in-memory fakes, and a fake clock: the domain's use cases run with no AWS and no sockets."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from flightdeck.domain import think_claim
from flightdeck.domain.agent import AgentDefinition, DelegateTool
from flightdeck.domain.allowlist import Allowlist
from flightdeck.domain.chat import Accepted, ReplyRequest, ingest_chat
from flightdeck.domain.config import DomainSettings
from flightdeck.domain.ports import Deps, state_ports
from flightdeck.domain.records import Session
from flightdeck.domain.tokens import SigningKey
from flightdeck.domain.turn_loop import run_turn
from flightdeck.settings import Settings
from tests.fakes.model import ScriptedModel
from tests.fakes.outbound import FakePeers, FakeQueues, FakeThinks
from tests.fakes.state import MemoryState

AGENT = "orchestrator"
WORKER_URL = "http://worker.test"
CALLER_URL = "http://caller.test"
SECRET = b"fake-world-callback-secret-0123456789"
# Resource names a Settings needs and the domain never sees.
_ENVIRONMENT = {
    "STATE_TABLE": "unused-table",
    "TURN_WORKER_FUNCTION": "unused",
    "TURNS_QUEUE_URL": "unused",
    "DISPATCH_QUEUE_URL": "unused",
    "DELIVERY_QUEUE_URL": "unused",
    "TIMERS_QUEUE_URL": "unused",
    "TOOL_CALLBACK_SECRET": SECRET.decode(),
}


class FakeClock:
    """Epoch milliseconds that move only when the test says."""

    def __init__(self, now_ms: int = 1_800_000_000_000):
        self.now = now_ms

    def now_ms(self) -> int:
        return self.now

    def advance(self, ms: int) -> None:
        self.now += ms


def domain_settings(agent: AgentDefinition, allowed: dict[str, str], **overrides: Any) -> DomainSettings:
    """The slice as flightdeck.settings builds it (its defaults), for this agent, with `overrides`."""
    settings = Settings.from_env({**_ENVIRONMENT, "AGENT_NAME": agent.name}).for_domain()
    return dataclasses.replace(settings, agent=agent, allowed_host_mapping=Allowlist(dict(allowed)), **overrides)


def delegating_agent(*delegates: DelegateTool, name: str = AGENT, **fields: Any) -> AgentDefinition:
    """An agent that delegates to a worker (ask_worker) unless told which delegates it has."""
    chosen = list(delegates) or [DelegateTool(agent="worker", callback_service=name)]
    return AgentDefinition(name=name, delegates=chosen, **fields)


@dataclass
class World:
    """An agent on fakes: its state, queues, thinks, peers and model, and the Deps that hold them."""

    clock: FakeClock
    state: MemoryState
    queues: FakeQueues
    thinks: FakeThinks
    peers: FakePeers
    model: ScriptedModel
    deps: Deps
    keys: list[SigningKey] = field(default_factory=list)

    def message(self, text: str, session_id: str | None = None, *, reply_token: str = "", **kwargs: Any) -> Accepted:
        """A user message, from the peer "tester"; with reply_token, a delegation whose answer goes to "caller"."""
        reply = ReplyRequest("caller", reply_token) if reply_token else None
        kwargs.setdefault("caller", "tester")
        return ingest_chat(self.deps, text, session_id, reply=reply, **kwargs)

    def think(self, session_id: str, turn: int, attempt: int = 1) -> str:
        """The turn worker's run of one think: one that raises gives its claim back (flightdeck.domain.thinks)."""
        run = think_claim.new_run()
        try:
            return run_turn(self.deps, session_id, turn, attempt=attempt, run=run)
        except Exception:
            think_claim.give_back(self.deps, session_id, turn, run)
            raise

    def session(self, session_id: str) -> Session:
        session = self.state.get_session(session_id)
        assert session is not None, f"no session {session_id}"
        return session


def world(
    agent: AgentDefinition | None = None,
    allowed: dict[str, str] | None = None,
    **settings: Any,
) -> World:
    """agent: a delegating agent by default; allowed: ALLOWED_HOST_MAPPING (the worker and a caller by default);
    settings: DomainSettings fields to change (ASYNC_TOOL_TIMEOUT_MS and the like, by their field names)."""
    agent = agent or delegating_agent()
    allowed = {"worker": WORKER_URL, "caller": CALLER_URL} if allowed is None else allowed
    clock = FakeClock()
    state = MemoryState(clock.now_ms)
    queues, thinks, peers, model = FakeQueues(), FakeThinks(), FakePeers(), ScriptedModel()
    keys = [SigningKey(SECRET)]
    deps = Deps(
        settings=domain_settings(agent, allowed, **settings),
        **state_ports(state, clock),
        queues=queues,
        thinks=thinks,
        peers=peers,
        keys=lambda: keys,
        model=lambda: model,
    )
    return World(clock, state, queues, thinks, peers, model, deps, keys)
