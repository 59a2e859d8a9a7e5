"""API Gateway's part of a peer route, on a laptop: the REQUEST authorizer and the caller's usage plan.

The stack puts every PEER_AUTH route (POST /api/chat, POST /a2a, GET /api/sessions/{id})
behind a Lambda REQUEST authorizer, requires an API key there, and takes the key from the
authorizer (apiKeySource AUTHORIZER; infra/api.py, infra/usage_plans.py). This does the same
before the local gateway invokes the route's function:

1. no Authorization header (the authorizer's identity source): 401, the authorizer is not called;
2. the authorizer function (flightdeck.handlers.peer_authorizer) gets a REQUEST authorizer
   event; its answer is cached per Authorization header for the configured TTL. The exception
   "Unauthorized" is 401, any other failure 503, a policy that does not allow this method 403;
3. the API key it names (usageIdentifierKey), looked up in the local moto server's API Gateway
   (flightdeck.adapters.usage_plans): none, disabled, or in no usage plan is 403; past the plan's
   rate (a token bucket of rate and burst per key) 429 `throttled`; past its daily quota 429
   `quota_exceeded`;
4. the request goes on with requestContext.authorizer (principalId, the authorizer's context,
   integrationLatency) and identity.apiKey / apiKeyId set, as API Gateway sends them.

Answers use the stack's gateway responses (same status, code, message and headers).
"""

from __future__ import annotations

import copy
import fnmatch
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from flightdeck.adapters.usage_plans import KeyPlan
from flightdeck.domain.peer_usage import QUOTA_MESSAGE, THROTTLED_MESSAGE
from flightdeck.local.invocation import Function

log = logging.getLogger("flightdeck.local")

REALM = 'Bearer realm="flightdeck"'


def _refusal(status: int, code: str, message: str, headers: dict[str, str] | None = None) -> Refusal:
    return Refusal(status, code, message, headers or {})


@dataclass(frozen=True)
class Refusal:
    status: int
    code: str
    message: str
    headers: dict[str, str]


# The stack's gateway responses (infra/api.py), for the cases this gate answers.
UNAUTHORIZED = _refusal(
    401, "unauthorized", "a peer bearer token is required (Authorization: Bearer <token>)", {"WWW-Authenticate": REALM}
)
ACCESS_DENIED = _refusal(403, "forbidden", "this token is not accepted")
INVALID_API_KEY = _refusal(403, "forbidden", "this peer has no usage plan on this agent")
THROTTLED = _refusal(429, "throttled", THROTTLED_MESSAGE, {"Retry-After": "1"})
QUOTA_EXCEEDED = _refusal(429, "quota_exceeded", QUOTA_MESSAGE)
AUTHORIZER_FAILURE = _refusal(
    503, "service_unavailable", "a dependency is unavailable; retry later", {"Retry-After": "1"}
)


class TokenBucket:
    """API Gateway's throttle: `burst` requests at once, refilled at `rate` per second."""

    def __init__(self, rate: float, burst: int, clock: Callable[[], float] = time.monotonic):
        self.rate, self.burst, self.clock = rate, burst, clock
        self.tokens = float(burst)
        self.at = clock()

    def take(self) -> bool:
        now = self.clock()
        self.tokens = min(float(self.burst), self.tokens + (now - self.at) * self.rate)
        self.at = now
        if self.tokens < 1.0:
            return False
        self.tokens -= 1.0
        return True


@dataclass
class _Cached:
    until: float
    answer: dict[str, Any] | None  # the authorizer's policy response; None: it raised "Unauthorized"


def _method_arn(event: dict[str, Any]) -> str:
    ctx = event["requestContext"]
    return (
        f"arn:aws:execute-api:{ctx.get('region', 'us-east-1')}:{ctx['accountId']}:{ctx['apiId']}/"
        f"{ctx['stage']}/{event['httpMethod']}{event['path']}"
    )


def authorizer_event(event: dict[str, Any], region: str) -> dict[str, Any]:
    """The REQUEST authorizer event API Gateway sends for this proxy event."""
    ctx = dict(event["requestContext"], region=region)
    return {
        "type": "REQUEST",
        "methodArn": _method_arn({**event, "requestContext": ctx}),
        "resource": event["resource"],
        "path": event["path"],
        "httpMethod": event["httpMethod"],
        "headers": event.get("headers") or {},
        "multiValueHeaders": event.get("multiValueHeaders") or {},
        "queryStringParameters": event.get("queryStringParameters") or {},
        "multiValueQueryStringParameters": event.get("multiValueQueryStringParameters") or {},
        "pathParameters": event.get("pathParameters") or {},
        "stageVariables": event.get("stageVariables") or {},
        "requestContext": copy.deepcopy(event["requestContext"]),
    }


def allows(policy: dict[str, Any], method_arn: str) -> bool:
    """IAM evaluation of an authorizer's policy for one method: an explicit Deny wins, else an Allow is needed."""
    allowed = False
    for statement in (policy.get("policyDocument") or {}).get("Statement", []):
        resources = statement.get("Resource", [])
        resources = [resources] if isinstance(resources, str) else resources
        actions = statement.get("Action", [])
        actions = [actions] if isinstance(actions, str) else actions
        if not any(fnmatch.fnmatchcase("execute-api:Invoke", a) for a in actions):
            continue
        if any(fnmatch.fnmatchcase(method_arn, r) for r in resources):
            if statement.get("Effect") == "Deny":
                return False
            allowed = allowed or statement.get("Effect") == "Allow"
    return allowed


class PeerGate:
    """Authorizer and usage plans for the peer routes of one agent's local gateway."""

    def __init__(
        self,
        authorizer: Function,
        key_lookup: Callable[[str], KeyPlan | None],
        *,
        cache_ttl_s: float,
        region: str,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.authorizer = authorizer
        self.key_lookup = key_lookup
        self.cache_ttl_s = cache_ttl_s
        self.region = region
        self.clock = clock
        self._lock = threading.Lock()
        self._cache: dict[str, _Cached] = {}
        self._buckets: dict[tuple[str, float, int], TokenBucket] = {}
        self._used_today: dict[tuple[str, str], int] = {}

    def admit(self, event: dict[str, Any]) -> Refusal | None:
        """None: the request may go on (event now carries the authorizer's answer); else the refusal."""
        headers = {str(k).lower(): v for k, v in (event.get("headers") or {}).items()}
        identity = headers.get("authorization")
        if not identity:
            return UNAUTHORIZED
        auth_event = authorizer_event(event, self.region)
        started = self.clock()
        try:
            answer = self._authorize(identity, auth_event)
        except Exception as exc:  # noqa: BLE001 - any authorizer failure is API Gateway's AUTHORIZER_FAILURE
            log.error("peer authorizer failed: %s: %s", type(exc).__name__, exc)
            return AUTHORIZER_FAILURE
        if answer is None:
            return UNAUTHORIZED
        if not allows(answer, auth_event["methodArn"]):
            return ACCESS_DENIED
        refusal, key = self._meter(answer.get("usageIdentifierKey"))
        if refusal is not None:
            return refusal
        ctx = event["requestContext"]
        ctx["authorizer"] = {
            "principalId": answer.get("principalId"),
            **(answer.get("context") or {}),
            "integrationLatency": int((self.clock() - started) * 1000),
        }
        ctx["identity"]["apiKey"] = answer.get("usageIdentifierKey")
        ctx["identity"]["apiKeyId"] = key.key_id if key else None
        return None

    def _authorize(self, identity: str, auth_event: dict[str, Any]) -> dict[str, Any] | None:
        now = self.clock()
        with self._lock:
            hit = self._cache.get(identity)
            if hit and now < hit.until:
                return hit.answer
        try:
            answer = self.authorizer.invoke(auth_event)
        except Exception as exc:
            if str(exc) != "Unauthorized":
                raise
            answer = None
        if answer is not None and not isinstance(answer, dict):
            raise TypeError(f"authorizer returned {type(answer).__name__}, not a policy")
        if self.cache_ttl_s > 0:
            with self._lock:
                self._cache[identity] = _Cached(now + self.cache_ttl_s, answer)
        return answer

    def _meter(self, value: str | None) -> tuple[Refusal | None, KeyPlan | None]:
        if not value:
            return INVALID_API_KEY, None
        key = self.key_lookup(value)
        if key is None or not key.enabled or key.limits is None:
            return INVALID_API_KEY, key
        limits = key.limits
        with self._lock:
            bucket_id = (key.key_id, limits.rate_per_s, limits.burst)
            bucket = self._buckets.get(bucket_id)
            if bucket is None:
                bucket = self._buckets[bucket_id] = TokenBucket(limits.rate_per_s, limits.burst, self.clock)
            if not bucket.take():
                return THROTTLED, key
            if limits.quota_per_day:
                day = (key.key_id, datetime.now(UTC).strftime("%Y-%m-%d"))
                if self._used_today.get(day, 0) >= limits.quota_per_day:
                    return QUOTA_EXCEEDED, key
                self._used_today[day] = self._used_today.get(day, 0) + 1
        return None, key
