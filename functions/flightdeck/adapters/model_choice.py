"""Choose the model of an agent from its configuration."""

from __future__ import annotations

from flightdeck.domain.agent import AgentDefinition
from flightdeck.domain.model import Model
from flightdeck.domain.scripted_model import ScriptedModel


def build_model(agent: AgentDefinition) -> Model:
    """The agent's model: the deterministic local model or Bedrock's Converse API."""
    provider = agent.model.provider
    if provider == "local":
        from flightdeck.adapters.prompt_cache_ledger import shared_ledger

        return ScriptedModel(agent.model, agent, ledger=shared_ledger())
    if provider == "bedrock":
        from flightdeck.adapters.bedrock import BedrockModel  # boto3 only when needed

        return BedrockModel(agent.model)
    raise ValueError(f"unknown model provider {provider!r}")
