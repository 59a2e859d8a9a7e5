"""Per-peer usage plans end to end on the local stack: the authorizer in front of the peer routes,
each peer's API key in moto's API Gateway, its limits enforced by the local gateway as API Gateway does.

One agent; peers with their own plans: alice (defaults), bob (1 request/s, burst 2),
carol (daily quota 2); dave and erin are registered later, as `flightdeck peers add` would.
Callers without a valid token share the "unidentified" plan (1 request/s, burst 3).
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import requests

from flightdeck.adapters.peer_registry import PeerRegistry
from flightdeck.adapters.usage_plans import UsagePlans
from flightdeck.domain.peer_usage import (
    UNIDENTIFIED,
    default_plan_name,
    peer_plan_name,
    unidentified_plan_name,
    usage_key,
)
from flightdeck.domain.peers import new_token
from flightdeck.local.resources import local_client
from flightdeck.local.stack import LocalStack

TOKENS = {p: f"fdp_{p}_LOCAL-TEST-{p}-token-0123456789abcdefghij" for p in ("alice", "bob", "carol")}
CONFIG = f"""
[agents.desk]
callback_secret = "test-only-desk-secret-0123456789abcdef0123456"
[agents.desk.peers]
alice = "{TOKENS["alice"]}"
bob = "{TOKENS["bob"]}"
carol = "{TOKENS["carol"]}"
[agents.desk.gateway]
peer_rate_limit = 50
peer_burst_limit = 100
authorizer_cache_s = 300
unidentified_rate_limit = 1
unidentified_burst_limit = 3
[agents.desk.gateway.peer_limits.bob]
rate_limit = 1
burst_limit = 2
[agents.desk.gateway.peer_limits.carol]
rate_limit = 50
burst_limit = 100
quota_per_day = 2
"""
# The local gateway re-reads keys and plans after this long (flightdeck.adapters.usage_plans.CachedKeyLookup).
KEY_CACHE_S = 2.0


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    path = Path(tmp_path_factory.mktemp("usage")) / "agents.toml"
    path.write_text(CONFIG)
    with LocalStack(path, relay=None) as local:
        yield local


@pytest.fixture(scope="module")
def usage(stack):
    return UsagePlans(local_client("apigateway", stack.moto_endpoint))


def session_get(stack, peer_token: str | None, sid: str = "s-none"):
    headers = {"Authorization": f"Bearer {peer_token}"} if peer_token else {}
    return requests.get(f"{stack.urls['desk']}/api/sessions/{sid}", headers=headers, timeout=10)


def chat(stack, token: str, content: str = "hello"):
    return requests.post(
        f"{stack.urls['desk']}/api/chat",
        json={"content": content},
        timeout=10,
        headers={"Authorization": f"Bearer {token}"},
    )


def test_the_stack_creates_a_plan_per_named_peer_with_its_key(stack, usage):
    for peer in ("alice", "bob", "carol"):
        found = usage.lookup(usage_key("desk", peer))
        assert found is not None and found.enabled
        assert found.plan_id == usage.plan_id(peer_plan_name("desk", peer))
    assert usage.lookup(usage_key("desk", "bob")).limits.rate_per_s == 1
    assert usage.lookup(usage_key("desk", "carol")).limits.quota_per_day == 2
    assert usage.plan_id(default_plan_name("desk"))
    unidentified = usage.lookup(usage_key("desk", UNIDENTIFIED))
    assert unidentified.plan_id == usage.plan_id(unidentified_plan_name("desk"))


def test_a_peer_within_its_plan_is_served(stack):
    resp = chat(stack, TOKENS["alice"])
    assert resp.status_code == 202, resp.text
    sid = resp.json()["session_id"]
    assert session_get(stack, TOKENS["alice"], sid).status_code == 200


def test_no_token_is_401_and_a_forged_one_403(stack):
    bare = session_get(stack, None)
    assert bare.status_code == 401 and bare.headers["WWW-Authenticate"].startswith('Bearer realm="flightdeck"')
    assert bare.json()["error"]["code"] == "unauthorized"
    time.sleep(1.0)  # the unidentified plan's bucket (shared with the next test) refills
    forged = session_get(stack, new_token("alice"))
    assert forged.status_code == 403 and forged.json()["error"]["code"] == "forbidden"


def test_callers_without_a_valid_token_share_one_small_plan_and_cannot_crowd_out_peers(stack):
    time.sleep(3.0)  # a full bucket
    forged = [session_get(stack, new_token("mallory")) for _ in range(6)]
    codes = [r.json()["error"]["code"] for r in forged]
    assert codes[:3] == ["forbidden"] * 3  # the burst reaches the function, which refuses and audits them
    assert "throttled" in codes[3:] and {r.status_code for r in forged[3:]} <= {403, 429}
    assert session_get(stack, TOKENS["alice"]).status_code == 404  # alice is untouched


def test_a_peer_over_its_rate_is_throttled_and_others_are_not(stack):
    statuses = [session_get(stack, TOKENS["bob"]).status_code for _ in range(4)]
    assert statuses[:2] == [404, 404]  # within the burst: the function answers (no such session)
    assert 429 in statuses[2:]
    throttled = session_get(stack, TOKENS["bob"])
    assert throttled.status_code == 429 and throttled.json()["error"]["code"] == "throttled"
    # It names what sets the limit, and when to come back (issue 41: 49 of a 100-session burst were refused so).
    assert "peer_rate_limit and peer_burst_limit" in throttled.json()["error"]["message"]
    assert throttled.headers["Retry-After"] == "1"
    assert session_get(stack, TOKENS["alice"]).status_code == 404  # alice's bucket is her own
    time.sleep(1.2)
    assert session_get(stack, TOKENS["bob"]).status_code == 404


def test_a_peer_past_its_daily_quota_gets_429_quota_exceeded(stack):
    assert [session_get(stack, TOKENS["carol"]).status_code for _ in range(2)] == [404, 404]
    over = session_get(stack, TOKENS["carol"])
    assert over.status_code == 429 and over.json()["error"]["code"] == "quota_exceeded"


def test_a_registered_peer_without_a_usage_key_is_refused_until_it_has_one(stack, usage):
    token = new_token("dave")
    PeerRegistry(stack.resources["desk"].table_name, local_client("dynamodb", stack.moto_endpoint)).add("dave", token)
    refused = session_get(stack, token)
    assert refused.status_code == 403 and "usage plan" in refused.json()["error"]["message"]
    # What `flightdeck peers add` does besides the registry: a key in the default plan.
    usage.ensure_peer_key("desk", "dave", usage.plan_id(default_plan_name("desk")))
    deadline = time.monotonic() + KEY_CACHE_S + 3
    while session_get(stack, token).status_code == 403 and time.monotonic() < deadline:
        time.sleep(0.3)
    assert session_get(stack, token).status_code == 404
    assert usage.lookup(usage_key("desk", "dave")).limits.rate_per_s == 50  # the defaults


def test_revocation_applies_at_once_though_the_authorizers_allow_is_cached(stack, usage):
    token = new_token("erin")
    registry = PeerRegistry(stack.resources["desk"].table_name, local_client("dynamodb", stack.moto_endpoint))
    registry.add("erin", token)
    usage.ensure_peer_key("desk", "erin", usage.plan_id(default_plan_name("desk")))
    deadline = time.monotonic() + KEY_CACHE_S + 3
    while session_get(stack, token).status_code != 404 and time.monotonic() < deadline:
        time.sleep(0.3)
    assert session_get(stack, token).status_code == 404  # allowed, and the Allow is now cached (300 s)
    registry.revoke("erin")
    refused = session_get(stack, token)  # the function's own check, a consistent read
    assert refused.status_code == 403 and refused.json()["error"]["code"] == "forbidden"
    # Disabling the key (`flightdeck peers revoke`) refuses at the gateway as well.
    assert usage.disable_peer_key("desk", "erin")
    deadline = time.monotonic() + KEY_CACHE_S + 3
    while "usage plan" not in session_get(stack, token).text and time.monotonic() < deadline:
        time.sleep(0.3)
    assert "usage plan" in session_get(stack, token).json()["error"]["message"]
