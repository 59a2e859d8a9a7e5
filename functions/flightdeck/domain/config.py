"""The settings the domain reads: its slice of the agent's settings.

flightdeck.settings.Settings.for_domain builds it (the defaults and validation live there, once).
Resource names, queue URLs and secrets stay outside: a use case reaches those only through its ports.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from flightdeck.domain.agent import AgentDefinition
from flightdeck.domain.allowlist import Allowlist


@dataclass(frozen=True)
class DomainSettings:
    agent_name: str
    agent: AgentDefinition  # the agent's prompt, model and tools
    allowed_host_mapping: Allowlist  # the only places a request or an answer may go, by service name
    inbound_auth: Literal["required", "off"]  # "off": anyone may call (isolated test rigs only)
    public_base_url: str  # named in what this agent sends A2A peers ("": none configured)
    public_endpoints: dict[str, str]  # the lean front door: its function URLs by endpoint (allowlist.ENDPOINTS)
    # How long things wait and live (ms).
    async_tool_timeout_ms: int  # a delegation's wait, unless its delegate sets timeout_ms
    tool_agg_punctuate_interval_ms: int  # the sweep's interval: the liveness bound's slack
    tool_agg_tombstone_ttl_ms: int  # a completed turn's record outlives its completion this long
    reply_to_state_ttl_ms: int  # a reply route's life
    reply_retry_max_ms: int  # an answer's delivery is retried this long
    session_retention_ms: int
    # Limits.
    max_result_bytes: int
    max_tools_per_turn: int
    dispatch_max_attempts: int
    model_max_attempts: int
    # Streams (flightdeck.domain.streaming).
    stream_poll_interval_ms: int
    stream_max_ms: int
    stream_keepalive_ms: int
    a2a_test_agent: str = "off"  # "tck": the TCK's fixed replies (flightdeck.domain.a2a.test_agent)
