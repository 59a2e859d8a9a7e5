"""Synthesizes the CDK app once per test run (jsii start-up is slow) and shares the result: with
pytest-xdist, the first worker to need it synthesizes and the other reads its cdk.out (tests.support.once).

- `synth`: every agent of examples/two-agents.toml through infra.deployment.build
  (the same path as app.py, cdk-nag on) and the account stack it adds
  (Flightdeck-ApiGatewayAccount), plus `Flightdeck-planner` from PLANNER_TOML
  below (Bedrock model, a known and an unknown peer, retain_data = false, ...).
  The Lambda asset is bundled with its dependencies for the Lambda platform
  (cached under ~/.cache/flightdeck/lambda-deps, so pip runs once per machine).
  FLIGHTDECK_BUNDLE_DEPS=0 skips the dependencies (offline); tests that need
  them are then skipped, saying so.
- `host_synth`: one stack whose asset is built for this machine's platform and
  Python, so its handlers can really be imported (the deployed aarch64 asset holds
  compiled wheels this machine may not load).
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
for entry in (REPO / "functions", REPO):
    if str(entry) not in sys.path:
        sys.path.insert(0, str(entry))
# jsii prints a banner about Node 20's end of life on every start.
os.environ.setdefault("JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION", "20")

import pytest  # noqa: E402

from tests.support.once import once_per_run  # noqa: E402

EXAMPLE = REPO / "examples" / "two-agents.toml"

PLANNER_TOML = """
[defaults]
TOOL_AGG_PUNCTUATE_INTERVAL_MS = 150000   # 2.5 min: the sweep runs every 3 minutes
TOOL_CALLBACK_SECRET = "local-only-secret-that-must-not-reach-lambda-0123"
PEER_TOKENS = '{"helper": "fdp_planner_LOCAL-ONLY-must-not-reach-lambda-0123456789"}'

[agents.planner]
description = "Plans with a Bedrock model."
allow = ["helper", "ghost"]
allowed_hosts = { audit = "https://audit.example.com/base" }
callback_secret = "local-only-planner-secret-0123456789abcdef0123"

[agents.planner.model]
provider = "bedrock"
model_id = "us.anthropic.claude-3-5-haiku-20241022-v1:0"

[[agents.planner.delegates]]
agent = "helper"

# MCP servers whose tokens are secrets: by name, and by ARN (tests/infra/test_infra_mcp.py); one without a token.
[[agents.planner.mcp_servers]]
name = "notes"
url = "https://audit.example.com/base/notes/mcp"
credential = "secret:planner/notes-token"

[[agents.planner.mcp_servers]]
name = "search"
url = "https://audit.example.com/base/search/mcp"
credential = "secret:arn:aws:secretsmanager:eu-west-1:123456789012:secret:search-token-AbCdEf"

[[agents.planner.mcp_servers]]
name = "open"
url = "https://audit.example.com/base/open/mcp"

[agents.planner.peers]
user = "fdp_user_LOCAL-ONLY-must-not-reach-aws-0123456789abcdef"

[agents.planner.deploy]
account = "123456789012"
region = "eu-west-1"
peer_urls = { helper = "https://abc123.execute-api.eu-west-1.amazonaws.com/prod/" }
retain_data = false
memory_mb = 1024
think_memory_mb = 256
deadline_index_projection = "ALL"
throttle_rate = 7
throttle_burst = 9

[agents.planner.env]
ASYNC_TOOL_TIMEOUT_MS = "45000"
PUBLIC_BASE_URL = "https://planner.example.com/agent"   # a custom domain: wins over the stage URL
STATE_TABLE = "not-this-one"

[agents.helper]
"""


@dataclass
class Synth:
    outdir: Path
    stacks: list[str]
    templates: dict[str, dict[str, Any]] = field(default_factory=dict)
    # stack -> [(level, construct path, text)] of aws:cdk:info/warning/error metadata
    messages: dict[str, list[tuple[str, str, str]]] = field(default_factory=dict)
    error: str | None = None  # synth exception (cdk-nag 3 raises ValidationFailed)
    validation_report: dict[str, Any] | None = None
    deps_bundled: bool = True

    @property
    def agent_stacks(self) -> list[str]:
        """The stacks of agents (without the account stack)."""
        return [s for s in self.stacks if s != "Flightdeck-ApiGatewayAccount"]

    def asset_dir(self, stack: str) -> Path:
        """The one zip asset of a stack (the Lambda code), as a directory in cdk.out."""
        manifest = json.loads((self.outdir / f"{stack}.assets.json").read_text())
        dirs = [
            self.outdir / f["source"]["path"]
            for f in manifest["files"].values()
            if f["source"].get("packaging") == "zip"
        ]
        assert len(dirs) == 1, f"expected exactly one code asset in {stack}, got {dirs}"
        return dirs[0]


def _collect(outdir: Path, stacks: list[str], error: str | None, deps: bool) -> Synth:
    result = Synth(outdir=outdir, stacks=stacks, error=error, deps_bundled=deps)
    report = outdir / "validation-report.json"
    if report.is_file():
        result.validation_report = json.loads(report.read_text())
    manifest = json.loads((outdir / "manifest.json").read_text())
    for name in stacks:
        template_file = outdir / f"{name}.template.json"
        result.templates[name] = json.loads(template_file.read_text())
        artifact = manifest["artifacts"][name]
        metadata = dict(artifact.get("metadata", {}))
        if artifact.get("additionalMetadataFile"):
            metadata.update(json.loads((outdir / artifact["additionalMetadataFile"]).read_text()))
        messages = []
        for path, entries in metadata.items():
            for entry in entries:
                kind = entry["type"]
                if kind in ("aws:cdk:info", "aws:cdk:warning", "aws:cdk:error"):
                    messages.append((kind.rsplit(":", 1)[1], path, str(entry["data"])))
        result.messages[name] = messages
    return result


@pytest.fixture(scope="session")
def synth(tmp_path_factory: pytest.TempPathFactory) -> Synth:
    outdir, made = once_per_run(tmp_path_factory, "cdk.out", _synth_example_and_planner)
    return _collect(outdir, made["stacks"], made["error"], made["deps"])


def _synth_example_and_planner(outdir: Path) -> dict[str, Any]:
    import aws_cdk as cdk

    from flightdeck import config_file
    from infra.bundling import BundleSettings
    from infra.deployment import build
    from infra.stack import FlightdeckStack

    planner_file = outdir.with_name(f"{outdir.name}.planner.toml")
    planner_file.write_text(PLANNER_TOML)

    app = cdk.App(outdir=str(outdir), context={"config": str(EXAMPLE)})
    stacks = [s.stack_name for s in build(app)]  # nag plugin added here, as in app.py
    stacks.append("Flightdeck-ApiGatewayAccount")  # the account-wide API Gateway role, made once (infra/account.py)
    bundle = BundleSettings.from_context(app.node)
    planner = config_file.load(planner_file)
    FlightdeckStack(
        app,
        "Flightdeck-planner",
        deployment=planner,
        deployment_name="planner",
        agent="planner",
        bundle=bundle,
        env=cdk.Environment(
            account=planner.agents["planner"].deploy.account, region=planner.agents["planner"].deploy.region
        ),
    )
    stacks.append("Flightdeck-planner")
    error = None
    try:
        app.synth()
    except Exception as exc:  # noqa: BLE001 - reported by test_infra_nag
        error = str(exc)
    return {"stacks": stacks, "error": error, "deps": bundle.deps}


@pytest.fixture(scope="session")
def host_synth(tmp_path_factory: pytest.TempPathFactory) -> Synth:
    outdir, made = once_per_run(tmp_path_factory, "cdk.out.host", _synth_worker_for_this_host)
    return _collect(outdir, made["stacks"], None, made["deps"])


def _synth_worker_for_this_host(outdir: Path) -> dict[str, Any]:
    import aws_cdk as cdk

    from infra.bundling import BundleSettings
    from infra.deployment import build

    app = cdk.App(
        outdir=str(outdir),
        context={"config": str(EXAMPLE), "agents": "worker", "bundlePlatform": "host", "nag": False},
    )
    stacks = [s.stack_name for s in build(app)]
    deps = BundleSettings.from_context(app.node).deps
    app.synth()
    return {"stacks": stacks, "deps": deps}


@pytest.fixture(scope="session")
def orchestrator_tpl(synth: Synth) -> dict[str, Any]:
    return synth.templates["Flightdeck-orchestrator"]


@pytest.fixture(scope="session")
def planner_tpl(synth: Synth) -> dict[str, Any]:
    return synth.templates["Flightdeck-planner"]
