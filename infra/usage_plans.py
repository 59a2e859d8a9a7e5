"""Usage plans: API Gateway's per-peer throttle and daily quota on the peer routes.

One usage plan per `UsagePlanSpec` of the agent (AgentSpec.usage_plans(), see
flightdeck.domain.peer_usage), each holding the API keys of the peers the spec names:
the default plan holds none at deploy time (`flightdeck peers add` puts the keys of
peers added later in it: the stack's PeerUsagePlanId output); every peer the
configuration names has a plan of its own (as has the shared pseudo-peer of callers
without a valid token). A plan's throttle and quota apply to each of its keys apart.

The API keys' values are written in the template on purpose: with the API's key
source AUTHORIZER, API Gateway ignores x-api-key headers and takes the key from the
peer authorizer's answer, so a key value identifies a peer for metering and grants
nothing. It is derived from (agent, peer) (peer_usage.usage_key), so the stack, the
local runtime and `flightdeck peers add` arrive at the same value.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence

from aws_cdk import aws_apigateway as apigateway
from constructs import Construct

from flightdeck.domain.peer_usage import UsagePlanSpec, usage_key, usage_key_name


def plan_key_logical_id(peer_id: str) -> str:
    """The logical id of a peer's AWS::ApiGateway::UsagePlanKey: fixed by the peer id alone.

    CDK names a plan's key association by its position among the plan's keys (or, behind a
    feature flag, by the key's path): either may change with an unrelated edit or a CDK
    upgrade, and CloudFormation would then create the association again before deleting the
    old one, which API Gateway refuses (the key is already in the plan). Peer ids are
    a-z, 0-9 and '-' (a pseudo-peer may have '_'): the hash keeps "a-b" and "ab" apart.
    """
    readable = "".join(part.capitalize() for part in re.split(r"[^A-Za-z0-9]+", peer_id))
    return f"PeerUsagePlanKey{readable}{hashlib.sha256(peer_id.encode()).hexdigest()[:8].upper()}"


class PeerUsagePlans(Construct):
    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        agent: str,
        rest_api: apigateway.IRestApi,
        stage: apigateway.Stage,
        plans: Sequence[UsagePlanSpec],
    ) -> None:
        super().__init__(scope, id)
        defaults = [spec for spec in plans if spec.default]
        if len(defaults) != 1:
            raise ValueError(f"agent {agent}: expected exactly one default usage plan, got {len(defaults)}")
        names = [spec.name for spec in plans]
        if len(set(names)) != len(names):
            raise ValueError(f"agent {agent}: usage plan names repeat: {names}")
        peers = [peer for spec in plans for peer in spec.peers]
        if len(set(peers)) != len(peers):
            raise ValueError(f"agent {agent}: a peer's API key can be in one usage plan only: {peers}")

        self.plans: dict[str, apigateway.UsagePlan] = {}
        self.keys: dict[str, apigateway.ApiKey] = {}
        for spec in plans:
            limits = spec.limits
            # The construct id is the plan's name, which depends only on the agent and the peer:
            # logical ids stay put when plans are added, removed or reordered. (Not "Default":
            # CDK reads that id as this construct's default child and leaves it out of logical ids.)
            plan = apigateway.UsagePlan(
                self,
                spec.name,
                name=spec.name,
                description=(
                    f"Flightdeck {agent}: the limits of each peer added with `flightdeck peers add`"
                    if spec.default
                    else f"Flightdeck {agent}: the limits of {', '.join(spec.peers)} (each key apart)"
                ),
                throttle=apigateway.ThrottleSettings(rate_limit=limits.rate_per_s, burst_limit=limits.burst),
                quota=(
                    apigateway.QuotaSettings(limit=limits.quota_per_day, period=apigateway.Period.DAY)
                    if limits.quota_per_day > 0
                    else None
                ),
                api_stages=[apigateway.UsagePlanPerApiStage(api=rest_api, stage=stage)],
            )
            for peer_id in spec.peers:
                key = apigateway.ApiKey(
                    self,
                    f"Key-{peer_id}",
                    api_key_name=usage_key_name(agent, peer_id),
                    # Not a secret (see the module docstring): the peer authorizer names it, no caller sends it.
                    value=usage_key(agent, peer_id),
                    description=f"usage key of peer {peer_id} calling {agent} (metering only, not a credential)",
                    enabled=True,
                )
                plan.add_api_key(key, override_logical_id=plan_key_logical_id(peer_id))
                self.keys[peer_id] = key
            self.plans[spec.name] = plan
        self.default_plan = self.plans[defaults[0].name]
