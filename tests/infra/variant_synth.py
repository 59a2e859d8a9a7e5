"""A stack of a variant of the example file, synthesized with cdk-nag on, and its two gates.

For tests of settings the example file does not use (alarm e-mails, a [gateway] section):
they change a DeploymentFile, synthesize one agent's stack, and check that cdk-nag and
cfn-lint still find nothing, as test_infra_nag and test_infra_cfn_lint do for the example.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from flightdeck.config_models import DeploymentFile


def synth_with_nag(
    deployment: DeploymentFile, agent: str, outdir: Path, context: dict[str, Any] | None = None
) -> dict[str, Any]:
    """The agent's template and file, the synthesis error (None: none) and the validation report.
    context: more CDK context (as -c gives it)."""
    import aws_cdk as cdk

    from infra.bundling import BundleSettings
    from infra.deployment import add_nag
    from infra.stack import FlightdeckStack

    name = f"Flightdeck-{agent}"
    app = cdk.App(outdir=str(outdir), context={"bundleDeps": False, **(context or {})})
    FlightdeckStack(
        app,
        name,
        deployment=deployment,
        deployment_name="variant",
        agent=agent,
        bundle=BundleSettings.from_context(app.node),
    )
    add_nag(app)
    error = None
    try:
        app.synth()
    except Exception as exc:  # noqa: BLE001 - reported by the tests through nag_violations
        error = str(exc)
    report = outdir / "validation-report.json"
    return {
        "spec": deployment.agents[agent],
        "template": json.loads((outdir / f"{name}.template.json").read_text()),
        "file": outdir / f"{name}.template.json",
        "error": error,
        "report": json.loads(report.read_text()) if report.is_file() else None,
    }


def nag_violations(synth: dict[str, Any]) -> list[str]:
    """cdk-nag AwsSolutions findings of a synth_with_nag result: rule and construct paths."""
    report = synth["report"] or {}
    return [
        f"{v['ruleName']} at {[c['constructPath'] for c in v['violatingConstructs']]}"
        for plugin in report.get("pluginReports", [])
        if plugin["pluginName"].startswith("AwsSolutions")
        for v in plugin.get("violations", [])
    ]


def cfn_lint_errors(template_file: Path) -> list[dict[str, Any]]:
    from tests.support import cfn_lint

    return cfn_lint.errors(template_file)
