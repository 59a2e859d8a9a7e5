"""The tools an agent offers its model: its delegating tools, then its in-process tools."""

from __future__ import annotations

from flightdeck.domain.agent import AgentDefinition
from flightdeck.domain.local_tools import specs_for
from flightdeck.domain.model import ToolSpec, delegate_tool_spec


def tool_specs(agent: AgentDefinition) -> list[ToolSpec]:
    """Delegating tools first, then local tools; tool names must be unique."""
    specs = [delegate_tool_spec(d.name, d.agent, d.description) for d in agent.delegates]
    specs += specs_for(agent.local_tools)
    names = [s["toolSpec"]["name"] for s in specs]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise ValueError(f"agent {agent.name!r} has several tools named {', '.join(duplicates)}")
    return specs
