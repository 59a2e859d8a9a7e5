"""The domain's settings slice (flightdeck.domain.config): what the domain reads of the environment, and only that."""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

from flightdeck.domain.config import DomainSettings
from flightdeck.settings import Settings

DOMAIN = Path(__file__).resolve().parents[2] / "functions" / "flightdeck" / "domain"
ENVIRONMENT = {
    "AGENT_NAME": "orchestrator",
    "STATE_TABLE": "orchestrator-state",
    "TURN_WORKER_FUNCTION": "orchestrator-turn-worker",
    "TURNS_QUEUE_URL": "https://sqs/turns",
    "DISPATCH_QUEUE_URL": "https://sqs/dispatch",
    "DELIVERY_QUEUE_URL": "https://sqs/delivery",
    "TIMERS_QUEUE_URL": "https://sqs/timers",
    "TOOL_CALLBACK_SECRET": "s" * 40,
    "ALLOWED_HOST_MAPPING": "worker:http://worker.test",
    "ASYNC_TOOL_TIMEOUT_MS": "12345",
    "MAX_TOOLS_PER_TURN": "7",
}


def test_the_slice_carries_each_of_its_values_as_the_settings_have_it():
    settings = Settings.from_env(ENVIRONMENT)
    domain = settings.for_domain()
    assert {f.name: getattr(domain, f.name) for f in dataclasses.fields(DomainSettings)} == {
        f.name: getattr(settings, f.name) for f in dataclasses.fields(DomainSettings)
    }
    assert (domain.async_tool_timeout_ms, domain.max_tools_per_turn) == (12345, 7)
    assert domain.agent == settings.agent and domain.allowed_host_mapping.services == {"worker": "http://worker.test"}


def test_the_slice_holds_no_secret_and_no_resource_name():
    names = {f.name for f in dataclasses.fields(DomainSettings)}
    assert not {n for n in names if any(w in n for w in ("secret", "token", "table", "queue", "function"))}


def test_no_domain_module_imports_the_environment_settings_or_the_composition_root():
    for path in sorted(DOMAIN.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module:
                modules = [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
            elif isinstance(node, ast.Import):
                modules = [a.name for a in node.names]
            else:
                continue
            assert not {"flightdeck.settings", "flightdeck.wiring"} & set(modules), path.name
