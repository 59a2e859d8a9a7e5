"""The streaming routes on AWS: API Gateway's STREAM integrations to functions that run the Lambda Web
Adapter, behind the same authorizer and API keys (usage plans) as every peer route.

What a template can show is checked here; what only a deployment can (that the adapter's layer
version exists in the region, that bytes reach a client as they are written) is in docs/STREAMING.md
("On AWS").
"""

from __future__ import annotations

import json

import pytest
from template_queries import STREAMING_HANDLER, function, function_ids, methods_by_route, resources

from flightdeck import topology
from flightdeck.settings import Settings
from infra.functions import WEB_ADAPTER_ENVIRONMENT, WEB_ADAPTER_VERSION

pytestmark = pytest.mark.slow

STREAMING_ROUTES = [r for r in topology.ROUTES if r.stream]


def _uri_text(uri) -> str:
    return "".join(p if isinstance(p, str) else "<token>" for p in uri["Fn::Join"][1])


def test_the_streaming_routes() -> None:
    assert {(r.method, r.path, r.handler) for r in STREAMING_ROUTES} == {
        ("POST", "/a2a", "a2a"),
        ("GET", "/a2a", "a2a"),  # a 405 in JSON-RPC
        ("GET", "/api/sessions/{session_id}/events", "session_events"),
        # MCP's Streamable HTTP on the a2a function (an answer may be SSE); GET and DELETE answer 405.
        ("POST", "/mcp", "a2a"),
        ("GET", "/mcp", "a2a"),
        ("DELETE", "/mcp", "a2a"),
    }
    assert topology.STREAMING_HANDLERS == {"a2a", "session_events"}
    # A stream ends on its own before its function's timeout and API Gateway's 15 minutes.
    assert Settings.model_fields["stream_max_ms"].metadata[1].le < topology.STREAM_TIMEOUT_S * 1000 <= 900_000


@pytest.mark.parametrize("route", topology.ROUTES, ids=lambda r: f"{r.method} {r.path}")
def test_streaming_routes_have_a_stream_integration_and_the_others_buffer(orchestrator_tpl, route) -> None:
    method = methods_by_route(orchestrator_tpl)[(route.method, route.path)]
    integration = method["Integration"]
    uri = _uri_text(integration["Uri"])
    assert integration["Type"] == "AWS_PROXY"
    if route.stream:
        assert integration["ResponseTransferMode"] == "STREAM"
        # InvokeWithResponseStream: the streaming invocation's own API version and action.
        assert ":lambda:path/2021-11-15/functions/" in uri and uri.endswith("/response-streaming-invocations")
        assert integration["TimeoutInMillis"] == topology.STREAM_TIMEOUT_S * 1000
    else:
        assert integration.get("ResponseTransferMode", "BUFFERED") == "BUFFERED"
        assert ":lambda:path/2015-03-31/functions/" in uri and uri.endswith("/invocations")


PEER_STREAMING_ROUTES = [r for r in STREAMING_ROUTES if r.auth == topology.PEER_AUTH]


@pytest.mark.parametrize("route", PEER_STREAMING_ROUTES, ids=lambda r: f"{r.method} {r.path}")
def test_streaming_routes_go_through_the_authorizer_and_the_usage_plans(orchestrator_tpl, route) -> None:
    method = methods_by_route(orchestrator_tpl)[(route.method, route.path)]
    chat = methods_by_route(orchestrator_tpl)[("POST", "/api/chat")]
    assert method["AuthorizationType"] == "CUSTOM" and method["AuthorizerId"] == chat["AuthorizerId"]
    assert method["ApiKeyRequired"] is True  # the authorizer's key, metered by the peer's usage plan
    # The plans meter the whole stage, so every method of it (the streaming ones too).
    stage = next(iter(resources(orchestrator_tpl, "AWS::ApiGateway::Stage")))
    for plan in resources(orchestrator_tpl, "AWS::ApiGateway::UsagePlan").values():
        assert [s["Stage"] for s in plan["Properties"]["ApiStages"]] == [{"Ref": stage}]


@pytest.mark.parametrize("handler", topology.HANDLERS)
def test_only_the_streaming_functions_run_the_web_adapter(orchestrator_tpl, handler: str) -> None:
    props = function(orchestrator_tpl, handler)
    env = props["Environment"]["Variables"]
    if handler in topology.STREAMING_HANDLERS:
        assert props["Handler"] == STREAMING_HANDLER
        (layer,) = props["Layers"]
        arn = "".join(p if isinstance(p, str) else json.dumps(p) for p in layer["Fn::Join"][1])
        assert arn == (
            'arn:{"Ref": "AWS::Partition"}:lambda:{"Ref": "AWS::Region"}:753240598075:layer:'
            f"LambdaAdapterLayerArm64:{WEB_ADAPTER_VERSION}"
        )  # the functions are arm64
        assert {k: env[k] for k in WEB_ADAPTER_ENVIRONMENT} == {
            "AWS_LAMBDA_EXEC_WRAPPER": "/opt/bootstrap",
            "AWS_LWA_INVOKE_MODE": "response_stream",
            "AWS_LWA_PORT": "8080",
            "POWERTOOLS_TRACE_DISABLED": "true",
        }
        assert props["Timeout"] == topology.STREAM_TIMEOUT_S
    else:
        assert "Layers" not in props
        assert not set(WEB_ADAPTER_ENVIRONMENT) & set(env)
    # Every function says streaming is on: the card (built from the settings) says streaming: true.
    assert env["STREAMING"] == "on"


def test_api_gateway_may_invoke_the_streaming_functions(orchestrator_tpl) -> None:
    ids = function_ids(orchestrator_tpl)
    permissions = [p["Properties"] for p in resources(orchestrator_tpl, "AWS::Lambda::Permission").values()]
    for route in STREAMING_ROUTES:
        target = {"Fn::GetAtt": [ids[route.handler], "Arn"]}
        source_arns = [
            "".join(x if isinstance(x, str) else "" for x in p["SourceArn"]["Fn::Join"][1])
            for p in permissions
            if p["FunctionName"] == target
            and p["Action"] == "lambda:InvokeFunction"
            and p["Principal"] == "apigateway.amazonaws.com"
        ]
        path = route.path.replace("{session_id}", "*")
        assert any(arn.endswith(f"/{route.method}{path}") for arn in source_arns), (route, source_arns)
