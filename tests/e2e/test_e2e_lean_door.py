"""The lean front door's stack (docs/FRONT_DOORS.md), created in moto's CloudFormation.

The example file with the worker on `front_door = "lean"` (the orchestrator stays on REST), synthesized once
as `cdk synth` would; every stack deployed, then one delegation from the orchestrator to the lean worker,
each function's handler run with its deployed environment (tests/e2e/e2e_lambda.py; the lean door's HTTP:
e2e_lean). What moto's CloudFormation lacks for
this door (AWS::ApiGatewayV2::*, AWS::Lambda::Url, and outputs naming them) is created through the service
APIs from the template's own values (tests/e2e/e2e_lean.py); the first test holds moto to that list.
"""

from __future__ import annotations

import json
from pathlib import Path

import boto3
import e2e_lean
import pytest
import requests
from e2e_agents import ACCOUNT_STACK
from e2e_cloud import CREATED_BEFORE, REGION, UNSUPPORTED

from flightdeck import topology
from flightdeck.domain.allowlist import CALLBACK_ENDPOINT, CHAT_ENDPOINT, Allowlist

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow
WORKER = "Flightdeck-worker"
ORCHESTRATOR = "Flightdeck-orchestrator"


@pytest.fixture(scope="module")
def lean_assembly(tmp_path_factory: pytest.TempPathFactory) -> Path:
    import aws_cdk as cdk

    from infra.deployment import build

    config = tmp_path_factory.mktemp("lean-file") / "lean.toml"
    text = (REPO / "examples" / "two-agents.toml").read_text()
    peers = "\n[agents.worker.peers]\n"
    assert peers in text
    config.write_text(text.replace(peers, '\n[agents.worker.deploy]\nfront_door = "lean"\n' + peers, 1))
    outdir = tmp_path_factory.mktemp("cdk.out.lean-e2e")
    app = cdk.App(outdir=str(outdir), context={"config": str(config), "bundleDeps": False, "nag": False})
    build(app)
    app.synth()
    return outdir


@pytest.fixture(scope="module")
def deployed(lean_assembly):
    """Both agents deployed (the worker lean), then one chat with a delegation: the orchestrator (REST) dispatches
    to the worker's chat function URL, found in the worker's published parameter; the worker answers to the
    orchestrator's REST callback route."""
    import os

    from e2e_agents import Chat, flightdeck, plan_id
    from e2e_cloud import MotoCloud
    from e2e_lambda import Runtime, iam_enforced
    from moto import mock_aws

    from flightdeck.adapters.peer_registry import PeerRegistry
    from flightdeck.domain.peers import new_token

    saved = {k: os.environ.get(k) for k in ("AWS_DEFAULT_REGION", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")}
    os.environ.update(AWS_DEFAULT_REGION=REGION, AWS_ACCESS_KEY_ID="testing", AWS_SECRET_ACCESS_KEY="testing")
    try:
        with mock_aws(config={"lambda": {"use_docker": False}}), iam_enforced():
            stacks = MotoCloud(lean_assembly).deploy_all([ACCOUNT_STACK, ORCHESTRATOR, WORKER])
            aws = {s: boto3.client(s, region_name=REGION) for s in ("lambda", "apigatewayv2", "ssm")}
            runtime = Runtime(stacks)
            # Let the orchestrator in at the worker: its registry directly, since moto's stack lists no PeerUrls
            # output for `peers add` to recognise the lean door by (e2e_lean takes that output out).
            worker_token = new_token("orchestrator")
            PeerRegistry(stacks[WORKER].outputs["StateTableName"], boto3.client("dynamodb", region_name=REGION)).add(
                "orchestrator", worker_token
            )
            boto3.client("secretsmanager", region_name=REGION).put_secret_value(
                SecretId=stacks[ORCHESTRATOR].outputs["PeerTokensSecretArn"],
                SecretString=json.dumps({"worker": worker_token}),
            )
            user = flightdeck(
                "peers", "add", "--agent", "orchestrator", "user",
                "--usage-plan-id", plan_id("flightdeck-orchestrator-peers"),
            )  # fmt: skip
            chat = Chat(runtime, stacks[ORCHESTRATOR].outputs["ApiUrl"], user)
            worker = stacks[WORKER].outputs
            with runtime.serving_http():
                answer = chat.answer(chat.send("@worker list three owls"))
                probes = {
                    "health": requests.get(f"{worker['ApiUrl']}health", timeout=10),
                    "card": requests.get(worker["AgentCardUrl"], timeout=10),
                    "chat without a token": requests.post(
                        f"{worker['ChatUrl']}/api/chat", json={"content": "x"}, timeout=10
                    ),
                }
            runtime.fail_on_failures("the lean round trip")
            yield {"stack": stacks[WORKER], "aws": aws, "answer": answer, "runtime": runtime, "probes": probes}
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def _function_name(stack, handler: str) -> str:
    [lid] = [
        lid
        for lid, r in stack.template["Resources"].items()
        if r["Type"] == "AWS::Lambda::Function" and r["Properties"].get("Description", "").endswith(f": {handler}")
    ]
    return stack.physical[lid]


def test_the_lean_stack_is_created_and_moto_skipped_exactly_what_e2e_lean_creates(deployed) -> None:
    from moto.cloudformation.parsing import resource_class_from_type

    stack = deployed["stack"]
    assert stack.skipped - (UNSUPPORTED - set(CREATED_BEFORE)) == set(e2e_lean.AFTER)
    assert all(resource_class_from_type(t) is None for t in (*e2e_lean.BEFORE, *e2e_lean.AFTER))


def test_each_round_trip_function_has_its_url_and_the_outputs_name_them(deployed) -> None:
    stack, aws = deployed["stack"], deployed["aws"]
    outputs = stack.outputs
    for handler, output in (("chat_ingest", "ChatUrl"), ("callback", "CallbackUrl"), ("a2a", "A2aUrl")):
        config = aws["lambda"].get_function_url_config(FunctionName=_function_name(stack, handler))
        assert config["AuthType"] == "NONE" and outputs[output] == config["FunctionUrl"]
        assert config["InvokeMode"] == ("RESPONSE_STREAM" if handler in topology.STREAMING_HANDLERS else "BUFFERED")
    api = aws["apigatewayv2"].get_apis()["Items"]
    [http_api] = [a for a in api if a["Name"] == "flightdeck-worker"]
    assert outputs["ApiUrl"] == http_api["ApiEndpoint"] + "/"


def test_the_http_api_routes_every_buffered_route_to_its_function_in_payload_1_0(deployed) -> None:
    stack, aws = deployed["stack"], deployed["aws"]
    v2 = aws["apigatewayv2"]
    [api] = [a for a in v2.get_apis()["Items"] if a["Name"] == "flightdeck-worker"]
    routes = v2.get_routes(ApiId=api["ApiId"])["Items"]
    assert sorted(r["RouteKey"] for r in routes) == sorted(
        f"{r.method} {r.path}"
        for r in topology.ROUTES
        if not r.stream and not r.console  # a lean agent has no console
    )
    integrations = {i["IntegrationId"]: i for i in v2.get_integrations(ApiId=api["ApiId"])["Items"]}
    for route in routes:
        integration = integrations[route["Target"].removeprefix("integrations/")]
        assert integration["PayloadFormatVersion"] == "1.0" and integration["IntegrationType"] == "AWS_PROXY"
        handler = next(r.handler for r in topology.ROUTES if f"{r.method} {r.path}" == route["RouteKey"])
        assert integration["IntegrationUri"].endswith(f":function:{_function_name(stack, handler)}"), route


def test_peers_find_every_url_in_the_published_parameter_and_the_functions_know_their_own(deployed) -> None:
    stack, aws = deployed["stack"], deployed["aws"]
    value = aws["ssm"].get_parameter(Name=stack.outputs["ApiUrlParameterName"])["Parameter"]["Value"]
    assert value == stack.outputs["PeerUrls"]
    allowlist = Allowlist.parse(f"worker:{value}")
    assert allowlist.resolve("worker", CHAT_ENDPOINT) == stack.outputs["ChatUrl"].rstrip("/")
    assert allowlist.resolve("worker", CALLBACK_ENDPOINT) == stack.outputs["CallbackUrl"].rstrip("/")
    assert allowlist.resolve("worker") == stack.outputs["ApiUrl"].rstrip("/")
    card = aws["lambda"].get_function_configuration(FunctionName=_function_name(stack, "agent_card"))
    variables = card["Environment"]["Variables"]
    assert f"a2a={stack.outputs['A2aUrl']}" in variables["PUBLIC_ENDPOINT_URLS"]
    assert variables["PUBLIC_BASE_URL"] == stack.outputs["ApiUrl"].rstrip("/")


def test_a_delegation_goes_to_the_lean_worker_s_function_url_and_comes_back(deployed) -> None:
    assert "[worker]" in deployed["answer"] and "list three owls" in deployed["answer"]
    chat_url = deployed["stack"].outputs["ChatUrl"]
    sent = [(m, u, status) for m, u, status in deployed["runtime"].http_log if u.startswith(chat_url)]
    # The orchestrator's dispatch, accepted; then the probe without a token (the next test).
    assert sent == [("POST", f"{chat_url}/api/chat", 202), ("POST", f"{chat_url}/api/chat", 401)], sent


def test_the_http_api_serves_the_user_s_routes_and_the_url_refuses_a_caller_without_a_token(deployed) -> None:
    health, card, chat = deployed["probes"].values()
    assert health.status_code == 200 and health.json()["agent"] == "worker"
    # The card (through the HTTP API) names the a2a function's URL as its JSON-RPC endpoint, not the HTTP API's.
    a2a_url = deployed["stack"].outputs["A2aUrl"].rstrip("/") + "/a2a"
    assert card.status_code == 200 and card.json()["url"] == a2a_url
    assert {i["url"] for i in card.json()["supportedInterfaces"]} == {a2a_url}
    assert chat.status_code == 401 and chat.json()["error"]["code"] == "unauthorized"
