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
from flightdeck.domain.allowlist import Allowlist, AllowlistError
from flightdeck.domain.config import DomainSettings
from flightdeck.domain.peers import PeerTokenError, check_token


class SettingsError(RuntimeError):
    """Raised at start-up when the environment does not describe a valid agent."""


PositiveMs = Annotated[int, Field(gt=0)]
# A service name, as in ALLOWED_HOST_MAPPING (flightdeck.domain.allowlist).
SERVICE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")


class Settings(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True, populate_by_name=True)

    agent_name: str = Field(alias="AGENT_NAME", min_length=1, max_length=64, pattern=r"^[a-z0-9][a-z0-9_-]*$")
    agent_description: str = Field("A Flightdeck agent", alias="AGENT_DESCRIPTION")
    agent_version: str = Field("0.1.0", alias="AGENT_VERSION")
    # Public base URL of this agent (API Gateway stage URL in AWS); used in the
    # agent card. Empty: derived from the request.
    public_base_url: str = Field("", alias="PUBLIC_BASE_URL")
    # The agent's prompt, model and tools, as JSON (see flightdeck.domain.agent).
    agent_config: AgentDefinition | None = Field(None, alias="AGENT_CONFIG")

    state_table: str = Field(alias="STATE_TABLE", min_length=3)
    # The turn worker's function name: every think starts as an asynchronous invoke of it.
    turn_worker_function: str = Field(
        alias="TURN_WORKER_FUNCTION", min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_-]+$"
    )
    # The thinks' delayed retry path (a throttled model's backoff).
    turns_queue_url: str = Field(alias="TURNS_QUEUE_URL", min_length=1)
    dispatch_queue_url: str = Field(alias="DISPATCH_QUEUE_URL", min_length=1)
    delivery_queue_url: str = Field(alias="DELIVERY_QUEUE_URL", min_length=1)
    delivery_dlq_url: str = Field("", alias="DELIVERY_DLQ_URL")
    timers_queue_url: str = Field(alias="TIMERS_QUEUE_URL", min_length=1)

    tool_callback_secret: str = Field("", alias="TOOL_CALLBACK_SECRET")
    tool_callback_secret_previous: str = Field("", alias="TOOL_CALLBACK_SECRET_PREVIOUS")
    tool_callback_secret_arn: str = Field("", alias="TOOL_CALLBACK_SECRET_ARN")

    # Inbound peer authentication on POST /api/chat, POST /a2a, GET /api/sessions/{id} (flightdeck.domain.peers):
    # "required" (default), or "off" for isolated test rigs only (anyone may call, sessions have no owner).
    inbound_auth: Literal["required", "off"] = Field("required", alias="INBOUND_AUTH")
    # Outbound: the bearer token this agent presents to each peer service it calls, as a JSON object
    # {"<service name>": "fdp_<our id>_<secret>"}. LOCAL ONLY; on AWS it is the secret PEER_TOKENS_SECRET_ARN.
    peer_tokens: dict[str, str] = Field(default_factory=dict, alias="PEER_TOKENS")
    peer_tokens_secret_arn: str = Field("", alias="PEER_TOKENS_SECRET_ARN")

    async_tool_timeout_ms: PositiveMs = Field(300_000, alias="ASYNC_TOOL_TIMEOUT_MS")
    tool_agg_punctuate_interval_ms: PositiveMs = Field(15_000, alias="TOOL_AGG_PUNCTUATE_INTERVAL_MS")
    tool_agg_tombstone_ttl_ms: PositiveMs = Field(60_000, alias="TOOL_AGG_TOMBSTONE_TTL_MS")
    reply_to_state_ttl_ms: PositiveMs = Field(86_400_000, alias="REPLY_TO_STATE_TTL_MS")
    reply_retry_max_ms: PositiveMs = Field(120_000, alias="REPLY_RETRY_MAX_MS")
    session_retention_ms: PositiveMs = Field(7 * 86_400_000, alias="SESSION_RETENTION_MS")
    allowed_host_mapping: Allowlist = Field(default_factory=Allowlist, alias="ALLOWED_HOST_MAPPING")
    # Allowed service names whose base URL is found at run time, not configured: on AWS the agents of
    # one deployment file publish their API URL in SSM under PEER_URL_PARAMETER_PREFIX/<name>/api-url
    # (flightdeck.adapters.peer_directory). A URL in ALLOWED_HOST_MAPPING wins over a lookup.
    discovered_peers: tuple[str, ...] = Field((), alias="DISCOVERED_PEERS")
    peer_url_parameter_prefix: str = Field("", alias="PEER_URL_PARAMETER_PREFIX", pattern=r"^(/[A-Za-z0-9_.-]+)*$")

    # A result (B's answer) above this many UTF-8 bytes is refused with 413.
    max_result_bytes: Annotated[int, Field(gt=0, le=300_000)] = Field(64_000, alias="MAX_RESULT_BYTES")
    # Whole request bodies above this are refused with 413 before parsing.
    max_body_bytes: Annotated[int, Field(gt=0, le=10_000_000)] = Field(1_000_000, alias="MAX_BODY_BYTES")
    # Bound for HTTP calls to peers.
    peer_timeout_ms: PositiveMs = Field(10_000, alias="PEER_TIMEOUT_MS")
    # Tool calls (delegations included) one turn may run; more get an error result.
    # A session runs one turn at a time, so this also bounds its concurrent delegations.
    max_tools_per_turn: Annotated[int, Field(gt=0, le=50)] = Field(20, alias="MAX_TOOLS_PER_TURN")
    # Attempts before a dispatch is given up and recorded as dispatch_failed.
    dispatch_max_attempts: Annotated[int, Field(gt=0, le=10)] = Field(6, alias="DISPATCH_MAX_ATTEMPTS")
    # Think attempts on a retryable model error (throttling, 5xx), with backoff (each retry a delayed
    # message on the turns queue), before the turn ends with an error answer.
    model_max_attempts: Annotated[int, Field(gt=0, le=4)] = Field(3, alias="MODEL_MAX_ATTEMPTS")

    # Server-Sent Events (message/stream, tasks/resubscribe, GET /api/sessions/{id}/events).
    # "on" only where the HTTP front streams responses: the local gateway, and on AWS the stack's
    # STREAM integrations (it sets this). "off": the card says streaming: false, message/stream and
    # tasks/resubscribe answer -32004, and the events route sends the timeline so far and ends.
    streaming: Literal["on", "off"] = Field("off", alias="STREAMING")
    # A stream reads the state at most once per interval (flightdeck.domain.streaming).
    stream_poll_interval_ms: Annotated[int, Field(ge=100, le=10_000)] = Field(1_000, alias="STREAM_POLL_INTERVAL_MS")
    # A stream ends after this long, final event or not (the client resubscribes): under the streaming
    # function's 900 s timeout and API Gateway's 15-minute streaming limit.
    stream_max_ms: Annotated[int, Field(ge=1_000, le=870_000)] = Field(840_000, alias="STREAM_MAX_MS")
    # An SSE comment after this long without an event, under API Gateway's 5-minute idle timeout
    # (and any proxy's shorter one).
    stream_keepalive_ms: Annotated[int, Field(ge=1_000, le=240_000)] = Field(15_000, alias="STREAM_KEEPALIVE_MS")
    # MCP: how long one tools/call request waits for its answer (delegations and all) before it answers
    # `working` with the session id to collect it by (get_result); capped by the function's time left.
    mcp_wait_ms: Annotated[int, Field(ge=0, le=840_000)] = Field(25_000, alias="MCP_WAIT_MS")

    @field_validator("allowed_host_mapping", mode="before")
    @classmethod
    def _parse_allowlist(cls, value: Any) -> Allowlist:
        if isinstance(value, Allowlist):
            return value
        try:
            return Allowlist.parse(value or "")
        except AllowlistError as exc:
            raise ValueError(str(exc)) from exc

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
