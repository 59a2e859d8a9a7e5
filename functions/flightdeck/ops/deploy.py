"""`flightdeck deploy --config FILE`: check what a deploy needs, then run the CDK with no prompts.

The checks, in order, each printed with its outcome and, when it fails, the fix:

1. the deployment file, checked whole as for AWS (what `cdk synth` would refuse);
2. Node.js, at least the version the pinned CDK CLI runs on (22 or 24 recommended);
3. the CDK CLI itself (`npx --yes aws-cdk@<CDK_CLI_VERSION> --version`: downloaded on first use);
4. AWS credentials (sts:GetCallerIdentity) and a region;
5. the CDK bootstrap in each target account and region: the CDKToolkit stack and the version parameter
   /cdk-bootstrap/<qualifier>/version, at least what the templates require;
6. the AWS Lambda Web Adapter layer the streaming functions use (flightdeck.topology), in each region;
7. for each agent whose model is Bedrock: the model id exists in its region and is enabled (bedrock_access).

Then, from the directory holding the CDK app (cdk.json, app.py): `npx --yes aws-cdk@<version> deploy --all
--require-approval never --app "<this Python> app.py" -c config=FILE ...`. `--dry-run` prints that command
instead. Only the checks run here; what CloudFormation decides (quotas, permissions of the deploy role,
names taken) is known only when it deploys.
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import shutil
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from flightdeck import config_check, config_file, config_models, topology
from flightdeck.domain.numerals import parse_nonneg_int
from flightdeck.ops.aws import EXIT_FAILURE, EXIT_OK, EXIT_USAGE, OpsError, add_aws_options, failure, say, session

# The CDK CLI this repository is tested with (npx runs exactly it; `aws-cdk` alone would float).
CDK_CLI_VERSION = "2.1148.1"
CDK_CLI = f"aws-cdk@{CDK_CLI_VERSION}"
# The pinned CLI's package.json engines (node >= 18); Node 22 and 24 are the supported releases.
MIN_NODE_MAJOR = 18
RECOMMENDED_NODE = "22 or 24"
NODE_FIX = f"install Node.js {RECOMMENDED_NODE} (https://nodejs.org/, nvm, or your package manager) and put it on PATH"
# The default synthesizer's qualifier and the lowest bootstrap version its templates accept (their
# CheckBootstrapVersion rule refuses 1-5).
BOOTSTRAP_QUALIFIER = "hnb659fds"
BOOTSTRAP_PARAMETER = f"/cdk-bootstrap/{BOOTSTRAP_QUALIFIER}/version"
BOOTSTRAP_STACK = "CDKToolkit"
MIN_BOOTSTRAP_VERSION = 6
# Where the CDK app is: the repository this package belongs to (functions/flightdeck/ -> the root).
REPO_ROOT = Path(__file__).resolve().parents[3]
TOOL_TIMEOUT_S = 300  # npx's first run downloads the CLI


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    detail: str
    fix: str = ""

    def line(self) -> str:
        mark = "ok  " if self.ok else "FAIL"
        return f"{mark} {self.name}: {self.detail}" + (f"\n     fix: {self.fix}" if self.fix else "")


Runner = Callable[[Sequence[str]], "subprocess.CompletedProcess[str]"]


def _run(argv: Sequence[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(argv), capture_output=True, text=True, timeout=TOOL_TIMEOUT_S, check=False)


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[-1] if lines else ""


def check_node(run: Runner = _run) -> Check:
    node = shutil.which("node")
    if node is None:
        return Check("Node.js", False, "`node` is not on PATH: the CDK CLI runs on Node.js", NODE_FIX)
    try:
        done = run([node, "--version"])
    except (OSError, subprocess.SubprocessError) as exc:
        return Check("Node.js", False, f"{node} --version failed: {exc}", NODE_FIX)
    found = re.match(r"^v?(\d+)\.(\d+)", done.stdout.strip())
    if done.returncode != 0 or found is None:
        return Check("Node.js", False, f"{node} --version answered {done.stdout.strip()!r}", NODE_FIX)
    version = done.stdout.strip()
    if int(found.group(1)) < MIN_NODE_MAJOR:
        return Check(
            "Node.js", False, f"{version} is older than the CDK CLI needs (>= {MIN_NODE_MAJOR}; {CDK_CLI})", NODE_FIX
        )
    if int(found.group(1)) < 22:
        return Check("Node.js", True, f"{version} (runs; past its end of life: {RECOMMENDED_NODE} recommended)")
    return Check("Node.js", True, version)


def check_cdk(run: Runner = _run) -> Check:
    npx = shutil.which("npx")
    if npx is None:
        return Check("CDK CLI", False, "`npx` is not on PATH (it comes with Node.js's npm)", NODE_FIX)
    try:
        done = run([npx, "--yes", CDK_CLI, "--version"])
    except (OSError, subprocess.SubprocessError) as exc:
        done = subprocess.CompletedProcess([], 1, "", str(exc))
    if done.returncode != 0 or not done.stdout.strip():
        said = _last_line(done.stderr) or _last_line(done.stdout) or f"exit {done.returncode}"
        return Check(
            "CDK CLI",
            False,
            f"`npx --yes {CDK_CLI} --version` failed: {said}",
            f"npm must reach its registry to fetch {CDK_CLI} (`npm config get registry`; behind a proxy: "
            f"`npm config set proxy ...`), or install it once: npm install -g {CDK_CLI}",
        )
    return Check("CDK CLI", True, f"{CDK_CLI} ({_last_line(done.stdout)})")


@dataclass(frozen=True)
class Target:
    """Where stacks go: an account and region (the file's deploy.account/region, else the credentials')."""

    account: str
    region: str


def targets(deployment: config_models.DeploymentFile, agents: Sequence[str], account: str, region: str) -> list[Target]:
    found = [
        Target(deployment.agents[a].deploy.account or account, deployment.agents[a].deploy.region or region)
        for a in agents
    ]
    return list(dict.fromkeys(found))


def check_bootstrap(aws: Any, target: Target, own_account: str) -> Check:
    from botocore.exceptions import ClientError

    name = f"bootstrap in {target.account}/{target.region}"
    fix = f"npx --yes {CDK_CLI} bootstrap aws://{target.account}/{target.region}"
    if target.account != own_account:
        return Check(name, True, f"not checked: the credentials are of account {own_account} (CDK assumes its roles)")
    try:
        stack = aws.client("cloudformation", region_name=target.region).describe_stacks(StackName=BOOTSTRAP_STACK)
        status = str(stack["Stacks"][0]["StackStatus"])
    except ClientError as exc:
        if "does not exist" not in str(exc):
            raise
        return Check(name, False, f"no {BOOTSTRAP_STACK} stack: the account and region are not bootstrapped", fix)
    if status.endswith("_FAILED") or status.startswith(("ROLLBACK", "DELETE")):
        return Check(name, False, f"the {BOOTSTRAP_STACK} stack is {status}", f"fix or delete it, then: {fix}")
    try:
        value = aws.client("ssm", region_name=target.region).get_parameter(Name=BOOTSTRAP_PARAMETER)["Parameter"]
    except ClientError as exc:
        if "ParameterNotFound" not in str(exc):
            raise
        return Check(name, False, f"no parameter {BOOTSTRAP_PARAMETER} (another qualifier's bootstrap?)", fix)
    version = str(value.get("Value", ""))
    if (parse_nonneg_int(version) or 0) < MIN_BOOTSTRAP_VERSION:
        return Check(name, False, f"bootstrap version {version}, the templates need >= {MIN_BOOTSTRAP_VERSION}", fix)
    return Check(name, True, f"{BOOTSTRAP_STACK} {status}, version {version}")


def check_layer(aws: Any, region: str) -> Check:
    from botocore.exceptions import ClientError

    arn = topology.web_adapter_layer_arn(region)
    name = f"web adapter layer in {region}"
    layer, _, version = arn.rpartition(":")
    try:
        aws.client("lambda", region_name=region).get_layer_version(LayerName=layer, VersionNumber=int(version))
    except ClientError as exc:
        code = exc.response.get("Error", {}).get("Code", "")
        if code == "AccessDeniedException":
            return Check(name, True, f"not checked: these credentials may not call lambda:GetLayerVersion ({arn})")
        if code not in ("ResourceNotFoundException", "ValidationException"):
            raise
        return Check(
            name,
            False,
            f"{arn} is not there: the streaming functions (POST /a2a, the events route) run it",
            "deploy to a region where AWS publishes the AWS Lambda Web Adapter layer "
            "(https://github.com/awslabs/aws-lambda-web-adapter lists them)",
        )
    return Check(name, True, arn)


def check_models(aws: Any, deployment: config_models.DeploymentFile, agents: Sequence[str], region: str) -> list[Check]:
    import flightdeck.ops.bedrock_access as bedrock_access

    checks = []
    for agent in agents:
        spec = deployment.agents[agent]
        if spec.model.provider != "bedrock":
            continue
        where = spec.deploy.region or region
        verdict = bedrock_access.BedrockAccess(bedrock_access.client(aws, where)).check(spec.model.model_id)
        key = f"{config_file.toml_key(('agents', agent, 'model'))}.model_id"
        checks.append(Check(f"Bedrock {key}", verdict.ok, f"{verdict.model_id}: {verdict.detail}", verdict.fix))
    return checks


def preflight(
    deployment: config_models.DeploymentFile, agents: Sequence[str], args: argparse.Namespace, run: Runner = _run
) -> list[Check]:
    """Every check, each once; the AWS ones only with credentials (without, that is the failed check)."""
    from botocore.exceptions import BotoCoreError, ClientError

    checks = [check_node(run), check_cdk(run)]
    try:
        aws = session(args)
        identity = aws.client("sts").get_caller_identity()
    except OpsError as exc:  # its message says how to provide them
        return [*checks, Check("AWS credentials", False, str(exc))]
    except (BotoCoreError, ClientError) as exc:
        return [*checks, Check("AWS credentials", False, str(failure(exc)))]
    account, region = str(identity["Account"]), str(aws.region_name)
    checks.append(Check("AWS credentials", True, f"{identity.get('Arn', '')} in account {account}, region {region}"))
    try:
        for target in targets(deployment, agents, account, region):
            checks.append(check_bootstrap(aws, target, account))
            checks.append(check_layer(aws, target.region))
        checks.extend(check_models(aws, deployment, agents, region))
    except (BotoCoreError, ClientError) as exc:
        checks.append(Check("AWS", False, str(failure(exc))))
    return checks


def command(args: argparse.Namespace, app_dir: Path) -> list[str]:
    """The CDK command line: every stack of the selection, no prompt, this interpreter for the app."""
    config = Path(args.config).resolve()
    argv = ["npx", "--yes", CDK_CLI, "deploy", "--all", "--require-approval", "never"]
    argv += ["--app", f"{shlex.quote(sys.executable)} {shlex.quote(str(app_dir / 'app.py'))}"]
    argv += ["-c", f"config={config}"]
    if args.agents:
        argv += ["-c", f"agents={args.agents}"]
    if args.deployment:
        argv += ["-c", f"deployment={args.deployment}"]
    if args.profile:
        argv += ["--profile", args.profile]
    return argv


def _app_dir() -> Path:
    for where in (Path.cwd(), REPO_ROOT):
        if (where / "cdk.json").is_file() and (where / "app.py").is_file():
            return where
    raise OpsError(
        "no CDK app here: run it from the Flightdeck repository (the directory holding cdk.json and app.py)",
        EXIT_USAGE,
    )


def selected(deployment: config_models.DeploymentFile, value: str | None) -> list[str]:
    names = [n.strip() for n in (value or "").split(",") if n.strip()] or list(deployment.agents)
    unknown = [n for n in names if n not in deployment.agents]
    if unknown:
        raise OpsError(
            f"--agents: no agent {', '.join(unknown)} in the file; it has {', '.join(deployment.agents)}", EXIT_USAGE
        )
    return names


def run(args: argparse.Namespace, runner: Runner = _run) -> int:
    try:
        deployment = config_check.load_checked(args.config, "aws")
    except config_file.ConfigFileError as exc:
        say("invalid deployment file:\n" + "".join(f"  {line}\n" for line in str(exc).splitlines()).rstrip())
        return EXIT_USAGE
    try:
        agents = selected(deployment, args.agents)
        app_dir = _app_dir()
    except OpsError as exc:
        say(str(exc))
        return exc.code
    checks = preflight(deployment, agents, args, runner)
    for check in checks:
        print(check.line(), file=sys.stderr, flush=True)
    failed = [c for c in checks if not c.ok]
    argv = command(args, app_dir)
    environment = {**os.environ}
    if args.region:
        environment["AWS_DEFAULT_REGION"] = environment["AWS_REGION"] = args.region
    if args.dry_run:
        print(shlex.join(argv), flush=True)
        say(f"dry run: {len(failed)} check(s) failed" if failed else "dry run: every check passed")
        return EXIT_FAILURE if failed else EXIT_OK
    if failed:
        say(f"not deploying: {len(failed)} check(s) failed; each says its fix above")
        return EXIT_FAILURE
    say(f"deploying {', '.join(agents)} from {app_dir}: {shlex.join(argv)}")
    # The CDK's own output streams through: it is the deploy's progress.
    done = subprocess.run(argv, cwd=app_dir, env=environment, check=False)
    if done.returncode != 0:
        say(f"the CDK deploy failed (exit {done.returncode}); its messages are above")
        return EXIT_FAILURE
    say("deployed. Next: `flightdeck peers sync --config FILE`, then `flightdeck status --config FILE`")
    return EXIT_OK


def add_command(commands: Any) -> None:
    sub = commands.add_parser(
        "deploy",
        help="check what a deploy needs (Node, the CDK, credentials, bootstrap, layer, Bedrock), then deploy",
        description="Check the deployment file, Node.js, the CDK CLI, AWS credentials, the CDK bootstrap of each "
        "target account and region, the Lambda Web Adapter layer and Bedrock access for the file's models; "
        "each failed check says its fix. Then run the CDK deploy of every stack with no prompts.",
        epilog="examples:\n"
        "  flightdeck deploy --config examples/two-agents.toml --dry-run   # the checks, and the command\n"
        "  flightdeck deploy --config my.toml --agents worker --region eu-west-1",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub.add_argument("--config", type=Path, required=True, metavar="FILE", help="the deployment file")
    sub.add_argument("--agents", metavar="A,B", help="deploy only these agents' stacks (default: all)")
    sub.add_argument("--deployment", metavar="NAME", help="the deployment's name (default: the file's name)")
    sub.add_argument("--dry-run", action="store_true", help="run the checks and print the CDK command, run nothing")
    add_aws_options(sub)
    sub.set_defaults(run=run)
