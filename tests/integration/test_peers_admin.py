"""`flightdeck peers add|rotate|revoke|list`, against the moto server (as with `flightdeck local up`)
and against in-process moto standing in for AWS (the table found through the stack's output)."""

from __future__ import annotations

import json
import uuid

import boto3
import pytest

from flightdeck import cli
from flightdeck.adapters.peer_registry import PeerRegistry
from flightdeck.domain.peers import AuthStatus, authenticate, peer_of
from flightdeck.local.resources import create_agent_resources


def peers(capsys, *args: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = cli.main(["peers", *args])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def local_agent(moto_server):
    """An agent's table on the moto server, named as `flightdeck local up` names it."""
    name = f"admin-{uuid.uuid4().hex[:8]}"
    dynamodb = boto3.client("dynamodb", endpoint_url=moto_server, region_name="us-east-1")
    sqs = boto3.client("sqs", endpoint_url=moto_server, region_name="us-east-1")
    res = create_agent_resources(name, dynamodb=dynamodb, sqs=sqs)
    return name, moto_server, PeerRegistry(res.table_name, dynamodb)


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


def test_a_token_from_the_command_opens_the_agents_api_and_revoking_it_closes_it(capsys, orchestrator_on_server,
                                                                                 moto_server):
    agent = orchestrator_on_server
    where = ["--agent", agent.name, "--table", agent.table, "--endpoint-url", moto_server]
    _, out, _ = peers(capsys, "add", *where, "partner")
    token = out.strip()
    assert agent.api("chat_post", token=token)[0] == 202
    peers(capsys, "revoke", *where, "partner")
    assert agent.api("chat_post", token=token)[0] == 403


STACK_TEMPLATE = {
    "Resources": {
        "StateTable": {
            "Type": "AWS::DynamoDB::Table",
            "Properties": {
                "BillingMode": "PAY_PER_REQUEST",
                "AttributeDefinitions": [{"AttributeName": "pk", "AttributeType": "S"},
                                         {"AttributeName": "sk", "AttributeType": "S"}],
                "KeySchema": [{"AttributeName": "pk", "KeyType": "HASH"}, {"AttributeName": "sk", "KeyType": "RANGE"}],
            },
        }
    },
    "Outputs": {"StateTableName": {"Value": {"Ref": "StateTable"}}},
}


def test_on_aws_the_table_is_the_stacks_output(capsys, aws):
    cloudformation = boto3.client("cloudformation", region_name="us-east-1")
    cloudformation.create_stack(StackName="Flightdeck-worker", TemplateBody=json.dumps(STACK_TEMPLATE))
    code, out, _ = peers(capsys, "add", "--agent", "worker", "--region", "us-east-1", "orchestrator")
    assert code == 0
    table = cloudformation.describe_stacks(StackName="Flightdeck-worker")["Stacks"][0]["Outputs"][0]["OutputValue"]
    registry = PeerRegistry(table, boto3.client("dynamodb", region_name="us-east-1"))
    assert check(registry, out.strip()) is AuthStatus.OK
    code, _, err = peers(capsys, "list", "--agent", "planner", "--region", "us-east-1")
    assert code == 1 and "Flightdeck-planner" in err and "--table" in err
