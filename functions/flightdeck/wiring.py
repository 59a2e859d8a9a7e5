"""The composition root: builds the adapters once per process and hands them to the domain.

Building them is cheap and calls nothing (a function's cold start imports only what its
invocations use): AWS clients and HTTP connection pools are made on first use; the A2A add-on
(the largest modules) is imported by the first session with an A2A task or delegate; the secrets
adapter by the first token minted, checked or presented. A function whose every invocation needs
one of those loads it at init instead (`preload`), so its first invocation does not pay for it.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import TYPE_CHECKING, Any, cast

from flightdeck import state_wiring
from flightdeck.adapters.a2a_http import A2AHttp
from flightdeck.adapters.dynamo.store import StateStore
from flightdeck.adapters.http_peers import Peers
from flightdeck.adapters.lambda_thinks import LambdaThinks
from flightdeck.adapters.live_state import LiveStore
from flightdeck.adapters.peer_directory import with_discovered_peers
from flightdeck.adapters.sqs_queues import Queues
from flightdeck.domain.model import Model
from flightdeck.domain.ports import Deps, TurnHooks, state_ports
from flightdeck.domain.time_budget import TimeBudget
from flightdeck.domain.tokens import SigningKey
from flightdeck.settings import Settings, get_settings
from flightdeck.state_wiring import peer_registry, state_store

if TYPE_CHECKING:
    from flightdeck.adapters.session_index import SessionIndex
    from flightdeck.domain.a2a.ports import A2APorts, A2AStatePort


@functools.lru_cache(maxsize=1)
def _http() -> tuple[Peers, A2AHttp]:
    """The HTTP clients to other agents: POSTs, and GETs of A2A cards (one connection pool each, made on first use)."""
    timeout_s = get_settings().peer_timeout_ms / 1000
    return Peers(timeout_s=timeout_s), A2AHttp(timeout_s=timeout_s)


def preload(*, http: bool = False, secrets: bool = False, a2a_records: bool = False) -> None:
    """At init, what every (or nearly every) invocation of the calling function uses, which would otherwise
    be loaded by its first invocation: the HTTP client to peers; the secrets adapter (callback keys, peer
    tokens); the A2A task records' adapter."""
    if http:
        _http()[0].load()
    # Imported for their cost, here rather than in a call.
    if secrets:
        import flightdeck.adapters.secrets  # noqa: F401
    if a2a_records:
        import flightdeck.adapters.a2a_state  # noqa: F401


def _gathering(settings: Settings) -> dict[str, Any]:
    """THINK_GATHERING = "shared": the thinks queue for a think that is not lone (flightdeck.adapters.lambda_thinks)."""
    if settings.think_gathering != "shared" or not settings.thinks_queue_url:
        return {}
    from flightdeck.adapters.think_starts import ThinkStarts

    store = state_store()
    starts = ThinkStarts(store.table, lambda: store.client, settings.think_lone_window_ms)
    return {"thinks_queue_url": settings.thinks_queue_url, "lone": starts}


def _signing_keys(settings: Settings) -> list[SigningKey]:
    from flightdeck.adapters.secrets import signing_keys

    return signing_keys(settings)


def _mcp_credential(reference: str) -> str | None:
    from flightdeck.adapters.secrets import mcp_credential

    return mcp_credential(reference)


@functools.lru_cache(maxsize=1)
def _mcp_client() -> Any:
    """The MCP servers' client (flightdeck.adapters.mcp_http), made by the first agent that names a server."""
    from flightdeck.adapters.mcp_http import McpHttp

    return McpHttp()


def _outbound_peer_tokens(settings: Settings) -> dict[str, str]:
    from flightdeck.adapters.secrets import outbound_peer_tokens

    return outbound_peer_tokens(settings)


class _A2APortsOnDemand:
    """Deps.a2a (flightdeck.domain.a2a.ports.A2APorts): the A2A task records' adapter is imported and
    built by its first use; most functions' invocations touch no A2A record."""

    def __init__(self, state: StateStore, http: A2AHttp):
        self._state = state
        self.http = http

    @functools.cached_property
    def store(self) -> A2AStatePort:
        from flightdeck.adapters.a2a_state import A2AStore

        return A2AStore(self._state)

    @functools.cached_property
    def index(self) -> Any:
        """The tasks index (A2A v1.0 ListTasks: flightdeck.domain.a2a.listing), built by its first use."""
        from flightdeck.adapters.a2a_task_index import TaskIndex

        return TaskIndex(self._state.table, client_factory=lambda: self._state.client)

    def within(self, budget: TimeBudget) -> A2APorts:
        return cast("A2APorts", _A2APortsOnDemand(self._state, self.http.within(budget)))


def _cancel_a2a(*args: Any, **kwargs: Any) -> tuple[int, bool, str]:
    """Deps.cancellers["a2a"]: tasks/cancel through the A2A client, imported by the first such cancel."""
    from flightdeck.domain.a2a.client import cancel_a2a

    return cancel_a2a(*args, **kwargs)


def _recover_a2a(*args: Any, **kwargs: Any) -> bool:
    """Deps.recoverers["handoff"]: flightdeck.domain.a2a.tasks.recover_task, imported by the first one."""
    from flightdeck.domain.a2a.tasks import recover_task

    return recover_task(*args, **kwargs)


def _dispatch_a2a(*args: Any, **kwargs: Any) -> Any:
    """Deps.transports["a2a"]: the A2A client, imported by the first delegation to an A2A peer."""
    from flightdeck.domain.a2a.client import dispatch_a2a

    return dispatch_a2a(*args, **kwargs)


class _A2ATurnHooks:
    """Deps.turn_hooks: the A2A add-on (flightdeck.domain.a2a.turn_hooks.A2ATurnHooks), imported the first time a
    session with an A2A task reaches a turn boundary; the turn loop calls none for any other session."""

    @functools.cached_property
    def _hooks(self) -> TurnHooks:
        from flightdeck.domain.a2a.turn_hooks import A2ATurnHooks

        return A2ATurnHooks()

    def stop_if_canceled(self, deps: Deps, session_id: str, turn: int, input_task: str = "") -> bool:
        return self._hooks.stop_if_canceled(deps, session_id, turn, input_task)

    def on_session_canceled(self, deps: Deps, session_id: str, turn: int, text: str) -> None:
        self._hooks.on_session_canceled(deps, session_id, turn, text)

    def on_end_turn(
        self, deps: Deps, session_id: str, turn: int, answer: str, failed: bool = False, question: str | None = None
    ) -> None:
        self._hooks.on_end_turn(deps, session_id, turn, answer, failed=failed, question=question)


@functools.lru_cache(maxsize=1)
def deps() -> Deps:
    # DISCOVERED_PEERS: allowed names whose URL is looked up at run time (the SSM parameters the stacks publish).
    settings = with_discovered_peers(get_settings())
    peers, card_http = _http()

    @functools.lru_cache(maxsize=1)
    def model() -> Model:
        from flightdeck.adapters.model_choice import build_model

        return build_model(settings.agent)

    store = state_store()
    queues = Queues(
        dispatch_url=settings.dispatch_queue_url,
        delivery_url=settings.delivery_queue_url,
        timers_url=settings.timers_queue_url,
        delivery_dlq_url=settings.delivery_dlq_url,
    )
    return Deps(
        settings=settings.for_domain(),
        # One table holds every aggregate of the agent's state: the one store serves each port.
        **state_ports(store),
        queues=queues,
        # Thinks start as asynchronous invokes of the turn worker; their delayed retries share the SQS client.
        thinks=LambdaThinks(
            function_name=settings.turn_worker_function,
            retry_queue_url=settings.turns_queue_url,
            sqs_client=lambda: queues.client,
            started_by_stream=settings.think_start == "stream",
            **_gathering(settings),
        ),
        peers=peers,
        keys=lambda: _signing_keys(settings),
        model=model,
        # A2A (flightdeck.domain.a2a.tasks): task records in the same table, agent cards over HTTP.
        a2a=cast("A2APorts", _A2APortsOnDemand(store, card_http)),
        # Peers that may call us: hashes in the same table (flightdeck.domain.peers).
        registry=peer_registry(),
        # Tokens we present to the peers we call: PEER_TOKENS locally, Secrets Manager on AWS.
        peer_tokens=lambda: _outbound_peer_tokens(settings),
        # A think's text to the streams that watch it, through the same table (flightdeck.domain.live).
        live=LiveStore(store),
        # Delegates' cards, read for the skills they publish (flightdeck.domain.skills.peers).
        cards=card_http,
        # Delegates of protocol "a2a" are sent by the A2A client (flightdeck.domain.a2a.client).
        transports={"a2a": _dispatch_a2a},
        cancellers={"a2a": _cancel_a2a},
        # The sweep's owner of an A2A task whose message never reached its session.
        recoverers={"handoff": _recover_a2a},
        # The A2A add-on at the turn loop's boundaries: a canceled task stops its session; a turn's end ends its task.
        turn_hooks=_A2ATurnHooks(),
        # MCP servers' tools (flightdeck.domain.mcp_tools): only an agent that names servers gets the client.
        mcp=_mcp_client() if settings.agent.mcp_servers else None,
        mcp_credential=_mcp_credential,
    )


def deps_within(budget: TimeBudget | None) -> Deps:
    """deps() for one invocation whose HTTP calls all end within `budget` (None: deps() itself)."""
    d = deps()
    if budget is None:
        return d
    peers, _ = _http()
    a2a = d.a2a.within(budget) if isinstance(d.a2a, _A2APortsOnDemand) else d.a2a
    cards = d.cards.within(budget) if isinstance(d.cards, A2AHttp) else d.cards
    return dataclasses.replace(d, peers=peers.within(budget), a2a=a2a, cards=cards)


def warm_for_threads() -> None:
    """Before a batch's threads start: the clients they share made once here (a boto3 client is thread-safe;
    making one from the default session is not), the model client with them."""
    d = deps()
    for holder in (state_store(), d.queues, d.thinks):
        getattr(holder, "client", None)  # a lazy property: reading it makes the client
    d.model()


@functools.lru_cache(maxsize=1)
def session_index() -> SessionIndex:
    """GET /api/sessions: the sessions index of the same table, through the same client."""
    from flightdeck.adapters.session_index import SessionIndex  # GET /api/sessions only

    store = state_store()
    return SessionIndex(store.table, client_factory=lambda: store.client, clock=store.now_ms)


def reset() -> None:
    """Forget settings and clients (tests change the environment between cases)."""
    session_index.cache_clear()
    deps.cache_clear()
    state_wiring.reset()
    _http.cache_clear()
    _mcp_client.cache_clear()
    get_settings.cache_clear()
