"""API Gateway usage plans and API keys of an agent's peers (flightdeck.domain.peer_usage), through boto3.

Three users, one set of calls:
- `flightdeck local up` creates the plans and keys of the configuration in the local
  moto server (on AWS the CDK stack creates them: infra/usage_plans.py);
- `flightdeck peers add|revoke` gives a peer added later its key in the default plan,
  or disables a revoked peer's key (locally and on AWS);
- the local gateway looks up the plan of the key the authorizer names, as API Gateway does.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from botocore.exceptions import ClientError

from flightdeck.domain.peer_usage import PeerLimits, UsagePlanSpec, usage_key, usage_key_name

AGENT_TAG = "flightdeck:agent"


class UsagePlanNotFoundError(LookupError):
    pass


@dataclass(frozen=True)
class KeyPlan:
    """What API Gateway knows of one usage key: its id, whether enabled, and the limits of its plan."""

    key_id: str
    enabled: bool
    plan_id: str | None
    limits: PeerLimits | None


def _limits(plan: dict[str, Any]) -> PeerLimits:
    throttle = plan.get("throttle") or {}
    quota = plan.get("quota") or {}
    daily = int(quota.get("limit", 0)) if quota.get("period", "DAY") == "DAY" else 0
    return PeerLimits(float(throttle.get("rateLimit", 0) or 0), int(throttle.get("burstLimit", 0) or 0), daily)


def _code(exc: ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code", ""))


class UsagePlans:
    def __init__(self, client: Any):
        self.client = client

    # --- plans ---------------------------------------------------------------------------
    def _all_plans(self) -> list[dict[str, Any]]:
        plans: list[dict[str, Any]] = []
        for page in self.client.get_paginator("get_usage_plans").paginate():
            plans.extend(page.get("items", []))
        return plans

    def plan_id(self, name: str) -> str:
        for plan in self._all_plans():
            if plan.get("name") == name:
                return str(plan["id"])
        raise UsagePlanNotFoundError(f"no usage plan named {name!r}")

    def ensure_plan(self, agent: str, spec: UsagePlanSpec) -> str:
        """The plan's id, creating it with the spec's limits if there is none of that name."""
        try:
            return self.plan_id(spec.name)
        except UsagePlanNotFoundError:
            pass
        kwargs: dict[str, Any] = {
            "name": spec.name,
            "description": f"Flightdeck agent {agent}: limits per calling peer",
            "throttle": {"rateLimit": spec.limits.rate_per_s, "burstLimit": spec.limits.burst},
            "tags": {AGENT_TAG: agent},
        }
        if spec.limits.quota_per_day:
            kwargs["quota"] = {"limit": spec.limits.quota_per_day, "period": "DAY"}
        return str(self.client.create_usage_plan(**kwargs)["id"])

    # --- keys ----------------------------------------------------------------------------
    def _key_by_value(self, value: str) -> dict[str, Any] | None:
        key: dict[str, Any]
        for page in self.client.get_paginator("get_api_keys").paginate(includeValues=True):
            for key in page.get("items", []):
                if key.get("value") == value:
                    return key
        return None

    def ensure_peer_key(self, agent: str, peer_id: str, plan_id: str) -> str:
        """The peer's key (created if missing, enabled), in plan_id unless already in a plan. Its id."""
        value = usage_key(agent, peer_id)
        key = self._key_by_value(value)
        if key is None:
            key = self.client.create_api_key(
                name=usage_key_name(agent, peer_id),
                value=value,
                enabled=True,
                description=f"usage key of peer {peer_id} calling {agent}",
                tags={AGENT_TAG: agent},
            )
        elif not key.get("enabled"):
            self.set_enabled(str(key["id"]), True)
        key_id = str(key["id"])
        if not self.client.get_usage_plans(keyId=key_id).get("items"):
            try:
                self.client.create_usage_plan_key(usagePlanId=plan_id, keyId=key_id, keyType="API_KEY")
            except ClientError as exc:
                if _code(exc) != "ConflictException":  # added meanwhile
                    raise
        return key_id

    def set_enabled(self, key_id: str, enabled: bool) -> None:
        self.client.update_api_key(
            apiKey=key_id,
            patchOperations=[{"op": "replace", "path": "/enabled", "value": "true" if enabled else "false"}],
        )

    def disable_peer_key(self, agent: str, peer_id: str) -> bool:
        """Disable the peer's key (API Gateway then refuses it, 403); False if it has none."""
        key = self._key_by_value(usage_key(agent, peer_id))
        if key is None:
            return False
        self.set_enabled(str(key["id"]), False)
        return True

    def lookup(self, value: str) -> KeyPlan | None:
        """The key with this value and the limits of its plan; None if no such key."""
        key = self._key_by_value(value)
        if key is None:
            return None
        plans = self.client.get_usage_plans(keyId=key["id"]).get("items", [])
        plan = plans[0] if plans else None
        return KeyPlan(
            str(key["id"]), bool(key.get("enabled")), str(plan["id"]) if plan else None, _limits(plan) if plan else None
        )

    def create_for(self, agent: str, plans: list[UsagePlanSpec]) -> dict[str, str]:
        """Every plan of a configuration and the keys of the peers it names; plan name -> id."""
        ids: dict[str, str] = {}
        for spec in plans:
            ids[spec.name] = self.ensure_plan(agent, spec)
            for peer_id in spec.peers:
                self.ensure_peer_key(agent, peer_id, ids[spec.name])
        return ids


class CachedKeyLookup:
    """UsagePlans.lookup with a short cache, as API Gateway applies key and plan changes after a moment."""

    def __init__(self, plans: UsagePlans, ttl_s: float = 2.0, clock: Callable[[], float] = time.monotonic):
        self.plans = plans
        self.ttl_s = ttl_s
        self.clock = clock
        self._cache: dict[str, tuple[float, KeyPlan | None]] = {}

    def __call__(self, value: str) -> KeyPlan | None:
        now = self.clock()
        hit = self._cache.get(value)
        if hit and now - hit[0] < self.ttl_s:
            return hit[1]
        found = self.plans.lookup(value)
        self._cache[value] = (now, found)
        return found
