"""`python app.py` synthesizes with no Docker and no AWS credentials, honouring its context."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow


def _run_app(
    outdir: Path, context: dict, args: tuple[str, ...] = (), extra_env: dict | None = None
) -> subprocess.CompletedProcess:
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


def test_app_py_synthesizes_selected_agents(tmp_path: Path) -> None:
    result = _run_app(tmp_path, {"agents": "worker", "bundleDeps": "false"})
    assert result.returncode == 0, result.stderr[-4000:]
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    stacks = {k for k, a in manifest["artifacts"].items() if a["type"] == "aws:cloudformation:stack"}
    assert stacks == {"Flightdeck-worker", "Flightdeck-ApiGatewayAccount"}
    assert manifest["artifacts"]["Flightdeck-worker"]["environment"] == "aws://unknown-account/unknown-region"


def test_app_py_rejects_an_unknown_agent(tmp_path: Path) -> None:
    result = _run_app(tmp_path, {"agents": "nobody", "bundleDeps": "false"})
    assert result.returncode != 0
    assert "unknown agent(s) nobody" in result.stderr


def _stacks(outdir: Path) -> set[str]:
    manifest = json.loads((outdir / "manifest.json").read_text())
    return {k for k, a in manifest["artifacts"].items() if a["type"] == "aws:cloudformation:stack"}


def test_app_py_config_uses_the_file(tmp_path: Path) -> None:
    # `critic` exists only in the three-agent file: its stack proves the file was read.
    result = _run_app(
        tmp_path,
        {},
        ("--config", "examples/three-agents.toml", "-c", "agents=critic", "-c", "bundleDeps=false", "-c", "nag=false"),
    )
    assert result.returncode == 0, result.stderr[-4000:]
    assert _stacks(tmp_path) == {"Flightdeck-critic", "Flightdeck-ApiGatewayAccount"}
    assert "1 stack(s) from examples/three-agents.toml" in result.stderr


def test_app_py_fails_loudly_on_a_missing_or_invalid_file(tmp_path: Path) -> None:
    result = _run_app(tmp_path, {}, ("--config", "no-such-file.toml"))
    assert result.returncode == 2
    assert "no-such-file.toml: no such file. Fix:" in result.stderr and "Traceback" not in result.stderr
    bad = tmp_path / "bad.toml"
    bad.write_text((REPO / "examples" / "three-agents.toml").read_text().replace('agent = "critic"', 'agent = "critc"'))
    # As `cdk synth -c config=FILE` passes it (CDK_CONTEXT_JSON): the same check, the same answer.
    result = _run_app(tmp_path, {"config": str(bad)})
    assert result.returncode == 2
    assert (
        f'{bad}: [[agents.orchestrator.delegates]] #2 agent: no agent "critc" in this file. Fix: did you mean '
        '"critic"?' in result.stderr
    )
    assert not (tmp_path / "manifest.json").exists()


def test_a_credential_less_cli_synth_pins_no_region(tmp_path: Path) -> None:
    # The CDK CLI sets CDK_DEFAULT_REGION even when it finds no credentials (its config, or us-east-1).
    result = _run_app(
        tmp_path,
        {"agents": "worker", "bundleDeps": "false", "nag": "false"},
        extra_env={"CDK_DEFAULT_REGION": "eu-west-3", "CDK_DEFAULT_ACCOUNT": "111122223333"},
    )
    assert result.returncode == 0, result.stderr[-4000:]
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    assert manifest["artifacts"]["Flightdeck-worker"]["environment"] == "aws://unknown-account/unknown-region"
    template = (tmp_path / "Flightdeck-worker.template.json").read_text()
    assert "eu-west-3" not in template and "111122223333" not in template
    assert "AWS::Region" in template  # bucket names and policies follow the deploying credentials


def test_the_deployment_name_comes_from_the_file_or_the_context(tmp_path: Path) -> None:
    result = _run_app(tmp_path, {"agents": "worker", "bundleDeps": "false", "nag": "false", "deployment": "prod-a"})
    assert result.returncode == 0, result.stderr[-4000:]
    template = json.loads((tmp_path / "Flightdeck-worker.template.json").read_text())
    names = [r["Properties"]["Name"] for r in template["Resources"].values() if r["Type"] == "AWS::SSM::Parameter"]
    assert names == ["/flightdeck/prod-a/worker/api-url"]
    bad = _run_app(tmp_path / "bad", {"agents": "worker", "bundleDeps": "false", "deployment": "a/b"})
    assert bad.returncode != 0 and "deployment name 'a/b'" in bad.stderr


def test_app_py_refuses_an_agent_with_inbound_auth_off_unless_told_it_is_a_test_rig(tmp_path: Path) -> None:
    config = tmp_path / "open.toml"
    config.write_text(
        (REPO / "examples" / "two-agents.toml").read_text() + '\n[agents.worker.env]\nINBOUND_AUTH = "off"\n'
    )
    context = {"config": str(config), "agents": "worker", "bundleDeps": "false", "nag": "false"}
    refused = _run_app(tmp_path / "refused", context)
    assert refused.returncode == 2 and "Traceback" not in refused.stderr
    assert f'{config}: [agents.worker.env].INBOUND_AUTH: is "off" for worker: deployed to AWS' in refused.stderr
    assert "-c allow_open_agents=true" in refused.stderr
    assert not (tmp_path / "refused" / "manifest.json").exists()
    unclear = _run_app(tmp_path / "unclear", {**context, "allow_open_agents": "perhaps"})
    assert unclear.returncode == 2 and "context allow_open_agents" in unclear.stderr
    rig = _run_app(tmp_path / "rig", {**context, "allow_open_agents": "true"})
    assert rig.returncode == 0, rig.stderr[-4000:]
    template = json.loads((tmp_path / "rig" / "Flightdeck-worker.template.json").read_text())
    envs = [
        r["Properties"]["Environment"]["Variables"]
        for r in template["Resources"].values()
        if r["Type"] == "AWS::Lambda::Function"
    ]
    assert envs and all(env["INBOUND_AUTH"] == "off" for env in envs)
