"""Per-peer usage plans: usage keys, plans from configuration, and the local gateway's part (PeerGate)."""

from __future__ import annotations

import textwrap

import pytest

from flightdeck import config_file
from flightdeck.adapters.usage_plans import KeyPlan
from flightdeck.domain.peer_usage import (
    UNIDENTIFIED,
    PeerLimits,
    default_plan_name,
    peer_plan_name,
    unidentified_plan_name,
    usage_key,
    usage_plans,
)
from flightdeck.domain.peers import PeerTokenError, check_peer_id
from flightdeck.local.peer_gate import PeerGate, TokenBucket, allows


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


# --- keys and plans -------------------------------------------------------------------------------


def test_usage_keys_are_stable_distinct_and_within_api_gateway_bounds():
    key = usage_key("worker", "orchestrator")
    assert key == usage_key("worker", "orchestrator")
    assert 20 <= len(key) <= 128 and key.startswith("fdu-")
    assert len({usage_key(a, p) for a in ("worker", "orchestrator") for p in ("user", "orchestrator", "worker")}) == 6
    assert usage_key("a" * 64, "b" * 63) != usage_key("a" * 64, "b" * 62)


def test_no_real_peer_can_share_the_unidentified_callers_key():
    with pytest.raises(PeerTokenError):
        check_peer_id(UNIDENTIFIED)


def test_every_named_peer_has_its_own_plan_and_later_peers_share_the_default_limits():
    defaults = PeerLimits(20, 40)
    plans = usage_plans(
        "worker", defaults, ["orchestrator", "user"], {"batch": PeerLimits(1, 2, 100)}, unidentified=PeerLimits(5, 10)
    )
    assert [p.name for p in plans] == [
        default_plan_name("worker"),
        unidentified_plan_name("worker"),
        peer_plan_name("worker", "batch"),
        peer_plan_name("worker", "orchestrator"),
        peer_plan_name("worker", "user"),
    ]
    assert plans[0].default and plans[0].peers == () and plans[0].limits == defaults
    assert plans[1].peers == (UNIDENTIFIED,) and plans[1].limits == PeerLimits(5, 10)
    assert plans[2].peers == ("batch",) and plans[2].limits == PeerLimits(1, 2, 100)
    assert plans[3].limits == defaults


def _deployment(tmp_path, gateway: str):
    path = tmp_path / "agents.toml"
    path.write_text(
        textwrap.dedent(f"""
        [agents.worker]
        [agents.worker.peers]
        orchestrator = "fdp_orchestrator_{"a" * 43}"
        {gateway}
    """)
    )
    return config_file.load(path)


def test_the_gateway_section_sets_defaults_and_per_peer_limits(tmp_path):
    deployment = _deployment(
        tmp_path,
        textwrap.dedent("""
        [agents.worker.gateway]
        peer_rate_limit = 5
        peer_burst_limit = 10
        authorizer_cache_s = 0
        unidentified_rate_limit = 1
        unidentified_burst_limit = 3
        [agents.worker.gateway.peer_limits.orchestrator]
        rate_limit = 50
        burst_limit = 100
        quota_per_day = 100000
    """),
    )
    spec = deployment.agents["worker"]
    plans = {p.name: p for p in spec.usage_plans()}
    assert plans[default_plan_name("worker")].limits == PeerLimits(5, 10, 0)
    assert plans[peer_plan_name("worker", "orchestrator")].limits == PeerLimits(50, 100, 100000)
    assert plans[unidentified_plan_name("worker")].limits == PeerLimits(1, 3, 0)
    assert spec.gateway.authorizer_cache_s == 0


@pytest.mark.parametrize(
    "bad",
    [
        "[agents.worker.gateway]\npeer_rate_limit = 0",
        "[agents.worker.gateway]\nauthorizer_cache_s = 7200",
        "[agents.worker.gateway.peer_limits.Bad_Id]\nrate_limit = 1\nburst_limit = 1",
        "[agents.worker.gateway.peer_limits.x]\nrate_limit = 1",
        "[agents.worker.gateway]\nunknown = 1",
    ],
)
def test_bad_gateway_settings_are_refused_with_the_field_named(tmp_path, bad):
    with pytest.raises(config_file.ConfigFileError, match="gateway"):
        _deployment(tmp_path, bad)


# --- the local gateway's authorizer and usage plans ----------------------------------------------------


def test_token_bucket_allows_the_burst_then_the_rate():
    clock = Clock()
    bucket = TokenBucket(rate=2, burst=3, clock=clock)
    assert [bucket.take() for _ in range(4)] == [True, True, True, False]
    clock.now += 0.5  # one token back at 2/s
    assert [bucket.take(), bucket.take()] == [True, False]
    clock.now += 100  # never more than the burst
    assert sum(bucket.take() for _ in range(10)) == 3


ARN = "arn:aws:execute-api:us-east-1:1:api/local/POST/api/chat"


def _policy(effect, resource="arn:aws:execute-api:us-east-1:1:api/local/*/*"):
    return {
        "principalId": "p",
        "policyDocument": {
            "Version": "2012-10-17",
            "Statement": [{"Action": "execute-api:Invoke", "Effect": effect, "Resource": [resource]}],
        },
    }


def test_policy_evaluation_needs_an_allow_and_an_explicit_deny_wins():
    assert allows(_policy("Allow"), ARN)
    assert not allows(_policy("Deny"), ARN)
    assert not allows(_policy("Allow", "arn:aws:execute-api:us-east-1:1:api/local/GET/*"), ARN)
    both = _policy("Allow")
    both["policyDocument"]["Statement"] += _policy("Deny", ARN)["policyDocument"]["Statement"]
    assert not allows(both, ARN)
    assert not allows({"principalId": "p"}, ARN)


class FakeAuthorizer:
    """Stands in for the authorizer function: answers from a table of Authorization headers."""

    def __init__(self, answers):
        self.answers = answers
        self.calls = 0

    def invoke(self, event):
        self.calls += 1
        answer = self.answers[event["headers"]["Authorization"]]
        if isinstance(answer, Exception):
            raise answer
        return answer


def _allow(peer):
    return {**_policy("Allow"), "principalId": peer, "context": {"peer": peer}, "usageIdentifierKey": f"key-{peer}"}


def _event(header="Bearer good"):
    headers = {"Authorization": header} if header else {}
    return {
        "resource": "/api/chat",
        "path": "/api/chat",
        "httpMethod": "POST",
        "headers": headers,
        "requestContext": {"accountId": "1", "apiId": "api", "stage": "local", "identity": {}},
    }


def _gate(answers, keys=None, ttl=300.0, clock=None):
    keys = keys if keys is not None else {"key-alice": KeyPlan("id-a", True, "plan", PeerLimits(1, 2, 0))}
    authorizer = FakeAuthorizer(answers)
    gate = PeerGate(authorizer, keys.get, cache_ttl_s=ttl, region="us-east-1", clock=clock or Clock())
    return gate, authorizer


def test_an_allowed_peer_goes_on_with_api_gateways_authorizer_context_and_key():
    gate, _ = _gate({"Bearer good": _allow("alice")})
    event = _event()
    assert gate.admit(event) is None
    assert event["requestContext"]["authorizer"]["principalId"] == "alice"
    assert event["requestContext"]["authorizer"]["peer"] == "alice"
    assert event["requestContext"]["identity"] == {"apiKey": "key-alice", "apiKeyId": "id-a"}


@pytest.mark.parametrize(
    "answer,status,code",
    [
        (Exception("Unauthorized"), 401, "unauthorized"),
        (RuntimeError("registry down"), 503, "service_unavailable"),
        (_policy("Deny"), 403, "forbidden"),
        ("not a policy", 503, "service_unavailable"),
    ],
)
def test_authorizer_answers_map_to_api_gateways_statuses(answer, status, code):
    gate, _ = _gate({"Bearer good": answer})
    refusal = gate.admit(_event())
    assert (refusal.status, refusal.code) == (status, code)
    if status == 401:
        assert refusal.headers["WWW-Authenticate"].startswith("Bearer")
    if status == 503:
        assert refusal.headers["Retry-After"] == "1"


def test_no_authorization_header_is_401_without_calling_the_authorizer():
    gate, authorizer = _gate({})
    assert gate.admit(_event(header=None)).status == 401
    assert authorizer.calls == 0


def test_the_authorizers_answer_is_reused_per_header_until_the_ttl():
    clock = Clock()
    gate, authorizer = _gate(
        {"Bearer good": _allow("alice"), "Bearer bad": Exception("Unauthorized")},
        keys={"key-alice": KeyPlan("id-a", True, "plan", PeerLimits(100, 100))},
        ttl=60,
        clock=clock,
    )
    for _ in range(3):
        assert gate.admit(_event()) is None
        assert gate.admit(_event("Bearer bad")).status == 401
    assert authorizer.calls == 2
    clock.now += 61
    gate.admit(_event())
    assert authorizer.calls == 3
    uncached, authorizer = _gate({"Bearer good": _allow("alice")}, ttl=0)
    uncached.admit(_event())
    uncached.admit(_event())
    assert authorizer.calls == 2


@pytest.mark.parametrize(
    "keys",
    [
        {},  # no such key
        {"key-alice": KeyPlan("id-a", False, "plan", PeerLimits(1, 1))},  # disabled
        {"key-alice": KeyPlan("id-a", True, None, None)},  # in no usage plan
    ],
)
def test_a_usage_key_that_is_missing_disabled_or_planless_is_403(keys):
    gate, _ = _gate({"Bearer good": _allow("alice")}, keys=keys)
    refusal = gate.admit(_event())
    assert (refusal.status, refusal.code) == (403, "forbidden") and "usage plan" in refusal.message


def test_each_peer_is_throttled_by_its_own_bucket():
    clock = Clock()
    limits = PeerLimits(1, 2)
    gate, _ = _gate(
        {"Bearer a": _allow("alice"), "Bearer b": _allow("bob")},
        clock=clock,
        keys={"key-alice": KeyPlan("id-a", True, "p", limits), "key-bob": KeyPlan("id-b", True, "p", limits)},
    )
    outcomes = [gate.admit(_event("Bearer a")) for _ in range(3)]
    assert outcomes[:2] == [None, None] and (outcomes[2].status, outcomes[2].code) == (429, "throttled")
    assert gate.admit(_event("Bearer b")) is None  # bob has his own
    clock.now += 1.0
    assert gate.admit(_event("Bearer a")) is None


def test_a_daily_quota_is_429_quota_exceeded_once_used_up():
    gate, _ = _gate(
        {"Bearer good": _allow("alice")}, keys={"key-alice": KeyPlan("id-a", True, "p", PeerLimits(1000, 1000, 3))}
    )
    outcomes = [gate.admit(_event()) for _ in range(4)]
    assert outcomes[:3] == [None] * 3
    assert (outcomes[3].status, outcomes[3].code) == (429, "quota_exceeded")
    assert "quota" in outcomes[3].message
