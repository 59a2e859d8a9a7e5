"""Who plays the bench's agents and with what: the options of a run, the roles a deployment file's agents take
(`bench --config`), and the memory each one's functions are billed at."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from flightdeck.config_models import DeploymentFile
from flightdeck.settings import LOCAL_ONLY_VARIABLES, RESOURCE_VARIABLES

DELEGATOR, WORKER, COLLECTOR, TIMEKEEPER, BLACKHOLE = "delegator", "worker", "collector", "timekeeper", "blackhole"
MEMORY_MB = 512


# What the bench itself sets on the agents it runs (timing of the counted turns, resources, secrets,
# identity, authentication): a deployment file's value for these is not taken (`bench --config`).
BENCH_MANAGED_SETTINGS = frozenset(
    {
        *RESOURCE_VARIABLES,
        *LOCAL_ONLY_VARIABLES,
        "ASYNC_TOOL_TIMEOUT_MS",
        "TOOL_AGG_PUNCTUATE_INTERVAL_MS",
        "TOOL_AGG_TOMBSTONE_TTL_MS",
        "REPLY_RETRY_MAX_MS",
        "INBOUND_AUTH",
        "ALLOWED_HOST_MAPPING",
        "PUBLIC_BASE_URL",
        "AGENT_NAME",
        "AGENT_DESCRIPTION",
        "AGENT_CONFIG",
        "POWERTOOLS_LOG_LEVEL",
    }
)


@dataclass(frozen=True)
class Role:
    """An agent of a deployment file playing the bench's delegator or worker (`bench --config`)."""

    name: str  # its name in the file
    description: str
    system_prompt: str
    model: dict[str, Any]
    builtin_tools: tuple[str, ...]
    skills: tuple[str, ...]
    env: dict[str, str]  # its settings ([defaults] and [env]) but those the bench manages
    memory_mb: int
    think_memory_mb: int  # its think function's (turn_worker): deploy.think_memory_mb, else memory_mb
    tool_description: str = ""  # the delegator's: its delegating tool's description


@dataclass(frozen=True)
class Roles:
    config: str  # the file
    delegator: Role
    worker: Role


def roles_from(deployment: DeploymentFile, config: str) -> Roles:
    """The file's first agent that delegates to another agent of the file, and that delegate."""

    def role(name: str, tool_description: str = "") -> Role:
        spec = deployment.agents[name]
        env = {k: v for k, v in deployment.environment(name).items() if k not in BENCH_MANAGED_SETTINGS}
        return Role(
            name=name,
            description=spec.description,
            system_prompt=spec.system_prompt,
            model=spec.model.model_dump(),
            builtin_tools=tuple(spec.builtin_tools),
            skills=tuple(s.name or s.id for s in spec.skills),
            env=env,
            memory_mb=spec.deploy.memory_mb,
            think_memory_mb=spec.deploy.think_memory_mb,
            tool_description=tool_description,
        )

    for name, spec in deployment.agents.items():
        for delegate in spec.delegates:
            if delegate.protocol == "flightdeck" and delegate.peer_service in deployment.agents:
                if spec.model.provider != "local" or deployment.agents[delegate.peer_service].model.provider != "local":
                    raise ValueError("the bench runs the local model only: pass --local-model")
                return Roles(
                    config=config, delegator=role(name, delegate.description), worker=role(delegate.peer_service)
                )
    raise ValueError(f"{config}: no agent delegates to another agent of the file: nothing to measure")


@dataclass(frozen=True)
class StackOptions:
    iterations: int = 30  # one-delegation round trips
    parallel_iterations: int = 10  # turns with `fan_out` delegations
    fan_out: int = 5
    callbacks: int = 150  # per mode (single, batch)
    batch_size: int = 50
    timeout_turns: int = 30
    warmup: int = 2
    # Short, so each counted turn's deadline timer fires within the run; long enough that no counted
    # turn times out on a busy machine (a turn that did is reported: its counts include the timeout path).
    delegator_timeout_ms: int = 8000
    timekeeper_timeout_ms: int = 2000
    # The backstop sweep's schedule, as on AWS (EventBridge fires at most once a minute): the
    # deadline timer is what ends a timed-out turn, and moto (whose index queries read the whole
    # table, one request at a time) is not kept busy by four agents sweeping every second.
    sweep_interval_ms: int = 60_000
    stagger_s: float = 0.25  # between timeout turns, so deadlines are spread out rather than a burst
    # The conversation: one session on the delegator, one user message at a time; these messages' thinks counted.
    # Message 1 creates the session (its think starts from its ingest's snapshot, no read); 2 is the first
    # think that reads the session, the baseline for growth with the conversation's length.
    conversation_at: tuple[int, ...] = (1, 2, 10, 50)
    # `bench --config`: agents of a deployment file play the delegator and the worker.
    roles: Roles | None = None


def memory_mb(opts: StackOptions, agent: str) -> int:
    """The memory of an agent's functions: the file's deploy.memory_mb with --config, else the bench's."""
    roles = opts.roles
    if roles is not None and agent in (DELEGATOR, WORKER):
        return (roles.delegator if agent == DELEGATOR else roles.worker).memory_mb
    return MEMORY_MB


def think_memory_mb(opts: StackOptions, agent: str) -> int:
    """The memory of an agent's think function (turn_worker): the file's deploy.think_memory_mb, else the bench's."""
    roles = opts.roles
    if roles is not None and agent in (DELEGATOR, WORKER):
        return (roles.delegator if agent == DELEGATOR else roles.worker).think_memory_mb
    return MEMORY_MB
