"""API: a REST API with one Lambda proxy method per `flightdeck.topology.ROUTES` entry.

Adding a route is adding a `Route` to topology.ROUTES. A route served by a new
handler module also needs that handler's permissions (infra/access.py ACCESS) and
the reason why it needs no gateway authorizer (AUTHENTICATION below).

Validation and limits, with the same answers as the functions give (and as the
local runtime gives, which has no API Gateway in front):
- API Gateway REST caps a request at 10 MB (fixed). The functions enforce
  MAX_BODY_BYTES (flightdeck.settings, default 1 MB) and MAX_RESULT_BYTES before
  parsing and answer 413; a request over 10 MB gets the same 413 shape here.
- The request validator checks required path parameters and that a JSON body is
  JSON at all (400 malformed_json, as the functions answer). The shape of a body
  (fields, types: 422 invalid_request) is checked by the functions' pydantic
  models, the one contract the OpenAPI document describes: a stricter gateway
  schema would answer the same mistake differently on AWS than locally.
- Errors API Gateway produces itself use the functions' shape
  {"error": {"code", "message"}}; an unknown route is 404, not REST's 403
  "Missing Authentication Token".
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
        "Authenticated in the function: POST /api/chat and GET /api/sessions/{id} require 'Authorization: "
        "Bearer fdp_<peer>_<secret>', a per-peer token whose SHA-256 is in this agent's peer registry "
        "(its DynamoDB table), compared in constant time; missing or malformed is 401, unknown or revoked "
        "403. A session is visible only to the peer that created it (404 to others). Peers are other "
        "agents, not principals of this account, so IAM or Cognito authorizers do not apply; tokens are "
        "added, rotated and revoked with `flightdeck peers` without a redeploy."
    ),
    "a2a": (
        "Authenticated in the function like POST /api/chat: a peer bearer token checked against the peer "
        "registry (401/403 before the JSON-RPC body is read); tasks and contexts are visible only to the "
        "peer that created them (-32001 to others). Push notifications go only to URLs under an "
        "ALLOWED_HOST_MAPPING base URL, checked when set and again when sent."
    ),
}

# Routes whose story differs from their handler's.
ROUTE_AUTHENTICATION: dict[tuple[str, str], str] = {
    ("POST", "/api/a2a/push"): (
        "Authenticated in the function: an A2A peer's push notification must carry "
        "'X-A2A-Notification-Token: <token>', the HMAC-SHA256 token this agent minted for exactly one "
        "(session, tool_use_id) and gave to the peer with the task; it is verified exactly as the callback "
        "bearer token is (constant time, expiry, agent). Peers are not principals of this account."
    ),
}

# Routes whose function parses the body itself: JSON-RPC answers malformed JSON with its own
# -32700 error (HTTP 200), which a gateway 400 would replace.
RAW_BODY_ROUTES: frozenset[tuple[str, str]] = frozenset({("POST", "/a2a")})

_PATH_PARAM = re.compile(r"{([A-Za-z0-9_]+)\+?}")
_ANY_JSON = [
    apigateway.JsonSchemaType.OBJECT,
    apigateway.JsonSchemaType.ARRAY,
    apigateway.JsonSchemaType.STRING,
    apigateway.JsonSchemaType.NUMBER,
    apigateway.JsonSchemaType.BOOLEAN,
    apigateway.JsonSchemaType.NULL,
]


def _error(code: str, message: str) -> str:
    """A gateway response body in the functions' error shape (a VTL template)."""
    return '{"error":{"code":"%s","message":%s}}' % (code, message)


# Responses API Gateway generates itself: (type, status or None to keep it, code, message VTL).
_GATEWAY_RESPONSES = (
    (apigateway.ResponseType.BAD_REQUEST_BODY, "400", "malformed_json", '"request body is not valid JSON"'),
    (apigateway.ResponseType.BAD_REQUEST_PARAMETERS, "400", "invalid_request", "$context.error.messageString"),
    (apigateway.ResponseType.REQUEST_TOO_LARGE, "413", "payload_too_large", '"request body exceeds 10 MB"'),
    (apigateway.ResponseType.THROTTLED, "429", "throttled", '"too many requests, retry later"'),
    (apigateway.ResponseType.MISSING_AUTHENTICATION_TOKEN, "404", "not_found", '"no route for $context.httpMethod $context.path"'),
    (apigateway.ResponseType.DEFAULT_4_XX, None, "gateway_error", "$context.error.messageString"),
    (apigateway.ResponseType.DEFAULT_5_XX, None, "gateway_error", "$context.error.messageString"),
)


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
            # Execution logging (ERROR level) needs the account's API Gateway CloudWatch role:
            # created here unless context apigwCloudWatchRole=false (the account has one already).
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
                    "agent); the stage throttles every method. the README, Deploy to AWS shows how to attach one."
                ),
            )
        )
        validator = self.rest_api.add_request_validator(
            "Validator", validate_request_body=True, validate_request_parameters=True
        )
        for response_type, status, code, message in _GATEWAY_RESPONSES:
            self.rest_api.add_gateway_response(
                f"{code}{response_type.response_type}".replace("_", ""),
                type=response_type,
                status_code=status,
                templates={"application/json": _error(code, message)},
            )
        json_body = self.rest_api.add_model(
            "AnyJson",
            content_type="application/json",
            model_name="AnyJson",
            description="Any JSON value: the functions validate the shape (422), the gateway only the syntax (400)",
            schema=apigateway.JsonSchema(schema=apigateway.JsonSchemaVersion.DRAFT4, title="AnyJson", type=_ANY_JSON),
        )
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
            if route.method in ("POST", "PUT", "PATCH") and (route.method, route.path) not in RAW_BODY_ROUTES:
                options["request_models"] = {"application/json": json_body}
            resource = self.rest_api.root.resource_for_path(route.path)
            method = resource.add_method(
                route.method,
                integrations[route.handler],
                authorization_type=apigateway.AuthorizationType.NONE,
                request_validator=validator,
                operation_name=re.sub(r"[^A-Za-z0-9]+", "_", f"{route.handler} {route.method} {route.path}").strip("_"),
                **options,
            )
            reason = ROUTE_AUTHENTICATION.get((route.method, route.path)) or AUTHENTICATION[route.handler]
            for rule in ("AwsSolutions-APIG4", "AwsSolutions-COG4"):
                Validations.of(method).acknowledge(Acknowledgment(id=rule, reason=reason))
            self.methods.append(method)

    @property
    def url(self) -> str:
        return self.rest_api.url

    @property
    def agent_card_url(self) -> str:
        return self.rest_api.url_for_path("/" + AGENT_CARD_PATH)
