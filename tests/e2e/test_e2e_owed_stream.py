"""THINK_START = "stream" (docs/ARCHITECTURE.md §3): the stacks created in moto's CloudFormation, with the
table's stream and the owed-think starter's event source mapping (its filter, its on-failure queue).

The example file with THINK_START = "stream" for every agent, synthesized once as `cdk synth` would, then every
stack deployed; the deployed mapping is read back through Lambda's API. (The path itself, a think started from
the stream, runs in tests/integration/test_owed_thinks_stream.py and the crash-point explorer.)
"""

from __future__ import annotations

import json
from pathlib import Path

import boto3
import pytest
from e2e_agents import ACCOUNT_STACK
from e2e_cloud import REGION

from flightdeck import topology

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow
AGENTS = ("orchestrator", "worker")


@pytest.fixture(scope="module")
def stream_assembly(tmp_path_factory: pytest.TempPathFactory) -> Path:
    import aws_cdk as cdk

    from infra.deployment import build

    config = tmp_path_factory.mktemp("stream-file") / "stream.toml"
    text = (REPO / "examples" / "two-agents.toml").read_text()
    assert "\n[defaults]\n" in text
    config.write_text(text.replace("\n[defaults]\n", '\n[defaults]\nTHINK_START = "stream"\n', 1))
    outdir = tmp_path_factory.mktemp("cdk.out.stream-e2e")
    app = cdk.App(outdir=str(outdir), context={"config": str(config), "bundleDeps": False, "nag": False})
    build(app)
    app.synth()
    return outdir


@pytest.fixture(scope="module")
def deployed(stream_assembly):
    import os

    from e2e_cloud import MotoCloud
    from moto import mock_aws

    saved = {k: os.environ.get(k) for k in ("AWS_DEFAULT_REGION", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")}
    os.environ.update(AWS_DEFAULT_REGION=REGION, AWS_ACCESS_KEY_ID="testing", AWS_SECRET_ACCESS_KEY="testing")
    try:
        with mock_aws(config={"lambda": {"use_docker": False}}):
            stacks = MotoCloud(stream_assembly).deploy_all([ACCOUNT_STACK, *(f"Flightdeck-{a}" for a in AGENTS)])
            lam, ddb = boto3.client("lambda", region_name=REGION), boto3.client("dynamodb", region_name=REGION)
            found = {}
            for agent in AGENTS:
                table = ddb.describe_table(TableName=stacks[f"Flightdeck-{agent}"].outputs["StateTableName"])["Table"]
                mappings = lam.list_event_source_mappings()["EventSourceMappings"]
                streamed = [m for m in mappings if m["EventSourceArn"] == table.get("LatestStreamArn")]
                functions = [lam.get_function(FunctionName=m["FunctionArn"])["Configuration"] for m in streamed]
                found[agent] = (table, streamed, functions)
            yield found
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def test_each_table_streams_both_images(deployed) -> None:
    for agent in AGENTS:
        table, _, _ = deployed[agent]
        assert table["StreamSpecification"] == {"StreamEnabled": True, "StreamViewType": "NEW_AND_OLD_IMAGES"}


def test_the_stream_feeds_the_owed_think_starter_through_its_filter(deployed) -> None:
    spec = topology.STREAM_CONSUMER
    for agent in AGENTS:
        _, (mapping,), (starter,) = deployed[agent]
        assert starter["Handler"].endswith(f".{topology.OWED_THINKS_HANDLER}.handler")
        assert starter["MemorySize"] == spec.memory_mb
        assert mapping["BatchSize"] == spec.batch_size
        patterns = [json.loads(f["Pattern"]) for f in mapping["FilterCriteria"]["Filters"]]
        assert patterns == [json.loads(json.dumps(p)) for p in topology.OWED_THINK_FILTERS]
        destination = mapping["DestinationConfig"]["OnFailure"]["Destination"]
        assert destination == f"arn:aws:sqs:{REGION}:123456789012:flightdeck-{agent}-turns-dlq"
