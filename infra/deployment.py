"""The CDK app: one `Flightdeck-<agent>` stack per agent of a deployment file.

Context (`cdk synth -c key=value`, or `python app.py --config FILE -c key=value`):

| key                  | default                       | meaning |
|----------------------|-------------------------------|---------|
| `config`             | examples/two-agents.toml      | the deployment file (flightdeck.config_file) |
| `agents`             | every agent of the file       | comma list: synthesize only these stacks |
| `nag`                | true                          | run cdk-nag AwsSolutions checks (synth fails on an unacknowledged finding) |
| `apigwCloudWatchRole`| true                          | false: the account already has API Gateway's CloudWatch Logs role |
| `bundleDeps`, `bundlePlatform` | see infra/bundling.py | how the Lambda asset is built |
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import TextIO

import aws_cdk as cdk
from aws_cdk import cx_api
from cdk_nag import AwsSolutionsChecks
from flightdeck import config_file

from .bundling import BundleSettings, truthy
from .stack import FlightdeckStack, stack_name


def config_path(app: cdk.App) -> Path:
    value = app.node.try_get_context("config")
    return Path(value) if value else config_file.DEFAULT_CONFIG


def selected_agents(app: cdk.App, deployment: config_file.DeploymentFile) -> list[str]:
    value = app.node.try_get_context("agents")
    if not value:
        return list(deployment.agents)
    names = [n.strip() for n in str(value).split(",") if n.strip()]
    unknown = [n for n in names if n not in deployment.agents]
    if unknown:
        raise ValueError(f"context agents: unknown agent(s) {', '.join(unknown)}; the file has {', '.join(deployment.agents)}")
    return names


def stack_env(spec: config_file.AgentSpec) -> cdk.Environment | None:
    account = spec.deploy.account or os.environ.get("CDK_DEFAULT_ACCOUNT")
    region = spec.deploy.region or os.environ.get("CDK_DEFAULT_REGION")
    if not account and not region:
        return None  # environment-agnostic: deployable to whatever the CLI's credentials point at
    return cdk.Environment(account=account or None, region=region or None)


def add_nag(app: cdk.App) -> None:
    """cdk-nag 3: a policy validation plugin; synthesis fails on any unacknowledged finding."""
    cdk.Validations.of(app).add_plugins(AwsSolutionsChecks(app))


def build(app: cdk.App) -> list[FlightdeckStack]:
    # The one check of the whole file (flightdeck.config_file): a bad file stops here, every problem named.
    deployment = config_file.load_checked(config_path(app), "aws")
    bundle = BundleSettings.from_context(app.node)
    cloudwatch_role = app.node.try_get_context("apigwCloudWatchRole")
    stacks = [
        FlightdeckStack(
            app,
            stack_name(agent),
            deployment=deployment,
            agent=agent,
            bundle=bundle,
            account_cloudwatch_role=True if cloudwatch_role is None else truthy(cloudwatch_role),
            env=stack_env(deployment.agents[agent]),
        )
        for agent in selected_agents(app, deployment)
    ]
    nag = app.node.try_get_context("nag")
    if nag is None or truthy(nag):
        add_nag(app)
    return stacks


def print_messages(assembly: cx_api.CloudAssembly, out: TextIO = sys.stderr) -> None:
    """What the CDK CLI would print: the stacks written and their warnings/errors."""
    for stack in assembly.stacks:
        print(f"{stack.stack_name}: {Path(assembly.directory) / stack.template_file}", file=out)
        for message in stack.messages:
            if message.level in (cx_api.SynthesisMessageLevel.WARNING, cx_api.SynthesisMessageLevel.ERROR):
                print(f"  [{message.level.name.lower()}] {message.entry.data}", file=out)
