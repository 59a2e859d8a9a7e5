#!/usr/bin/env python3
"""CDK app: one `Flightdeck-<agent>` stack per agent of a deployment file.

    python app.py                                  # synthesize every agent of examples/two-agents.toml into ./cdk.out
    python app.py --config my.toml -c agents=worker
    npx aws-cdk deploy --all                       # the same through the CDK CLI (cdk.json runs this file)
    npx aws-cdk deploy -c config=my.toml -c agents=worker

The file is checked whole first (flightdeck.config_check); a missing or invalid file stops
here with every problem named (exit 2), never falls back to the example.
Needs no Docker and no AWS credentials to synthesize; see docs/DEPLOYMENT.md.
"""

import argparse
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent
# `flightdeck` is normally pip-installed (pip install -e '.[infra]'); this keeps a bare checkout working.
sys.path.insert(0, str(ROOT / "functions"))

import aws_cdk as cdk  # noqa: E402

from flightdeck.config_file import ConfigFileError  # noqa: E402
from infra.deployment import build, config_path, print_messages  # noqa: E402


def arguments(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="app.py", description="Synthesize one stack per agent of a deployment file.")
    parser.add_argument("--config", metavar="FILE", help="the deployment file (default: examples/two-agents.toml)")
    parser.add_argument(
        "-c",
        "--context",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a context value, as with the CDK CLI (e.g. -c agents=worker -c bundleDeps=false)",
    )
    args = parser.parse_args(argv)
    context = {}
    for item in args.context:
        key, sep, value = item.partition("=")
        if not sep or not key:
            parser.error(f"-c {item!r}: expected KEY=VALUE")
        context[key] = value
    if args.config is not None:
        if context.get("config", args.config) != args.config:
            parser.error("--config and -c config= name different files")
        context["config"] = args.config
    args.context = context
    return args


def main(argv: list[str]) -> int:
    args = arguments(argv)
    run_by_cli = "CDK_OUTDIR" in os.environ
    app = cdk.App(outdir=None if run_by_cli else str(ROOT / "cdk.out"), context=args.context)
    given = args.context.get("config")
    if given is not None and app.node.try_get_context("config") != given:
        # The CDK CLI's own context (CDK_CONTEXT_JSON) takes precedence over the App's.
        print(
            f"app.py: --config {given} conflicts with the CDK CLI's -c config="
            f"{app.node.try_get_context('config')}: give the file once",
            file=sys.stderr,
        )
        return 2
    try:
        stacks = build(app)
    except ConfigFileError as exc:
        print(
            "app.py: invalid deployment file:\n" + "\n".join(f"  {line}" for line in str(exc).splitlines()),
            file=sys.stderr,
        )
        return 2
    except ValueError as exc:  # e.g. -c agents= naming an agent the file does not have
        print(f"app.py: {exc}", file=sys.stderr)
        return 2
    print(f"app.py: {len(stacks)} stack(s) from {config_path(app.node.try_get_context)}", file=sys.stderr)
    assembly = app.synth()
    if not run_by_cli:  # the CLI prints warnings itself
        print_messages(assembly)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
