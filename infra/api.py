"""API: a REST API with one Lambda proxy method per `flightdeck.topology.ROUTES` entry.

Adding a route is adding a `Route` to topology.ROUTES. A route served by a new
handler module also needs that handler's permissions (infra/access.py ACCESS) and
the reason why it needs no gateway authorizer (AUTHENTICATION below).

Payload limits: API Gateway REST caps a request at 10 MB (not configurable).
The functions enforce MAX_BODY_BYTES (flightdeck.settings, default 1 MB) and
MAX_RESULT_BYTES before parsing and answer 413. The gateway validates that a
JSON body is a JSON object (or array for the batch route) so malformed bodies
never reach a function.
"""

from __future__ import annotations

import re
from typing import Mapping

from aws_cdk import Acknowledgment, RemovalPolicy, Validations
from aws_cdk import aws_apigateway as apigateway
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from constructs import Construct

from flightdeck import topology

from .functions import LOG_RETENTION

STAGE_NAME = "prod"
AGENT_CARD_PATH = ".well-known/agent-card.json"

# Why each handler's routes have no API Gateway authorizer (cdk-nag APIG4/COG4).
AUTHENTICATION: dict[str, str] = {
    "callback": (
        "Authenticated in the function: every call must carry 'Authorization: Bearer <token>', an "
        "HMAC-SHA256 token this agent minted for exactly one (session, tool_use_id) and signed with its "
        "Secrets Manager key; it is verified in constant time with expiry and agent checks. Callers are "
        "peer agents that are not principals of this account, so IAM or Cognito authorizers do not apply."
    ),
    "agent_card": (
        "Public by design: the A2A agent card is a discovery document fetched anonymously by clients. "
        "It holds only what the agent advertises, and its function can reach no table, queue or secret."
    ),
    "chat_ingest": (
        "Entry point for users and peer agents, which are not principals of this account (no IAM/Cognito "
        "identity to check). Abuse is bounded, not authenticated: stage throttling limits the rate, bodies "
        "are size-checked, and a reply target must be a logical name on ALLOWED_HOST_MAPPING (fail closed), "
        "so a caller cannot make the agent call any new host. Put WAF or an authorizer in front for an "
        "internet-facing deployment (infra/DEPLOY.md)."
    ),
    "a2a": (
        "A2A JSON-RPC entry point for peer agents that are not principals of this account; protected like "
        "POST /api/chat (stage throttling, size checks, replies only to allowlisted services)."
    ),
}

# JSON schema (draft 4) per POST route; routes not listed get a JSON object.
_BODY_TYPES: dict[str, list[apigateway.JsonSchemaType]] = {
    "/api/tools/responses": [apigateway.JsonSchemaType.OBJECT, apigateway.JsonSchemaType.ARRAY],
}
_PATH_PARAM = re.compile(r"{([A-Za-z0-9_]+)\+?}")


def _model_id(types: list[apigateway.JsonSchemaType]) -> str:
    return "Json" + "Or".join(t.name.capitalize() for t in types)


class Api(Construct):
    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        agent: str,
        functions: Mapping[str, lambda_.IFunction],
        throttle_rate: int,
        throttle_burst: int,
        log_removal_policy: RemovalPolicy,
        account_cloudwatch_role: bool = True,
    ) -> None:
        super().__init__(scope, id)
        access_logs = logs.LogGroup(self, "AccessLogs", retention=LOG_RETENTION, removal_policy=log_removal_policy)
        self.rest_api = apigateway.RestApi(
            self,
            "RestApi",
            rest_api_name=f"flightdeck-{agent}",
            description=f"Flightdeck agent {agent}",
            endpoint_types=[apigateway.EndpointType.REGIONAL],
            # Execution logging (ERROR level) needs the account's API Gateway CloudWatch role;
            # set account_cloud_watch_role=False where the account already has one.
            cloud_watch_role=account_cloudwatch_role,
            cloud_watch_role_removal_policy=RemovalPolicy.RETAIN,
            deploy_options=apigateway.StageOptions(
                stage_name=STAGE_NAME,
                throttling_rate_limit=throttle_rate,
                throttling_burst_limit=throttle_burst,
                access_log_destination=apigateway.LogGroupLogDestination(access_logs),
                access_log_format=apigateway.AccessLogFormat.json_with_standard_fields(
                    caller=True,
                    http_method=True,
                    ip=True,
                    protocol=True,
                    request_time=True,
                    resource_path=True,
                    response_length=True,
                    status=True,
                    user=True,
                ),
                logging_level=apigateway.MethodLoggingLevel.ERROR,
                data_trace_enabled=False,  # would log bodies and bearer tokens
                metrics_enabled=True,
                tracing_enabled=True,
            ),
        )
        if account_cloudwatch_role:
            Validations.of(self.rest_api).acknowledge(
                Acknowledgment(
                    id=(
                        "AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/service-role/"
                        "AmazonAPIGatewayPushToCloudWatchLogs]"
                    ),
                    reason=(
                        "The account-level role API Gateway assumes to write execution logs; AWS documents "
                        "this managed policy for it and it grants only CloudWatch Logs actions."
                    ),
                )
            )
        Validations.of(self.rest_api).acknowledge(
            Acknowledgment(
                id="AwsSolutions-APIG3",
                reason=(
                    "No WAF web ACL by default (a per-ACL monthly cost, and rules depend on who may call the "
                    "agent); the stage throttles every method. infra/DEPLOY.md shows how to attach one."
                ),
            )
        )
        validator = self.rest_api.add_request_validator(
            "Validator", validate_request_body=True, validate_request_parameters=True
        )
        models: dict[str, apigateway.Model] = {}
        integrations: dict[str, apigateway.LambdaIntegration] = {}
        self.methods: list[apigateway.Method] = []
        for route in topology.ROUTES:
            if route.handler not in AUTHENTICATION:
                raise ValueError(
                    f"route {route.method} {route.path}: say in infra/api.py AUTHENTICATION how handler "
                    f"{route.handler!r} authenticates its callers"
                )
            if route.handler not in integrations:
                integrations[route.handler] = apigateway.LambdaIntegration(
                    functions[route.handler], proxy=True, allow_test_invoke=False
                )
            options: dict = {}
            params = _PATH_PARAM.findall(route.path)
            if params:
                options["request_parameters"] = {f"method.request.path.{p}": True for p in params}
            if route.method in ("POST", "PUT", "PATCH"):
                types = _BODY_TYPES.get(route.path, [apigateway.JsonSchemaType.OBJECT])
                model_id = _model_id(types)
                if model_id not in models:
                    models[model_id] = self.rest_api.add_model(
                        model_id,
                        content_type="application/json",
                        model_name=model_id,
                        schema=apigateway.JsonSchema(
                            schema=apigateway.JsonSchemaVersion.DRAFT4,
                            title=model_id,
                            type=types[0] if len(types) == 1 else None,
                            one_of=None if len(types) == 1 else [apigateway.JsonSchema(type=t) for t in types],
                        ),
                    )
                options["request_models"] = {"application/json": models[model_id]}
            resource = self.rest_api.root.resource_for_path(route.path)
            method = resource.add_method(
                route.method,
                integrations[route.handler],
                authorization_type=apigateway.AuthorizationType.NONE,
                request_validator=validator,
                operation_name=re.sub(r"[^A-Za-z0-9]+", "_", f"{route.handler} {route.method} {route.path}").strip("_"),
                **options,
            )
            reason = AUTHENTICATION[route.handler]
            for rule in ("AwsSolutions-APIG4", "AwsSolutions-COG4"):
                Validations.of(method).acknowledge(Acknowledgment(id=rule, reason=reason))
            self.methods.append(method)

    @property
    def url(self) -> str:
        return self.rest_api.url

    @property
    def agent_card_url(self) -> str:
        return self.rest_api.url_for_path("/" + AGENT_CARD_PATH)
