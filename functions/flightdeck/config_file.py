"""A deployment of agents described in one TOML file (see examples/two-agents.toml).

The same file drives `flightdeck local up` (every agent on loopback) and the CDK
app (one stack per agent). An agent's `allow` list names the services it may
call back or dispatch to: a name of another agent in the file resolves to that
agent's URL (its local URL locally; on AWS the URL its stack publishes in SSM, found at
run time, unless `deploy.peer_urls` or `allowed_hosts` gives one).
"""

from __future__ import annotations

import difflib
import json
import re
import tomllib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, cast, get_args, get_origin
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator, model_validator
from pydantic_core import ErrorDetails

from flightdeck.domain.agent import AgentDefinition, ModelConfig
from flightdeck.domain.allowlist import Allowlist
from flightdeck.domain.invalid_value import InvalidValue
from flightdeck.domain.peer_usage import PeerLimits, UsagePlanSpec, usage_plans
from flightdeck.domain.peers import PeerTokenError, check_peer_id, check_token, new_token
from flightdeck.settings import Settings


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


# --- reading and checking a deployment file ---------------------------------------------------------
#
# Hand-written on top of pydantic on purpose: pydantic finds what is wrong, but speaks of its
# own locations ("agents.critic.allow.0") and links to its documentation; a person editing the
# file needs the TOML key as they wrote it, and the fix. Problems are collected, never raised
# one at a time, so a file with three mistakes is answered with three lines, each once.


# Where the file runs: "local" (`flightdeck local up|demo`, `flightdeck bench`: every agent on this
# machine, state in moto) or "aws" (`app.py` / `cdk synth`: one stack per agent).
Runtime = Literal["local", "aws"]

SETTING_NAMES: tuple[str, ...] = tuple(sorted(f.alias for f in Settings.model_fields.values() if f.alias))
# Powertools reads its own variables (POWERTOOLS_LOG_LEVEL, ...): passed through as they are.
PASSTHROUGH_PREFIX = "POWERTOOLS_"
# What a lone setting is validated against: the resource variables the stack or the local runtime sets.
_SETTINGS_BASE = {
    "AGENT_NAME": "check",
    "STATE_TABLE": "check-state",
    "TURN_WORKER_FUNCTION": "check-turn-worker",
    "TURNS_QUEUE_URL": "q",
    "DISPATCH_QUEUE_URL": "q",
    "DELIVERY_QUEUE_URL": "q",
    "TIMERS_QUEUE_URL": "q",
    "TOOL_CALLBACK_SECRET": "c" * 32,
}
_BARE_KEY = re.compile(r"^[A-Za-z0-9_-]+$")
_NAME_PATTERN = "^[a-z0-9][a-z0-9_-]*$"


def _dotted(parts: Sequence[object]) -> str:
    """Keys joined as TOML spells them ("a.b", a quoted "odd key"); a list position as [n]."""
    out = ""
    for p in parts:
        if isinstance(p, int):
            out += f"[{p}]"
        else:
            out += ("." if out else "") + (str(p) if _BARE_KEY.match(str(p)) else json.dumps(str(p)))
    return out


def _is_model(cls: Any) -> bool:
    return isinstance(cls, type) and issubclass(cls, BaseModel)


def toml_key(loc: Sequence[object]) -> str:
    """The TOML key a pydantic location names, as the file spells it: ("agents", "critic", "allow")
    -> "[agents.critic].allow"; ("agents", "a", "delegates", 1, "agent") -> "[[agents.a.delegates]] #2 agent"."""
    tables: list[object] = []
    array = ""
    key: list[object] = []
    cls: Any = DeploymentFile
    items = list(loc)
    while items:
        part = items.pop(0)
        field = cls.model_fields.get(part) if _is_model(cls) and isinstance(part, str) else None
        if field is None:
            key = [part, *items]
            break
        annotation, origin = field.annotation, get_origin(field.annotation)
        if origin is dict:
            tables.append(part)
            value_type = get_args(annotation)[1]
            if _is_model(value_type) and items:
                tables.append(items.pop(0))
                cls = value_type
                continue
            key = list(items)  # a table of plain values: the rest is one of its keys
            break
        if origin is list and _is_model(get_args(annotation)[0]) and items and isinstance(items[0], int):
            array = f"[[{_dotted([*tables, part])}]] #{cast(int, items.pop(0)) + 1}"  # an int: checked above
            tables, cls = [], get_args(annotation)[0]
            continue
        if _is_model(annotation):
            tables.append(part)
            cls = annotation
            continue
        key = [part, *items]
        break
    if array:
        return f"{array} {_dotted(key)}" if key else array
    if not tables:
        return _dotted(key)
    return f"[{_dotted(tables)}]" + (f".{_dotted(key)}" if key else "")


def _door_problems(deployment: DeploymentFile) -> list[Problem]:
    """The console is MOCK methods of the REST API (infra/console.py): the lean door's HTTP API has none."""
    return [
        Problem(
            toml_key(("agents", name, "deploy", "console")),
            'needs front_door = "rest": the console is served by the REST API, which the lean door has not',
            'set console = false, or front_door = "rest"',
        )
        for name, spec in deployment.agents.items()
        if spec.deploy.console and spec.deploy.front_door == "lean"
    ]


def _model_at(loc: Sequence[object]) -> type[BaseModel] | None:
    """The model class of the table a location points into (None: a table of plain values)."""
    cls: Any = DeploymentFile
    items = list(loc)
    while items:
        part = items.pop(0)
        field = cls.model_fields.get(part) if _is_model(cls) and isinstance(part, str) else None
        if field is None:
            return None
        annotation, origin = field.annotation, get_origin(field.annotation)
        if origin in (dict, list):
            if not items:
                return None
            items.pop(0)
            cls = get_args(annotation)[-1]
        else:
            cls = annotation
    return cls if _is_model(cls) else None


def _show(value: Any) -> str:
    return (
        json.dumps(value, ensure_ascii=False, default=str)
        if isinstance(value, (str, int, float, bool))
        else type(value).__name__
    )


_TYPE_FIXES = {
    "int": "write a whole number, without quotes",
    "float": "write a number, without quotes",
    "bool": "write true or false, without quotes",
    "string": "write it as a quoted string",
    "list": 'write a list, e.g. ["a", "b"]',
    "dict": "write a table: a [section], or { key = value } inline",
    "model": "write a table: a [section], or { key = value } inline",
}


def _explain(err: ErrorDetails, example: str = "") -> tuple[str, str]:
    """(what is wrong, the fix) for one pydantic error, in the file's terms."""
    kind, ctx, given = err["type"], err.get("ctx") or {}, err.get("input")
    msg = str(err["msg"]).removeprefix("Value error, ")
    should = msg.replace("Input should be", "must be").replace("String should", "must").replace("List should", "must")
    got = f" (it is {_show(given)})" if not isinstance(given, (dict, list)) else ""
    for prefix, fix in _TYPE_FIXES.items():
        if kind.startswith(prefix + "_") and kind.endswith(("_type", "_parsing", "_from_float", "_attributes_type")):
            return f"{should.split(',')[0]}{got}", fix + (f", e.g. {example}" if example else "")
    if kind == "literal_error":
        expected = str(ctx.get("expected", "one of the listed values")).replace("'", '"')  # TOML quotes
        return f"must be {expected}{got}", f"write {expected}"
    bounds = {
        "greater_than": ("gt", "a number above {}"),
        "greater_than_equal": ("ge", "{} or more"),
        "less_than": ("lt", "a number below {}"),
        "less_than_equal": ("le", "at most {}"),
        "string_too_short": ("min_length", "at least {} characters"),
        "string_too_long": ("max_length", "at most {} characters"),
        "too_short": ("min_length", "at least {} entries"),
        "too_long": ("max_length", "at most {} entries"),
    }
    if kind in bounds:
        name, text = bounds[kind]
        return f"{should}{got}", "use " + text.format(ctx.get(name))
    if kind == "string_pattern_mismatch":
        if ctx.get("pattern") == _NAME_PATTERN:
            return (
                f"{_show(given)} is not a name",
                "use lower-case letters, digits, '-' and '_', starting with a letter or digit",
            )
        return f"{should}{got}", "change it to match that pattern"
    if kind == "missing":
        return "is required", "add it"
    if kind == "value_error" and "at least 32 characters" in msg:
        return msg, f"use 32 or more random characters, e.g. {_random_secret_hint()}"
    if kind == "value_error" and isinstance(ctx.get("error"), InvalidValue):
        return msg, ctx["error"].fix
    return msg, f"see what {kind} means for this key in docs/CONFIGURATION.md"


def _setting_problem(table: str, name: str, value: Any) -> Problem | None:
    """A setting of [defaults] or [agents.X.env]: known by name, of the right type and range."""
    key = f"{table}.{_dotted([name])}"
    if not isinstance(value, (str, int, float, bool)):
        return Problem(
            key, f"must be a string or a number, not a {type(value).__name__}", f'write {name} = "..." or a number'
        )
    if name not in SETTING_NAMES and not name.startswith(PASSTHROUGH_PREFIX):
        close = difflib.get_close_matches(name, SETTING_NAMES, n=1, cutoff=0.6)
        fix = (
            f"rename it to {close[0]}"
            if close
            else "remove it: an agent reads only the settings listed in docs/CONFIGURATION.md (flightdeck/settings.py)"
        )
        return Problem(key, "is not a setting", fix)
    text = ("true" if value else "false") if isinstance(value, bool) else str(value)
    try:
        Settings.model_validate({**_SETTINGS_BASE, name: text})
    except ValidationError as exc:
        err = exc.errors()[0]
        default = next((f.default for f in Settings.model_fields.values() if f.alias == name), None)
        example = f"{name} = {default}" if isinstance(default, int) and not isinstance(default, bool) else ""
        message, fix = _explain(err, example)
        return Problem(key, message, fix)
    return None


def _settings_tables(raw: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """(TOML key, table) of every table of settings: [defaults] and each [agents.X.env]."""
    tables: list[tuple[str, dict[str, Any]]] = []
    if isinstance(raw.get("defaults"), dict):
        tables.append(("[defaults]", raw["defaults"]))
    agents = raw.get("agents")
    for name, spec in agents.items() if isinstance(agents, dict) else ():
        if isinstance(spec, dict) and isinstance(spec.get("env"), dict):
            tables.append((toml_key(("agents", name, "env")), spec["env"]))
    return tables


def _structure_problem(err: ErrorDetails) -> Problem:
    loc = tuple(err["loc"])
    key = toml_key(loc)
    if err["type"] == "extra_forbidden":
        model = _model_at(loc[:-1])
        known = sorted(model.model_fields) if model else []
        name, parent = str(loc[-1]), toml_key(loc[:-1])
        is_table = isinstance(err.get("input"), dict)
        close = difflib.get_close_matches(name, known, n=1, cutoff=0.6)
        if is_table and parent.startswith("[") and not parent.startswith("[[") and parent.endswith("]"):
            key = f"{parent[:-1]}.{_dotted([name])}]"
            fix = f"rename it to {parent[:-1]}.{close[0]}]" if close else f"remove it; {parent} has: {', '.join(known)}"
            return Problem(key, "unknown section", fix)
        fix = f'rename it to "{close[0]}"' if close else f"remove it; {parent or 'the file'} takes: {', '.join(known)}"
        return Problem(key, f'unknown key "{name}"', fix)
    if len(loc) == 3 and loc[0] == "agents" and loc[2] == "name" and err["type"] == "string_pattern_mismatch":
        return Problem(
            toml_key(loc[:2]),
            f"the agent name {_show(loc[1])} is not allowed",
            "rename the section: lower-case letters, digits, '-' and '_', starting with a letter or digit",
        )
    refused = (err.get("ctx") or {}).get("error")
    if isinstance(refused, InvalidValue) and refused.at:
        key = toml_key((*loc, *refused.at))  # the value itself, not only the table that refused it
    message, fix = _explain(err)
    return Problem(key, message, fix)


def parse(raw: dict[str, Any], path: str | Path = "<deployment>") -> DeploymentFile:
    """A deployment from the TOML document's data; ConfigFileError naming every mistake at once."""
    problems: list[Problem] = []
    agents = raw.get("agents", {})
    if isinstance(agents, dict):
        for name, spec in agents.items():
            if isinstance(spec, dict):
                spec.setdefault("name", name)
    for key, table in _settings_tables(raw):
        for name, value in list(table.items()):
            problem = _setting_problem(key, name, value)
            if problem is not None:
                problems.append(problem)
            table[name] = ("true" if value else "false") if isinstance(value, bool) else str(value)
    try:
        # Strict: a deployment file says what it means ("2500" is not a number of milliseconds).
        deployment = DeploymentFile.model_validate(raw, strict=True)
    except ValidationError as exc:
        problems.extend(_structure_problem(err) for err in exc.errors(include_url=False))
        raise ConfigFileError.of(path, _once(problems)) from None
    for name, spec in deployment.agents.items():
        if spec.name != name:
            problems.append(
                Problem(
                    toml_key(("agents", name, "name")),
                    f"is {spec.name!r}, not the section's name",
                    f"remove it (the name is the section's: [agents.{name}])",
                )
            )
        problems.extend(_secret_problems(name, spec))
    if problems:
        raise ConfigFileError.of(path, _once(problems))
    return deployment


# The callback tokens' HMAC key: shorter, and the agents refuse to start (flightdeck.settings).
CALLBACK_SECRET_MIN_CHARS = 32


def _random_secret_hint() -> str:
    return "the output of python -c 'import secrets; print(secrets.token_urlsafe(32))'"


def _secret_problems(name: str, spec: AgentSpec) -> list[Problem]:
    """A LOCAL ONLY callback_secret too short to be the HMAC key (the agents would not start, naming
    TOOL_CALLBACK_SECRET rather than this key)."""
    secret = spec.callback_secret
    if not secret or len(secret) >= CALLBACK_SECRET_MIN_CHARS:
        return []
    return [
        Problem(
            toml_key(("agents", name, "callback_secret")),
            f"is {len(secret)} characters: the callback tokens' HMAC key needs at least {CALLBACK_SECRET_MIN_CHARS}, "
            "or the agents do not start",
            f"make it {CALLBACK_SECRET_MIN_CHARS} or more random characters ({_random_secret_hint()}), or remove "
            "it: `flightdeck local` then makes one (on AWS it is generated in Secrets Manager)",
        )
    ]


def _once(problems: Sequence[Problem]) -> list[Problem]:
    return list(dict.fromkeys(problems))


def load(path: str | Path) -> DeploymentFile:
    """Read a deployment file: TOML syntax, known keys and settings, types and ranges (every agent's).

    What depends on where it runs (other agents named, tokens, the model) is `check`'s.
    """
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigFileError.of(
            path, [Problem("", "no such file", "check the path (--config FILE, -c config=FILE)")]
        ) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigFileError.of(
            path, [Problem("", f"cannot be read: {exc}", "check the path and its permissions")]
        ) from None
    try:
        raw: dict[str, Any] = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigFileError.of(
            path,
            [
                Problem(
                    "",
                    f"is not valid TOML: {exc}",
                    "correct the syntax there (key = value lines under [section] headers)",
                )
            ],
        ) from None
    return parse(raw, path)


def _delegate_key(agent: str, index: int, field_name: str = "") -> str:
    return toml_key(("agents", agent, "delegates", index, *([field_name] if field_name else [])))


def _with(items: Sequence[str], name: str) -> str:
    return "[" + ", ".join(json.dumps(i) for i in [*items, name]) + "]"


def _nearest(name: str, names: Sequence[str]) -> str:
    close = difflib.get_close_matches(name, names, n=1, cutoff=0.5)
    return close[0] if close else ""


def check(
    deployment: DeploymentFile,
    path: str | Path,
    runtime: Runtime,
    *,
    local_model: bool = False,
    aws_credentials: bool = False,
    allow_open_agents: bool = False,
) -> DeploymentFile:
    """Everything the agents of the file need of each other and of where they run, checked at start.

    - a delegate names an agent of the file (or an outside service of `allowed_hosts`);
    - the delegator's `allow` names it, and its `allow` names the delegator (the answer's way back);
    - locally, the delegate's `peers` has a token for the delegator (without one: 401);
    - every `allow` name resolves to a URL;
    - the model can run here: Bedrock needs a model_id, and under `flightdeck local` AWS credentials
      (aws_credentials) or local_model=True, which runs such agents with the local model instead;
    - on AWS, no agent has inbound authentication off (INBOUND_AUTH), unless allow_open_agents (the CDK
      context key of the same name) says an isolated test rig is meant.

    Returns the deployment to run (local_model applied); ConfigFileError lists every problem.
    """
    problems: list[Problem] = []
    if runtime == "aws" and not allow_open_agents:
        problems.extend(_open_agent_problems(deployment))
    problems.extend(_mcp_problems(deployment, runtime))
    problems.extend(_door_problems(deployment))
    agents = deployment.agents
    names = list(agents)
    for name, spec in agents.items():
        allowed = set(spec.allow) | set(spec.allowed_hosts)
        for index, delegate in enumerate(spec.delegates):
            target = delegate.peer_service
            target_key = _delegate_key(name, index, "service" if delegate.service else "agent")
            if delegate.protocol == "a2a":
                problems.extend(_card_url_problems(deployment, name, index, runtime))
                continue
            outside = target in spec.allowed_hosts or (runtime == "aws" and target in spec.deploy.peer_urls)
            if target not in agents and not outside:
                nearest = _nearest(target, [n for n in names if n != name])
                problems.append(
                    Problem(
                        target_key,
                        f'no agent "{target}" in this file',
                        f'did you mean "{nearest}"?'
                        if nearest
                        else f"name one of its agents ({', '.join(names)}), or a service outside the file listed in "
                        f"[agents.{name}].allowed_hosts",
                    )
                )
                continue
            if target not in allowed:
                problems.append(
                    Problem(
                        toml_key(("agents", name, "allow")),
                        f'lacks "{target}", which {_delegate_key(name, index)} delegates to: every dispatch would be refused',
                        f"allow = {_with(spec.allow, target)}",
                    )
                )
            peer = agents.get(target)
            if peer is None:
                continue
            callback = delegate.callback_service or name
            if callback not in peer.allow and callback not in peer.allowed_hosts:
                problems.append(
                    Problem(
                        toml_key(("agents", target, "allow")),
                        f'lacks "{callback}": {target} could not send its answers back to {name} '
                        f"(delegated to by {_delegate_key(name, index)})",
                        f"allow = {_with(peer.allow, callback)}",
                    )
                )
            if runtime == "local" and deployment.environment(target).get("INBOUND_AUTH", "required") != "off":
                problems.extend(_token_problems(deployment, name, target, index))
        for allowed_name in spec.allow:
            if allowed_name in agents or allowed_name in spec.allowed_hosts:
                continue
            if runtime == "aws":
                continue  # resolved through deploy.peer_urls, or reported by the stack until it is known
            nearest = _nearest(allowed_name, names)
            problems.append(
                Problem(
                    toml_key(("agents", name, "allow")),
                    f'names "{allowed_name}", which is neither an agent of this file nor in [agents.{name}].allowed_hosts',
                    f'did you mean "{nearest}"?'
                    if nearest
                    else f'remove it, or give its URL: allowed_hosts = {{ {allowed_name} = "https://..." }}',
                )
            )
    fallback: list[str] = []
    for name, spec in agents.items():
        model_key = toml_key(("agents", name, "model"))
        if spec.model.provider != "bedrock":
            continue
        if not spec.model.model_id.strip():
            problems.append(
                Problem(
                    f"{model_key}.model_id",
                    'is required with provider = "bedrock"',
                    f"add model_id = {json.dumps(EXAMPLE_MODEL_ID)} (a model id, an inference profile id or an ARN)",
                )
            )
        elif not is_bedrock_model_id(spec.model.model_id):
            problems.append(
                Problem(
                    f"{model_key}.model_id",
                    f"{json.dumps(spec.model.model_id)} is not a Bedrock model id",
                    MODEL_ID_FIX,
                )
            )
        if runtime == "local" and local_model:
            fallback.append(name)
        elif runtime == "local" and not aws_credentials:
            problems.append(
                Problem(
                    f"{model_key}.provider",
                    '"bedrock" cannot run here: `flightdeck local` has no AWS credentials to call Bedrock with '
                    "(the local stack's moto has no Bedrock)",
                    'set provider = "local" (deterministic, offline), or pass --local-model to run it with the local '
                    "model this time, or provide AWS credentials (aws configure, AWS_PROFILE or AWS_ACCESS_KEY_ID/"
                    "AWS_SECRET_ACCESS_KEY) with access to that model in us-east-1",
                )
            )
    if problems:
        raise ConfigFileError.of(path, _once(problems))
    if not fallback:
        return deployment
    variant = deployment.model_copy(deep=True)
    for name in fallback:
        variant.agents[name].model = ModelConfig(provider="local")
    return variant


# Bedrock's model ids, offline: "<vendor>.<model>" (anthropic.claude-3-5-haiku-20241022-v1:0), a cross-region
# inference profile "<geography>.<vendor>.<model>" (us., eu., apac., global. ...), or an ARN of a foundation
# model, an inference profile (system or application), a provisioned, custom or imported model. Whether the
# model exists in the region and is enabled for the account only Bedrock can say (`flightdeck check --aws`).
EXAMPLE_MODEL_ID = "us.anthropic.claude-3-5-haiku-20241022-v1:0"
_MODEL_ID = re.compile(r"^(?:[a-z]{2,8}(?:-[a-z]{2,8})?\.)?[a-z][a-z0-9-]{1,31}\.[a-z0-9][A-Za-z0-9._:-]{0,127}$")
_MODEL_ARN = re.compile(
    r"^arn:aws(?:-[a-z]+)*:bedrock:[a-z]{2}(?:-[a-z]+)+-\d:(?:\d{12})?:"
    r"(?:foundation-model|inference-profile|application-inference-profile|provisioned-model|custom-model"
    r"|imported-model|custom-model-deployment)/[A-Za-z0-9][A-Za-z0-9._:/-]{0,255}$"
)
MODEL_ID_FIX = (
    f'write a model id "<vendor>.<model>" (e.g. "anthropic.claude-3-5-haiku-20241022-v1:0"), an inference '
    f'profile id "<region>.<vendor>.<model>" (e.g. "{EXAMPLE_MODEL_ID}") or a model or inference profile ARN; '
    "`aws bedrock list-foundation-models` and `aws bedrock list-inference-profiles` list them"
)


def is_bedrock_model_id(model_id: str) -> bool:
    """Whether model_id has one of the shapes Bedrock's Converse takes (not whether the model exists)."""
    return bool(_MODEL_ID.match(model_id) or _MODEL_ARN.match(model_id))


def _card_url_problems(deployment: DeploymentFile, name: str, index: int, runtime: Runtime) -> list[Problem]:
    """An A2A delegate's card_url under a base URL the agent may call (ALLOWED_HOST_MAPPING): its allowed_hosts,
    on AWS also the deploy.peer_urls of the names it allows. A delegate that is an agent of this file, allowed,
    is left to run time: its local URL is known only once it listens."""
    spec = deployment.agents[name]
    delegate = spec.delegates[index]
    if delegate.peer_service in deployment.agents and delegate.peer_service in spec.allow:
        return []
    hosts = {k: v.rstrip("/") for k, v in spec.allowed_hosts.items()}
    if runtime == "aws":
        hosts.update({k: v.rstrip("/") for k, v in spec.deploy.peer_urls.items() if k in spec.allow and k not in hosts})
    if Allowlist(hosts).allows_url(delegate.card_url):
        return []
    service = delegate.peer_service
    return [
        Problem(
            _delegate_key(name, index, "card_url"),
            f"{delegate.card_url} is not under any base URL of [agents.{name}].allowed_hosts: the agent would refuse "
            "to fetch the card, and every delegation to it would fail",
            f'add its base URL: allowed_hosts = {{ {service} = "{_base_of(delegate.card_url)}" }} under '
            f"[agents.{name}] (or correct card_url)",
        )
    ]


def _mcp_problems(deployment: DeploymentFile, runtime: Runtime) -> list[Problem]:
    """Each MCP server's URL lies under one of its agent's allowed_hosts (the allowlist peers go through), and on
    AWS its credential is a secret (a Lambda function's environment holds no token of ours)."""
    problems: list[Problem] = []
    for name, spec in deployment.agents.items():
        allowlist = Allowlist({k: v.rstrip("/") for k, v in spec.allowed_hosts.items()})
        for index, server in enumerate(spec.mcp_servers):
            key = toml_key(("agents", name, "mcp_servers", index))
            if not allowlist.allows_url(server.url):
                problems.append(
                    Problem(
                        f"{key} url",
                        f"{server.url} is not under any base URL of [agents.{name}].allowed_hosts: every call would "
                        "be refused",
                        f'add its base URL, e.g. allowed_hosts = {{ {server.name} = "{_base_of(server.url)}" }}',
                    )
                )
            if runtime == "aws" and server.credential.startswith("env:"):
                problems.append(
                    Problem(
                        f"{key} credential",
                        f"{server.credential} names an environment variable, which a deployed agent does not have",
                        'use credential = "secret:<name>" (a Secrets Manager secret holding the token; the stack grants '
                        "its read)",
                    )
                )
    return problems


def _base_of(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}"


def _open_agent_problems(deployment: DeploymentFile) -> list[Problem]:
    """On AWS: an agent with INBOUND_AUTH = "off", one problem per table that sets it (naming its agents)."""
    open_by_key: dict[str, list[str]] = {}
    for name, spec in deployment.agents.items():
        if deployment.environment(name).get("INBOUND_AUTH", "required") != "off":
            continue
        table = toml_key(("agents", name, "env")) if "INBOUND_AUTH" in spec.env else "[defaults]"
        open_by_key.setdefault(f"{table}.INBOUND_AUTH", []).append(name)
    return [
        Problem(
            key,
            f'is "off" for {", ".join(names)}: deployed to AWS, its functions would take any caller\'s messages '
            "and show every session to any caller (no peer token checked, sessions without an owner)",
            'remove it (the default, "required": peers present the tokens `flightdeck peers add` issues); for an '
            "isolated test rig only, synthesize with the CDK context -c allow_open_agents=true",
        )
        for key, names in open_by_key.items()
    ]


def _token_problems(deployment: DeploymentFile, caller: str, target: str, index: int) -> list[Problem]:
    """Locally: the token `caller` presents to `target` is one target's [peers] lists (else 401 or 403)."""
    peer = deployment.agents[target]
    # As outbound_tokens() gives it once `allow` names the target (a missing `allow` is its own problem).
    presented = deployment.agents[caller].peer_tokens.get(target) or peer.peers.get(caller)
    peers_key = toml_key(("agents", target, "peers"))
    if presented is None:
        try:
            example = new_token(caller)
        except PeerTokenError:
            example = "fdp_<peer id>_<secret>"
        return [
            Problem(
                peers_key,
                f'has no token for "{caller}", which delegates to {target} '
                f"({_delegate_key(caller, index)}): its tasks would be refused with 401",
                f'add {caller} = "{example}" under {peers_key} (LOCAL ONLY; any fdp_{caller}_<32+ characters>)',
            )
        ]
    if presented not in peer.peers.values():
        return [
            Problem(
                toml_key(("agents", caller, "peer_tokens", target)),
                f"is not a token {peers_key} lists: {target} would refuse {caller}'s tasks with 403",
                f"remove it ({caller}'s token for {target} is taken from {peers_key})",
            )
        ]
    return []


def load_checked(
    path: str | Path,
    runtime: Runtime,
    *,
    local_model: bool = False,
    aws_credentials: bool = False,
    allow_open_agents: bool = False,
) -> DeploymentFile:
    """`load` and `check`: the one check of a whole file at start (local up, demo, bench, app.py)."""
    return check(
        load(path),
        path,
        runtime,
        local_model=local_model,
        aws_credentials=aws_credentials,
        allow_open_agents=allow_open_agents,
    )


# The repository's bundled example (functions/flightdeck/ -> repo root).
DEFAULT_CONFIG = Path(__file__).resolve().parents[2] / "examples" / "two-agents.toml"
