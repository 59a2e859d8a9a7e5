"""When the template and the code disagree, the deployed round trip fails, naming the mismatch;
and the agents of one file wire up whatever order their stacks are deployed in.

Each test deploys into a fresh moto: a template changed the way a faulty infra/ change would
change it, or the stacks one at a time.
"""

from __future__ import annotations

import json

import boto3
import pytest
from e2e_agents import ACCOUNT_STACK, TASK, Chat, flightdeck, let_in, plan_id
from e2e_cloud import REGION
from e2e_lambda import HarnessError, Runtime

pytestmark = pytest.mark.slow


def function_id(template: dict, handler: str) -> str:
    (lid,) = [
        lid
        for lid, r in template["Resources"].items()
        if r["Type"] == "AWS::Lambda::Function"
        and r["Properties"]["Handler"] == f"flightdeck.handlers.{handler}.handler"
    ]
    return lid


def without_permission(template: dict, handler: str, action: str) -> dict:
    """The template with `action` gone from the policies of the handler's role."""
    role = template["Resources"][function_id(template, handler)]["Properties"]["Role"]["Fn::GetAtt"][0]
    removed = 0
    for resource in template["Resources"].values():
        if resource["Type"] == "AWS::IAM::Policy" and {"Ref": role} in resource["Properties"]["Roles"]:
            statements = resource["Properties"]["PolicyDocument"]["Statement"]
            kept = [
                s for s in statements if action not in ([s["Action"]] if isinstance(s["Action"], str) else s["Action"])
            ]
            removed += len(statements) - len(kept)
            resource["Properties"]["PolicyDocument"]["Statement"] = kept
    assert removed, f"{handler} had no {action} to remove"
    return template


def with_variable(template: dict, handler: str, name: str, value: str) -> dict:
    template["Resources"][function_id(template, handler)]["Properties"]["Environment"]["Variables"][name] = value
    return template


def deploy(cloud, **templates: dict) -> dict:
    cloud.bootstrap()
    for stack in (ACCOUNT_STACK, "Flightdeck-orchestrator", "Flightdeck-worker"):
        cloud.deploy(stack, templates.get(stack))
    return cloud.stacks


def run_round_trip(stacks) -> tuple[Runtime, str]:
    runtime = Runtime(stacks)
    chat = Chat(runtime, stacks["Flightdeck-orchestrator"].outputs["ApiUrl"], let_in(stacks))
    with runtime.serving_http():
        return runtime, chat.answer(chat.send(TASK))


def test_a_missing_permission_is_caught(cloud) -> None:
    """The turn and dispatch workers' roles lose ssm:GetParameter: neither the inline dispatch nor
    its retry can find the worker's URL."""
    template = without_permission(cloud.template("Flightdeck-orchestrator"), "turn_worker", "ssm:GetParameter")
    template = without_permission(template, "dispatch_worker", "ssm:GetParameter")
    stacks = deploy(cloud, **{"Flightdeck-orchestrator": template})
    with pytest.raises(HarnessError) as caught:
        run_round_trip(stacks)
    message = str(caught.value)
    assert (
        "orchestrator/turn_worker: IAM denied ssm:GetParameter on "
        "arn:aws:ssm:us-east-1:123456789012:parameter/flightdeck/two-agents/worker/api-url"
    ) in message, message


def test_an_environment_variable_naming_a_resource_that_does_not_exist_is_caught(cloud) -> None:
    """The turn worker's TIMERS_QUEUE_URL names a queue the stack does not create."""
    wrong = "https://sqs.us-east-1.amazonaws.com/123456789012/flightdeck-orchestrator-timerz"
    template = with_variable(cloud.template("Flightdeck-orchestrator"), "turn_worker", "TIMERS_QUEUE_URL", wrong)
    stacks = deploy(cloud, **{"Flightdeck-orchestrator": template})
    runtime = Runtime(stacks)
    assert runtime.missing_resources() == [f"orchestrator/turn_worker: TIMERS_QUEUE_URL={wrong}: no such queue"]
    with pytest.raises(HarnessError) as caught:
        run_round_trip(stacks)
    message = str(caught.value)
    # IAM answers first, as on AWS: the role may send to the stack's timers queue, not to this one.
    assert (
        "orchestrator/turn_worker: IAM denied sqs:SendMessage on arn:aws:sqs:us-east-1:123456789012:"
        "flightdeck-orchestrator-timerz" in message
    ), message


def test_deploy_order_does_not_matter_the_worker_can_come_last(cloud) -> None:
    """The orchestrator alone: its delegations fail closed (no URL published). The worker deployed later,
    the orchestrator untouched: the next task is delegated."""
    cloud.bootstrap()
    cloud.deploy(ACCOUNT_STACK)
    stacks = {"Flightdeck-orchestrator": cloud.deploy("Flightdeck-orchestrator")}
    runtime = Runtime(stacks)
    assert any(
        "DISCOVERED_PEERS worker: no parameter /flightdeck/two-agents/worker/api-url" in p
        for p in runtime.missing_resources()
    )
    token = flightdeck(
        "peers", "add", "--agent", "orchestrator", "user", "--usage-plan-id", plan_id("flightdeck-orchestrator-peers")
    )
    api = stacks["Flightdeck-orchestrator"].outputs["ApiUrl"]
    with runtime.serving_http():
        chat = Chat(runtime, api, token)
        alone = chat.answer(chat.send(TASK))
    assert "0 of 2 delegations answered" in alone and "dispatch_failed" in alone, alone
    assert "no published URL" in alone, alone

    stacks["Flightdeck-worker"] = cloud.deploy("Flightdeck-worker")
    worker_token = flightdeck(
        "peers", "add", "--agent", "worker", "orchestrator", "--usage-plan-id", plan_id("flightdeck-worker-peers")
    )
    boto3.client("secretsmanager", region_name=REGION).put_secret_value(
        SecretId=stacks["Flightdeck-orchestrator"].outputs["PeerTokensSecretArn"],
        SecretString=json.dumps({"worker": worker_token}),
    )
    runtime = Runtime(stacks)  # the same orchestrator stack, not deployed again
    assert runtime.missing_resources() == []
    with runtime.serving_http():
        chat = Chat(runtime, api, token)
        both = chat.answer(chat.send(TASK))
    assert "2 of 2 delegations answered" in both, both
    runtime.fail_on_failures("the round trip after the worker came")
