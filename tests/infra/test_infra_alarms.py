"""Alarm e-mail subscriptions: `deploy.alarm_emails` subscribes each address to the agent's alarm topic.

`emails_synth` loads the example file, gives its worker two alarm e-mail addresses and
synthesizes that stack with cdk-nag on (the example file itself has none: see
test_infra_template for the topic, its key and policy, and the alarms' actions).
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
from flightdeck import config_file
from template_queries import resources

pytestmark = pytest.mark.slow

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "two-agents.toml"
EMAILS = ["ops@example.com", "oncall+flightdeck@example.org"]


@pytest.fixture(scope="module")
def emails_synth(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    import aws_cdk as cdk

    from infra.bundling import BundleSettings
    from infra.deployment import add_nag
    from infra.stack import FlightdeckStack

    deployment = config_file.load(EXAMPLE)
    deployment.agents["worker"].deploy = config_file.DeploySection.model_validate(
        {**deployment.agents["worker"].deploy.model_dump(), "alarm_emails": EMAILS}
    )
    outdir = tmp_path_factory.mktemp("cdk.out.alarms")
    app = cdk.App(outdir=str(outdir), context={"bundleDeps": False})
    FlightdeckStack(
        app, "Flightdeck-worker", deployment=deployment, agent="worker", bundle=BundleSettings.from_context(app.node)
    )
    add_nag(app)
    error = None
    try:
        app.synth()
    except Exception as exc:  # noqa: BLE001 - reported by the test below
        error = str(exc)
    report = outdir / "validation-report.json"
    return {
        "template": json.loads((outdir / "Flightdeck-worker.template.json").read_text()),
        "file": outdir / "Flightdeck-worker.template.json",
        "error": error,
        "report": json.loads(report.read_text()) if report.is_file() else None,
    }


def test_an_email_subscription_per_address(emails_synth) -> None:
    template = emails_synth["template"]
    (topic_id,) = resources(template, "AWS::SNS::Topic")
    subs = [r["Properties"] for r in resources(template, "AWS::SNS::Subscription").values()]
    assert sorted(s["Endpoint"] for s in subs) == sorted(EMAILS)
    for s in subs:
        assert s["Protocol"] == "email" and s["TopicArn"] == {"Ref": topic_id}


def test_alarm_emails_pass_cdk_nag(emails_synth) -> None:
    report = emails_synth["report"] or {}
    violations = [
        f"{v['ruleName']} at {[c['constructPath'] for c in v['violatingConstructs']]}"
        for plugin in report.get("pluginReports", [])
        if plugin["pluginName"].startswith("AwsSolutions")
        for v in plugin.get("violations", [])
    ]
    assert emails_synth["error"] is None and violations == [], "\n".join(violations) or emails_synth["error"]


def test_alarm_emails_pass_cfn_lint(emails_synth) -> None:
    from test_infra_cfn_lint import _cfn_lint

    result = subprocess.run([*_cfn_lint(), "--format", "json", str(emails_synth["file"])],
                            capture_output=True, text=True, timeout=300, check=False)
    errors = [m for m in json.loads(result.stdout or "[]") if m["Level"] == "Error"]
    assert errors == [], errors
