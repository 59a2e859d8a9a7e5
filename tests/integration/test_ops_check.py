"""`flightdeck check --config FILE [--aws]` and what it asks Bedrock (flightdeck.ops.bedrock_access).

moto (5.2) does not serve Bedrock's control plane (GetFoundationModel, GetFoundationModelAvailability,
GetInferenceProfile answer NotImplementedError), so the Bedrock client here is a real botocore client with
botocore's Stubber: each answer has the shape of Bedrock's API model, and the requests are checked against it.
The rest (the session, credentials, the file's checks) is the command as it runs."""

from __future__ import annotations

from pathlib import Path

import boto3
import pytest
from botocore.stub import Stubber

from flightdeck import cli
from flightdeck.ops import bedrock_access
from flightdeck.ops.bedrock_access import BedrockAccess

REGION = "us-east-1"
MODEL = "anthropic.claude-3-5-haiku-20241022-v1:0"
PROFILE = f"us.{MODEL}"
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "three-agents.toml"


def bedrock(region: str = REGION):
    return boto3.client("bedrock", region_name=region, aws_access_key_id="testing", aws_secret_access_key="testing")


def model_details(model_id: str = MODEL, status: str = "ACTIVE") -> dict:
    return {
        "modelDetails": {
            "modelArn": f"arn:aws:bedrock:{REGION}::foundation-model/{model_id}",
            "modelId": model_id,
            "modelLifecycle": {"status": status},
        }
    }


def availability(model_id: str = MODEL, authorized: bool = True) -> dict:
    return {
        "modelId": model_id,
        "agreementAvailability": {"status": "AVAILABLE"},
        "authorizationStatus": "AUTHORIZED" if authorized else "NOT_AUTHORIZED",
        "entitlementAvailability": "AVAILABLE",
        "regionAvailability": "AVAILABLE",
    }


def expect_model(stub: Stubber, model_id: str = MODEL, authorized: bool = True, status: str = "ACTIVE") -> None:
    stub.add_response("get_foundation_model", model_details(model_id, status), {"modelIdentifier": model_id})
    if status in ("ACTIVE", "LEGACY"):
        stub.add_response(
            "get_foundation_model_availability", availability(model_id, authorized), {"modelId": model_id}
        )


def ask(model_id: str, script) -> bedrock_access.Verdict:
    client = bedrock()
    with Stubber(client) as stub:
        script(stub)
        verdict = BedrockAccess(client).check(model_id)
        stub.assert_no_pending_responses()
    return verdict


def test_an_enabled_model_id():
    verdict = ask(MODEL, expect_model)
    assert verdict.ok and verdict.detail == f"{MODEL} is enabled in {REGION}"


def test_a_model_the_account_has_no_access_to_says_where_to_enable_it():
    verdict = ask(MODEL, lambda stub: expect_model(stub, authorized=False))
    assert not verdict.ok
    assert verdict.detail == f"{MODEL} is not enabled for this account in {REGION} (authorization NOT_AUTHORIZED)"
    assert "Bedrock console (Model access) in us-east-1" in verdict.fix


def test_a_model_id_bedrock_does_not_know():
    def script(stub):
        stub.add_client_error(
            "get_foundation_model",
            "ResourceNotFoundException",
            "not found",
            404,
            {"modelIdentifier": "anthropic.nope-v1:0"},
        )

    verdict = ask("anthropic.nope-v1:0", script)
    assert not verdict.ok and verdict.detail == f"no model 'anthropic.nope-v1:0' in {REGION}"
    assert "aws bedrock list-foundation-models --region us-east-1" in verdict.fix


def test_a_retired_model():
    verdict = ask(MODEL, lambda stub: expect_model(stub, status="EOL"))
    assert not verdict.ok and verdict.detail == f"{MODEL} is EOL in {REGION}"


def test_an_inference_profile_and_the_models_it_routes_to():
    def script(stub):
        stub.add_response(
            "get_inference_profile",
            {
                "inferenceProfileName": "US Claude 3.5 Haiku",
                "inferenceProfileArn": f"arn:aws:bedrock:{REGION}:123456789012:inference-profile/{PROFILE}",
                "inferenceProfileId": PROFILE,
                "status": "ACTIVE",
                "type": "SYSTEM_DEFINED",
                "models": [
                    {"modelArn": f"arn:aws:bedrock:us-east-1::foundation-model/{MODEL}"},
                    {"modelArn": f"arn:aws:bedrock:us-west-2::foundation-model/{MODEL}"},
                ],
            },
            {"inferenceProfileIdentifier": PROFILE},
        )
        expect_model(stub)
        expect_model(stub, authorized=False)

    verdict = ask(PROFILE, script)
    assert not verdict.ok and "not enabled for this account" in verdict.detail


def test_an_unknown_inference_profile():
    def script(stub):
        stub.add_client_error(
            "get_inference_profile",
            "ResourceNotFoundException",
            "no",
            404,
            {"inferenceProfileIdentifier": "xx." + MODEL},
        )

    verdict = ask("xx." + MODEL, script)
    assert not verdict.ok and "aws bedrock list-inference-profiles" in verdict.fix


def test_a_foundation_model_arn_is_asked_by_its_id_and_a_provisioned_one_is_not_asked():
    verdict = ask(f"arn:aws:bedrock:{REGION}::foundation-model/{MODEL}", expect_model)
    assert verdict.ok
    verdict = ask(f"arn:aws:bedrock:{REGION}:123456789012:provisioned-model/abc123", lambda stub: None)
    assert verdict.ok and "not checked here" in verdict.detail


def test_credentials_that_may_not_ask_are_told_which_permissions():
    def script(stub):
        stub.add_client_error("get_foundation_model", "AccessDeniedException", "not authorized", 403)

    verdict = ask(MODEL, script)
    assert not verdict.ok and "bedrock:GetFoundationModelAvailability" in verdict.fix


# --- the command ----------------------------------------------------------------------------------


def bedrock_file(tmp_path: Path, model_id: str = PROFILE) -> Path:
    path = tmp_path / "bedrock.toml"
    local = '[agents.researcher.model]\nprovider = "local"'
    assert local in EXAMPLE.read_text()
    path.write_text(
        EXAMPLE.read_text().replace(
            local, f'[agents.researcher.model]\nprovider = "bedrock"\nmodel_id = "{model_id}"', 1
        )
    )
    return path


@pytest.fixture
def no_credentials(monkeypatch, tmp_path):
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.setenv("AWS_DEFAULT_REGION", REGION)


@pytest.fixture
def stubbed(monkeypatch):
    """Credentials, and the command's Bedrock client stubbed (the stub handed to the test)."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", REGION)
    client = bedrock()
    regions: list[str] = []

    def client_for(aws, region):
        regions.append(region)
        return client

    monkeypatch.setattr(bedrock_access, "client", client_for)
    with Stubber(client) as stub:
        stub.regions = regions
        yield stub
        stub.assert_no_pending_responses()


def check(capsys, *args: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = cli.main(["check", *args])
    out, err = capsys.readouterr()
    return code, out, err


def test_offline_the_file_is_checked_and_bedrock_ids_for_shape_only(capsys, tmp_path, no_credentials):
    code, out, err = check(capsys, "--config", str(bedrock_file(tmp_path)))
    assert code == 0 and "ok (3 agents, checked as for AWS)" in out
    assert "checked for shape only; --aws asks Bedrock" in err


def test_aws_without_credentials_says_so_and_exits_non_zero(capsys, tmp_path, no_credentials):
    code, out, err = check(capsys, "--config", str(bedrock_file(tmp_path)), "--aws")
    assert code == 2
    assert "--aws asks Bedrock and the MCP servers, which needs AWS credentials and a region: no AWS credentials" in err
    assert "aws configure" in err


def test_aws_with_an_enabled_profile(capsys, tmp_path, stubbed):
    stubbed.add_response(
        "get_inference_profile",
        {
            "inferenceProfileName": "p",
            "inferenceProfileArn": f"arn:aws:bedrock:{REGION}:123456789012:inference-profile/{PROFILE}",
            "inferenceProfileId": PROFILE,
            "status": "ACTIVE",
            "type": "SYSTEM_DEFINED",
            "models": [{"modelArn": f"arn:aws:bedrock:us-east-1::foundation-model/{MODEL}"}],
        },
        {"inferenceProfileIdentifier": PROFILE},
    )
    expect_model(stubbed)
    code, out, err = check(capsys, "--config", str(bedrock_file(tmp_path)), "--aws")
    assert code == 0, err
    assert "[agents.researcher.model].model_id: the inference profile and its models are enabled in us-east-1" in out
    assert stubbed.regions == [REGION]


def test_aws_with_a_model_not_enabled_names_the_key_and_the_fix(capsys, tmp_path, stubbed):
    expect_model(stubbed, authorized=False)
    code, out, err = check(capsys, "--config", str(bedrock_file(tmp_path, MODEL)), "--aws", "--region", "eu-west-1")
    assert code == 1
    assert "[agents.researcher.model].model_id: " in err and "(authorization NOT_AUTHORIZED). Fix: enable it" in err
    assert stubbed.regions == ["eu-west-1"]


def test_aws_on_a_file_without_bedrock_asks_nothing(capsys, stubbed):
    code, out, _ = check(capsys, "--config", str(EXAMPLE), "--aws")
    assert code == 0 and "no agent uses Bedrock or an MCP server: nothing to ask" in out


def test_a_file_with_a_mistake_is_refused(capsys, tmp_path, no_credentials):
    code, _, err = check(capsys, "--config", str(bedrock_file(tmp_path, "claude-3-haiku")))
    assert code == 2 and '[agents.researcher.model].model_id: "claude-3-haiku" is not a Bedrock model id' in err
