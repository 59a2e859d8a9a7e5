"""THINK_START = "stream": the table's stream, the owed-think starter's event source mapping with its filter,
and that function's permissions, synthesized with cdk-nag on and checked by cfn-lint.

`stream_synth` loads the example file and sets THINK_START = "stream" for the orchestrator (the example itself
starts thinks from the writer: no stream, no mapping, as test_infra_template checks).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from template_queries import function_ids, queue_id, reach, resources
from variant_synth import cfn_lint_errors, nag_violations, synth_with_nag

from flightdeck import config_file, topology

pytestmark = pytest.mark.slow

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "two-agents.toml"


@pytest.fixture(scope="module")
def stream_synth(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    deployment = config_file.load(EXAMPLE)
    deployment.agents["orchestrator"].env["THINK_START"] = "stream"
    return synth_with_nag(deployment, "orchestrator", tmp_path_factory.mktemp("cdk.out.stream"))


def test_the_table_streams_both_images(stream_synth) -> None:
    (table,) = resources(stream_synth["template"], "AWS::DynamoDB::Table").values()
    assert table["Properties"]["StreamSpecification"] == {"StreamViewType": "NEW_AND_OLD_IMAGES"}


def test_only_the_owed_think_starter_reads_the_stream_through_a_filtered_mapping(stream_synth) -> None:
    template = stream_synth["template"]
    (table_id,) = resources(template, "AWS::DynamoDB::Table")
    mappings = [
        m["Properties"]
        for m in resources(template, "AWS::Lambda::EventSourceMapping").values()
        if "Fn::GetAtt" in m["Properties"]["EventSourceArn"]
        and m["Properties"]["EventSourceArn"]["Fn::GetAtt"][0] == table_id
    ]
    (mapping,) = mappings
    spec = topology.STREAM_CONSUMER
    assert mapping["FunctionName"] == {"Ref": function_ids(template)[spec.handler]}
    assert mapping["StartingPosition"] == "TRIM_HORIZON"
    assert mapping["BatchSize"] == spec.batch_size
    assert mapping["BisectBatchOnFunctionError"] is True
    assert mapping["MaximumRetryAttempts"] == spec.retry_attempts
    assert mapping["MaximumRecordAgeInSeconds"] == spec.max_record_age_s
    assert mapping["FunctionResponseTypes"] == ["ReportBatchItemFailures"]
    dlq = queue_id(template, spec.on_failure_queue, dlq=True)
    assert mapping["DestinationConfig"] == {"OnFailure": {"Destination": {"Fn::GetAtt": [dlq, "Arn"]}}}
    patterns = [json.loads(f["Pattern"]) for f in mapping["FilterCriteria"]["Filters"]]
    assert patterns == [json.loads(json.dumps(p)) for p in topology.OWED_THINK_FILTERS]


def test_the_starter_may_start_thinks_and_defer_a_mark_and_nothing_else_of_the_table(stream_synth) -> None:
    template = stream_synth["template"]
    got = reach(template, topology.OWED_THINKS_HANDLER)
    assert got.invoke == {"flightdeck-orchestrator-turn-worker"} and got.defer_owed
    # The mapping's own grants: the stream's records, and its on-failure destination, the turns DLQ.
    assert got.read_stream and got.send_dlq == {topology.STREAM_CONSUMER.on_failure_queue}
    assert not (got.table or got.read_table or got.send or got.secret or got.peer_tokens or got.bedrock)
    assert not got.other


def test_the_stream_variant_passes_cdk_nag_and_cfn_lint(stream_synth) -> None:
    violations = nag_violations(stream_synth)
    assert stream_synth["error"] is None and violations == [], "\n".join(violations) or stream_synth["error"]
    assert cfn_lint_errors(stream_synth["file"]) == []
