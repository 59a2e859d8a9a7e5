"""The tools an agent offers its model: its delegating tools, its in-process tools, and ask_user."""

from __future__ import annotations

from flightdeck.domain.agent import AgentDefinition
from flightdeck.domain.asking import ask_user_tool_spec
from flightdeck.domain.builtin_tools import specs_for
from flightdeck.domain.model import ToolSpec, delegate_tool_spec


def tool_specs(agent: AgentDefinition) -> list[ToolSpec]:
    """Delegating tools first, then local tools, then ask_user; tool names must be unique."""
    specs = [delegate_tool_spec(d.name, d.agent, d.description, a2a=d.protocol == "a2a") for d in agent.delegates]
    specs += specs_for(agent.builtin_tools)
    if agent.ask_user:
        specs.append(ask_user_tool_spec())
    names = [s["toolSpec"]["name"] for s in specs]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise ValueError(f"agent {agent.name!r} has several tools named {', '.join(duplicates)}")
    return specs
