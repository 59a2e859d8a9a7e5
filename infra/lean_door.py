"""The lean front door (deploy.front_door = "lean"; docs/FRONT_DOORS.md): Lambda function URLs and an HTTP API.

Instead of the REST API (infra/api.py):
- Each function of topology.URL_HANDLERS (chat_ingest, callback, a2a, session_events) has a function URL,
  AuthType NONE: the peer routes that carry a round trip (a peer's POST /api/chat, POST /api/tools/response(s),
  POST /api/a2a/push, POST /a2a, POST /mcp, GET /api/sessions/{id}/events) are served there, free beyond the
  invocation. The streaming functions (topology.STREAMING_HANDLERS, which run the Lambda Web Adapter) use the
  URL's RESPONSE_STREAM invoke mode, the others BUFFERED. Nothing stands in front of them: the token check in
  the function (flightdeck.api.auth) is the only gate, and it runs before anything else is read
  (tests/integration/test_front_door_auth.py counts it). A flood is bounded by each URL function's reserved
  concurrency (deploy.url_function_concurrency), not by a gateway throttle.
- An HTTP API ($default stage, auto-deployed, throttled as the REST stage is) serves every buffered route, with a
  Lambda proxy integration per function in payload format 1.0: the user's routes then reach the functions as the
  same event the REST door sends (resource template, httpMethod), so the one new event shape is the function
  URLs' 2.0. The streaming routes are not on it: an HTTP API cannot stream, so they live at their function URL.

What the REST door gave that this one does not (the per-peer usage plans, the request validator, a WAF web ACL,
the gateway responses) is the price of the door, listed in docs/FRONT_DOORS.md.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

from aws_cdk import Acknowledgment, RemovalPolicy, Stack, Validations
from aws_cdk import aws_apigatewayv2 as apigwv2
from aws_cdk import aws_apigatewayv2_integrations as integrations
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from constructs import Construct

from flightdeck import topology

from .functions import LOG_RETENTION
from .queues import construct_id

# Why the HTTP API's routes carry no gateway authorizer (cdk-nag AwsSolutions-APIG4), by route auth.
_NO_GATEWAY_AUTH = {
    topology.PEER_AUTH: (
        "Authenticated in the function before anything else is read: the peer bearer token against the peer "
        "registry (flightdeck.api.auth; revocation applies at once). The lean door has no Lambda authorizer on "
        "purpose: it would be a second invocation per request, which is what this door exists to save."
    ),
    topology.CALLBACK_AUTH: (
        "Authenticated in the function: the HMAC callback token this agent minted for one delegation, checked "
        "before the body is read. Peers are not principals of this account."
    ),
    topology.PUBLIC: "Public by design: the agent card, the health check and the OpenAPI document.",
}


def published_urls(base_url: str, urls: Mapping[str, str]) -> str:
    """What the stack publishes for its peers (the SSM api-url value, the PeerUrls output): the HTTP API's URL
    and each function URL by endpoint, the form flightdeck.domain.allowlist.parse_urls reads."""
    return " ".join([base_url, *(f"{handler}={url}" for handler, url in urls.items())])


class LeanDoor(Construct):
    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        agent: str,
        functions: Mapping[str, lambda_.Function],
        throttle_rate: int,
        throttle_burst: int,
        url_function_concurrency: int,
        log_removal_policy: RemovalPolicy,
    ) -> None:
        super().__init__(scope, id)
        self.function_urls: dict[str, lambda_.FunctionUrl] = {}
        for handler in topology.URL_HANDLERS:
            function = functions[handler]
            self.function_urls[handler] = function.add_function_url(
                auth_type=lambda_.FunctionUrlAuthType.NONE,
                invoke_mode=(
                    lambda_.InvokeMode.RESPONSE_STREAM
                    if handler in topology.STREAMING_HANDLERS
                    else lambda_.InvokeMode.BUFFERED
                ),
            )
            if url_function_concurrency:
                # Without a gateway in front, this is what bounds a flood of requests (good tokens or bad).
                cfn = function.node.default_child
                assert isinstance(cfn, lambda_.CfnFunction)
                cfn.reserved_concurrent_executions = url_function_concurrency

        self.http_api = apigwv2.HttpApi(
            self,
            "HttpApi",
            api_name=f"flightdeck-{agent}",
            description=f"Flightdeck agent {agent}: the user's routes (lean front door)",
            create_default_stage=True,
        )
        access_logs = logs.LogGroup(self, "AccessLogs", retention=LOG_RETENTION, removal_policy=log_removal_policy)
        stage = self.http_api.default_stage
        assert stage is not None
        cfn_stage = stage.node.default_child
        assert isinstance(cfn_stage, apigwv2.CfnStage)
        cfn_stage.default_route_settings = apigwv2.CfnStage.RouteSettingsProperty(
            throttling_rate_limit=throttle_rate, throttling_burst_limit=throttle_burst
        )
        cfn_stage.access_log_settings = apigwv2.CfnStage.AccessLogSettingsProperty(
            destination_arn=access_logs.log_group_arn,
            format=json.dumps(
                {
                    "requestId": "$context.requestId",
                    "ip": "$context.identity.sourceIp",
                    "requestTime": "$context.requestTime",
                    "httpMethod": "$context.httpMethod",
                    "routeKey": "$context.routeKey",
                    "status": "$context.status",
                    "protocol": "$context.protocol",
                    "responseLength": "$context.responseLength",
                    "errorType": "$context.error.responseType",
                    "integrationError": "$context.integrationErrorMessage",
                }
            ),
        )
        by_handler: dict[str, integrations.HttpLambdaIntegration] = {}
        self.routes: list[apigwv2.HttpRoute] = []
        for route in topology.ROUTES:
            if route.handler in topology.STREAMING_HANDLERS:
                continue  # an HTTP API cannot stream: these are at their function's URL only
            if route.console:
                continue  # the console needs the REST door (config_file refuses it here): so do its routes
            if route.handler not in by_handler:
                by_handler[route.handler] = integrations.HttpLambdaIntegration(
                    f"{construct_id(route.handler)}Integration",
                    functions[route.handler],
                    payload_format_version=apigwv2.PayloadFormatVersion.VERSION_1_0,
                )
            [added] = self.http_api.add_routes(
                path=route.path, methods=[apigwv2.HttpMethod(route.method)], integration=by_handler[route.handler]
            )
            Validations.of(added).acknowledge(
                Acknowledgment(id="AwsSolutions-APIG4", reason=_NO_GATEWAY_AUTH[route.auth])
            )
            self.routes.append(added)

    @property
    def base_url(self) -> str:
        """The HTTP API's URL (no trailing slash): PUBLIC_BASE_URL. Built from the API's id, which depends on no
        function, so a function naming it closes no cycle."""
        stack = Stack.of(self)
        return f"https://{self.http_api.api_id}.execute-api.{stack.region}.{stack.url_suffix}"

    @property
    def urls(self) -> dict[str, str]:
        """Each function URL by endpoint (its handler); it ends with "/", which the allowlist drops."""
        return {handler: url.url for handler, url in self.function_urls.items()}
