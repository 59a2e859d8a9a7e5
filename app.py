#!/usr/bin/env python3
"""CDK app: one `Flightdeck-<agent>` stack per agent of a deployment file.

    python app.py                                  # synthesize every agent of examples/two-agents.toml into ./cdk.out
    npx aws-cdk deploy --all                       # the same through the CDK CLI (cdk.json runs this file)
    npx aws-cdk deploy -c config=my.toml -c agents=worker

Needs no Docker and no AWS credentials to synthesize; see the README, Deploy to AWS.
"""

import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent
# `flightdeck` is normally pip-installed (pip install -e '.[infra]'); this keeps a bare checkout working.
sys.path.insert(0, str(ROOT / "functions"))

import aws_cdk as cdk  # noqa: E402

from infra.deployment import build, print_messages  # noqa: E402

run_by_cli = "CDK_OUTDIR" in os.environ
app = cdk.App(outdir=None if run_by_cli else str(ROOT / "cdk.out"))
build(app)
assembly = app.synth()
if not run_by_cli:  # the CLI prints warnings itself
    print_messages(assembly)
