"""`python app.py` synthesizes with no Docker and no AWS credentials, honouring its context.

A run of app.py is a process that starts jsii and synthesizes (several seconds each): two real syntheses
(the context as the CDK CLI passes it, and app.py's own arguments) and two refusals prove the app's wiring.
Every other refusal is the check app.py runs (infra.deployment.select), called here with a context.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from infra.deployment import select

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow


def _run_app(
    outdir: Path, context: dict[str, Any], args: tuple[str, ...] = (), extra_env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "CDK_")) and k not in ("DOCKER_HOST",)}
    env.update(
        CDK_OUTDIR=str(outdir),
        CDK_CONTEXT_JSON=json.dumps(context),
        JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION="20",
        PATH="/usr/local/bin:/usr/bin:/bin",  # no docker on purpose (and none on this machine)
        AWS_SHARED_CREDENTIALS_FILE="/nonexistent",
        AWS_CONFIG_FILE="/nonexistent",
    )
    env.update(extra_env or {})
    return subprocess.run(
        [sys.executable, "app.py", *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=300
    )


def _stacks(outdir: Path) -> set[str]:
    manifest = json.loads((outdir / "manifest.json").read_text())
    return {k for k, a in manifest["artifacts"].items() if a["type"] == "aws:cloudformation:stack"}


def _ssm_names(template: dict[str, Any]) -> list[str]:
    return [r["Properties"]["Name"] for r in template["Resources"].values() if r["Type"] == "AWS::SSM::Parameter"]


@pytest.fixture(scope="module")
def cli_synth(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """app.py as the CDK CLI runs it (context in CDK_CONTEXT_JSON, cdk-nag on), with the CLI's
    CDK_DEFAULT_REGION/ACCOUNT set as it sets them even without credentials."""
    outdir = tmp_path_factory.mktemp("cli-synth")
    result = _run_app(
        outdir,
        {"agents": "worker", "bundleDeps": "false", "deployment": "prod-a"},
        extra_env={"CDK_DEFAULT_REGION": "eu-west-3", "CDK_DEFAULT_ACCOUNT": "111122223333"},
    )
    assert result.returncode == 0, result.stderr[-4000:]
    return outdir


@pytest.fixture(scope="module")
def file_synth(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, subprocess.CompletedProcess[str]]:
    """`python app.py --config FILE -c ...`: the file and the context from app.py's own arguments."""
    outdir = tmp_path_factory.mktemp("file-synth")
    result = _run_app(
        outdir,
        {},
        ("--config", "examples/three-agents.toml", "-c", "agents=critic", "-c", "bundleDeps=false", "-c", "nag=false"),
    )
    assert result.returncode == 0, result.stderr[-4000:]
    return outdir, result


def test_app_py_synthesizes_selected_agents(cli_synth: Path) -> None:
    assert _stacks(cli_synth) == {"Flightdeck-worker", "Flightdeck-ApiGatewayAccount"}
    manifest = json.loads((cli_synth / "manifest.json").read_text())
    assert manifest["artifacts"]["Flightdeck-worker"]["environment"] == "aws://unknown-account/unknown-region"


def test_a_credential_less_cli_synth_pins_no_region(cli_synth: Path) -> None:
    # The CDK CLI sets CDK_DEFAULT_REGION even when it finds no credentials (its config, or us-east-1).
    manifest = json.loads((cli_synth / "manifest.json").read_text())
    assert manifest["artifacts"]["Flightdeck-worker"]["environment"] == "aws://unknown-account/unknown-region"
    template = (cli_synth / "Flightdeck-worker.template.json").read_text()
    assert "eu-west-3" not in template and "111122223333" not in template
    assert "AWS::Region" in template  # bucket names and policies follow the deploying credentials


def test_app_py_config_uses_the_file(file_synth: tuple[Path, subprocess.CompletedProcess[str]]) -> None:
    # `critic` exists only in the three-agent file: its stack proves the file was read.
    outdir, result = file_synth
    assert _stacks(outdir) == {"Flightdeck-critic", "Flightdeck-ApiGatewayAccount"}
    assert "1 stack(s) from examples/three-agents.toml" in result.stderr


def test_the_deployment_name_comes_from_the_file_or_the_context(
    cli_synth: Path, file_synth: tuple[Path, subprocess.CompletedProcess[str]]
) -> None:
    template = json.loads((cli_synth / "Flightdeck-worker.template.json").read_text())
    assert _ssm_names(template) == ["/flightdeck/prod-a/worker/api-url"]
    template = json.loads((file_synth[0] / "Flightdeck-critic.template.json").read_text())
    assert _ssm_names(template) == ["/flightdeck/three-agents/critic/api-url"]
    with pytest.raises(ValueError, match="deployment name 'a/b'"):
        select({"agents": "worker", "bundleDeps": "false", "deployment": "a/b"}.get)


def test_app_py_refuses_a_bad_file_given_as_the_cli_passes_it(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text((REPO / "examples" / "three-agents.toml").read_text().replace('agent = "critic"', 'agent = "critc"'))
    # As `cdk synth -c config=FILE` passes it (CDK_CONTEXT_JSON): the same check, the same answer.
    result = _run_app(tmp_path, {"config": str(bad)})
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "app.py: invalid deployment file:" in result.stderr
    assert (
        f'{bad}: [[agents.orchestrator.delegates]] #2 agent: no agent "critc" in this file. Fix: did you mean '
        '"critic"?' in result.stderr
    )
    assert not (tmp_path / "manifest.json").exists()


def test_app_py_refuses_a_context_value_given_as_its_argument(tmp_path: Path) -> None:
    result = _run_app(tmp_path, {}, ("-c", "agents=nobody", "-c", "bundleDeps=false"))
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "app.py: context agents: unknown agent(s) nobody" in result.stderr
    assert not (tmp_path / "manifest.json").exists()


def test_app_py_rejects_an_unknown_agent() -> None:
    with pytest.raises(ValueError, match=r"unknown agent\(s\) nobody"):
        select({"agents": "nobody", "bundleDeps": "false"}.get)


def test_app_py_fails_loudly_on_a_missing_or_invalid_file(tmp_path: Path) -> None:
    with pytest.raises(ValueError) as missing:
        select({"config": "no-such-file.toml"}.get)
    assert "no-such-file.toml: no such file. Fix:" in str(missing.value)
    bad = tmp_path / "bad.toml"
    bad.write_text((REPO / "examples" / "three-agents.toml").read_text().replace('agent = "critic"', 'agent = "critc"'))
    with pytest.raises(ValueError) as invalid:
        select({"config": str(bad)}.get)
    assert (
        f'{bad}: [[agents.orchestrator.delegates]] #2 agent: no agent "critc" in this file. Fix: did you mean '
        '"critic"?' in str(invalid.value)
    )


def test_app_py_refuses_an_agent_with_inbound_auth_off_unless_told_it_is_a_test_rig(tmp_path: Path) -> None:
    import aws_cdk as cdk

    from infra.deployment import build

    config = tmp_path / "open.toml"
    config.write_text(
        (REPO / "examples" / "two-agents.toml").read_text() + '\n[agents.worker.env]\nINBOUND_AUTH = "off"\n'
    )
    context = {"config": str(config), "agents": "worker", "bundleDeps": "false", "nag": "false"}
    with pytest.raises(ValueError) as refused:
        select(context.get)
    assert f'{config}: [agents.worker.env].INBOUND_AUTH: is "off" for worker: deployed to AWS' in str(refused.value)
    assert "-c allow_open_agents=true" in str(refused.value)
    with pytest.raises(ValueError, match="context allow_open_agents"):
        select({**context, "allow_open_agents": "perhaps"}.get)
    # The rig, synthesized as app.py does (build, then synth).
    app = cdk.App(outdir=str(tmp_path / "rig"), context={**context, "allow_open_agents": "true"})
    build(app)
    app.synth()
    template = json.loads((tmp_path / "rig" / "Flightdeck-worker.template.json").read_text())
    envs = [
        r["Properties"]["Environment"]["Variables"]
        for r in template["Resources"].values()
        if r["Type"] == "AWS::Lambda::Function"
    ]
    assert envs and all(env["INBOUND_AUTH"] == "off" for env in envs)


def test_the_bedrock_example_synthesizes_with_each_agents_model_granted(tmp_path: Path) -> None:
    """examples/bedrock.toml (issue 41): both stacks synthesize in the region the file names, and each turn worker
    may invoke its own model only: the orchestrator's inference profile (and its base model in the profile's
    regions), the worker's foundation model in its stack's region."""
    result = _run_app(tmp_path, {}, ("--config", "examples/bedrock.toml", "-c", "bundleDeps=false", "-c", "nag=false"))
    assert result.returncode == 0, result.stderr[-4000:]
    assert {"Flightdeck-orchestrator", "Flightdeck-worker"} <= _stacks(tmp_path)
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    assert manifest["artifacts"]["Flightdeck-worker"]["environment"].endswith("/us-east-1")

    def bedrock_resources(stack: str) -> str:
        template = json.loads((tmp_path / f"{stack}.template.json").read_text())
        found = []
        for resource in template["Resources"].values():
            if resource["Type"] != "AWS::IAM::Policy":
                continue
            for statement in resource["Properties"]["PolicyDocument"]["Statement"]:
                actions = statement["Action"] if isinstance(statement["Action"], list) else [statement["Action"]]
                if "bedrock:InvokeModel" in actions:
                    found.append(json.dumps(statement["Resource"]))
        return " ".join(found)

    orchestrator, worker = bedrock_resources("Flightdeck-orchestrator"), bedrock_resources("Flightdeck-worker")
    assert "inference-profile/us.anthropic.claude-3-5-haiku-20241022-v1:0" in orchestrator
    assert "foundation-model/anthropic.claude-3-5-haiku-20241022-v1:0" in orchestrator
    assert "foundation-model/amazon.nova-lite-v1:0" in worker and "claude" not in worker
