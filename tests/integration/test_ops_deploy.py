"""`flightdeck deploy`: each check against moto (CloudFormation, SSM, Lambda, STS) and fake `node`/`npx` scripts on
PATH, each failure's message and fix, and the CDK command it runs (recorded by the fake npx, never a real deploy)."""

from __future__ import annotations

import io
import json
import zipfile
from pathlib import Path

import boto3
import pytest

from flightdeck import cli, topology
from flightdeck.ops import deploy

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "two-agents.toml"
REGION = "us-east-1"
# The deploying account is the web adapter layer's publisher: moto serves a layer only to its own account.
ACCOUNT = topology.WEB_ADAPTER_ACCOUNT


def _script(path: Path, body: str) -> None:
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)


class Tools:
    """A PATH holding only fake `node` and `npx`: what they answer, and every npx command line they were given."""

    def __init__(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
        self.bin = tmp_path / "bin"
        self.bin.mkdir()
        self.calls = tmp_path / "npx-calls"
        monkeypatch.setenv("PATH", str(self.bin))
        self.node("v22.11.0")
        self.npx(ok=True)

    def node(self, version: str) -> None:
        _script(self.bin / "node", f'echo "{version}"\n')

    def npx(self, ok: bool) -> None:
        answer = 'echo "2.1148.1 (build 1a2b3c4)"; exit 0' if ok else 'echo "npm ERR! code E404" >&2; exit 1'
        _script(
            self.bin / "npx",
            f'printf "%s\\n" "$*" >> "{self.calls}"\n'
            f'case "$*" in *--version*) {answer};; *) echo "deploying (fake)"; exit 0;; esac\n',
        )

    def remove(self, name: str) -> None:
        (self.bin / name).unlink()

    def npx_calls(self) -> list[str]:
        return self.calls.read_text().splitlines() if self.calls.exists() else []


@pytest.fixture
def tools(tmp_path, monkeypatch) -> Tools:
    return Tools(tmp_path, monkeypatch)


@pytest.fixture
def account(monkeypatch):
    """moto as the deploying account, with credentials and a region."""
    from moto import mock_aws

    for name, value in {
        "MOTO_ACCOUNT_ID": ACCOUNT,
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": REGION,
    }.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    with mock_aws():
        yield


def bootstrap(version: str = "21", region: str = REGION) -> None:
    """What `cdk bootstrap` leaves that the check reads: the CDKToolkit stack and its version parameter."""
    template = {
        "Resources": {
            "CdkBootstrapVersion": {
                "Type": "AWS::SSM::Parameter",
                "Properties": {"Type": "String", "Name": deploy.BOOTSTRAP_PARAMETER, "Value": version},
            }
        }
    }
    boto3.client("cloudformation", region_name=region).create_stack(
        StackName=deploy.BOOTSTRAP_STACK, TemplateBody=json.dumps(template)
    )


def publish_layer(region: str = REGION) -> None:
    """The web adapter layer at the version the stack names (moto numbers versions from 1)."""
    arn = topology.web_adapter_layer_arn(region)
    name = arn.split(":")[-2]
    content = io.BytesIO()
    with zipfile.ZipFile(content, "w") as z:
        z.writestr("bootstrap", "#!/bin/sh\n")
    client = boto3.client("lambda", region_name=region)
    for _ in range(topology.WEB_ADAPTER_VERSION):
        client.publish_layer_version(LayerName=name, Content={"ZipFile": content.getvalue()})


def run(capsys, *extra: str, config: Path = EXAMPLE) -> tuple[int, str, str]:
    capsys.readouterr()
    code = cli.main(["deploy", "--config", str(config), *extra])
    out, err = capsys.readouterr()
    return code, out, err


def test_every_check_passes_then_the_cdk_deploys_with_no_prompt(account, tools, capsys):
    bootstrap()
    publish_layer()
    code, out, err = run(capsys)
    assert code == 0, err
    for name in ("Node.js: v22.11.0", "CDK CLI: aws-cdk@", "AWS credentials:", "bootstrap in", "web adapter layer in"):
        assert f"ok   {name}" in err
    assert "FAIL" not in err
    version, deploy_call = tools.npx_calls()
    assert version == f"--yes {deploy.CDK_CLI} --version"
    assert deploy_call.startswith(f"--yes {deploy.CDK_CLI} deploy --all --require-approval never --app ")
    assert f"-c config={EXAMPLE}" in deploy_call and "app.py" in deploy_call
    assert "peers sync" in err  # what to do next


def test_dry_run_prints_the_command_and_runs_nothing(account, tools, capsys):
    bootstrap()
    publish_layer()
    code, out, err = run(capsys, "--dry-run", "--agents", "worker", "--deployment", "staging")
    assert code == 0, err
    assert out.startswith(f"npx --yes {deploy.CDK_CLI} deploy --all --require-approval never --app ")
    assert "-c agents=worker" in out and "-c deployment=staging" in out
    assert all("deploy --all" not in call for call in tools.npx_calls())


def test_without_credentials_it_says_how_to_provide_them_and_deploys_nothing(tools, capsys, monkeypatch, tmp_path):
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.setenv("AWS_DEFAULT_REGION", REGION)
    code, out, err = run(capsys)
    assert code == 1
    assert "FAIL AWS credentials: no AWS credentials" in err and "aws configure" in err
    assert "not deploying: 1 check(s) failed" in err
    assert all("deploy --all" not in call for call in tools.npx_calls())


def test_an_account_not_bootstrapped_gets_the_bootstrap_command(account, tools, capsys):
    publish_layer()
    code, out, err = run(capsys)
    assert code == 1
    assert f"FAIL bootstrap in {ACCOUNT}/{REGION}: no CDKToolkit stack" in err
    assert f"fix: npx --yes {deploy.CDK_CLI} bootstrap aws://{ACCOUNT}/{REGION}" in err
    assert all("deploy --all" not in call for call in tools.npx_calls())


def test_an_old_bootstrap_is_refused(account, tools, capsys):
    bootstrap(version="5")
    publish_layer()
    code, _, err = run(capsys)
    assert code == 1 and "bootstrap version 5, the templates need >= 6" in err


def test_an_old_node_is_refused_with_the_version_to_install(account, tools, capsys):
    bootstrap()
    publish_layer()
    tools.node("v16.20.2")
    code, _, err = run(capsys)
    assert code == 1
    assert "FAIL Node.js: v16.20.2 is older than the CDK CLI needs (>= 18" in err
    assert "fix: install Node.js 22 or 24" in err


def test_node_20_runs_with_a_note(account, tools, capsys):
    bootstrap()
    publish_layer()
    tools.node("v20.20.2")
    code, _, err = run(capsys, "--dry-run")
    assert code == 0 and "ok   Node.js: v20.20.2 (runs; past its end of life" in err


def test_no_node_at_all(account, tools, capsys):
    bootstrap()
    publish_layer()
    tools.remove("node")
    code, _, err = run(capsys)
    assert code == 1 and "FAIL Node.js: `node` is not on PATH" in err and "fix: install Node.js" in err


def test_a_cdk_cli_npx_cannot_fetch_says_how_to_get_it(account, tools, capsys):
    bootstrap()
    publish_layer()
    tools.npx(ok=False)
    code, _, err = run(capsys)
    assert code == 1
    assert f"FAIL CDK CLI: `npx --yes {deploy.CDK_CLI} --version` failed: npm ERR! code E404" in err
    assert f"npm install -g {deploy.CDK_CLI}" in err


def test_no_npx(account, tools, capsys):
    bootstrap()
    publish_layer()
    tools.remove("npx")
    code, _, err = run(capsys)
    assert code == 1 and "FAIL CDK CLI: `npx` is not on PATH" in err


def test_a_region_without_the_web_adapter_layer_is_refused(account, tools, capsys):
    bootstrap()
    code, _, err = run(capsys)
    assert code == 1
    assert f"FAIL web adapter layer in {REGION}: {topology.web_adapter_layer_arn(REGION)} is not there" in err
    assert "aws-lambda-web-adapter" in err


def test_an_agent_deployed_elsewhere_is_checked_in_its_own_region(account, tools, capsys, tmp_path):
    bootstrap()
    publish_layer()
    config = tmp_path / "two.toml"
    config.write_text(EXAMPLE.read_text() + '\n[agents.worker.deploy]\nregion = "eu-west-1"\n')
    code, _, err = run(capsys, config=config)
    assert code == 1
    assert f"ok   bootstrap in {ACCOUNT}/{REGION}" in err
    assert f"FAIL bootstrap in {ACCOUNT}/eu-west-1: no CDKToolkit stack" in err


def test_a_bad_file_or_agent_is_a_usage_error_before_any_check(tools, capsys, tmp_path):
    code, _, err = run(capsys, "--agents", "nobody")
    assert code == 2 and "--agents: no agent nobody in the file" in err
    bad = tmp_path / "bad.toml"
    bad.write_text(EXAMPLE.read_text().replace('allow = ["orchestrator"]', "allow = []"))
    code, _, err = run(capsys, config=bad)
    assert code == 2 and '[agents.worker].allow: lacks "orchestrator"' in err
    assert tools.npx_calls() == []


def test_the_layer_the_check_asks_for_is_the_one_the_stack_attaches():
    from infra.bundling import ARCHITECTURE

    assert ARCHITECTURE.name == topology.LAMBDA_ARCHITECTURE
    assert topology.web_adapter_layer_arn("eu-west-1") == (
        f"arn:aws:lambda:eu-west-1:753240598075:layer:LambdaAdapterLayerArm64:{topology.WEB_ADAPTER_VERSION}"
    )


def test_the_deployment_page_names_the_pinned_cdk_cli():
    page = (REPO / "docs" / "DEPLOYMENT.md").read_text()
    assert f"npx --yes {deploy.CDK_CLI} --version" in page and f"(at least {deploy.MIN_NODE_MAJOR}," in page


def test_a_bedrock_model_not_enabled_stops_the_deploy_with_its_key_and_fix(
    account, tools, capsys, tmp_path, monkeypatch
):
    """Bedrock's answers stubbed (botocore's Stubber): moto does not serve Bedrock's control plane."""
    from botocore.stub import Stubber

    from flightdeck.ops import bedrock_access

    bootstrap()
    publish_layer()
    model = "anthropic.claude-3-5-haiku-20241022-v1:0"
    config = tmp_path / "bedrock.toml"
    local = 'provider = "local"       # deterministic, offline; "bedrock" with model_id on AWS'
    assert local in EXAMPLE.read_text()
    config.write_text(EXAMPLE.read_text().replace(local, f'provider = "bedrock"\nmodel_id = "{model}"'))
    bedrock = boto3.client("bedrock", region_name=REGION)
    monkeypatch.setattr(bedrock_access, "client", lambda aws, region: bedrock)
    with Stubber(bedrock) as stub:
        stub.add_response(
            "get_foundation_model",
            {"modelDetails": {"modelArn": f"arn:aws:bedrock:{REGION}::foundation-model/{model}", "modelId": model}},
            {"modelIdentifier": model},
        )
        stub.add_response(
            "get_foundation_model_availability",
            {
                "modelId": model,
                "agreementAvailability": {"status": "PENDING"},
                "authorizationStatus": "AUTHORIZED",
                "entitlementAvailability": "AVAILABLE",
                "regionAvailability": "AVAILABLE",
            },
            {"modelId": model},
        )
        code, _, err = run(capsys, config=config)
    assert code == 1
    assert f"FAIL Bedrock [agents.orchestrator.model].model_id: {model}: " in err
    assert "(agreement PENDING)" in err and "fix: enable it for this account in the Bedrock console" in err
    assert all("deploy --all" not in call for call in tools.npx_calls())
