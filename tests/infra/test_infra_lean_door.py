"""The lean front door on AWS (infra/lean_door.py, docs/FRONT_DOORS.md): the example's worker with
`front_door = "lean"`, synthesized once with cdk-nag on (the REST door is the example itself: test_infra_nag,
test_infra_cfn_lint, test_infra_template).

Function URLs (AuthType NONE) on the four round-trip functions, streaming where the function streams; an HTTP API
with every buffered route and none of the streaming ones; reserved concurrency on the URL functions; no REST API,
authorizer or usage plan; the published value names every URL a peer needs, and the functions that have no URL of
their own are told the a2a and callback URLs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from template_queries import resources
from variant_synth import cfn_lint_errors, nag_violations, synth_with_nag

from flightdeck import config_file, config_models, topology

pytestmark = pytest.mark.slow

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "two-agents.toml"
CONCURRENCY = 25


@pytest.fixture(scope="module")
def lean(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    deployment = config_file.load(EXAMPLE)
    deployment.agents["worker"].deploy = config_models.DeploySection.model_validate(
        {
            **deployment.agents["worker"].deploy.model_dump(),
            "front_door": "lean",
            "url_function_concurrency": CONCURRENCY,
        }
    )
    return synth_with_nag(deployment, "worker", tmp_path_factory.mktemp("cdk.out.lean"))


def _function_id(template: dict[str, Any], handler: str) -> str:
    [found] = [
        lid
        for lid, r in resources(template, "AWS::Lambda::Function").items()
        if r["Properties"].get("Description", "").endswith(f": {handler}")
    ]
    return found


def test_the_round_trip_functions_have_urls_with_no_auth_streaming_where_they_stream(lean) -> None:
    template = lean["template"]
    urls = {
        r["Properties"]["TargetFunctionArn"]["Fn::GetAtt"][0]: r["Properties"]
        for r in resources(template, "AWS::Lambda::Url").values()
    }
    assert set(urls) == {_function_id(template, h) for h in topology.URL_HANDLERS}
    for handler in topology.URL_HANDLERS:
        url = urls[_function_id(template, handler)]
        assert url["AuthType"] == "NONE"
        streams = handler in topology.STREAMING_HANDLERS
        assert url["InvokeMode"] == ("RESPONSE_STREAM" if streams else "BUFFERED"), handler
    functions = resources(template, "AWS::Lambda::Function")
    for handler in topology.HANDLERS:
        reserved = functions[_function_id(template, handler)]["Properties"].get("ReservedConcurrentExecutions")
        assert reserved == (CONCURRENCY if handler in topology.URL_HANDLERS else None), handler


def test_the_http_api_serves_every_buffered_route_in_payload_1_0_and_no_streaming_one(lean) -> None:
    template = lean["template"]
    [api] = resources(template, "AWS::ApiGatewayV2::Api").values()
    assert api["Properties"]["ProtocolType"] == "HTTP"
    keys = sorted(r["Properties"]["RouteKey"] for r in resources(template, "AWS::ApiGatewayV2::Route").values())
    # The console's routes need the REST door's console: none here (issue 36).
    assert keys == sorted(f"{r.method} {r.path}" for r in topology.ROUTES if not r.stream and not r.console)
    for integration in resources(template, "AWS::ApiGatewayV2::Integration").values():
        assert integration["Properties"]["IntegrationType"] == "AWS_PROXY"
        assert integration["Properties"]["PayloadFormatVersion"] == "1.0"
    [stage] = resources(template, "AWS::ApiGatewayV2::Stage").values()
    props = stage["Properties"]
    assert props["StageName"] == "$default" and props["AutoDeploy"] is True
    assert props["DefaultRouteSettings"] == {"ThrottlingBurstLimit": 100, "ThrottlingRateLimit": 50}
    assert "DestinationArn" in props["AccessLogSettings"]
    for kind in ("AWS::ApiGateway::RestApi", "AWS::ApiGateway::Authorizer", "AWS::ApiGateway::UsagePlan"):
        assert resources(template, kind) == {}, kind


def test_outputs_and_the_published_value_name_every_url_a_peer_or_the_user_needs(lean) -> None:
    template = lean["template"]
    outputs = template["Outputs"]
    assert {"ApiUrl", "PeerUrls", "ChatUrl", "CallbackUrl", "A2aUrl", "EventsUrl", "AgentCardUrl"} <= set(outputs)
    assert "PeerUsagePlanId" not in outputs and "ConsoleUrl" not in outputs
    [parameter] = resources(template, "AWS::SSM::Parameter").values()
    assert parameter["Properties"]["Name"].endswith("/worker/api-url")
    joined = parameter["Properties"]["Value"]["Fn::Join"][1]
    text = "".join(p if isinstance(p, str) else "<ref>" for p in joined)
    for handler in topology.URL_HANDLERS:
        assert f" {handler}=<ref>" in text, text
    assert outputs["PeerUrls"]["Value"] == parameter["Properties"]["Value"]


def test_the_functions_without_a_url_are_told_the_a2a_and_callback_urls(lean) -> None:
    template = lean["template"]
    functions = resources(template, "AWS::Lambda::Function")
    for handler in topology.HANDLERS:
        variables = functions[_function_id(template, handler)]["Properties"]["Environment"]["Variables"]
        if handler in topology.URL_HANDLERS:
            assert "PUBLIC_ENDPOINT_URLS" not in variables, handler  # its own URL would be a cycle
        else:
            value = variables["PUBLIC_ENDPOINT_URLS"]["Fn::Join"][1]
            text = "".join(p if isinstance(p, str) else "<ref>" for p in value)
            assert text == "a2a=<ref> callback=<ref>" or text == "callback=<ref> a2a=<ref>", text
        assert ".execute-api." in str(variables["PUBLIC_BASE_URL"]), handler


def test_the_lean_door_passes_cdk_nag(lean) -> None:
    violations = nag_violations(lean)
    assert lean["error"] is None and violations == [], "\n".join(violations) or lean["error"]


def test_the_lean_door_passes_cfn_lint(lean) -> None:
    errors = cfn_lint_errors(lean["file"])
    assert errors == [], errors
