"""Alarm e-mail subscriptions: `deploy.alarm_emails` subscribes each address to the agent's alarm topic.

`emails_synth` loads the example file, gives its worker two alarm e-mail addresses and
synthesizes that stack with cdk-nag on (the example file itself has none: see
test_infra_template for the topic, its key and policy, and the alarms' actions).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from template_queries import resources
from variant_synth import cfn_lint_errors, nag_violations, synth_with_nag

from flightdeck import config_file, config_models

pytestmark = pytest.mark.slow

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "two-agents.toml"
EMAILS = ["ops@example.com", "oncall+flightdeck@example.org"]


@pytest.fixture(scope="module")
def emails_synth(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    deployment = config_file.load(EXAMPLE)
    deployment.agents["worker"].deploy = config_models.DeploySection.model_validate(
        {**deployment.agents["worker"].deploy.model_dump(), "alarm_emails": EMAILS}
    )
    return synth_with_nag(deployment, "worker", tmp_path_factory.mktemp("cdk.out.alarms"))


def test_an_email_subscription_per_address(emails_synth) -> None:
    template = emails_synth["template"]
    (topic_id,) = resources(template, "AWS::SNS::Topic")
    subs = [r["Properties"] for r in resources(template, "AWS::SNS::Subscription").values()]
    assert sorted(s["Endpoint"] for s in subs) == sorted(EMAILS)
    for s in subs:
        assert s["Protocol"] == "email" and s["TopicArn"] == {"Ref": topic_id}


def test_alarm_emails_pass_cdk_nag(emails_synth) -> None:
    violations = nag_violations(emails_synth)
    assert emails_synth["error"] is None and violations == [], "\n".join(violations) or emails_synth["error"]


def test_alarm_emails_pass_cfn_lint(emails_synth) -> None:
    errors = cfn_lint_errors(emails_synth["file"])
    assert errors == [], errors
