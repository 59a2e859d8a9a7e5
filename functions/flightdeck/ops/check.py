"""`flightdeck check --config FILE [--aws]`: the deployment file's checks, without running anything.

Offline, the file is checked whole as the CDK app checks it before synthesis (or, with --local, as
`flightdeck local` checks it): every problem once, with its TOML key and fix (docs/MISTAKES.md). A Bedrock
model_id is checked for its shape only. With --aws, Bedrock is asked, with this machine's credentials, whether
each Bedrock model id of the file exists in the agent's region and is enabled for the account
(flightdeck.ops.bedrock_access); without credentials it says so and exits 2.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from flightdeck import config_check, config_file, config_models
from flightdeck.ops.aws import EXIT_FAILURE, EXIT_OK, EXIT_USAGE, OpsError, add_aws_options, failure, say, session


def run(args: argparse.Namespace) -> int:
    from botocore.exceptions import BotoCoreError, ClientError

    import flightdeck.ops.bedrock_access as bedrock_access

    runtime: config_check.Runtime = "local" if args.local else "aws"
    try:
        # Locally a Bedrock agent needs credentials at run time: that is --aws's question, not the file's.
        deployment = config_check.load_checked(args.config, runtime, local_model=runtime == "local")
    except config_file.ConfigFileError as exc:
        say("invalid deployment file:\n" + "".join(f"  {line}\n" for line in str(exc).splitlines()).rstrip())
        if runtime == "aws" and _runs_locally(args.config):
            say(f"these refuse it for AWS only; for a local run: flightdeck check --local --config {args.config}")
        return EXIT_USAGE
    raw = config_file.load(args.config)
    bedrock = {name: spec for name, spec in raw.agents.items() if spec.model.provider == "bedrock"}
    print(
        f"{args.config}: ok ({len(deployment.agents)} agents, checked as for {'flightdeck local' if args.local else 'AWS'})"
    )
    if not args.aws:
        if bedrock:
            say(
                f"{len(bedrock)} Bedrock model id(s) checked for shape only; --aws asks Bedrock whether each is enabled"
            )
        return EXIT_OK
    if not bedrock and not any(spec.mcp_servers for spec in raw.agents.values()):
        print("no agent uses Bedrock or an MCP server: nothing to ask")
        return EXIT_OK
    try:
        aws = session(args)
    except OpsError as exc:
        say(f"--aws asks Bedrock and the MCP servers, which needs AWS credentials and a region: {exc}")
        return exc.code
    _mcp_servers_answer(args.config, raw, aws)  # warnings: what the deployed agent would find, not a refusal
    failed = 0
    for name, spec in bedrock.items():
        region = spec.deploy.region or str(aws.region_name)
        key = f"{config_file.toml_key(('agents', name, 'model'))}.model_id"
        try:
            verdict = bedrock_access.BedrockAccess(bedrock_access.client(aws, region)).check(spec.model.model_id)
        except (BotoCoreError, ClientError) as exc:
            problem = failure(exc)
            say(str(problem))
            return problem.code
        if verdict.ok:
            print(f"{args.config}: {key}: {verdict.detail}")
        else:
            failed += 1
            print(f"{args.config}: {key}: {verdict.detail}. Fix: {verdict.fix}", file=sys.stderr)
    return EXIT_FAILURE if failed else EXIT_OK


def _mcp_servers_answer(path: Path, deployment: config_models.DeploymentFile, aws: Any) -> int:
    """Each agent's MCP servers asked for their tools from this machine, with the token its `secret:` credential
    names (read with your credentials, in the agent's region): a warning line per problem (flightdeck.local.mcp_probe),
    so that what the deployed agent would find is known before it starts. The number of problems."""
    from botocore.exceptions import BotoCoreError, ClientError

    from flightdeck.local.mcp_probe import probe

    why: dict[str, str] = {}

    def token_of(agent: str, server: Any) -> str | None:
        if not server.credential:
            return ""
        name = server.credential.removeprefix("secret:")
        try:
            region = deployment.agents[agent].deploy.region or aws.region_name
            client = aws.client("secretsmanager", region_name=region)
            return str(client.get_secret_value(SecretId=name)["SecretString"])
        except (BotoCoreError, ClientError, KeyError) as exc:
            why[server.credential] = str(exc)[:200]
            return None

    def unset(server: Any) -> str:
        return (
            f"{server.credential} cannot be read ({why.get(server.credential, 'no secret')}). Fix: create the secret "
            "with the server's token as its value (aws secretsmanager create-secret --name NAME --secret-string ...)"
        )

    lines = probe(deployment, token_of, unset)
    for line in lines:
        print(f"{path}: warning: {line}", file=sys.stderr)
    if not lines and any(spec.mcp_servers for spec in deployment.agents.values()):
        print(f"{path}: every MCP server listed its tools, each tool the file names among them")
    return len(lines)


def _runs_locally(path: Path) -> bool:
    """Whether `flightdeck local` would take the file (it refuses fewer things than a deployment does)."""
    try:
        config_check.load_checked(path, "local", local_model=True)
    except config_file.ConfigFileError:
        return False
    return True


def add_command(commands: Any) -> None:
    sub = commands.add_parser(
        "check",
        help="check a deployment file (--aws: ask Bedrock whether its models are enabled)",
        description="Check the deployment file whole, as `cdk synth` would (--local: as `flightdeck local` "
        "would), and print every problem with its TOML key and fix. --aws also asks Bedrock, with your AWS "
        "credentials, whether each Bedrock model id exists in the agent's region and is enabled for the account.",
    )
    sub.add_argument("--config", type=Path, required=True, metavar="FILE", help="the deployment file")
    sub.add_argument("--aws", action="store_true", help="ask Bedrock about each model id (needs AWS credentials)")
    sub.add_argument("--local", action="store_true", help="check it as `flightdeck local` runs it")
    add_aws_options(sub)
    sub.set_defaults(run=run)
