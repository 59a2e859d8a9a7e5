"""`flightdeck peers` without a region or credentials says how to provide them (issue 15)."""

from __future__ import annotations

import pytest
from botocore.exceptions import ClientError, NoCredentialsError

from flightdeck import cli
from flightdeck.peers_admin import credentials_problem


@pytest.fixture
def bare_aws(monkeypatch, tmp_path):
    """An environment with no AWS configuration at all."""
    for name in (
        "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY",
        "AWS_SESSION_TOKEN",
        "AWS_PROFILE",
        "AWS_DEFAULT_REGION",
        "AWS_REGION",
        "AWS_ENDPOINT_URL",
        "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
        "AWS_CONTAINER_CREDENTIALS_FULL_URI",
        "AWS_WEB_IDENTITY_TOKEN_FILE",
    ):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")


def _peers(capsys, *args: str) -> tuple[int, str]:
    code = cli.main(["peers", *args])
    return code, capsys.readouterr().err


def test_no_region_names_aws_default_region_or_a_profile(bare_aws, capsys):
    code, err = _peers(capsys, "list", "--agent", "worker")
    assert code == 2
    assert "no AWS region" in err and "AWS_DEFAULT_REGION" in err and "AWS_PROFILE" in err
    assert "set AWS_REGION" not in err


def test_no_credentials_says_how_to_provide_them_not_pass_table(bare_aws, monkeypatch, capsys):
    monkeypatch.setenv("AWS_DEFAULT_REGION", "eu-west-1")
    for action in (["list"], ["add", "orchestrator"], ["revoke", "orchestrator"]):
        code, err = _peers(capsys, action[0], "--agent", "worker", *action[1:])
        assert code == 2, err
        assert "no AWS credentials" in err and "aws configure" in err and "AWS_ACCESS_KEY_ID" in err
        assert "--endpoint-url" in err and "pass --table" not in err


def test_refused_credentials_are_told_apart_from_other_errors():
    refused = ClientError(
        {"Error": {"Code": "UnrecognizedClientException", "Message": "The security token is invalid"}}, "DescribeStacks"
    )
    assert "AWS refused the credentials (The security token is invalid)" in credentials_problem(refused)
    assert "aws sso login" in credentials_problem(NoCredentialsError())
    denied = ClientError({"Error": {"Code": "AccessDeniedException", "Message": "not allowed"}}, "DescribeStacks")
    assert credentials_problem(denied) is None  # a permission, not credentials: the caller's message stays
