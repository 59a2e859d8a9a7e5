"""A deployment of agents described in one TOML file (see examples/two-agents.toml).

The same file drives `flightdeck local up` (every agent on loopback) and the CDK
app (one stack per agent). An agent's `allow` list names the services it may
call back or dispatch to: a name of another agent in the file resolves to that
agent's URL (its local URL locally; on AWS the URL its stack publishes in SSM, found at
run time, unless `deploy.peer_urls` or `allowed_hosts` gives one).
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from flightdeck.domain.agent import DelegateTool, ModelConfig
from flightdeck.domain.peer_usage import PeerLimits, UsagePlanSpec, usage_plans
from flightdeck.domain.peers import PeerTokenError, check_peer_id, check_token


class ConfigFileError(ValueError):
    pass


class DeploySection(BaseModel):
    """What only an AWS deployment needs."""

    model_config = ConfigDict(extra="forbid")

    account: str = ""
    region: str = ""
    # Base URLs of peers deployed elsewhere (their API Gateway stage URLs).
    peer_urls: dict[str, str] = Field(default_factory=dict)
    memory_mb: int = Field(512, ge=128, le=10240)
    throttle_rate: int = Field(50, gt=0)
    throttle_burst: int = Field(100, gt=0)
    retain_data: bool = True
    # E-mail addresses subscribed to the agent's alarm topic (each must confirm the subscription).
    alarm_emails: list[str] = Field(default_factory=list)

    @field_validator("alarm_emails")
    @classmethod
    def _alarm_emails(cls, value: list[str]) -> list[str]:
        seen: set[str] = set()
        for email in value:
            # local@domain.tld: no spaces, one @, a dot in the domain (SNS sends the confirmation)
            if not re.fullmatch(r"[^@\s]+@[^@\s]+\.[^@\s.]+", email):
                raise ValueError(f"alarm_emails: {email!r} is not an e-mail address")
            if email.lower() in seen:
                raise ValueError(f"alarm_emails: {email!r} is listed twice")
            seen.add(email.lower())
        return value


class PeerLimitsSection(BaseModel):
    """One peer's usage plan limits."""

    model_config = ConfigDict(extra="forbid")

    rate_limit: float = Field(gt=0, le=10_000)  # requests per second
    burst_limit: int = Field(gt=0, le=5_000)
    quota_per_day: int = Field(0, ge=0)  # 0: no daily quota

    def limits(self) -> PeerLimits:
        return PeerLimits(self.rate_limit, self.burst_limit, self.quota_per_day)


class GatewaySection(BaseModel):
    """API Gateway in front of the agent's peer routes: per-peer usage plans and the authorizer's cache.
    Enforced by API Gateway on AWS and by the local gateway of `flightdeck local up` alike."""

    model_config = ConfigDict(extra="forbid")

    # Each calling peer's limits unless peer_limits names it (a plan's limits apply per peer).
    peer_rate_limit: float = Field(20, gt=0, le=10_000)
    peer_burst_limit: int = Field(40, gt=0, le=5_000)
    peer_quota_per_day: int = Field(0, ge=0)
    peer_limits: dict[str, PeerLimitsSection] = Field(default_factory=dict)
    # Callers without a valid token, all together: let through to be refused and audited, but bounded.
    unidentified_rate_limit: float = Field(5, gt=0, le=10_000)
    unidentified_burst_limit: int = Field(10, gt=0, le=5_000)
    # How long API Gateway reuses the authorizer's answer for one Authorization header (0: ask every time).
    # Revocation does not wait for it: the functions check the token on every request.
    authorizer_cache_s: int = Field(300, ge=0, le=3600)

    @field_validator("peer_limits")
    @classmethod
    def _peer_ids(cls, value: dict[str, PeerLimitsSection]) -> dict[str, PeerLimitsSection]:
        for peer_id in value:
            try:
                check_peer_id(peer_id)
            except PeerTokenError as exc:
                raise ValueError(f"peer_limits.{peer_id}: {exc}") from None
        return value

    def default_limits(self) -> PeerLimits:
        return PeerLimits(self.peer_rate_limit, self.peer_burst_limit, self.peer_quota_per_day)


class AgentSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1, max_length=64, pattern=r"^[a-z0-9][a-z0-9_-]*$")
    description: str = "A Flightdeck agent"
    system_prompt: str = "You are a helpful agent."
    model: ModelConfig = Field(default_factory=ModelConfig)
    local_tools: list[str] = Field(default_factory=list)
    delegates: list[DelegateTool] = Field(default_factory=list)
    skills: list[str] = Field(default_factory=list)
    # Services this agent may call (ALLOWED_HOST_MAPPING): agent names from this file...
    allow: list[str] = Field(default_factory=list)
    # ...or explicit name -> base URL entries.
    allowed_hosts: dict[str, str] = Field(default_factory=dict)
    # LOCAL ONLY: the HMAC secret used by `flightdeck local`; on AWS the secret is generated in Secrets Manager.
    callback_secret: str = ""
    # LOCAL ONLY: who may call this agent (POST /api/chat, POST /a2a, GET /api/sessions/{id}):
    # peer id -> its token "fdp_<peer_id>_<secret>". `flightdeck local up` stores their SHA-256 in the
    # agent's peer registry; on AWS the registry is managed with `flightdeck peers add|rotate|revoke`.
    peers: dict[str, str] = Field(default_factory=dict)
    # LOCAL ONLY: the token this agent presents to a service it calls (service name -> token), for
    # services outside this file. An agent of this file that lists us in its `peers` needs no entry:
    # its token for us is taken from there. On AWS: the secret PEER_TOKENS_SECRET_ARN names.
    peer_tokens: dict[str, str] = Field(default_factory=dict)
    # Extra environment (settings of DESIGN §4) for this agent.
    env: dict[str, str] = Field(default_factory=dict)
    deploy: DeploySection = Field(default_factory=DeploySection)
    gateway: GatewaySection = Field(default_factory=GatewaySection)

    @field_validator("peers")
    @classmethod
    def _peers_name_themselves(cls, value: dict[str, str]) -> dict[str, str]:
        for peer_id, token in value.items():
            try:
                check_peer_id(peer_id)
                check_token(token, peer_id)
            except PeerTokenError as exc:
                raise ValueError(f"peers.{peer_id}: {exc}") from None
        return value

    @field_validator("peer_tokens")
    @classmethod
    def _peer_tokens_are_tokens(cls, value: dict[str, str]) -> dict[str, str]:
        for service, token in value.items():
            try:
                check_token(token)
            except PeerTokenError as exc:
                raise ValueError(f"peer_tokens.{service}: {exc}") from None
        return value

    def usage_plans(self) -> list[UsagePlanSpec]:
        """Usage plans: the default one, the unidentified callers' one, one per peer this file names (peers, peer_limits)."""
        overrides = {p: section.limits() for p, section in self.gateway.peer_limits.items()}
        unidentified = PeerLimits(self.gateway.unidentified_rate_limit, self.gateway.unidentified_burst_limit)
        return usage_plans(self.name, self.gateway.default_limits(), self.peers, overrides, unidentified)

    def agent_config_json(self) -> str:
        from flightdeck.domain.agent import AgentDefinition

        definition = AgentDefinition(
            name=self.name,
            description=self.description,
            system_prompt=self.system_prompt,
            model=self.model,
            local_tools=self.local_tools,
            delegates=self.delegates,
            skills=self.skills,
        )
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


class DeploymentFile(BaseModel):
    model_config = ConfigDict(extra="forbid")

    # Settings applied to every agent unless the agent's own env overrides them.
    defaults: dict[str, str] = Field(default_factory=dict)
    agents: dict[str, AgentSpec]

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


def load(path: str | Path) -> DeploymentFile:
    path = Path(path)
    try:
        raw: dict[str, Any] = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ConfigFileError(f"{path}: {exc}") from exc
    agents = raw.get("agents", {})
    if isinstance(agents, dict):
        for name, spec in agents.items():
            if isinstance(spec, dict):
                spec.setdefault("name", name)
    for section in ("defaults",):
        if isinstance(raw.get(section), dict):
            raw[section] = {k: str(v) for k, v in raw[section].items()}
    for spec in agents.values() if isinstance(agents, dict) else ():
        if isinstance(spec, dict) and isinstance(spec.get("env"), dict):
            spec["env"] = {k: str(v) for k, v in spec["env"].items()}
    try:
        deployment = DeploymentFile.model_validate(raw)
    except ValidationError as exc:
        raise ConfigFileError(f"{path}: {exc}") from exc
    for name, spec in deployment.agents.items():
        if spec.name != name:
            raise ConfigFileError(f"{path}: agents.{name} has name {spec.name!r}")
    return deployment


# The repository's bundled example (functions/flightdeck/ -> repo root).
DEFAULT_CONFIG = Path(__file__).resolve().parents[2] / "examples" / "two-agents.toml"
