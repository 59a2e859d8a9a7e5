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

from flightdeck.domain.peer_usage import UNIDENTIFIED, authorize
from flightdeck.observability import lambda_entry, logger
from flightdeck.settings import get_settings

# The registry alone, not flightdeck.wiring: every other port's adapters stay unloaded (issue 42).
from flightdeck.state_wiring import peer_registry, state_store

get_settings()


@lambda_entry
def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    store = state_store()
    decision = authorize(peer_registry(), get_settings().agent_name, _header(event, "authorization"), store.now_ms())
    if decision.peer_id is None:
        logger.info(
            "authorizer: unidentified caller, metered under the shared key; the function will refuse it",
            extra={"auth_check": decision.result.status.value, "claimed_peer": decision.result.peer_id},
        )
    return _allow_every_route(
        event["methodArn"],
        principal_id=decision.peer_id or UNIDENTIFIED,
        usage_key=decision.usage_key,
        context={"peer": decision.peer_id} if decision.peer_id else None,
    )


# The REQUEST authorizer's event and answer are read and written here, not with Powertools' data classes:
# importing those imports its every event class, about 0.08x `import boto3` at each cold start (issue 31).
# The answer is the one its APIGatewayAuthorizerResponse.allow_all_routes() gives (tests/integration/test_peer_authorizer.py).


def _header(event: dict[str, Any], name: str) -> str | None:
    """A request header, by its name in any case (HTTP header names are case-insensitive)."""
    return next((v for k, v in (event.get("headers") or {}).items() if k.lower() == name), None)


def _allow_every_route(
    method_arn: str, *, principal_id: str, usage_key: str | None, context: dict[str, Any] | None
) -> dict[str, Any]:
    """An IAM policy allowing every method and path of the stage the request came to."""
    # arn:<partition>:execute-api:<region>:<account>:<api id>/<stage>/<method>/<path>
    _, partition, _, region, account, route = method_arn.split(":", 5)
    api_id, stage = route.split("/")[:2]
    resource = f"arn:{partition}:execute-api:{region}:{account}:{api_id}/{stage}/*/*"
    answer: dict[str, Any] = {
        "principalId": principal_id,
        "policyDocument": {
            "Version": "2012-10-17",
            "Statement": [{"Action": "execute-api:Invoke", "Effect": "Allow", "Resource": [resource]}],
        },
    }
    if usage_key:
        answer["usageIdentifierKey"] = usage_key
    if context:
        answer["context"] = context
    return answer
