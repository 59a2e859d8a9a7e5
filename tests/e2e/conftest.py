"""The app synthesized once per session; each test deploys it into a fresh moto."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from tests.support.once import once_per_run

REPO = Path(__file__).resolve().parents[2]
for entry in (REPO / "functions", REPO):
    if str(entry) not in sys.path:
        sys.path.insert(0, str(entry))
os.environ.setdefault("JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION", "20")

EXAMPLE = REPO / "examples" / "two-agents.toml"


@pytest.fixture(scope="session")
def assembly(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """cdk.out of the whole app for examples/two-agents.toml, as `cdk synth` writes it.

    bundleDeps=false: the asset holds the package alone (the functions run in this process,
    where the dependencies are installed); everything else is the app as deployed.
    """
    outdir, _ = once_per_run(tmp_path_factory, "cdk.out.e2e", _synth)  # once, whichever xdist worker asks first
    return outdir


def _synth(outdir: Path) -> dict:
    import aws_cdk as cdk

    from infra.deployment import build

    app = cdk.App(outdir=str(outdir), context={"config": str(EXAMPLE), "bundleDeps": False, "nag": False})
    build(app)
    app.synth()
    return {}


@pytest.fixture
def cloud(assembly: Path, monkeypatch: pytest.MonkeyPatch):
    from e2e_cloud import REGION, MotoCloud
    from e2e_lambda import iam_enforced
    from moto import mock_aws

    for name, value in {
        "AWS_DEFAULT_REGION": REGION,
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
    }.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    from tests.support.invokes import RECORDER

    RECORDER.clear()
    # moto's Lambda without Docker: an asynchronous invoke is answered 202 and runs nothing; e2e_lambda runs it.
    with mock_aws(config={"lambda": {"use_docker": False}}), iam_enforced():
        yield MotoCloud(assembly)
    RECORDER.clear()
