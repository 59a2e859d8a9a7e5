"""`flightdeck peers add|rotate|revoke|list`, against the moto server (as with `flightdeck local up`)
and against in-process moto standing in for AWS (the table and the default usage plan found through
the stack's outputs). Besides the registry, `add` and `revoke` manage the peer's usage key: its API
key in API Gateway, in a usage plan (flightdeck.domain.peer_usage)."""

from __future__ import annotations

import json
import uuid

import boto3
import pytest

from flightdeck import cli
from flightdeck.adapters.peer_registry import PeerRegistry
from flightdeck.adapters.usage_plans import UsagePlans
from flightdeck.domain.peer_usage import (
    PeerLimits,
    UsagePlanSpec,
    default_plan_name,
    peer_plan_name,
    usage_key,
)
from flightdeck.domain.peers import AuthStatus, authenticate, new_token, peer_of
from flightdeck.local.resources import create_agent_resources


def peers(capsys, *args: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = cli.main(["peers", *args])
    out, err = capsys.readouterr()
    return code, out, err


LIMITS = PeerLimits(rate_per_s=5, burst=10, quota_per_day=1000)


def usage_plans(endpoint: str | None = None) -> UsagePlans:
    return UsagePlans(boto3.client("apigateway", endpoint_url=endpoint, region_name="us-east-1"))


def default_plan(agent: str, endpoint: str | None = None) -> str:
    """The agent's default usage plan, as `flightdeck local up` (or the stack) creates it; its id."""
    return usage_plans(endpoint).ensure_plan(agent, UsagePlanSpec(default_plan_name(agent), LIMITS, (), default=True))


def key_of(agent: str, peer: str, endpoint: str | None = None) -> tuple[bool, list[str]] | None:
    """The peer's usage key as API Gateway has it: (enabled, ids of the plans holding it); None if none."""
    plans = usage_plans(endpoint)
    found = plans.lookup(usage_key(agent, peer))
    if found is None:
        return None
    in_plans = plans.client.get_usage_plans(keyId=found.key_id)["items"]
    return found.enabled, [p["id"] for p in in_plans]


def new_local_agent(moto_server: str) -> tuple[str, PeerRegistry]:
    name = f"admin-{uuid.uuid4().hex[:8]}"
    dynamodb = boto3.client("dynamodb", endpoint_url=moto_server, region_name="us-east-1")
    sqs = boto3.client("sqs", endpoint_url=moto_server, region_name="us-east-1")
    res = create_agent_resources(name, dynamodb=dynamodb, sqs=sqs)
    return name, PeerRegistry(res.table_name, dynamodb)


@pytest.fixture
def local_agent(moto_server):
    """An agent's table and default usage plan on the moto server, named as `flightdeck local up` names them."""
    name, registry = new_local_agent(moto_server)
    default_plan(name, moto_server)
    return name, moto_server, registry


def check(registry: PeerRegistry, token: str) -> AuthStatus:
    return authenticate(registry, token, registry._clock()).status


def test_add_rotate_revoke_list_against_the_local_moto_server(capsys, local_agent):
    agent, endpoint, registry = local_agent
    where = ["--agent", agent, "--endpoint-url", endpoint]

    code, out, err = peers(capsys, "add", *where, "alice")
    assert code == 0 and "shown only once" in err
    token = out.strip()
    assert peer_of(token) == "alice" and len(token.split("_", 2)[2]) == 43  # 32 random bytes, base64url
    assert check(registry, token) is AuthStatus.OK
    assert token not in json.dumps(registry.client.scan(TableName=registry.table)["Items"])

    code, _, err = peers(capsys, "add", *where, "alice")
    assert code == 1 and "already registered" in err

    code, out, err = peers(capsys, "rotate", *where, "alice", "--grace-seconds", "600")
    rotated = out.strip()
    assert code == 0 and rotated != token and "stays valid until" in err
    assert check(registry, rotated) is AuthStatus.OK
    assert check(registry, token) is AuthStatus.OK  # within the grace period

    code, out, _ = peers(capsys, "rotate", *where, "alice")
    latest = out.strip()
    assert code == 0 and check(registry, latest) is AuthStatus.OK
    assert check(registry, rotated) is AuthStatus.UNKNOWN  # no grace this time: refused at once

    peers(capsys, "add", *where, "bob")
    code, out, _ = peers(capsys, "list", *where, "--json")
    listed = {p["peer_id"]: p for p in json.loads(out)}
    assert code == 0 and set(listed) == {"alice", "bob"} and listed["alice"]["rotated_at"] > 0
    assert "sha256" not in out and latest not in out

    code, _, err = peers(capsys, "revoke", *where, "alice")
    assert code == 0 and "revoked" in err
    assert check(registry, latest) is AuthStatus.REVOKED
    code, out, _ = peers(capsys, "list", *where)
    assert code == 0 and out.splitlines()[0].startswith("PEER")
    assert any(line.split()[:2] == ["alice", "revoked"] for line in out.splitlines()[1:])

    code, out, _ = peers(capsys, "add", *where, "alice")  # a revoked peer may be added again
    assert code == 0 and check(registry, out.strip()) is AuthStatus.OK


def test_mistakes_are_one_line_errors(capsys, local_agent):
    agent, endpoint, _ = local_agent
    where = ["--agent", agent, "--endpoint-url", endpoint]
    code, _, err = peers(capsys, "add", *where, "Not_A_Peer")
    assert code == 2 and "peer id" in err
    code, _, err = peers(capsys, "rotate", *where, "nobody")
    assert code == 1 and "no active peer 'nobody'" in err
    code, _, err = peers(capsys, "revoke", *where, "nobody")
    assert code == 1 and "no peer 'nobody'" in err
    code, _, err = peers(capsys, "rotate", *where, "nobody", "--grace-seconds", "-1")
    assert code == 2 and "--grace-seconds" in err
    code, _, err = peers(capsys, "list", "--agent", "no-such-agent", "--endpoint-url", endpoint)
    assert code == 1 and "AWS call failed" in err


def test_a_token_from_the_command_opens_the_agents_api_and_revoking_it_closes_it(
    capsys, orchestrator_on_server, moto_server
):
    agent = orchestrator_on_server
    plan_id = default_plan(agent.name, moto_server)
    where = ["--agent", agent.name, "--table", agent.table, "--endpoint-url", moto_server]
    _, out, _ = peers(capsys, "add", *where, "partner")
    token = out.strip()
    assert agent.api("chat_post", token=token)[0] == 202
    assert key_of(agent.name, "partner", moto_server) == (True, [plan_id])
    peers(capsys, "revoke", *where, "partner")
    assert agent.api("chat_post", token=token)[0] == 403
    assert key_of(agent.name, "partner", moto_server) == (False, [plan_id])


def test_add_puts_the_peers_usage_key_in_the_default_plan_and_revoke_disables_it(capsys, local_agent):
    agent, endpoint, registry = local_agent
    where = ["--agent", agent, "--endpoint-url", endpoint]
    plan_id = usage_plans(endpoint).plan_id(default_plan_name(agent))

    code, out, err = peers(capsys, "add", *where, "alice")
    assert code == 0 and check(registry, out.strip()) is AuthStatus.OK
    assert key_of(agent, "alice", endpoint) == (True, [plan_id])
    assert f"metered under usage plan {default_plan_name(agent)} ({plan_id})" in err
    key = usage_plans(endpoint).lookup(usage_key(agent, "alice"))
    assert key is not None and key.limits == LIMITS

    code, out, _ = peers(capsys, "rotate", *where, "alice")  # the key is per peer: a new token keeps it
    assert code == 0 and key_of(agent, "alice", endpoint) == (True, [plan_id])

    code, out, _ = peers(capsys, "list", *where, "--json")
    assert code == 0 and json.loads(out)[0]["usage_key"] == {"state": "enabled", "plan": default_plan_name(agent)}

    code, _, err = peers(capsys, "revoke", *where, "alice")
    assert code == 0 and "usage key is disabled" in err
    assert key_of(agent, "alice", endpoint) == (False, [plan_id])
    code, out, _ = peers(capsys, "list", *where)
    assert code == 0 and out.splitlines()[0].split()[-3:] == ["USAGE", "KEY", "(PLAN)"]
    alice = next(line for line in out.splitlines()[1:] if line.startswith("alice "))
    assert alice.split()[1] == "revoked" and alice.endswith(f"disabled ({default_plan_name(agent)})")

    code, _, err = peers(capsys, "revoke", *where, "alice")  # again: still fine
    assert code == 0 and key_of(agent, "alice", endpoint) == (False, [plan_id])

    code, out, _ = peers(capsys, "add", *where, "alice")  # re-added: the same key, enabled again, in one plan
    assert code == 0 and check(registry, out.strip()) is AuthStatus.OK
    assert key_of(agent, "alice", endpoint) == (True, [plan_id])


def test_a_peer_with_a_plan_of_its_own_keeps_it(capsys, moto_server):
    agent, registry = new_local_agent(moto_server)
    # As `flightdeck local up` (or the stack) does for a peer named in the configuration.
    own = UsagePlanSpec(peer_plan_name(agent, "carol"), PeerLimits(50, 100), ("carol",))
    ids = usage_plans(moto_server).create_for(
        agent, [UsagePlanSpec(default_plan_name(agent), LIMITS, (), default=True), own]
    )
    where = ["--agent", agent, "--endpoint-url", moto_server]

    code, out, err = peers(capsys, "add", *where, "carol")
    assert code == 0 and check(registry, out.strip()) is AuthStatus.OK
    assert key_of(agent, "carol", moto_server) == (True, [ids[own.name]])
    assert f"keeps its usage plan {own.name}" in err

    peers(capsys, "revoke", *where, "carol")
    assert key_of(agent, "carol", moto_server) == (False, [ids[own.name]])
    code, _, _ = peers(capsys, "add", *where, "carol")
    assert code == 0 and key_of(agent, "carol", moto_server) == (True, [ids[own.name]])


def test_usage_plan_id_chooses_the_plan(capsys, local_agent):
    agent, endpoint, _ = local_agent
    other = usage_plans(endpoint).ensure_plan(agent, UsagePlanSpec(f"{agent}-partners", PeerLimits(1, 2), ()))
    code, _, err = peers(capsys, "add", "--agent", agent, "--endpoint-url", endpoint, "--usage-plan-id", other, "dave")
    assert code == 0 and key_of(agent, "dave", endpoint) == (True, [other])
    assert f"{agent}-partners ({other})" in err


def test_add_without_the_plan_fails_and_changes_nothing(capsys, moto_server):
    agent, registry = new_local_agent(moto_server)  # no usage plans: `flightdeck local up` not run for it
    where = ["--agent", agent, "--endpoint-url", moto_server]

    code, out, err = peers(capsys, "add", *where, "erin")
    assert code == 1 and out == ""
    assert f"no usage plan named {default_plan_name(agent)!r}" in err and "--usage-plan-id" in err
    assert registry.get_peer("erin") is None and key_of(agent, "erin", moto_server) is None

    code, out, err = peers(capsys, "add", *where, "--usage-plan-id", "nosuchplan", "erin")
    assert code == 1 and out == "" and "no usage plan 'nosuchplan'" in err
    assert registry.get_peer("erin") is None and key_of(agent, "erin", moto_server) is None


def test_add_of_an_active_peer_touches_no_key(capsys, local_agent):
    agent, endpoint, registry = local_agent
    registry.add("frank", new_token("frank"))  # registered before usage plans existed: no key
    code, _, err = peers(capsys, "add", "--agent", agent, "--endpoint-url", endpoint, "frank")
    assert code == 1 and "already registered" in err
    assert key_of(agent, "frank", endpoint) is None

    code, out, _ = peers(capsys, "list", "--agent", agent, "--endpoint-url", endpoint, "--json")
    assert json.loads(out)[0]["usage_key"] == {"state": "missing", "plan": None}
    code, _, err = peers(capsys, "revoke", "--agent", agent, "--endpoint-url", endpoint, "frank")
    assert code == 0 and "revoked" in err and "had no usage key" in err
    assert key_of(agent, "frank", endpoint) is None


def stack_template(plan_id: str | None) -> str:
    """The agent's stack as far as `flightdeck peers` reads it (moto's CloudFormation has no usage plans: the
    plan is made beforehand and its id written in the output, as the real stack's Ref would give it)."""
    template: dict = {
        "Resources": {
            "StateTable": {
                "Type": "AWS::DynamoDB::Table",
                "Properties": {
                    "BillingMode": "PAY_PER_REQUEST",
                    "AttributeDefinitions": [
                        {"AttributeName": "pk", "AttributeType": "S"},
                        {"AttributeName": "sk", "AttributeType": "S"},
                    ],
                    "KeySchema": [
                        {"AttributeName": "pk", "KeyType": "HASH"},
                        {"AttributeName": "sk", "KeyType": "RANGE"},
                    ],
                },
            }
        },
        "Outputs": {"StateTableName": {"Value": {"Ref": "StateTable"}}},
    }
    if plan_id:
        template["Outputs"]["PeerUsagePlanId"] = {"Value": plan_id}
    return json.dumps(template)


def stack_outputs(cloudformation, stack: str) -> dict[str, str]:
    outputs = cloudformation.describe_stacks(StackName=stack)["Stacks"][0]["Outputs"]
    return {o["OutputKey"]: o["OutputValue"] for o in outputs}


def test_on_aws_the_table_and_the_plan_are_the_stacks_outputs(capsys, aws):
    cloudformation = boto3.client("cloudformation", region_name="us-east-1")
    plan_id = default_plan("worker")
    cloudformation.create_stack(StackName="Flightdeck-worker", TemplateBody=stack_template(plan_id))
    code, out, err = peers(capsys, "add", "--agent", "worker", "--region", "us-east-1", "orchestrator")
    assert code == 0
    outputs = stack_outputs(cloudformation, "Flightdeck-worker")
    registry = PeerRegistry(outputs["StateTableName"], boto3.client("dynamodb", region_name="us-east-1"))
    assert check(registry, out.strip()) is AuthStatus.OK
    assert key_of("worker", "orchestrator") == (True, [plan_id]) and f"({plan_id})" in err

    code, _, err = peers(capsys, "revoke", "--agent", "worker", "--region", "us-east-1", "orchestrator")
    assert code == 0 and key_of("worker", "orchestrator") == (False, [plan_id])

    code, _, err = peers(capsys, "list", "--agent", "planner", "--region", "us-east-1")
    assert code == 1 and "Flightdeck-planner" in err and "--table" in err


def test_on_aws_a_stack_without_the_plan_output_changes_nothing(capsys, aws):
    cloudformation = boto3.client("cloudformation", region_name="us-east-1")
    cloudformation.create_stack(StackName="Flightdeck-worker", TemplateBody=stack_template(None))
    code, out, err = peers(capsys, "add", "--agent", "worker", "--region", "us-east-1", "orchestrator")
    assert code == 1 and out == ""
    assert "Flightdeck-worker has no PeerUsagePlanId output" in err and "--usage-plan-id" in err
    registry = PeerRegistry(
        stack_outputs(cloudformation, "Flightdeck-worker")["StateTableName"],
        boto3.client("dynamodb", region_name="us-east-1"),
    )
    assert registry.list_peers() == [] and key_of("worker", "orchestrator") is None

    # An explicit plan id does without the output (and the stack is described for the table alone).
    plan_id = usage_plans().ensure_plan("worker", UsagePlanSpec("by-hand", LIMITS, ()))
    code, _, _ = peers(
        capsys, "add", "--agent", "worker", "--region", "us-east-1", "--usage-plan-id", plan_id, "orchestrator"
    )
    assert code == 0 and key_of("worker", "orchestrator") == (True, [plan_id])


def test_on_aws_an_agent_on_the_lean_front_door_gets_its_peers_a_token_and_no_usage_key(capsys, aws):
    # A lean stack (docs/FRONT_DOORS.md) publishes PeerUrls and has no usage plan: `peers add` issues the token alone.
    cloudformation = boto3.client("cloudformation", region_name="us-east-1")
    template = json.loads(stack_template(None))
    template["Outputs"]["PeerUrls"] = {"Value": "https://api.example chat_ingest=https://chat.example"}
    cloudformation.create_stack(StackName="Flightdeck-worker", TemplateBody=json.dumps(template))
    code, out, err = peers(capsys, "add", "--agent", "worker", "--region", "us-east-1", "orchestrator")
    assert code == 0 and "lean front door" in err
    registry = PeerRegistry(
        stack_outputs(cloudformation, "Flightdeck-worker")["StateTableName"],
        boto3.client("dynamodb", region_name="us-east-1"),
    )
    assert check(registry, out.strip()) is AuthStatus.OK and key_of("worker", "orchestrator") is None
    code, _, err = peers(capsys, "add", "--agent", "worker", "--region", "us-east-1", "orchestrator")
    assert code != 0 and "orchestrator" in err  # already there: nothing issued twice
