"""API: a REST API with one Lambda proxy method per `flightdeck.topology.ROUTES` entry (a console route
only with deploy.console).

Adding a route is adding a `Route` to topology.ROUTES. A route served by a new
handler module also needs that handler's permissions (infra/access.py ACCESS) and
its authentication story (AUTHENTICATION below: why no Cognito authorizer, and for
routes that are not PEER_AUTH why no gateway authorizer at all).

Streaming routes (topology `stream`: POST /a2a, GET /api/sessions/{id}/events) have a Lambda proxy
integration in response transfer mode STREAM: API Gateway invokes their function with
InvokeWithResponseStream (the 2021-11-15 .../response-streaming-invocations URI) and relays the
bytes as the function writes them, for up to the integration timeout of 15 minutes (the
functions: infra/functions.py, the Lambda Web Adapter). They are peer routes like the others:
same authorizer, same API key requirement, so the same usage plans meter and throttle them
(a stream is one request to API Gateway's meter, each 10 MB of it one more).

Peer routes (topology.PEER_AUTH: POST /api/chat, GET /api/sessions/{id}, GET /api/sessions,
GET /api/sessions/{id}/events, POST /a2a)
go through one Lambda REQUEST authorizer (the peer_authorizer function, keyed on the
Authorization header, its answer cached `gateway.authorizer_cache_s`) and require an
API key whose source is that authorizer (apiKeySource AUTHORIZER): the authorizer
names the usage-plan key the caller is metered under (flightdeck.domain.peer_usage),
so API Gateway throttles and counts each peer under its own usage plan
(infra/usage_plans.py). The functions still verify the token on every request.
Callback and public routes have no authorizer and no API key: callbacks carry a
token this agent minted, and the agent card is public.

Validation and limits, with the same answers as the functions give (and as the
local runtime gives, which has no API Gateway in front):
- API Gateway REST caps a request at 10 MB (fixed). The functions enforce
  MAX_BODY_BYTES (flightdeck.settings, default 1 MB, at most 2 MB on AWS:
  infra/environment.py) and MAX_RESULT_BYTES before parsing and answer 413; a
  request over 10 MB gets the same 413 shape here (REQUEST_TOO_LARGE).
  In between, a body whose proxy event exceeds Lambda's 6 MB synchronous limit
  never reaches a function: Lambda refuses the invoke and API Gateway answers 413
  itself. REST APIs have no setting that refuses a body by size below 10 MB
  (request validators check parameters and a JSON schema, not a byte count;
  mapping templates do not apply to proxy integrations; no gateway response type
  names this case), so that 413's body is API Gateway's, not ours. Only AWS WAF
  (a Content-Length rule with a custom 413 response) could refuse it first.
- The request validator checks required path parameters and that a JSON body is
  JSON at all (400 malformed_json, as the functions answer). The shape of a body
  (fields, types: 422 invalid_request) is checked by the functions' pydantic
  models, the one contract the OpenAPI document describes: a stricter gateway
  schema would answer the same mistake differently on AWS than locally.
- Errors API Gateway produces itself use the functions' shape
  {"error": {"code", "message"}}; an unknown route is 404, not REST's 403
  "Missing Authentication Token"; the authorizer's and the usage plans' refusals
  answer as the functions do (401 with WWW-Authenticate, 403, 429) and a failing
  authorizer is 503 with Retry-After.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import NamedTuple

from aws_cdk import Acknowledgment, Duration, RemovalPolicy, Stack, Validations
from aws_cdk import aws_apigateway as apigateway
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from constructs import Construct

from flightdeck import topology
from flightdeck.domain.peer_usage import QUOTA_MESSAGE, THROTTLED_MESSAGE

from .functions import LOG_RETENTION

STAGE_NAME = "prod"
AGENT_CARD_PATH = ".well-known/agent-card.json"

# How each handler's routes authenticate their callers: the reason given to cdk-nag for what it
# reports on their methods. PEER_AUTH routes have the peer authorizer (APIG4 is satisfied) but it
# is not a Cognito user pool authorizer (COG4); other routes have no gateway authorizer (APIG4, COG4).
AUTHENTICATION: dict[str, str] = {
    "callback": (
        "Authenticated in the function: every call must carry 'Authorization: Bearer <token>', an "
        "HMAC-SHA256 token this agent minted for exactly one (session, tool_use_id) and signed with its "
        "Secrets Manager key; it is verified in constant time with expiry and agent checks. Callers are "
        "peer agents that are not principals of this account, so IAM or Cognito authorizers do not apply."
    ),
    "agent_card": (
        "Public by design: the A2A agent card is a discovery document fetched anonymously by clients, "
        "GET /health says only the agent's name and version, and GET /openapi.json is the API's published "
        "description. They hold only what the agent advertises, and their function can reach no table, "
        "queue or secret."
    ),
    "chat_ingest": (
        "A Lambda REQUEST authorizer, not a Cognito user pool: peers are other agents, not Cognito users "
        "or principals of this account. POST /api/chat, GET /api/sessions/{id} and GET /api/sessions require "
        "'Authorization: Bearer fdp_<peer>_<secret>' (without the header API Gateway answers 401). The peer authorizer "
        "looks the token up in this agent's peer registry (its DynamoDB table) and names the usage-plan "
        "API key the request is metered under; the function verifies the token on every request with a "
        "consistent read, in constant time (401 malformed, 403 unknown or revoked), so a revocation applies "
        "at once, cache or not. A session is visible only to the peer that created it (404 to others); "
        "tokens are added, rotated and revoked with `flightdeck peers` without a redeploy."
    ),
    "session_events": (
        "A Lambda REQUEST authorizer, not a Cognito user pool, as for GET /api/sessions/{id}: the peer authorizer "
        "names the usage-plan API key of the bearer token's peer, and the function verifies the token against the "
        "peer registry before it reads the session; a session is visible only to the peer that created it (404 to "
        "others). The function reads the table and writes nothing."
    ),
    "a2a": (
        "A Lambda REQUEST authorizer, not a Cognito user pool, as for POST /api/chat: the peer authorizer "
        "names the usage-plan API key of the bearer token's peer, and the function verifies the token "
        "against the peer registry before the JSON-RPC body is read. Tasks and contexts are visible only "
        "to the peer that created them (-32001 to others). Push notifications go only to URLs under an "
        "ALLOWED_HOST_MAPPING base URL, checked when set and again when sent."
    ),
}

# cdk-nag rules each kind of route fires, acknowledged on its method with the reason above.
_NAG_RULES: dict[str, tuple[str, ...]] = {
    topology.PEER_AUTH: ("AwsSolutions-COG4",),  # CUSTOM authorizer: APIG4 passes
    topology.CALLBACK_AUTH: ("AwsSolutions-APIG4", "AwsSolutions-COG4"),
    topology.PUBLIC: ("AwsSolutions-APIG4", "AwsSolutions-COG4"),
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
# -32700 error (HTTP 200; MCP's, HTTP 400 with a JSON-RPC body), which a gateway 400 would replace.
RAW_BODY_ROUTES: frozenset[tuple[str, str]] = frozenset({("POST", "/a2a"), ("POST", "/mcp")})

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


class GatewayAnswer(NamedTuple):
    """A response API Gateway generates itself, in the functions' error shape."""

    type: apigateway.ResponseType
    status: str | None  # None: keep API Gateway's status
    code: str
    message: str  # VTL: a quoted JSON string or a $context variable
    headers: Mapping[str, str] = {}  # gateway response header values are static strings in single quotes


_UNAVAILABLE = ("503", "service_unavailable", '"a dependency is unavailable; retry later"', {"Retry-After": "'1'"})

_GATEWAY_RESPONSES: tuple[GatewayAnswer, ...] = (
    GatewayAnswer(
        apigateway.ResponseType.BAD_REQUEST_BODY, "400", "malformed_json", '"request body is not valid JSON"'
    ),
    GatewayAnswer(
        apigateway.ResponseType.BAD_REQUEST_PARAMETERS, "400", "invalid_request", "$context.error.messageString"
    ),
    GatewayAnswer(
        apigateway.ResponseType.REQUEST_TOO_LARGE, "413", "payload_too_large", '"request body exceeds 10 MB"'
    ),
    GatewayAnswer(
        apigateway.ResponseType.THROTTLED, "429", "throttled", json.dumps(THROTTLED_MESSAGE), {"Retry-After": "'1'"}
    ),
    GatewayAnswer(
        apigateway.ResponseType.MISSING_AUTHENTICATION_TOKEN,
        "404",
        "not_found",
        '"no route for $context.httpMethod $context.path"',
    ),
    # Peer routes: no Authorization header (API Gateway's 401, worded as the functions word theirs), or
    # a Deny from the authorizer (403).
    GatewayAnswer(
        apigateway.ResponseType.UNAUTHORIZED,
        "401",
        "unauthorized",
        '"a peer bearer token is required (Authorization: Bearer <token>)"',
        {"WWW-Authenticate": "'Bearer realm=\"flightdeck\"'"},
    ),
    GatewayAnswer(apigateway.ResponseType.ACCESS_DENIED, "403", "forbidden", '"this token is not accepted"'),
    # The usage plans: the authorizer named a key in no plan of this stage (or a disabled one), or the
    # peer's daily quota is spent.
    GatewayAnswer(
        apigateway.ResponseType.INVALID_API_KEY, "403", "forbidden", '"this peer has no usage plan on this agent"'
    ),
    GatewayAnswer(apigateway.ResponseType.QUOTA_EXCEEDED, "429", "quota_exceeded", json.dumps(QUOTA_MESSAGE)),
    # The authorizer failed (the registry unreachable) or answered something API Gateway cannot use.
    GatewayAnswer(apigateway.ResponseType.AUTHORIZER_FAILURE, *_UNAVAILABLE),
    GatewayAnswer(apigateway.ResponseType.AUTHORIZER_CONFIGURATION_ERROR, *_UNAVAILABLE),
    GatewayAnswer(apigateway.ResponseType.DEFAULT_4_XX, None, "gateway_error", "$context.error.messageString"),
    GatewayAnswer(apigateway.ResponseType.DEFAULT_5_XX, None, "gateway_error", "$context.error.messageString"),
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
        authorizer_cache_s: int,
        log_removal_policy: RemovalPolicy,
        console: bool = False,
    ) -> None:
        super().__init__(scope, id)
        access_logs = logs.LogGroup(self, "AccessLogs", retention=LOG_RETENTION, removal_policy=log_removal_policy)
        self.rest_api = apigateway.RestApi(
            self,
            "RestApi",
            rest_api_name=f"flightdeck-{agent}",
            description=f"Flightdeck agent {agent}",
            endpoint_types=[apigateway.EndpointType.REGIONAL],
            # Peer routes require an API key, and the peer authorizer names it (usageIdentifierKey):
            # API Gateway ignores any x-api-key header, so the key meters a peer but proves nothing.
            api_key_source_type=apigateway.ApiKeySourceType.AUTHORIZER,
            # Logging needs the account's API Gateway CloudWatch role: an account-wide setting, made once
            # per account and region by the Flightdeck-ApiGatewayAccount stack (infra/account.py).
            cloud_watch_role=False,
            deploy_options=apigateway.StageOptions(
                stage_name=STAGE_NAME,
                throttling_rate_limit=throttle_rate,
                throttling_burst_limit=throttle_burst,
                access_log_destination=apigateway.LogGroupLogDestination(access_logs),
                # The standard fields plus who the authorizer said called (peer, usage key) and why API
                # Gateway answered itself: the record of calls refused before a function (and its audit
                # line) ran, such as a missing token (401), a throttle or quota (429), a disabled key (403).
                access_log_format=apigateway.AccessLogFormat.custom(
                    json.dumps(
                        {
                            "requestId": apigateway.AccessLogField.context_request_id(),
                            "ip": apigateway.AccessLogField.context_identity_source_ip(),
                            "caller": apigateway.AccessLogField.context_identity_caller(),
                            "user": apigateway.AccessLogField.context_identity_user(),
                            "requestTime": apigateway.AccessLogField.context_request_time(),
                            "httpMethod": apigateway.AccessLogField.context_http_method(),
                            "resourcePath": apigateway.AccessLogField.context_resource_path(),
                            "status": apigateway.AccessLogField.context_status(),
                            "protocol": apigateway.AccessLogField.context_protocol(),
                            "responseLength": apigateway.AccessLogField.context_response_length(),
                            "peer": apigateway.AccessLogField.context_authorizer_principal_id(),
                            "apiKeyId": apigateway.AccessLogField.context_identity_api_key_id(),
                            "errorType": apigateway.AccessLogField.context_error_response_type(),
                        }
                    )
                ),
                logging_level=apigateway.MethodLoggingLevel.ERROR,
                data_trace_enabled=False,  # would log bodies and bearer tokens
                metrics_enabled=True,
                tracing_enabled=True,
            ),
        )
        Validations.of(self.rest_api).acknowledge(
            Acknowledgment(
                id="AwsSolutions-APIG3",
                reason=(
                    "No WAF web ACL by default (a per-ACL monthly cost, and rules depend on who may call the "
                    "agent); the stage throttles every method. docs/DEPLOYMENT.md shows how to attach one."
                ),
            )
        )
        # Every method's, the console's too (infra/console.py).
        validator = self.request_validator = self.rest_api.add_request_validator(
            "Validator", validate_request_body=True, validate_request_parameters=True
        )
        for answer in _GATEWAY_RESPONSES:
            self.rest_api.add_gateway_response(
                f"{answer.code}{answer.type.response_type}".replace("_", ""),
                type=answer.type,
                status_code=answer.status,
                response_headers=dict(answer.headers) or None,
                templates={"application/json": _error(answer.code, answer.message)},
            )
        # One authorizer for every peer route: its (cached) Allow covers them all.
        self.authorizer = apigateway.RequestAuthorizer(
            self,
            "PeerAuthorizer",
            authorizer_name="peer-token",
            handler=functions[topology.PEER_AUTHORIZER_HANDLER],
            # Without this header API Gateway answers 401 itself; the cache is keyed on it.
            identity_sources=[apigateway.IdentitySource.header("Authorization")],
            results_cache_ttl=Duration.seconds(authorizer_cache_s),  # 0: no cache, ask every time
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
            if route.console and not console:
                continue  # the console's routes exist only beside its page (deploy.console)
            if route.handler not in AUTHENTICATION:
                raise ValueError(
                    f"route {route.method} {route.path}: say in infra/api.py AUTHENTICATION how handler "
                    f"{route.handler!r} authenticates its callers"
                )
            streams = route.handler in topology.STREAMING_HANDLERS
            if route.stream != streams:
                raise ValueError(
                    f"route {route.method} {route.path}: its handler {route.handler!r} serves streaming "
                    "and buffered routes; a function streams all its answers or none"
                )
            if route.handler not in integrations:
                integrations[route.handler] = apigateway.LambdaIntegration(
                    functions[route.handler],
                    proxy=True,
                    allow_test_invoke=False,
                    **(
                        {
                            "response_transfer_mode": apigateway.ResponseTransferMode.STREAM,
                            "timeout": Duration.seconds(topology.STREAM_TIMEOUT_S),
                        }
                        if streams
                        else {}
                    ),
                )
            options: dict = {}
            params = _PATH_PARAM.findall(route.path)
            if params:
                options["request_parameters"] = {f"method.request.path.{p}": True for p in params}
            if route.method in ("POST", "PUT", "PATCH") and (route.method, route.path) not in RAW_BODY_ROUTES:
                options["request_models"] = {"application/json": json_body}
            if route.auth not in _NAG_RULES:
                raise ValueError(f"route {route.method} {route.path}: unknown auth {route.auth!r}")
            if route.auth == topology.PEER_AUTH:
                options["authorization_type"] = apigateway.AuthorizationType.CUSTOM
                options["authorizer"] = self.authorizer
                options["api_key_required"] = True
            else:
                options["authorization_type"] = apigateway.AuthorizationType.NONE
            resource = self.rest_api.root.resource_for_path(route.path)
            method = resource.add_method(
                route.method,
                integrations[route.handler],
                request_validator=validator,
                operation_name=re.sub(r"[^A-Za-z0-9]+", "_", f"{route.handler} {route.method} {route.path}").strip("_"),
                **options,
            )
            reason = ROUTE_AUTHENTICATION.get((route.method, route.path)) or AUTHENTICATION[route.handler]
            for rule in _NAG_RULES[route.auth]:
                Validations.of(method).acknowledge(Acknowledgment(id=rule, reason=reason))
            self.methods.append(method)

    @property
    def stage(self) -> apigateway.Stage:
        """The deployment stage: the one the usage plans meter."""
        return self.rest_api.deployment_stage

    @property
    def url(self) -> str:
        return self.rest_api.url

    @property
    def base_url(self) -> str:
        """The stage's URL, without the trailing slash: the functions' PUBLIC_BASE_URL. Built from the RestApi id,
        not from `url`, which refers to the stage: the stage depends on the deployment, the deployment on the
        methods, the methods on the functions, so a function naming it would close a cycle."""
        stack = Stack.of(self)
        return f"https://{self.rest_api.rest_api_id}.execute-api.{stack.region}.{stack.url_suffix}/{STAGE_NAME}"

    @property
    def agent_card_url(self) -> str:
        return self.rest_api.url_for_path("/" + AGENT_CARD_PATH)
