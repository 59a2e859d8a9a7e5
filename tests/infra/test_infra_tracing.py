"""Context traces=xray: every function exports its spans to X-Ray's OTLP endpoint, sampled, and may put them
(infra/tracing.py); the stack still passes cdk-nag and cfn-lint. Without it, no function has an OTLP endpoint."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from template_queries import resources
from variant_synth import cfn_lint_errors, nag_violations, synth_with_nag

from flightdeck import config_file

pytestmark = pytest.mark.slow

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "two-agents.toml"


@pytest.fixture(scope="module")
def traced(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    context = {"traces": "xray", "traceSampleRatio": "0.1"}
    return synth_with_nag(config_file.load(EXAMPLE), "worker", tmp_path_factory.mktemp("cdk.out.traces"), context)


def test_every_function_exports_to_xray_sampled(traced) -> None:
    functions = resources(traced["template"], "AWS::Lambda::Function").values()
    assert functions
    for function in functions:
        env = function["Properties"]["Environment"]["Variables"]
        endpoint = json.dumps(env["OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"])
        assert "https://xray." in endpoint and "AWS::Region" in endpoint and ".amazonaws.com/v1/traces" in endpoint
        assert env["OTEL_EXPORTER_OTLP_PROTOCOL"] == "http/protobuf"
        assert (env["OTEL_TRACES_SAMPLER"], env["OTEL_TRACES_SAMPLER_ARG"]) == ("parentbased_traceidratio", "0.1")


def test_every_role_may_put_spans(traced) -> None:
    policies = resources(traced["template"], "AWS::IAM::Policy").values()
    granted = [
        st for p in policies for st in p["Properties"]["PolicyDocument"]["Statement"] if st["Action"] == "xray:PutSpans"
    ]
    functions = resources(traced["template"], "AWS::Lambda::Function")
    assert len(granted) == len(functions) and all(st["Resource"] == "*" for st in granted)


def test_traces_to_xray_pass_cdk_nag(traced) -> None:
    violations = nag_violations(traced)
    assert traced["error"] is None and violations == [], "\n".join(violations) or traced["error"]


def test_traces_to_xray_pass_cfn_lint(traced) -> None:
    assert cfn_lint_errors(traced["file"]) == []


def test_without_the_context_no_function_exports(orchestrator_tpl) -> None:
    for function in resources(orchestrator_tpl, "AWS::Lambda::Function").values():
        assert not any(k.startswith("OTEL_") for k in function["Properties"]["Environment"]["Variables"])
