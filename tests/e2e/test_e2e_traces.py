"""The app with its spans sent to X-Ray (`-c traces=xray`, at the default sampling: docs/TRACING.md), created in
moto's CloudFormation, and a delegation traced through it.

Synthesized as `cdk synth -c traces=xray` does, cdk-nag on (the synthesis fails on a finding), every template
through cfn-lint; every stack created as tests/e2e/test_e2e_deploy.py creates them. Then one chat with a
delegation, sent with a sampled `traceparent`: each function runs with its deployed environment (the OTLP endpoint
and sampler CloudFormation gave it), and its spans leave as OTLP/HTTP POSTs to X-Ray's endpoint, which this test
answers (`responses`, as e2e_lambda serves the REST APIs): signed with SigV4 for X-Ray in the stack's region, one
trace holding both agents' spans.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import pytest
import requests
import responses
from e2e_agents import ACCOUNT_STACK, TASK, Chat, let_in
from e2e_cloud import REGION

from tests.support import cfn_lint

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "two-agents.toml"
STACKS = (ACCOUNT_STACK, "Flightdeck-orchestrator", "Flightdeck-worker")
XRAY = f"https://xray.{REGION}.amazonaws.com/v1/traces"
TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"


@pytest.fixture(scope="module")
def traced_assembly(tmp_path_factory: pytest.TempPathFactory) -> Path:
    import aws_cdk as cdk

    from infra.deployment import build

    outdir = tmp_path_factory.mktemp("cdk.out.traces-e2e")
    app = cdk.App(outdir=str(outdir), context={"config": str(EXAMPLE), "bundleDeps": False, "traces": "xray"})
    build(app)  # cdk-nag on, as `cdk synth` runs it: an unacknowledged finding fails the synthesis
    app.synth()
    return outdir


def _spans(body: bytes) -> list[dict[str, Any]]:
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    request = ExportTraceServiceRequest.FromString(body)
    found = []
    for resource in request.resource_spans:
        for scoped in resource.scope_spans:
            for span in scoped.spans:
                attributes = {a.key: a.value.string_value for a in span.attributes}
                found.append({"name": span.name, "trace_id": span.trace_id.hex(), "attributes": attributes})
    return found


@pytest.fixture(scope="module")
def traced(traced_assembly):
    from e2e_cloud import MotoCloud
    from e2e_lambda import Runtime, iam_enforced
    from moto import mock_aws

    saved = {k: os.environ.get(k) for k in ("AWS_DEFAULT_REGION", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")}
    os.environ.update(AWS_DEFAULT_REGION=REGION, AWS_ACCESS_KEY_ID="testing", AWS_SECRET_ACCESS_KEY="testing")
    exports: list[dict[str, Any]] = []

    def xray(request: Any) -> tuple[int, dict[str, str], bytes]:
        exports.append({"headers": dict(request.headers), "spans": _spans(request.body)})
        return 200, {"Content-Type": "application/x-protobuf"}, b""

    # Registered before any function runs and removed after their exporters shut down: no span leaves for AWS.
    receiver = responses.add_callback(responses.POST, XRAY, callback=xray)
    try:
        with mock_aws(), iam_enforced():
            stacks = MotoCloud(traced_assembly).deploy_all(list(STACKS))
            runtime = Runtime(stacks)
            chat = Chat(runtime, stacks["Flightdeck-orchestrator"].outputs["ApiUrl"], let_in(stacks))
            try:
                with runtime.serving_http():
                    sent = requests.post(
                        f"{chat.api}api/chat",
                        json={"content": TASK},
                        headers={**chat.headers, "traceparent": f"00-{TRACE}-00f067aa0ba902b7-01"},
                        timeout=10,
                    )
                    assert sent.status_code == 202, sent.text
                    answer = chat.answer(sent.json()["session_id"])
                runtime.fail_on_failures("the traced round trip")
            finally:
                for function in runtime.functions.values():
                    tracing = (function._modules or {}).get("flightdeck.tracing")
                    if tracing is not None:
                        tracing.uninstall()  # its provider shut down here, under the receiver
            yield {"stacks": stacks, "runtime": runtime, "answer": answer, "exports": exports}
    finally:
        responses.remove(receiver)
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def test_the_traced_templates_pass_cfn_lint(traced_assembly) -> None:
    errors = cfn_lint.errors(*(traced_assembly / f"{stack}.template.json" for stack in STACKS))
    assert errors == [], json.dumps(errors, indent=1)


def test_every_stack_is_created_and_every_function_exports_to_xray_sampled(traced) -> None:
    assert set(traced["stacks"]) == set(STACKS)
    functions = traced["runtime"].functions.values()
    assert {f.agent for f in functions} == {"orchestrator", "worker"}
    for function in functions:
        env = function.environment
        assert env["OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"] == XRAY, function.name
        assert env["OTEL_EXPORTER_OTLP_PROTOCOL"] == "http/protobuf"
        # The default sampling: a ratio of new traces, and a delegate follows its caller's decision.
        assert (env["OTEL_TRACES_SAMPLER"], env["OTEL_TRACES_SAMPLER_ARG"]) == ("parentbased_traceidratio", "0.05")
        statements = [s for d in function.role.policies for s in json.loads(d)["Statement"]]
        assert any(s["Action"] == "xray:PutSpans" and s["Resource"] == "*" for s in statements), function.name


def test_a_sampled_delegation_is_one_trace_of_both_agents_sent_signed_to_xray(traced) -> None:
    assert "2 of 2 delegations answered" in traced["answer"], traced["answer"]
    exports = traced["exports"]
    assert exports, "no span was exported to X-Ray's endpoint"
    for export in exports:
        headers = {k.lower(): v for k, v in export["headers"].items()}
        assert re.search(rf"Credential=\w+/\d{{8}}/{REGION}/xray/aws4_request", headers["authorization"]), headers
        assert headers["content-type"] == "application/x-protobuf"
    spans = [s for e in exports for s in e["spans"] if s["trace_id"] == TRACE]
    names = {s["name"] for s in spans}
    assert {"POST /api/chat", "invoke_agent orchestrator", "invoke_agent worker", "POST /api/tools/response"} <= names
    assert any(n.startswith("execute_tool ") for n in names) and any(n.startswith("chat ") for n in names), names
    agents = {s["attributes"].get("gen_ai.agent.name") for s in spans if s["name"].startswith("invoke_agent ")}
    assert agents == {"orchestrator", "worker"}
