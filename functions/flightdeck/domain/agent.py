"""An agent as configuration: prompt, model, local tools and delegating tools.

Deploying a third agent or pointing at another peer changes this JSON, not code.
"""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, field_validator, model_validator

from flightdeck.domain.invalid_value import InvalidValue
from flightdeck.domain.model import RESPOND_TOOL
from flightdeck.domain.skills.contract import Skill, skill_of
from flightdeck.domain.skills.handlers import HANDLERS


class ModelConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    provider: Literal["local", "bedrock"] = Field(
        "local", description="`local`: the deterministic offline model; `bedrock`: Amazon Bedrock's Converse."
    )
    # Bedrock model id or inference profile (provider "bedrock").
    model_id: str = Field(
        "", description="provider bedrock: a model id, a cross-region inference profile id or an ARN."
    )
    max_tokens: int = Field(1024, gt=0, description="The most tokens one think may write.")
    temperature: float = Field(0.0, ge=0, le=1, description="The model's sampling temperature.")
    # Local model only: pretend to think this long, to exercise long-running work.
    think_delay_ms: int = Field(
        0, ge=0, description="provider local: pretend to think this long, to exercise long-running work."
    )


class DelegateTool(BaseModel):
    """A tool whose call is delegated to a peer agent and answered asynchronously."""

    model_config = ConfigDict(extra="forbid")

    # Peer agent name: the model's tool is called `ask_<agent>` unless tool_name says otherwise.
    agent: str = Field(
        min_length=1,
        max_length=64,
        pattern=r"^[a-z0-9][a-z0-9_-]*$",
        description="The peer agent delegated to: an agent of the file, or a name of allowed_hosts.",
    )
    tool_name: str = Field("", description="The model's tool name (empty: ask_<agent>).")
    description: str = Field("", description="The tool's description the model reads (empty: taken from the peer).")
    # Logical name of the peer in our ALLOWED_HOST_MAPPING: where its /api/chat lives.
    service: str = Field(
        "", description="The peer's name in our ALLOWED_HOST_MAPPING, where its /api/chat lives (empty: agent)."
    )
    # Our own name in the peer's ALLOWED_HOST_MAPPING: where it sends the answer.
    callback_service: str = Field(
        "", description="Our own name in the peer's ALLOWED_HOST_MAPPING, where it sends the answer (empty: our name)."
    )
    # "a2a": any A2A v0.3 agent, found by its agent card (flightdeck.domain.a2a.client).
    protocol: Literal["flightdeck", "a2a"] = Field(
        "flightdeck", description="`flightdeck`: one of our agents; `a2a`: any A2A agent, found by its card_url."
    )
    # protocol "a2a": the peer's agent card URL; it must lie under an ALLOWED_HOST_MAPPING base URL.
    card_url: str = Field(
        "", max_length=2048, description="protocol a2a: the peer's agent card URL, under an allowed_hosts base URL."
    )
    # How long a turn waits for this delegate's answer before a timeout result stands in for it
    # (unset: ASYNC_TOOL_TIMEOUT_MS). At most 7 days, the default session retention.
    timeout_ms: int | None = Field(
        None,
        gt=0,
        le=7 * 86_400_000,
        description="How long a turn waits for its answer (unset: ASYNC_TOOL_TIMEOUT_MS).",
    )

    @model_validator(mode="after")
    def _a2a_needs_a_card(self) -> DelegateTool:
        if self.protocol == "a2a" and not self.card_url.startswith(("http://", "https://")):
            raise InvalidValue(
                f"delegate {self.agent!r}: protocol 'a2a' needs an http(s) card_url",
                'add card_url = "https://<peer host>/.well-known/agent-card.json" (its host under allowed_hosts)',
                ("card_url",),
            )
        return self

    @property
    def name(self) -> str:
        return self.tool_name or f"ask_{self.agent}".replace("-", "_")

    @property
    def peer_service(self) -> str:
        return self.service or self.agent

    def timeout_or(self, default_ms: int) -> int:
        """This delegation's wait: its own timeout_ms, else the agent's default (ASYNC_TOOL_TIMEOUT_MS)."""
        return self.timeout_ms or default_ms


# An MCP server's name namespaces its tools (`<server>__<tool>`, flightdeck.domain.mcp_tools); a credential is
# a reference, never the value: `env:NAME` (the function's environment, locally) or `secret:NAME` (Secrets Manager).
# A call runs in the think (up to 10 s) or in the dispatch worker, whose 30 s timeout, less its reserve, bounds it.
MCP_MAX_TIMEOUT_MS = 25_000
MCP_CREDENTIAL = r"^(env:[A-Za-z_][A-Za-z0-9_]{0,127}|secret:[A-Za-z0-9/_+=.@:-]{1,512})$"


class McpTool(BaseModel):
    """One tool of an MCP server the agent may call (the server's `tools` allowlist)."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(
        min_length=1, max_length=128, pattern=r"^[A-Za-z0-9_.-]+$", description="The tool's name on the server."
    )
    # How long one call may take (unset: the server's timeout_ms). Up to MCP_INLINE_MAX_MS the call runs inside the
    # think; a longer one is taken like a delegation (flightdeck.domain.mcp_tools).
    timeout_ms: int | None = Field(
        None, gt=0, le=MCP_MAX_TIMEOUT_MS, description="How long one call may take (unset: the server's timeout_ms)."
    )


class McpServer(BaseModel):
    """An MCP server whose tools the agent's model may call (Streamable HTTP; flightdeck.domain.mcp_tools)."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(
        min_length=1,
        max_length=32,
        pattern=r"^[a-z0-9][a-z0-9-]*$",
        description="Namespaces its tools, `<name>__<tool>`; not a delegate's agent name.",
    )
    # Its MCP endpoint; it must lie under an ALLOWED_HOST_MAPPING base URL (allowed_hosts), as a peer's.
    url: str = Field(
        min_length=1,
        max_length=2048,
        description="Its MCP endpoint (Streamable HTTP), under an allowed_hosts base URL.",
    )
    # The bearer token's reference: "env:NAME" or "secret:NAME" ("": the server takes no token).
    credential: str = Field(
        "", description="The bearer token's reference, env:NAME or secret:NAME, never the token (empty: none)."
    )
    # The tools offered to the model (unset: every tool the server lists).
    tools: list[McpTool] | None = Field(
        None, description="The tools offered to the model: names, or tables with a timeout_ms (unset: every tool)."
    )
    # A call's timeout unless its tool sets one.
    timeout_ms: int = Field(
        10_000,
        gt=0,
        le=MCP_MAX_TIMEOUT_MS,
        description="A call's timeout unless its tool sets one (over 10 s: taken like a delegation).",
    )

    @field_validator("credential")
    @classmethod
    def _credential_is_a_reference(cls, value: str) -> str:
        if value and not re.fullmatch(MCP_CREDENTIAL, value):
            # Never echo it: it may be the token itself.
            raise InvalidValue(
                'an MCP credential is a reference, "env:NAME" (an environment variable) or "secret:NAME" '
                "(a Secrets Manager secret), never the token itself",
                'write credential = "env:NOTES_TOKEN" (locally) or "secret:<secret name>" (on AWS), and keep the '
                "token there",
            )
        return value

    @field_validator("url")
    @classmethod
    def _url_is_http(cls, value: str) -> str:
        if not value.startswith(("http://", "https://")):
            raise InvalidValue(
                f"{value!r} is not an http(s) URL",
                f'write it with its scheme, e.g. url = "http://{value.split("://")[-1]}"',
            )
        return value

    @field_validator("tools", mode="before")
    @classmethod
    def _bare_names(cls, value: Any) -> Any:
        return [{"name": v} if isinstance(v, str) else v for v in value] if isinstance(value, list) else value

    def allows(self, tool: str) -> bool:
        return self.tools is None or any(t.name == tool for t in self.tools)

    def timeout_of(self, tool: str) -> int:
        found = next((t for t in self.tools or () if t.name == tool), None)
        return found.timeout_ms if found is not None and found.timeout_ms else self.timeout_ms


class AgentDefinition(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1, max_length=64, description="The agent's name.")
    description: str = Field(
        "A Flightdeck agent",
        description="What it does: its agent card's description, and its delegators' tool description.",
    )
    system_prompt: str = Field("You are a helpful agent.", description="The model's system prompt.")
    model: ModelConfig = Field(default_factory=ModelConfig, description="The model that thinks.")
    # The list fields' factories are lambdas, not `list`: pydantic reads a factory's signature, and reading a
    # builtin's compiles the tokenizer's regex, about a millisecond at every function's start.
    # Names of built-in tools run inline (see flightdeck.domain.builtin_tools). `local_tools`, its name
    # before, is still read, so older deployment files keep working.
    builtin_tools: list[str] = Field(
        default_factory=lambda: [],
        validation_alias=AliasChoices("builtin_tools", "local_tools"),
        description="Built-in tools run inside the think (flightdeck.domain.builtin_tools); also read as local_tools.",
    )
    delegates: list[DelegateTool] = Field(
        default_factory=lambda: [],
        description="Delegating tools: each hands a task to a peer agent, answered asynchronously.",
    )
    # What the agent offers (flightdeck.domain.skills): objects with their schemas, or bare names (read as
    # skills without schemas, as before).
    skills: list[Skill] = Field(
        default_factory=lambda: [],
        description="What it offers, with JSON Schemas (bare names: skills without schemas).",
    )
    # How many tasks it takes at once (sessions busy with a turn); one more is refused as busy (429, or
    # JSON-RPC -32000 on /a2a), never queued without bound. None: no limit of its own.
    max_concurrent_tasks: int | None = Field(
        None, gt=0, le=100_000, description="Sessions busy at once; one more is refused as busy, 429 (unset: no limit)."
    )
    # Offer the built-in ask_user tool: the agent may end a turn asking for input (flightdeck.domain.asking).
    ask_user: bool = Field(True, description="Offer the built-in ask_user tool: a turn may end asking for input.")
    # MCP servers whose (allowed) tools the model may call, as `<server>__<tool>` (flightdeck.domain.mcp_tools).
    mcp_servers: list[McpServer] = Field(
        default_factory=lambda: [],
        description="MCP servers whose allowed tools the model may call, as <server>__<tool>.",
    )

    @field_validator("skills", mode="before")
    @classmethod
    def _skills_as_objects(cls, value: Any) -> Any:
        return [skill_of(v) if isinstance(v, str) else v for v in value] if isinstance(value, list) else value

    @model_validator(mode="after")
    def _skills_are_bound(self) -> AgentDefinition:
        ids = [s.id for s in self.skills]
        duplicates = sorted({i for i in ids if ids.count(i) > 1})
        if duplicates:
            second = next(i for i, skill_id in enumerate(ids) if skill_id in duplicates and ids.index(skill_id) < i)
            raise InvalidValue(
                f"is {ids[second]!r}, the id of skill #{ids.index(ids[second]) + 1} too",
                f'give each skill an id of its own, e.g. id = "{ids[second]}-2"',
                ("skills", second, "id"),
            )
        for index, skill in enumerate(self.skills):
            if not skill.handler:
                continue
            handler = HANDLERS.get(skill.handler)
            if handler is None:
                known = ", ".join(sorted(HANDLERS))
                raise InvalidValue(
                    f"{skill.handler!r} is not a handler",
                    f"use one of: {known}; or remove it (the model answers)",
                    ("skills", index, "handler"),
                )
            # A skill bound to a handler takes the handler's contract unless it declares its own.
            self.skills[index] = skill.model_copy(
                update={
                    "input_schema": skill.input_schema or handler.input_schema,
                    "output_schema": skill.output_schema or handler.output_schema,
                }
            )
        return self

    def skill(self, skill_id: str) -> Skill | None:
        return next((s for s in self.skills if s.id == skill_id), None)

    @model_validator(mode="after")
    def _ask_user_is_one_tool(self) -> AgentDefinition:
        clash = next((d for d in self.delegates if d.name == "ask_user"), None) if self.ask_user else None
        if clash is not None:
            raise InvalidValue(
                f"delegate {clash.agent!r}: its tool name ask_user is the built-in ask_user tool's",
                f'give it another tool_name (e.g. "ask_{clash.agent}_agent"), or set ask_user = false',
                ("delegates", self.delegates.index(clash), "tool_name"),
            )
        return self

    @model_validator(mode="after")
    def _respond_is_reserved(self) -> AgentDefinition:
        # A contract's answer comes back through this tool (flightdeck.adapters.bedrock): a delegate of
        # that name would be answered as the final reply instead of delegated to.
        clash = next((d for d in self.delegates if d.name == RESPOND_TOOL), None)
        if clash is not None:
            raise InvalidValue(
                f"delegate {clash.agent!r}: its tool name {RESPOND_TOOL} is reserved for answers held to a schema",
                f'give it another tool_name, e.g. "ask_{clash.agent}"',
                ("delegates", self.delegates.index(clash), "tool_name"),
            )
        return self

    @model_validator(mode="after")
    def _tool_names_are_unique(self) -> AgentDefinition:
        # The model calls a tool by name: two tools of one name could not be told apart.
        names = [d.name for d in self.delegates] + list(self.builtin_tools)
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise InvalidValue(
                f"agent {self.name!r} has several tools named {', '.join(duplicates)}",
                "give each delegate a tool_name of its own (a delegate's tool is ask_<agent> unless tool_name says), "
                "or drop the built-in tool of that name from builtin_tools",
            )
        return self

    @model_validator(mode="after")
    def _mcp_namespaces_are_own(self) -> AgentDefinition:
        # `<x>__<y>` names a delegate's skill when x is a delegate's agent: a server of that name would make one
        # tool name mean two things, so server names differ from delegates' agents and from each other.
        names = [m.name for m in self.mcp_servers]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            second = next(i for i, n in enumerate(names) if n in duplicates and names.index(n) < i)
            raise InvalidValue(
                f"is {names[second]!r}, the name of MCP server #{names.index(names[second]) + 1} too",
                f'give each MCP server a name of its own, e.g. name = "{names[second]}-2"',
                ("mcp_servers", second, "name"),
            )
        clash = next((m for m in self.mcp_servers if self.delegate_for_agent(m.name) is not None), None)
        if clash is not None:
            raise InvalidValue(
                f"is {clash.name!r}, a delegate's agent name: <name>__<tool> would name both its skills and this "
                "server's tools",
                f'rename the server, e.g. name = "{clash.name}-tools"',
                ("mcp_servers", self.mcp_servers.index(clash), "name"),
            )
        return self

    def mcp_server(self, name: str) -> McpServer | None:
        return next((m for m in self.mcp_servers if m.name == name), None)

    def delegate_for_tool(self, tool_name: str) -> DelegateTool | None:
        """The delegate a tool reaches: its free-text tool, or one of its skills (`<agent>__<skill id>`,
        flightdeck.domain.skills.peers)."""
        found = next((d for d in self.delegates if d.name == tool_name), None)
        if found is None and "__" in tool_name:
            return self.delegate_for_agent(tool_name.partition("__")[0])
        return found

    def delegate_for_agent(self, agent: str) -> DelegateTool | None:
        return next((d for d in self.delegates if d.agent == agent), None)
