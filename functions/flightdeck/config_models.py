"""The deployment file's models: one pydantic model per TOML table ([agents.NAME], its deploy, gateway and
local sections, the file itself), with the validators that check each value where it stands; and a mistake in
the file (Problem) and the error that lists them (ConfigFileError).

Reading a file (TOML, problems named by key) is flightdeck.config_file's; what the agents need of each other
is flightdeck.config_check's.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator

from flightdeck.domain.agent import AgentDefinition
from flightdeck.domain.invalid_value import InvalidValue
from flightdeck.domain.peer_usage import PeerLimits, UsagePlanSpec, usage_plans
from flightdeck.domain.peers import PeerTokenError, check_peer_id, check_token


@dataclass(frozen=True)
class Problem:
    """One mistake in a deployment file: where (its TOML key), what is wrong, and how to fix it."""

    key: str  # e.g. "[agents.critic].allow"; "" for the file as a whole
    message: str
    fix: str

    def render(self, path: str | Path) -> str:
        where = f"{path}: {self.key}: " if self.key else f"{path}: "
        fix = self.fix if self.fix.endswith(("?", ".", "!")) else self.fix + "."
        return f"{where}{self.message.rstrip('.')}. Fix: {fix}"


class ConfigFileError(ValueError):
    """A deployment file that cannot be used. str(): one line per problem, each naming the file, key and fix."""

    def __init__(self, message: str, problems: Sequence[Problem] = (), path: str | Path | None = None):
        super().__init__(message)
        self.problems = tuple(problems)
        self.path = path

    @classmethod
    def of(cls, path: str | Path, problems: Sequence[Problem]) -> ConfigFileError:
        return cls("\n".join(p.render(path) for p in problems), problems, path)


_PEER_ID_FIX = "use lower-case letters, digits and '-', starting with a letter or digit"


class DeploySection(BaseModel):
    """What only an AWS deployment needs."""

    model_config = ConfigDict(extra="forbid")

    account: str = Field("", description="The AWS account the stack deploys into (empty: the credentials' account).")
    region: str = Field("", description="The AWS region the stack deploys into (empty: the credentials' region).")
    # Base URLs of peers deployed elsewhere (their API Gateway stage URLs).
    peer_urls: dict[str, str] = Field(
        default_factory=dict,
        description="Base URLs of peers deployed elsewhere (their stage URLs), by name: a URL here wins over the SSM lookup.",
    )
    memory_mb: int = Field(512, ge=128, le=10240, description="Memory of each of the agent's Lambda functions, in MB.")
    think_memory_mb: int = Field(
        256,
        ge=128,
        le=10240,
        description="Memory of the think function (turn_worker), in MB. It waits while the model answers, billed by "
        "GB-s: 256 by measurement (a think peaks at about 100 MB resident, 60 of it the shared preload of the "
        "local sandboxes, and uses 6-7 ms of CPU warm; docs/PERFORMANCE.md, the model's wait).",
    )
    throttle_rate: int = Field(
        50, gt=0, description="The API stage's throttle: requests per second, all callers together."
    )
    throttle_burst: int = Field(100, gt=0, description="The API stage's throttle: burst.")
    retain_data: bool = Field(
        True, description="Keep the DynamoDB table and the log groups when the stack is destroyed."
    )
    front_door: Literal["rest", "lean"] = Field(
        "rest",
        description='The agent\'s front door (docs/FRONT_DOORS.md): "rest", one REST API with the peer authorizer, '
        'usage plans and request validator; "lean", Lambda function URLs for the peer routes that carry a round '
        "trip and an HTTP API for the rest, cheaper, with the token checked in the functions only.",
    )
    url_function_concurrency: int = Field(
        0,
        ge=0,
        le=1000,
        description='front_door = "lean": the reserved concurrency of each function behind a function URL (chat, '
        "callback, a2a), which bounds a flood no gateway throttles (0: none reserved, the account's pool).",
    )
    deadline_index_projection: Literal["KEYS_ONLY", "ALL"] = Field(
        "KEYS_ONLY",
        description="The deadline index's projection. KEYS_ONLY: a round trip writes it only as a session enters "
        "and leaves it. ALL: what a stack created before 2026-12-03 has; CloudFormation cannot change an index's "
        "projection in place, so such a stack keeps it (the agent reads either; ALL costs an index write unit more "
        "per update of a listed session: 2 per one-delegation round trip; docs/PERFORMANCE.md).",
    )
    console: bool = Field(
        False,
        description="Serve the web console at /console/ of the agent's API (static files, public; its data comes from "
        "the API with the user's token: docs/CONSOLE.md).",
    )
    # E-mail addresses subscribed to the agent's alarm topic (each must confirm the subscription).
    alarm_emails: list[str] = Field(
        default_factory=list, description="E-mail addresses subscribed to the agent's alarm topic (each must confirm)."
    )

    @field_validator("alarm_emails")
    @classmethod
    def _alarm_emails(cls, value: list[str]) -> list[str]:
        seen: set[str] = set()
        for email in value:
            # local@domain.tld: no spaces, one @, a dot in the domain (SNS sends the confirmation)
            if not re.fullmatch(r"[^@\s]+@[^@\s]+\.[^@\s.]+", email):
                raise InvalidValue(f"{email!r} is not an e-mail address", "write it as name@example.com")
            if email.lower() in seen:
                raise InvalidValue(f"{email!r} is listed twice", f"remove one {email!r}")
            seen.add(email.lower())
        return value


class PeerLimitsSection(BaseModel):
    """One peer's usage plan limits."""

    model_config = ConfigDict(extra="forbid")

    rate_limit: float = Field(gt=0, le=10_000, description="This peer's requests per second (token bucket refill).")
    burst_limit: int = Field(gt=0, le=5_000, description="This peer's burst.")
    quota_per_day: int = Field(0, ge=0, description="This peer's requests per day (0: no daily quota).")

    def limits(self) -> PeerLimits:
        return PeerLimits(self.rate_limit, self.burst_limit, self.quota_per_day)


class GatewaySection(BaseModel):
    """API Gateway in front of the agent's peer routes: per-peer usage plans and the authorizer's cache.
    Enforced by API Gateway on AWS and by the local gateway of `flightdeck local up` alike."""

    model_config = ConfigDict(extra="forbid")

    # Each calling peer's limits unless peer_limits names it (a plan's limits apply per peer).
    peer_rate_limit: float = Field(
        20, gt=0, le=10_000, description="Each calling peer's requests per second, unless peer_limits names it."
    )
    peer_burst_limit: int = Field(
        40, gt=0, le=5_000, description="Each calling peer's burst, unless peer_limits names it."
    )
    peer_quota_per_day: int = Field(0, ge=0, description="Each calling peer's requests per day (0: no daily quota).")
    peer_limits: dict[str, PeerLimitsSection] = Field(
        default_factory=dict, description="Limits of their own for the peers named (a usage plan each)."
    )
    # Callers without a valid token, all together: let through to be refused and audited, but bounded.
    unidentified_rate_limit: float = Field(
        5, gt=0, le=10_000, description="Requests per second of every caller without a valid token, together."
    )
    unidentified_burst_limit: int = Field(
        10, gt=0, le=5_000, description="Burst of every caller without a valid token, together."
    )
    # How long API Gateway reuses the authorizer's answer for one Authorization header (0: ask every time).
    # Revocation does not wait for it: the functions check the token on every request.
    authorizer_cache_s: int = Field(
        300,
        ge=0,
        le=3600,
        description="How long API Gateway reuses the authorizer's answer for one token (0: ask every time).",
    )

    @field_validator("peer_limits")
    @classmethod
    def _peer_ids(cls, value: dict[str, PeerLimitsSection]) -> dict[str, PeerLimitsSection]:
        for peer_id in value:
            try:
                check_peer_id(peer_id)
            except PeerTokenError as exc:
                raise InvalidValue(f"{peer_id!r}: {exc}", _PEER_ID_FIX, (peer_id,)) from None
        return value

    def default_limits(self) -> PeerLimits:
        return PeerLimits(self.peer_rate_limit, self.peer_burst_limit, self.peer_quota_per_day)


class AgentSpec(AgentDefinition):
    """An agent of a config file: its definition (flightdeck.domain.agent, inherited, not
    re-declared) and what running it takes (services it may call, local secrets, deploy)."""

    model_config = ConfigDict(extra="forbid")

    # Also a resource name (queues, table, stack): a narrower alphabet than the definition's.
    name: str = Field(
        min_length=1,
        max_length=64,
        pattern=r"^[a-z0-9][a-z0-9_-]*$",
        description="The agent's name: the section's, [agents.NAME].",
    )
    # Services this agent may call (ALLOWED_HOST_MAPPING): agent names from this file...
    allow: list[str] = Field(
        default_factory=list,
        description="Agents of this file it may call: its delegates, and those it sends answers back to.",
    )
    # ...or explicit name -> base URL entries.
    allowed_hosts: dict[str, str] = Field(
        default_factory=dict,
        description="Services outside the file it may call, name = base URL (A2A peers, MCP servers).",
    )
    # LOCAL ONLY: the HMAC secret used by `flightdeck local`; on AWS the secret is generated in Secrets Manager.
    callback_secret: str = Field(
        "",
        description="LOCAL ONLY: the callback tokens' HMAC key, at least 32 characters (on AWS: generated in Secrets Manager).",
    )
    # LOCAL ONLY: who may call this agent (POST /api/chat, POST /a2a, GET /api/sessions/{id}):
    # peer id -> its token "fdp_<peer_id>_<secret>". `flightdeck local up` stores their SHA-256 in the
    # agent's peer registry; on AWS the registry is managed with `flightdeck peers add|rotate|revoke`.
    peers: dict[str, str] = Field(
        default_factory=dict,
        description="LOCAL ONLY: who may call it, peer id = token (on AWS: `flightdeck peers add`).",
    )
    # LOCAL ONLY: this agent's own users (you with curl, `flightdeck chat`, the console): user id -> token,
    # registered for the user channel (docs/PEERS.md, "Roles"); on AWS `flightdeck peers add --channel user`.
    users: dict[str, str] = Field(
        default_factory=dict,
        description="LOCAL ONLY: its own users (curl, `flightdeck chat`, the console), user id = token: every skill "
        "and the console's routes (on AWS: `flightdeck peers add --channel user`).",
    )
    # LOCAL ONLY: MCP clients that may call its /mcp (client id -> token "fdp_<client_id>_<secret>"), registered
    # with the mcp channel only, as `flightdeck peers add --channel mcp` does on AWS.
    mcp_clients: dict[str, str] = Field(
        default_factory=dict,
        description="LOCAL ONLY: MCP clients that may call its /mcp, client id = token (on AWS: `flightdeck peers add --channel mcp`).",
    )
    # LOCAL ONLY: the token this agent presents to a service it calls (service name -> token), for
    # services outside this file. An agent of this file that lists us in its `peers` needs no entry:
    # its token for us is taken from there. On AWS: the secret PEER_TOKENS_SECRET_ARN names.
    peer_tokens: dict[str, str] = Field(
        default_factory=dict,
        description="LOCAL ONLY: the token it presents to a service outside the file, name = token.",
    )
    # Extra environment (settings: docs/CONFIGURATION.md) for this agent.
    env: dict[str, str] = Field(
        default_factory=dict, description="Settings of this agent (environment variables), over [defaults]."
    )
    deploy: DeploySection = Field(default_factory=DeploySection, description="What only an AWS deployment needs.")
    gateway: GatewaySection = Field(
        default_factory=GatewaySection, description="Per-peer usage plans and the authorizer's cache."
    )

    @field_validator("peers", "users", "mcp_clients")
    @classmethod
    def _callers_name_themselves(cls, value: dict[str, str], info: ValidationInfo) -> dict[str, str]:
        for peer_id, token in value.items():
            try:
                check_peer_id(peer_id)
            except PeerTokenError as exc:
                raise InvalidValue(f"{peer_id!r}: {exc}", _PEER_ID_FIX, (peer_id,)) from None
            try:
                check_token(token, peer_id)
            except PeerTokenError as exc:
                example = f"fdp_{peer_id}_{'x' * 32}"
                raise InvalidValue(
                    str(exc),
                    f"a token for {peer_id} starts fdp_{peer_id}_ and has a secret of 32+ characters A-Z a-z 0-9 _ -: "
                    f'{peer_id} = "{example}" (`flightdeck peers add` makes one; locally any such string will do)',
                    (peer_id,),
                ) from None
        return value

    @model_validator(mode="after")
    def _one_registry_entry_per_caller(self) -> AgentSpec:
        # Peers, users and MCP clients share the agent's peer registry, one entry per id.
        both = sorted(set(self.peers) & set(self.mcp_clients))
        if both:
            raise InvalidValue(
                f"{both[0]!r} is also in peers: a peer and an MCP client share the agent's registry",
                f'give the MCP client an id of its own, e.g. "{both[0]}-mcp" = "fdp_{both[0]}-mcp_..."',
                ("mcp_clients", both[0]),
            )
        taken = sorted(set(self.users) & (set(self.peers) | set(self.mcp_clients)))
        if taken:
            raise InvalidValue(
                f"{taken[0]!r} is also a peer or an MCP client: users, peers and MCP clients share the agent's registry",
                "give the user an id of its own (one token opens one id's channels)",
                ("users", taken[0]),
            )
        return self

    def callers(self) -> dict[str, tuple[str, tuple[str, ...]]]:
        """LOCAL ONLY: every caller the registry takes, id -> (token, the channels it opens: its roles)."""
        return {
            **{peer: (token, ("a2a",)) for peer, token in self.peers.items()},
            **{user: (token, ("user",)) for user, token in self.users.items()},
            **{client: (token, ("mcp",)) for client, token in self.mcp_clients.items()},
        }

    @field_validator("peer_tokens")
    @classmethod
    def _peer_tokens_are_tokens(cls, value: dict[str, str]) -> dict[str, str]:
        for service, token in value.items():
            try:
                check_token(token)
            except PeerTokenError as exc:
                raise InvalidValue(
                    str(exc),
                    f"write the token {service} issued us, fdp_<our id at {service}>_<32+ characters>",
                    (service,),
                ) from None
        return value

    def usage_plans(self) -> list[UsagePlanSpec]:
        """Usage plans: the default one, the unidentified callers' one, one per peer this file names (peers, peer_limits)."""
        overrides = {p: section.limits() for p, section in self.gateway.peer_limits.items()}
        unidentified = PeerLimits(self.gateway.unidentified_rate_limit, self.gateway.unidentified_burst_limit)
        return usage_plans(self.name, self.gateway.default_limits(), self.callers(), overrides, unidentified)

    def agent_config_json(self) -> str:
        definition = AgentDefinition.model_validate(self.model_dump(include=set(AgentDefinition.model_fields)))
        return definition.model_dump_json()

    def host_mapping(self, urls: dict[str, str]) -> str:
        """ALLOWED_HOST_MAPPING for this agent, given the base URL of each agent by name."""
        entries = dict(self.allowed_hosts)
        for name in self.allow:
            if name in entries:
                continue
            if name not in urls:
                raise ConfigFileError(f"agent {self.name!r} allows {name!r}, whose URL is not known")
            entries[name] = urls[name]
        return ",".join(f"{n}:{u}" for n, u in entries.items())


class LocalMcpServer(BaseModel):
    """LOCAL ONLY: an example MCP server `flightdeck local` starts on loopback (examples/mcp/)."""

    model_config = ConfigDict(extra="forbid")

    # A Python script serving MCP on the listening socket --listen-fd hands it (relative paths: from the repository's
    # root).
    script: str = Field(
        min_length=1,
        description="A Python script serving MCP on the socket --listen-fd passes (relative: from the repository's root).",
    )
    # Not the port it is served on: that is a free one chosen at start (parallel stacks never collide), and the
    # agents' URLs naming this address are pointed there (flightdeck.local.mcp_servers).
    port: int = Field(
        gt=0,
        lt=65536,
        description="The port the agents' URLs name it by (http://127.0.0.1:PORT); served on a free port, and those URLs pointed there.",
    )
    # The environment variable holding the token it takes (set to a fresh one when unset); agents' credentials
    # "env:<token_env>" read the same one.
    token_env: str = Field(
        "",
        pattern=r"^([A-Za-z_][A-Za-z0-9_]{0,127})?$",
        description="The environment variable holding its token (a fresh one when unset); credentials env:NAME read it.",
    )


class LocalSection(BaseModel):
    """LOCAL ONLY: what `flightdeck local` runs beside the agents."""

    model_config = ConfigDict(extra="forbid")

    mcp_servers: dict[str, LocalMcpServer] = Field(
        default_factory=dict, description="Example MCP servers `flightdeck local up|demo` starts on loopback, by name."
    )


class DeploymentFile(BaseModel):
    model_config = ConfigDict(extra="forbid")

    # Settings applied to every agent unless the agent's own env overrides them.
    defaults: dict[str, str] = Field(
        default_factory=dict, description="Settings of every agent, unless its own env overrides them."
    )
    agents: dict[str, AgentSpec] = Field(description="The agents, one [agents.NAME] section each.")
    local: LocalSection = Field(
        default_factory=LocalSection, description="LOCAL ONLY: what `flightdeck local` runs beside the agents."
    )

    def environment(self, agent: str) -> dict[str, str]:
        spec = self.agents[agent]
        return {**self.defaults, **spec.env}

    def outbound_tokens(self, agent: str) -> dict[str, str]:
        """LOCAL ONLY: service name -> the token `agent` presents when it calls that service (PEER_TOKENS).

        Its own `peer_tokens`, plus, for each agent of this file it may call (allow), the token
        that agent's `peers` lists for it.
        """
        spec = self.agents[agent]
        tokens: dict[str, str] = {}
        for name in spec.allow:
            peer = self.agents.get(name)
            if peer is not None and agent in peer.peers:
                tokens[name] = peer.peers[agent]
        tokens.update(spec.peer_tokens)
        return tokens
