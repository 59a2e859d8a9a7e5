#!/usr/bin/env python3
"""CDK app: one `Flightdeck-<agent>` stack per agent of a deployment file.

    python app.py                                  # synthesize every agent of examples/two-agents.toml into cdk.out/
    npx aws-cdk deploy --all                       # the same through the CDK CLI (cdk.json runs this file)
    npx aws-cdk deploy -c config=my.toml -c agents=worker

Needs no Docker and no AWS credentials to synthesize; see infra/DEPLOY.md.
"""

import sys
from pathlib import Path

# `flightdeck` is normally pip-installed (pip install -e '.[infra]'); this keeps a bare checkout working.
sys.path.insert(0, str(Path(__file__).resolve().parent / "functions"))

import aws_cdk as cdk  # noqa: E402

from infra.deployment import build  # noqa: E402

app = cdk.App()
build(app)
app.synth()
