"""Every setting of one agent, read from the environment and validated once.

A malformed value stops start-up with a message that names the variable.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import re
from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from flightdeck.domain.agent import AgentDefinition
from flightdeck.domain.allowlist import Allowlist, AllowlistError, parse_endpoints
from flightdeck.domain.config import DomainSettings
from flightdeck.domain.limits import MAX_ANSWER_BYTES, MAX_STORED_RESULT_BYTES
from flightdeck.domain.peers import PeerTokenError, check_token


class SettingsError(RuntimeError):
    """Raised at start-up when the environment does not describe a valid agent."""


# Names, URLs and ARNs of the agent's resources: the stack sets them (infra/environment.py), and locally the
# runtime; a deployment file never does.
RESOURCE_VARIABLES = (
    "STATE_TABLE",
    "TURN_WORKER_FUNCTION",
    "TURNS_QUEUE_URL",
    "THINKS_QUEUE_URL",
    "DISPATCH_QUEUE_URL",
    "DELIVERY_QUEUE_URL",
    "DELIVERY_DLQ_URL",
    "TIMERS_QUEUE_URL",
    "TOOL_CALLBACK_SECRET_ARN",
    "PEER_TOKENS_SECRET_ARN",
)
# Plain-text secrets are for `flightdeck local` only; on AWS they live in Secrets Manager.
LOCAL_ONLY_VARIABLES = ("TOOL_CALLBACK_SECRET", "TOOL_CALLBACK_SECRET_PREVIOUS", "PEER_TOKENS")


PositiveMs = Annotated[int, Field(gt=0)]
# A service name, as in ALLOWED_HOST_MAPPING (flightdeck.domain.allowlist).
SERVICE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")


class Settings(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True, populate_by_name=True)

    agent_name: str = Field(
        alias="AGENT_NAME",
        description="This agent's name: the tokens' `agent`, the resources' prefix, the logs' `service`.",
        min_length=1,
        max_length=64,
        pattern=r"^[a-z0-9][a-z0-9_-]*$",
    )
    agent_description: str = Field(
        "A Flightdeck agent",
        alias="AGENT_DESCRIPTION",
        description="The agent card's description (the deployment file's `description`).",
    )
    agent_version: str = Field(
        "0.1.0", alias="AGENT_VERSION", description="The version the agent card and `GET /health` report."
    )
    # Public base URL of this agent (API Gateway stage URL in AWS); used in the
    # agent card. Empty: derived from the request.
    public_base_url: str = Field(
        "",
        alias="PUBLIC_BASE_URL",
        description="The agent card's base URL and the A2A push URL; set by the stack and by `flightdeck local`; empty: derived from the request.",
    )
    # The lean front door: the function URLs that serve some routes instead of PUBLIC_BASE_URL.
    public_endpoints: dict[str, str] = Field(
        default_factory=dict,
        alias="PUBLIC_ENDPOINT_URLS",
        description="On the lean front door, the agent's own function URLs by endpoint, `endpoint=url ...` (a2a: the "
        "agent card's JSON-RPC URL; callback: the A2A push URL); set by the stack (docs/FRONT_DOORS.md).",
    )
    # The agent's prompt, model and tools, as JSON (see flightdeck.domain.agent).
    agent_config: AgentDefinition | None = Field(
        None,
        alias="AGENT_CONFIG",
        description="The agent definition as JSON (prompt, model, tools, delegates, skills): set from the deployment file.",
    )

    state_table: str = Field(
        alias="STATE_TABLE",
        description="The agent's DynamoDB table (set by the stack or the local runtime).",
        min_length=3,
    )
    # The turn worker's function name: every think starts as an asynchronous invoke of it.
    turn_worker_function: str = Field(
        alias="TURN_WORKER_FUNCTION",
        description="The turn worker's function: every think starts as an asynchronous invoke of it (set by the stack or the local runtime).",
        min_length=1,
        max_length=64,
        pattern=r"^[A-Za-z0-9_-]+$",
    )
    # Who starts a think a write marked owed (ARCHITECTURE §3, topology.THINK_STARTERS).
    think_start: Literal["writer", "stream"] = Field(
        "writer",
        alias="THINK_START",
        description="Who starts a think a write marked owed: `writer`, the writer right after its commit (the mark "
        "in the deadline index, for the sweep); `stream`, the consumer of the table's DynamoDB stream (the mark "
        "out of the index: fewer index writes, a stream hop more per think; docs/ARCHITECTURE.md §3).",
    )
    # How thinks are gathered into invocations (docs/ARCHITECTURE.md §3, topology.THINK_GATHERINGS).
    think_gathering: Literal["one_per_function", "shared"] = Field(
        "one_per_function",
        alias="THINK_GATHERING",
        description="How a writer starts a think: `one_per_function`, an asynchronous invoke of the turn worker per "
        "think; `shared`, a lone think so, the others through the thinks queue, whose batches of up to 10 the turn "
        "worker runs concurrently (docs/ARCHITECTURE.md §3, docs/PERFORMANCE.md).",
    )
    think_lone_window_ms: int = Field(
        1000,
        alias="THINK_LONE_WINDOW_MS",
        ge=0,
        le=60_000,
        description="With THINK_GATHERING = shared: a think is lone, and started by an asynchronous invoke, when it is "
        "the agent's first start in its window (counted in the table); 0 sends every think through the thinks queue.",
    )
    think_batch_threads: int = Field(
        10,
        alias="THINK_BATCH_THREADS",
        ge=1,
        le=10,
        description="How many thinks of one thinks-queue batch run at once in the turn worker (1: one after another).",
    )
    thinks_queue_url: str = Field(
        "",
        alias="THINKS_QUEUE_URL",
        description="The thinks queue, feeding the turn worker batches of thinks (THINK_GATHERING = shared; set by "
        "the stack or the local runtime).",
    )
    # The thinks' delayed retry path (a throttled model's backoff).
    turns_queue_url: str = Field(
        alias="TURNS_QUEUE_URL",
        description="The thinks' delayed retry queue: a throttled model's backoff (set by the stack or the local runtime).",
        min_length=1,
    )
    dispatch_queue_url: str = Field(
        alias="DISPATCH_QUEUE_URL",
        description="Dispatches retried after a retryable failure (set by the stack or the local runtime).",
        min_length=1,
    )
    delivery_queue_url: str = Field(
        alias="DELIVERY_QUEUE_URL",
        description="Answers retried after a retryable failure (set by the stack or the local runtime).",
        min_length=1,
    )
    delivery_dlq_url: str = Field(
        "",
        alias="DELIVERY_DLQ_URL",
        description="Where an answer refused or out of retries goes, with the reason (set by the stack or the local runtime).",
    )
    timers_queue_url: str = Field(
        alias="TIMERS_QUEUE_URL",
        description="The turns' deadline timers, delayed messages (set by the stack or the local runtime).",
        min_length=1,
    )

    tool_callback_secret: str = Field(
        "",
        alias="TOOL_CALLBACK_SECRET",
        description="The callback tokens' HMAC key, at least 32 characters (locally: the file's `callback_secret`; on AWS: TOOL_CALLBACK_SECRET_ARN).",
    )
    tool_callback_secret_previous: str = Field(
        "",
        alias="TOOL_CALLBACK_SECRET_PREVIOUS",
        description="Locally: the previous HMAC key, still accepted during a rotation.",
    )
    tool_callback_secret_arn: str = Field(
        "",
        alias="TOOL_CALLBACK_SECRET_ARN",
        description="On AWS: the Secrets Manager secret holding the HMAC key (AWSCURRENT and AWSPREVIOUS accepted; cached 5 min).",
    )

    # Inbound peer authentication on POST /api/chat, POST /a2a, GET /api/sessions/{id} (flightdeck.domain.peers):
    # "required" (default), or "off" for isolated test rigs only (anyone may call, sessions have no owner).
    inbound_auth: Literal["required", "off"] = Field(
        "required",
        alias="INBOUND_AUTH",
        description="Peers must present their bearer token; `off` for isolated test rigs only (anyone may call, sessions have no owner; synthesis refuses it unless -c allow_open_agents=true).",
    )
    # Outbound: the bearer token this agent presents to each peer service it calls, as a JSON object
    # {"<service name>": "fdp_<our id>_<secret>"}. LOCAL ONLY; on AWS it is the secret PEER_TOKENS_SECRET_ARN.
    peer_tokens: dict[str, str] = Field(
        default_factory=dict,
        alias="PEER_TOKENS",
        description='Locally: the token this agent presents to each peer it calls, JSON {"<service>": "fdp_..."} (set by `flightdeck local` from the file).',
    )
    peer_tokens_secret_arn: str = Field(
        "",
        alias="PEER_TOKENS_SECRET_ARN",
        description="On AWS: the Secrets Manager secret holding PEER_TOKENS (created empty by the stack; cached 5 min).",
    )

    async_tool_timeout_ms: PositiveMs = Field(
        300_000,
        alias="ASYNC_TOOL_TIMEOUT_MS",
        description="How long a turn waits for a delegation before a timeout result stands in for it (a delegate's own `timeout_ms` wins).",
    )
    tool_agg_punctuate_interval_ms: PositiveMs = Field(
        15_000,
        alias="TOOL_AGG_PUNCTUATE_INTERVAL_MS",
        description="The backstop sweep's period (EventBridge rounds it up to whole minutes; per-turn timers are exact).",
    )
    tool_agg_tombstone_ttl_ms: PositiveMs = Field(
        60_000,
        alias="TOOL_AGG_TOMBSTONE_TTL_MS",
        description="How long a completed turn absorbs late and duplicate callbacks.",
    )
    reply_to_state_ttl_ms: PositiveMs = Field(
        86_400_000, alias="REPLY_TO_STATE_TTL_MS", description="Expiry of stored reply routes."
    )
    reply_retry_max_ms: PositiveMs = Field(
        120_000, alias="REPLY_RETRY_MAX_MS", description="Retry budget for delivering an answer."
    )
    session_retention_ms: PositiveMs = Field(
        7 * 86_400_000, alias="SESSION_RETENTION_MS", description="Time to live of sessions, messages and results."
    )
    allowed_host_mapping: Allowlist = Field(
        default_factory=Allowlist,
        alias="ALLOWED_HOST_MAPPING",
        description="The services this agent may call, `name:baseUrl,...`; any other name is refused (fail closed).",
    )
    # Allowed service names whose base URL is found at run time, not configured: on AWS the agents of
    # one deployment file publish their API URL in SSM under PEER_URL_PARAMETER_PREFIX/<name>/api-url
    # (flightdeck.adapters.peer_directory). A URL in ALLOWED_HOST_MAPPING wins over a lookup.
    discovered_peers: tuple[str, ...] = Field(
        (),
        alias="DISCOVERED_PEERS",
        description="Allowed names whose base URL is looked up at run time in SSM under PEER_URL_PARAMETER_PREFIX (a URL in ALLOWED_HOST_MAPPING wins).",
    )
    peer_url_parameter_prefix: str = Field(
        "",
        alias="PEER_URL_PARAMETER_PREFIX",
        description="Where the agents of one deployment publish their URL: the SSM parameter `<prefix>/<name>/api-url` (set by the stack).",
        pattern=r"^(/[A-Za-z0-9_.-]+)*$",
    )

    # A result (B's answer, an MCP tool's) above this many UTF-8 bytes is not taken: its call ends with a
    # result_too_large error result. The default is the callback protocol's answer limit (domain.limits).
    max_result_bytes: Annotated[int, Field(gt=0, le=MAX_STORED_RESULT_BYTES)] = Field(
        MAX_ANSWER_BYTES,
        alias="MAX_RESULT_BYTES",
        description="A larger result is never truncated: its call ends at once with a `result_too_large` error result (a callback carrying one is answered 413). The default is the largest answer a delegate sends.",
    )
    # Whole request bodies above this are refused with 413 before parsing.
    max_body_bytes: Annotated[int, Field(gt=0, le=10_000_000)] = Field(
        1_000_000,
        alias="MAX_BODY_BYTES",
        description="A larger request body is refused with 413 before parsing (synthesis refuses more than 2000000 on AWS).",
    )
    # Bound for HTTP calls to peers.
    peer_timeout_ms: PositiveMs = Field(
        10_000,
        alias="PEER_TIMEOUT_MS",
        description="HTTP timeout towards peers, for the whole exchange (cut to what is left of the invocation).",
    )
    # Tool calls (delegations included) one turn may run; more get an error result.
    # A session runs one turn at a time, so this also bounds its concurrent delegations.
    max_tools_per_turn: Annotated[int, Field(gt=0, le=50)] = Field(
        20,
        alias="MAX_TOOLS_PER_TURN",
        description="Tool calls one turn may run (delegations included); more get a `too_many_tools` error result.",
    )
    # Attempts before a dispatch is given up and recorded as dispatch_failed.
    dispatch_max_attempts: Annotated[int, Field(gt=0, le=10)] = Field(
        6,
        alias="DISPATCH_MAX_ATTEMPTS",
        description="Dispatch attempts before a delegation is recorded as `dispatch_failed`.",
    )
    # Think attempts on a retryable model error (throttling, 5xx), with backoff (each retry a delayed
    # message on the turns queue), before the turn ends with an error answer.
    model_max_attempts: Annotated[int, Field(gt=0, le=4)] = Field(
        3,
        alias="MODEL_MAX_ATTEMPTS",
        description="Think attempts on a retryable model error, with backoff, before the turn ends with an error answer.",
    )

    # Server-Sent Events (message/stream, tasks/resubscribe, GET /api/sessions/{id}/events).
    # "on" only where the HTTP front streams responses: the local gateway, and on AWS the stack's
    # STREAM integrations (it sets this). "off": the card says streaming: false, message/stream and
    # tasks/resubscribe answer -32004, and the events route sends the timeline so far and ends.
    streaming: Literal["on", "off"] = Field(
        "off",
        alias="STREAMING",
        description="`on` where the HTTP front streams (set by `flightdeck local` and the stack): SSE on message/stream, tasks/resubscribe and the events route; `off`: -32004, and the events route answers the timeline so far.",
    )
    # The TCK's test agent (flightdeck.domain.a2a.test_agent): fixed replies to the official A2A TCK's
    # messageId prefixes, for a conformance rig only.
    a2a_test_agent: Literal["off", "tck"] = Field(
        "off",
        alias="A2A_TEST_AGENT",
        description="`tck`: answer the official A2A TCK's messageId prefixes (`tck-artifact-*`, `tck-message-response`) with its fixed artifacts and a direct Message (a conformance rig only); `off`: every message is the agent's.",
    )
    # The web console's routes (topology Route.console: the inspector, the delegate lanes) exist only where
    # the console is served: deploy.console on AWS (the stack sets it), every agent locally.
    console: Literal["on", "off"] = Field(
        "off",
        alias="CONSOLE",
        description="`on` where the web console is served (set by `flightdeck local` and by the stack for deploy.console = true): its routes (/api/inspector/*, the delegate lanes) exist; `off`: they are 404.",
    )
    # A stream reads the state at most once per interval (flightdeck.domain.streaming).
    stream_poll_interval_ms: Annotated[int, Field(ge=100, le=10_000)] = Field(
        1_000, alias="STREAM_POLL_INTERVAL_MS", description="A stream reads the state at most once per interval."
    )
    # A stream ends after this long, final event or not (the client resubscribes): under the streaming
    # function's 900 s timeout and API Gateway's 15-minute streaming limit.
    stream_max_ms: Annotated[int, Field(ge=1_000, le=870_000)] = Field(
        840_000,
        alias="STREAM_MAX_MS",
        description="A stream ends after this long, final event or not (under the function's 900 s).",
    )
    # An SSE comment after this long without an event, under API Gateway's 5-minute idle timeout
    # (and any proxy's shorter one).
    stream_keepalive_ms: Annotated[int, Field(ge=1_000, le=240_000)] = Field(
        15_000,
        alias="STREAM_KEEPALIVE_MS",
        description="An SSE comment after this long without an event (under API Gateway's 5-minute idle timeout).",
    )
    # MCP: how long one tools/call request waits for its answer (delegations and all) before it answers
    # `working` with the session id to collect it by (get_result); capped by the function's time left.
    mcp_wait_ms: Annotated[int, Field(ge=0, le=840_000)] = Field(
        25_000,
        alias="MCP_WAIT_MS",
        description="How long one MCP tools/call waits for its answer before it answers `working` with the id `get_result` collects it by.",
    )

    @field_validator("allowed_host_mapping", mode="before")
    @classmethod
    def _parse_allowlist(cls, value: Any) -> Allowlist:
        if isinstance(value, Allowlist):
            return value
        try:
            return Allowlist.parse(value or "")
        except AllowlistError as exc:
            raise ValueError(str(exc)) from exc

    @field_validator("public_endpoints", mode="before")
    @classmethod
    def _parse_public_endpoints(cls, value: Any) -> Any:
        if not isinstance(value, str):
            return value
        try:
            return parse_endpoints("PUBLIC_ENDPOINT_URLS", value)
        except AllowlistError as exc:
            raise ValueError(str(exc)) from None

    @field_validator("discovered_peers", mode="before")
    @classmethod
    def _parse_discovered_peers(cls, value: Any) -> Any:
        names = [n.strip() for n in value.split(",") if n.strip()] if isinstance(value, str) else list(value or ())
        for name in names:
            if not SERVICE_NAME.match(name):
                raise ValueError(f"{name!r} is not a service name")
        if len(set(names)) != len(names):
            raise ValueError("a service is listed twice")
        return tuple(names)

    @field_validator("peer_tokens", mode="before")
    @classmethod
    def _parse_peer_tokens(cls, value: Any) -> Any:
        if isinstance(value, str):
            try:
                value = json.loads(value) if value.strip() else {}
            except ValueError as exc:
                raise ValueError(f"not JSON: {exc}") from None
        return parse_peer_tokens(value)

    @field_validator("agent_config", mode="before")
    @classmethod
    def _parse_agent_config(cls, value: Any) -> Any:
        if isinstance(value, str):
            return json.loads(unpack_agent_config(value)) if value.strip() else None
        return value

    @model_validator(mode="after")
    def _secret_source(self) -> Settings:
        if not (self.tool_callback_secret or self.tool_callback_secret_arn):
            raise ValueError("TOOL_CALLBACK_SECRET (or TOOL_CALLBACK_SECRET_ARN) must be set")
        if self.tool_callback_secret and len(self.tool_callback_secret) < 32:
            raise ValueError("TOOL_CALLBACK_SECRET must be at least 32 characters")
        if self.discovered_peers and not self.peer_url_parameter_prefix:
            raise ValueError("DISCOVERED_PEERS needs PEER_URL_PARAMETER_PREFIX (where their URLs are published)")
        return self

    @property
    def agent(self) -> AgentDefinition:
        return self.agent_config or AgentDefinition(name=self.agent_name)

    def for_domain(self) -> DomainSettings:
        """The slice the domain reads (flightdeck.domain.config): its fields are named as here."""
        return DomainSettings(**{f.name: getattr(self, f.name) for f in dataclasses.fields(DomainSettings)})

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Settings:
        env = dict(os.environ if environ is None else environ)
        try:
            return cls.model_validate(env)
        except ValidationError as exc:
            raise SettingsError(_describe(exc)) from None


def parse_peer_tokens(value: Any) -> dict[str, str]:
    """A map of service name -> peer token (PEER_TOKENS, or the secret PEER_TOKENS_SECRET_ARN names)."""
    if not isinstance(value, dict):
        raise ValueError('must be a JSON object {"<service>": "fdp_<peer_id>_<secret>", ...}')
    tokens: dict[str, str] = {}
    for service, token in value.items():
        if not isinstance(service, str) or not service:
            raise ValueError("service names must be non-empty strings")
        if not isinstance(token, str):
            raise ValueError(f"{service!r}: the token must be a string")
        try:
            check_token(token)
        except PeerTokenError as exc:
            raise ValueError(f"{service!r}: {exc}") from None  # never echo the token itself
        tokens[service] = token
    return tokens


def _describe(exc: ValidationError) -> str:
    problems = []
    for err in exc.errors():
        where = ".".join(str(p) for p in err["loc"]) or "settings"
        msg = err["msg"].removeprefix("Value error, ")
        problems.append(f"{where}: {msg}")
    return "invalid configuration: " + "; ".join(problems)


@functools.lru_cache(maxsize=1)
def get_settings() -> Settings:
    """The process-wide settings, parsed on first use (at cold start in Lambda)."""
    return Settings.from_env()


# AGENT_CONFIG travels in the function's environment, which Lambda caps at 4 KB for all variables; skills with
# their JSON Schemas fill that fast. A definition the deployment packs (infra/environment.py) is its JSON,
# zlib-compressed and base64-encoded behind this prefix (schemas compress 3-5x); plain JSON is read as before.
PACKED_AGENT_CONFIG_PREFIX = "zlib+b64:"


def pack_agent_config(config_json: str) -> str:
    import base64
    import zlib

    return PACKED_AGENT_CONFIG_PREFIX + base64.b64encode(zlib.compress(config_json.encode("utf-8"), 9)).decode()


def unpack_agent_config(value: str) -> str:
    if not value.startswith(PACKED_AGENT_CONFIG_PREFIX):
        return value
    import base64
    import zlib

    try:
        return zlib.decompress(base64.b64decode(value[len(PACKED_AGENT_CONFIG_PREFIX) :], validate=True)).decode()
    except (ValueError, zlib.error) as exc:
        raise ValueError(f"AGENT_CONFIG is packed ({PACKED_AGENT_CONFIG_PREFIX}) but does not unpack: {exc}") from None
