"""Per-peer usage plans: the API key each calling peer is metered under, and its limits.

On AWS the peer routes (POST /api/chat, POST /a2a, GET /api/sessions/{id}) require an
API key whose source is the Lambda authorizer (API Gateway's `apiKeySource: AUTHORIZER`):
the authorizer checks the peer's bearer token and answers with `usageIdentifierKey`, the
API key of that peer. API Gateway then throttles and counts the request under the usage
plan holding that key; limits of a plan apply to each of its keys separately.

A peer never sees or sends its API key: with the AUTHORIZER source API Gateway ignores
any `x-api-key` header, so the key is an identifier for metering, not a credential. That
is why it can be derived from (agent, peer) and written in the CloudFormation template:
the stack, the local runtime and `flightdeck peers add` all arrive at the same value.

Plans: each peer named in the configuration has its own plan (its limits, or the
agent's defaults); peers added later with `flightdeck peers add` get a key in the
agent's default plan (the default limits, per peer). Callers without a valid token
(unknown, forged, revoked, malformed) share one more plan, "unidentified", with low
limits: the authorizer lets them through to the function, which refuses them (401/403)
and writes their audit line with the payload's hash, while their volume stays bounded
and cannot use up what the peers may send. No AWS here.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from flightdeck.domain.peers import AuthResult, AuthStatus, PeerRegistryPort, authenticate, bearer_token

USAGE_KEY_PREFIX = "fdu-"
# The pseudo-peer every caller without a valid token is metered as. "_" is not allowed in
# peer ids (flightdeck.domain.peers), so no real peer can share its key.
UNIDENTIFIED = "_unidentified"

# What a 429 of the gateway says (infra/api.py on AWS, flightdeck.local.peer_gate locally): the keys that set the
# limit it hit, so that whoever is refused knows what to raise.
THROTTLED_MESSAGE = (
    "too many requests: over this caller's usage plan ([agents.NAME.gateway] peer_rate_limit and peer_burst_limit; "
    "peer_limits.PEER for one peer) or the stage's throttle ([agents.NAME.deploy] throttle_rate); retry later"
)
QUOTA_MESSAGE = (
    "this peer's daily quota is used up ([agents.NAME.gateway] peer_quota_per_day; peer_limits.PEER.quota_per_day "
    "for one peer)"
)


def usage_key(agent: str, peer_id: str) -> str:
    """The API key value `peer_id` is metered under when calling `agent` (44 characters: API Gateway wants 20-128)."""
    digest = hashlib.sha256(f"flightdeck/{agent}/{peer_id}".encode()).hexdigest()
    return USAGE_KEY_PREFIX + digest[:40]


def usage_key_name(agent: str, peer_id: str) -> str:
    """The API key's name, for people reading the console."""
    return f"flightdeck-{agent}-{peer_id}"


def default_plan_name(agent: str) -> str:
    return f"flightdeck-{agent}-peers"


def peer_plan_name(agent: str, peer_id: str) -> str:
    return f"flightdeck-{agent}-peer-{peer_id}"


def unidentified_plan_name(agent: str) -> str:
    return f"flightdeck-{agent}-unidentified"


@dataclass(frozen=True)
class PeerLimits:
    rate_per_s: float  # steady requests per second (token bucket refill)
    burst: int  # bucket size
    quota_per_day: int = 0  # requests per UTC day; 0: no quota


@dataclass(frozen=True)
class UsagePlanSpec:
    name: str
    limits: PeerLimits
    peers: tuple[str, ...]  # peers whose API keys the plan holds (the default plan: none at deploy time)
    default: bool = False  # where `flightdeck peers add` puts the keys of peers added later


def usage_plans(
    agent: str,
    defaults: PeerLimits,
    known_peers: Iterable[str],
    overrides: Mapping[str, PeerLimits],
    unidentified: PeerLimits,
) -> list[UsagePlanSpec]:
    """The default plan, the unidentified callers' plan, then one plan per known peer (its override,
    else the defaults), sorted by peer."""
    plans = [
        UsagePlanSpec(default_plan_name(agent), defaults, (), default=True),
        UsagePlanSpec(unidentified_plan_name(agent), unidentified, (UNIDENTIFIED,)),
    ]
    for peer_id in sorted(set(known_peers) | set(overrides)):
        plans.append(UsagePlanSpec(peer_plan_name(agent, peer_id), overrides.get(peer_id, defaults), (peer_id,)))
    return plans


@dataclass(frozen=True)
class Authorization:
    """The authorizer's answer: the usage key the request is metered under, and who the caller is."""

    result: AuthResult
    usage_key: str

    @property
    def peer_id(self) -> str | None:
        """The authenticated peer; None for an unidentified caller (the function will refuse it)."""
        return self.result.peer_id if self.result.ok else None


def authorize(registry: PeerRegistryPort, agent: str, authorization_header: str | None, now_ms: int) -> Authorization:
    """Meter the request: an authenticated peer under its own key, anyone else under the unidentified key.

    It refuses nobody: the route's function checks the token on every request (a consistent
    read) and answers 401/403 with an audit line holding the payload's hash, which a refusal
    here could not write (an authorizer never sees the body)."""
    token = bearer_token(authorization_header)
    result = authenticate(registry, token, now_ms) if token is not None else AuthResult(AuthStatus.MALFORMED)
    if result.ok and result.peer_id is not None:
        return Authorization(result, usage_key(agent, result.peer_id))
    return Authorization(result, usage_key(agent, UNIDENTIFIED))
