"""Lambda: the REQUEST authorizer of the peer routes (POST /api/chat, POST /a2a, GET /api/sessions/{id}).

API Gateway calls it before those routes, caching its answer per Authorization header
(`gateway.authorizer_cache_s`). It exists for the per-peer usage plans: it names the
caller's API key (`usageIdentifierKey`, flightdeck.domain.peer_usage) so API Gateway
throttles and counts the request under that peer's plan, and it turns away bad tokens
before they cost a function invocation. Answers, as API Gateway maps them:
- no usable bearer token: the exception "Unauthorized" -> 401 (API Gateway answers a
  missing Authorization header itself, without calling us);
- unknown, wrong or revoked token: a Deny policy -> 403;
- allowed: an Allow policy for every route (the cached answer serves any peer route),
  context {"peer": <id>} and the peer's usage key;
- the registry unreachable: an exception -> AUTHORIZER_FAILURE, which the stack maps to 503.

The functions behind still check the token on every request with a strongly consistent
read, so a revocation applies at once rather than when the cached Allow expires.
"""

from __future__ import annotations

from aws_lambda_powertools.utilities.data_classes.api_gateway_authorizer_event import (
    APIGatewayAuthorizerRequestEvent,
    APIGatewayAuthorizerResponse,
)

from flightdeck import topology
from flightdeck.domain.peer_usage import authorize
from flightdeck.observability import audit, count, lambda_entry, logger
from flightdeck.settings import get_settings
from flightdeck.wiring import deps

get_settings()

# API Gateway's fixed word for "answer 401".
UNAUTHORIZED = "Unauthorized"


@lambda_entry
def handler(event: dict, context) -> dict:
    request = APIGatewayAuthorizerRequestEvent(event)
    d = deps()
    decision = authorize(d.registry, d.settings.agent_name, request.headers.get("authorization"), d.store.now_ms())
    route = topology.route_for(request.http_method, request.resource)
    operation = route.audit if route and route.audit else f"{request.http_method} {request.resource}"
    if decision.unauthenticated:
        count("InboundAuthRefused")
        logger.warning("authorizer: no usable bearer token", extra={"auth_check": "malformed"})
        audit("inbound", operation, None, "", "unauthorized", stage="authorizer")
        raise Exception(UNAUTHORIZED)  # noqa: TRY002 - API Gateway matches this exact message
    arn = request.parsed_arn
    result = decision.result
    response = APIGatewayAuthorizerResponse(
        principal_id=result.peer_id or "unknown",
        region=arn.region,
        aws_account_id=arn.aws_account_id,
        api_id=arn.api_id,
        stage=arn.stage,
        context={"peer": result.peer_id} if result.ok else None,
        usage_identifier_key=decision.usage_key,
        partition=arn.partition,
    )
    if result.ok:
        response.allow_all_routes()
    else:
        count("InboundAuthRefused")
        logger.warning("authorizer: refused", extra={"auth_check": result.status.value, "claimed_peer": result.peer_id})
        audit("inbound", operation, None, "", "forbidden", claimed_peer=result.peer_id, stage="authorizer")
        response.deny_all_routes()
    return response.asdict()
