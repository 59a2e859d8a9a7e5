"""The CDK app: one `Flightdeck-<agent>` stack per agent of a deployment file.

Context (`cdk synth -c key=value`, or `python app.py --config FILE -c key=value`):

| key                  | default                       | meaning |
|----------------------|-------------------------------|---------|
| `config`             | examples/two-agents.toml      | the deployment file (flightdeck.config_file) |
| `deployment`         | the file's name without .toml | names the SSM parameters its agents publish their URLs in |
| `agents`             | every agent of the file       | comma list: synthesize only these stacks |
| `nag`                | true                          | run cdk-nag AwsSolutions checks (synth fails on an unacknowledged finding) |
| `apigwCloudWatchRole`| true                          | false: leave out the Flightdeck-ApiGatewayAccount stack (the account already has API Gateway's CloudWatch Logs role) |
| `allow_open_agents`  | false                         | true: let an agent with INBOUND_AUTH = "off" be synthesized (an isolated test rig only: any caller is let in and sees every session); otherwise synthesis refuses it |
| `bundleDeps`, `bundlePlatform` | see infra/bundling.py | how the Lambda asset is built |
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

import aws_cdk as cdk
from aws_cdk import cx_api
from cdk_nag import AwsSolutionsChecks

from flightdeck import config_check, config_file, config_models

from .account import ACCOUNT_STACK_NAME, ApiGatewayAccountStack
from .bundling import BundleSettings, truthy
from .stack import FlightdeckStack, stack_name

# A context value by key, None when unset: app.node.try_get_context, or a dict's get (the tests' check of a context).
Context = Callable[[str], Any]


def config_path(context: Context) -> Path:
    value = context("config")
    return Path(value) if value else config_file.DEFAULT_CONFIG


DEPLOYMENT_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")


def deployment_name(context: Context, path: Path) -> str:
    """The deployment's name: context `deployment`, else the file's name without `.toml`.

    Its agents publish their URLs under /flightdeck/<name>/ (flightdeck.topology) and find each
    other there, so two files deployed into one account and region need different names.
    """
    value = context("deployment")
    name = str(value) if value else path.stem
    if not DEPLOYMENT_NAME.match(name):
        raise ValueError(
            f"deployment name {name!r} must be 1-64 letters, digits, '.', '_' or '-' (context deployment=NAME)"
        )
    return name


def selected_agents(context: Context, deployment: config_models.DeploymentFile) -> list[str]:
    value = context("agents")
    if not value:
        return list(deployment.agents)
    names = [n.strip() for n in str(value).split(",") if n.strip()]
    unknown = [n for n in names if n not in deployment.agents]
    if unknown:
        raise ValueError(
            f"context agents: unknown agent(s) {', '.join(unknown)}; the file has {', '.join(deployment.agents)}"
        )
    return names


def stack_env(spec: config_models.AgentSpec) -> cdk.Environment | None:
    """The file's `deploy.account`/`deploy.region`, else none: an environment-agnostic stack.

    CDK_DEFAULT_ACCOUNT/CDK_DEFAULT_REGION are deliberately ignored: the CDK CLI sets the region
    even when it finds no credentials (from its config, or us-east-1), and a stack built from them
    would carry that region in bucket names and policies. Nothing here needs a concrete environment
    (no lookups), so the template says ${AWS::Region}/${AWS::AccountId} and deploys wherever the
    deploying credentials point.
    """
    account, region = spec.deploy.account, spec.deploy.region
    if not account and not region:
        return None
    return cdk.Environment(account=account or None, region=region or None)


def allow_open_agents(context: Context) -> bool:
    """Context `allow_open_agents`: whether an agent may be deployed with INBOUND_AUTH = "off"."""
    value = context("allow_open_agents")
    try:
        return value is not None and truthy(value)
    except ValueError as exc:
        raise ValueError(f"context allow_open_agents: {exc} (true or false)") from None


@dataclass(frozen=True)
class Selection:
    """A synthesis's deployment file, checked, its deployment name and the agents to synthesize."""

    path: Path
    deployment: config_models.DeploymentFile
    name: str
    agents: list[str]


def select(context: Context) -> Selection:
    """Every refusal of a synthesis, made before any construct: ValueError names the problem (app.py: exit 2).

    The one check of the whole file first (flightdeck.config_check: every problem named, ConfigFileError);
    inbound authentication off on AWS is refused unless the context says a test rig is meant.
    """
    path = config_path(context)
    deployment = config_check.load_checked(path, "aws", allow_open_agents=allow_open_agents(context))
    name = deployment_name(context, path)
    return Selection(path, deployment, name, selected_agents(context, deployment))


def add_nag(app: cdk.App) -> None:
    """cdk-nag 3: a policy validation plugin; synthesis fails on any unacknowledged finding."""
    cdk.Validations.of(app).add_plugins(AwsSolutionsChecks(app))


def build(app: cdk.App) -> list[FlightdeckStack]:
    selection = select(app.node.try_get_context)
    deployment = selection.deployment
    bundle = BundleSettings.from_context(app.node)
    cloudwatch_role = app.node.try_get_context("apigwCloudWatchRole")
    with_account_stack = True if cloudwatch_role is None else truthy(cloudwatch_role)
    account_stacks: dict[tuple[str, str], ApiGatewayAccountStack] = {}
    stacks = []
    for agent in selection.agents:
        env = stack_env(deployment.agents[agent])
        stack = FlightdeckStack(
            app,
            stack_name(agent),
            deployment=deployment,
            deployment_name=selection.name,
            agent=agent,
            bundle=bundle,
            env=env,
        )
        if with_account_stack:
            # One API Gateway account setting per environment (account, region), whatever the number of agents.
            key = (env.account or "", env.region or "") if env else ("", "")
            if key not in account_stacks:
                cid = ACCOUNT_STACK_NAME if not account_stacks else f"{ACCOUNT_STACK_NAME}{len(account_stacks) + 1}"
                account_stacks[key] = ApiGatewayAccountStack(app, cid, stack_name=ACCOUNT_STACK_NAME, env=env)
            stack.add_stack_dependency(account_stacks[key], "the stage logs through the account's API Gateway role")
        stacks.append(stack)
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
