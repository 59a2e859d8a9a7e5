"""The peer routes at the gateway: one Lambda REQUEST authorizer, API keys taken from it, a usage plan per peer.

The example file gives each agent one known peer (orchestrator: `user`, worker:
`orchestrator`) and the default limits. `limits_synth` below builds a deployment file
whose worker has its own [gateway] section (defaults with a daily quota, a peer_limits
override for a known peer and one for a peer the file does not list, no authorizer
cache) and synthesizes it, with cdk-nag on.

What plans a configuration has is the domain's answer (AgentSpec.usage_plans()): the
stack must create exactly those, whatever else the domain adds to them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from template_queries import (
    api_keys_by_name,
    function_ids,
    methods_by_route,
    plan_of_key,
    referenced_ids,
    resources,
    usage_plans_by_name,
)
from variant_synth import cfn_lint_errors, nag_violations, synth_with_nag

from flightdeck import config_file, config_models, topology
from flightdeck.domain.peer_usage import (
    default_plan_name,
    peer_plan_name,
    usage_key,
    usage_key_name,
)

pytestmark = pytest.mark.slow

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "two-agents.toml"
KNOWN_PEER = {"orchestrator": "user", "worker": "orchestrator"}  # [agents.NAME.peers] of the example


def _example_spec(agent: str) -> config_models.AgentSpec:
    return config_file.load(EXAMPLE).agents[agent]


GATEWAY = {
    "peer_rate_limit": 5,
    "peer_burst_limit": 10,
    "peer_quota_per_day": 1000,
    "authorizer_cache_s": 0,
    "peer_limits": {
        "orchestrator": {"rate_limit": 2.5, "burst_limit": 5, "quota_per_day": 200},
        "auditor": {"rate_limit": 1, "burst_limit": 2},  # not in [agents.worker.peers]: a plan and key all the same
    },
}


def _single(template: dict[str, Any], kind: str) -> tuple[str, dict[str, Any]]:
    (lid,) = resources(template, kind)
    return lid, template["Resources"][lid]["Properties"]


def _authorizer(template: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    return _single(template, "AWS::ApiGateway::Authorizer")


# --- the authorizer and the methods ------------------------------------------------------


def test_api_keys_come_from_the_authorizer(synth) -> None:
    for name in synth.agent_stacks:
        _, api = _single(synth.templates[name], "AWS::ApiGateway::RestApi")
        assert api["ApiKeySourceType"] == "AUTHORIZER", name


def test_one_request_authorizer_on_the_authorization_header(orchestrator_tpl) -> None:
    lid, auth = _authorizer(orchestrator_tpl)
    assert auth["Type"] == "REQUEST"
    assert auth["IdentitySource"] == "method.request.header.Authorization"
    assert auth["AuthorizerResultTtlInSeconds"] == _example_spec("orchestrator").gateway.authorizer_cache_s
    assert auth["RestApiId"] == {"Ref": next(iter(resources(orchestrator_tpl, "AWS::ApiGateway::RestApi")))}
    authorizer_fn = function_ids(orchestrator_tpl)[topology.PEER_AUTHORIZER_HANDLER]
    assert referenced_ids(auth["AuthorizerUri"]) == {authorizer_fn}
    # API Gateway may invoke it, as this authorizer only
    permissions = [
        p["Properties"]
        for p in resources(orchestrator_tpl, "AWS::Lambda::Permission").values()
        if referenced_ids(p["Properties"]["FunctionName"]) == {authorizer_fn}
    ]
    assert len(permissions) == 1
    (permission,) = permissions
    assert permission["Principal"] == "apigateway.amazonaws.com"
    assert lid in referenced_ids(permission["SourceArn"])


def test_the_peer_routes() -> None:
    peer_routes = {(r.method, r.path) for r in topology.ROUTES if r.auth == topology.PEER_AUTH}
    assert peer_routes == {
        ("POST", "/api/chat"),
        ("GET", "/api/sessions/{session_id}"),
        ("GET", "/api/sessions"),
        ("GET", "/api/sessions/{session_id}/events"),
        ("POST", "/api/sessions/{session_id}/cancel"),
        ("POST", "/a2a"),
        ("POST", "/mcp"),  # MCP clients' keys: the same registry, scoped to the mcp channel (docs/MCP.md)
        # What the web console reads (docs/CONSOLE.md): a delegate's lane, and the inspector's allowlisted relay.
        ("GET", "/api/sessions/{session_id}/delegations/{tool_use_id}/events"),
        ("GET", "/api/inspector/card"),
        ("POST", "/api/inspector/rpc"),
    }


@pytest.mark.parametrize("route", topology.ROUTES, ids=lambda r: f"{r.method} {r.path}")
def test_peer_routes_require_the_authorizer_and_an_api_key(orchestrator_tpl, route: topology.Route) -> None:
    method = methods_by_route(orchestrator_tpl)[(route.method, route.path)]
    if route.auth == topology.PEER_AUTH:
        assert method["AuthorizationType"] == "CUSTOM"
        assert method["AuthorizerId"] == {"Ref": _authorizer(orchestrator_tpl)[0]}
        assert method["ApiKeyRequired"] is True
    else:  # callbacks carry a token we minted; the agent card is public
        assert method["AuthorizationType"] == "NONE"
        assert "AuthorizerId" not in method
        assert not method.get("ApiKeyRequired", False)


# --- usage plans and API keys (the example file) -----------------------------------------


def _stage_of(template: dict[str, Any]) -> dict[str, Any]:
    api_id, _ = _single(template, "AWS::ApiGateway::RestApi")
    stage_id, _ = _single(template, "AWS::ApiGateway::Stage")
    return {"ApiId": {"Ref": api_id}, "Stage": {"Ref": stage_id}}


def _check_plans_match(template: dict[str, Any], spec: config_models.AgentSpec) -> None:
    """Exactly the configuration's usage plans, with its limits, on the API's stage; each peer's key in its plan."""
    agent = spec.name
    specs = spec.usage_plans()
    plans = usage_plans_by_name(template)
    keys = api_keys_by_name(template)
    assert set(plans) == {s.name for s in specs}
    assert set(keys) == {usage_key_name(agent, peer) for s in specs for peer in s.peers}
    for plan_spec in specs:
        plan_id, plan = plans[plan_spec.name]
        limits = plan_spec.limits
        assert plan["Throttle"] == {"RateLimit": limits.rate_per_s, "BurstLimit": limits.burst}, plan_spec.name
        if limits.quota_per_day:
            assert plan["Quota"] == {"Limit": limits.quota_per_day, "Period": "DAY"}, plan_spec.name
        else:
            assert "Quota" not in plan, plan_spec.name
        (stage,) = plan["ApiStages"]
        assert {k: stage[k] for k in ("ApiId", "Stage")} == _stage_of(template)
        for peer in plan_spec.peers:
            key_id, key = keys[usage_key_name(agent, peer)]
            assert key["Value"] == usage_key(agent, peer)
            assert key["Enabled"] is True
            assert "StageKeys" not in key  # reached through its plan's stage only
            assert plan_of_key(template, key_id) == plan_id
    # the default plan holds no key at deploy time: `flightdeck peers add` fills it
    (default,) = [s for s in specs if s.default]
    attached = [r["Properties"]["UsagePlanId"] for r in resources(template, "AWS::ApiGateway::UsagePlanKey").values()]
    assert {"Ref": plans[default.name][0]} not in attached
    assert len(attached) == len(keys)


@pytest.mark.parametrize("agent", sorted(KNOWN_PEER))
def test_usage_plans_are_the_configuration_s(synth, agent: str) -> None:
    _check_plans_match(synth.templates[f"Flightdeck-{agent}"], _example_spec(agent))


@pytest.mark.parametrize("agent", sorted(KNOWN_PEER))
def test_a_default_plan_and_a_plan_for_the_known_peer(synth, agent: str) -> None:
    template = synth.templates[f"Flightdeck-{agent}"]
    peer = KNOWN_PEER[agent]
    gateway = _example_spec(agent).gateway
    assert not gateway.peer_limits and gateway.peer_quota_per_day == 0
    plans = usage_plans_by_name(template)
    for name in (default_plan_name(agent), peer_plan_name(agent, peer)):
        _, plan = plans[name]
        assert plan["Throttle"] == {"RateLimit": gateway.peer_rate_limit, "BurstLimit": gateway.peer_burst_limit}, name
        assert "Quota" not in plan, name  # peer_quota_per_day = 0: no quota
    key_id, key = api_keys_by_name(template)[usage_key_name(agent, peer)]
    assert key["Value"] == usage_key(agent, peer)
    assert plan_of_key(template, key_id) == plans[peer_plan_name(agent, peer)][0]


def test_usage_keys_are_not_tokens(synth) -> None:
    """The API key value is written in the template on purpose; a peer's bearer token never is."""
    for name, template in synth.templates.items():
        for _, key in api_keys_by_name(template).values():
            assert key["Value"].startswith("fdu-") and "fdp_" not in key["Value"], name


@pytest.mark.parametrize("agent", sorted(KNOWN_PEER))
def test_peer_usage_plan_id_output(synth, agent: str) -> None:
    template = synth.templates[f"Flightdeck-{agent}"]
    output = template["Outputs"]["PeerUsagePlanId"]
    assert output["Value"] == {"Ref": usage_plans_by_name(template)[default_plan_name(agent)][0]}
    assert "flightdeck peers add" in output["Description"]


# --- a [gateway] section: quotas, overrides, no authorizer cache -------------------------


@pytest.fixture(scope="module")
def limits_synth(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    deployment = config_file.load(EXAMPLE)
    deployment.agents["worker"].gateway = config_models.GatewaySection.model_validate(GATEWAY)
    return synth_with_nag(deployment, "worker", tmp_path_factory.mktemp("cdk.out.gateway"))


def test_gateway_section_passes_cdk_nag(limits_synth) -> None:
    violations = nag_violations(limits_synth)
    assert limits_synth["error"] is None and violations == [], "\n".join(violations) or limits_synth["error"]


def test_gateway_section_passes_cfn_lint(limits_synth) -> None:
    errors = cfn_lint_errors(limits_synth["file"])
    assert errors == [], errors


def test_authorizer_cache_can_be_off(limits_synth) -> None:
    _, auth = _authorizer(limits_synth["template"])
    assert auth["AuthorizerResultTtlInSeconds"] == 0
    assert auth["IdentitySource"] == "method.request.header.Authorization"


EXPECTED_LIMITS = {
    # plan name: (Throttle, Quota or None, peers whose key it holds)
    default_plan_name("worker"): ({"RateLimit": 5, "BurstLimit": 10}, {"Limit": 1000, "Period": "DAY"}, set()),
    peer_plan_name("worker", "orchestrator"): (
        {"RateLimit": 2.5, "BurstLimit": 5}, {"Limit": 200, "Period": "DAY"}, {"orchestrator"}),
    # an override replaces every limit: quota_per_day = 0 there means no quota, not the default's
    peer_plan_name("worker", "auditor"): ({"RateLimit": 1, "BurstLimit": 2}, None, {"auditor"}),
}  # fmt: skip


def test_overrides_and_quotas(limits_synth) -> None:
    template = limits_synth["template"]
    _check_plans_match(template, limits_synth["spec"])
    plans = usage_plans_by_name(template)
    keys = api_keys_by_name(template)
    for name, (throttle, quota, peers) in EXPECTED_LIMITS.items():
        plan_id, plan = plans[name]
        assert plan["Throttle"] == throttle, name
        assert plan.get("Quota") == quota, name
        for peer in peers:
            key_id, key = keys[usage_key_name("worker", peer)]
            assert key["Value"] == usage_key("worker", peer)
            assert plan_of_key(template, key_id) == plan_id
