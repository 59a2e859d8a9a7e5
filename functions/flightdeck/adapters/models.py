"""Choose the model and the tool specs of an agent from its configuration."""

from __future__ import annotations

from flightdeck.domain.agent import AgentDefinition
from flightdeck.domain.asking import ask_user_tool_spec
from flightdeck.domain.local_model import LocalModel
from flightdeck.domain.local_tools import specs_for
from flightdeck.domain.model import Model, ToolSpec, delegate_tool_spec


def build_model(agent: AgentDefinition) -> Model:
    """The agent's model: the deterministic local model or Bedrock's Converse API."""
    provider = agent.model.provider
    if provider == "local":
        return LocalModel(agent.model, agent)
    if provider == "bedrock":
        from flightdeck.adapters.bedrock import BedrockModel  # boto3 only when needed

        return BedrockModel(agent.model)
    raise ValueError(f"unknown model provider {provider!r}")


def tool_specs(agent: AgentDefinition) -> list[ToolSpec]:
    """Delegating tools first, then local tools, then ask_user; tool names must be unique."""
    specs = [delegate_tool_spec(d.name, d.agent, d.description, a2a=d.protocol == "a2a") for d in agent.delegates]
    specs += specs_for(agent.local_tools)
    if agent.ask_user:
        specs.append(ask_user_tool_spec())
    names = [s["toolSpec"]["name"] for s in specs]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise ValueError(f"agent {agent.name!r} has several tools named {', '.join(duplicates)}")
    return specs
