"""Lambda: the REQUEST authorizer of the peer routes (POST /api/chat, POST /a2a, GET /api/sessions/{id}).

API Gateway calls it before those routes, caching its answer per Authorization header
(`gateway.authorizer_cache_s`); a request without that header is 401 at API Gateway and
never gets here. Its job is metering (flightdeck.domain.peer_usage): it names the API key
the request counts against (`usageIdentifierKey`), so API Gateway applies the caller's
usage plan (throttle, quota):
- a valid peer token: that peer's key, context {"peer": <id>};
- anything else (unknown, forged, revoked, malformed): the shared "unidentified" key,
  whose plan has low limits. The function behind refuses it (401/403) and audits it with
  the payload's hash, which an authorizer, never seeing the body, could not.
The policy allows every route, since the cached answer serves any peer route. A registry
outage raises, which API Gateway reports as AUTHORIZER_FAILURE (the stack maps it to 503).
"""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools.utilities.data_classes.api_gateway_authorizer_event import (
    APIGatewayAuthorizerRequestEvent,
    APIGatewayAuthorizerResponse,
)

from flightdeck.domain.peer_usage import UNIDENTIFIED, authorize
from flightdeck.observability import lambda_entry, logger
from flightdeck.settings import get_settings
from flightdeck.wiring import deps

get_settings()


@lambda_entry
def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    request = APIGatewayAuthorizerRequestEvent(event)
    d = deps()
    assert d.registry is not None, "flightdeck.wiring.deps() wires the peer registry"
    decision = authorize(d.registry, d.settings.agent_name, request.headers.get("authorization"), d.clock.now_ms())
    arn = request.parsed_arn
    response = APIGatewayAuthorizerResponse(
        principal_id=decision.peer_id or UNIDENTIFIED,
        region=arn.region,
        aws_account_id=arn.aws_account_id,
        api_id=arn.api_id,
        stage=arn.stage,
        context={"peer": decision.peer_id} if decision.peer_id else None,
        usage_identifier_key=decision.usage_key,
        partition=arn.partition,
    )
    if decision.peer_id is None:
        logger.info(
            "authorizer: unidentified caller, metered under the shared key; the function will refuse it",
            extra={"auth_check": decision.result.status.value, "claimed_peer": decision.result.peer_id},
        )
    response.allow_all_routes()
    return response.asdict()
