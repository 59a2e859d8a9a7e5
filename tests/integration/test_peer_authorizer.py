"""The peer routes' REQUEST authorizer (flightdeck.handlers.peer_authorizer) on moto, with the sample event.

It meters, it does not refuse: a peer's token is allowed under the peer's usage key; anything
else under the shared "unidentified" key, for the function to refuse and audit. A registry
outage raises (API Gateway: AUTHORIZER_FAILURE, 503).
"""

from __future__ import annotations

import importlib

import pytest
from botocore.exceptions import ClientError

from flightdeck.domain.peer_usage import UNIDENTIFIED, usage_key
from flightdeck.domain.peers import new_token
from flightdeck.local.invocation import LocalLambdaContext
from flightdeck.local.peer_gate import allows
from tests.support.harness import TEST_PEER, load_event

METHOD_ARN = "arn:aws:execute-api:us-east-1:123456789012:8d8f9918ad/prod/POST/api/chat"
OTHER_ROUTE_ARN = "arn:aws:execute-api:us-east-1:123456789012:8d8f9918ad/prod/GET/api/sessions/s-1"


def authorize(header: str | None):
    event = load_event("api/peer_authorizer_request.json", AUTHORIZATION=header or "")
    if header is None:
        del event["headers"]["Authorization"], event["multiValueHeaders"]["Authorization"]
    module = importlib.import_module("flightdeck.handlers.peer_authorizer")
    return module.handler(event, LocalLambdaContext(function_name="orchestrator-peer-authorizer"))


def test_a_peer_token_is_allowed_on_every_peer_route_under_its_usage_key(orchestrator):
    answer = authorize(f"Bearer {orchestrator.peer_token}")
    assert answer["principalId"] == TEST_PEER
    assert answer["context"] == {"peer": TEST_PEER}
    assert answer["usageIdentifierKey"] == usage_key("orchestrator", TEST_PEER)
    # The answer is cached per Authorization header, so it must hold for the other peer routes too.
    assert allows(answer, METHOD_ARN) and allows(answer, OTHER_ROUTE_ARN)


@pytest.mark.parametrize("case", ["none", "not_bearer", "malformed", "unknown", "wrong_secret", "revoked"])
def test_every_other_caller_is_metered_under_the_unidentified_key_for_the_function_to_refuse(orchestrator, case):
    header = {
        "none": None,
        "not_bearer": "Basic abc",
        "malformed": "Bearer fdp_orchestrator_short",
        "unknown": f"Bearer {new_token('stranger')}",
        "wrong_secret": f"Bearer {new_token(TEST_PEER)}",
        "revoked": f"Bearer {orchestrator.peer_token}",
    }[case]
    if case == "revoked":
        orchestrator.registry.revoke(TEST_PEER)
    answer = authorize(header)
    assert answer["usageIdentifierKey"] == usage_key("orchestrator", UNIDENTIFIED)
    assert answer["principalId"] == UNIDENTIFIED and "context" not in answer  # names no peer
    assert allows(answer, METHOD_ARN)
    # ...and the function behind does refuse it, with its audit line (tests/integration/test_peer_auth.py).
    status = orchestrator.api("chat_post", headers={"Authorization": header} if header else None, token=None)[0]
    assert status in (401, 403)


@pytest.mark.parametrize("case", ["peer", "unidentified"])
def test_the_answer_is_the_one_powertools_builds(orchestrator, case):
    # The handler writes the answer itself (its data classes cost a cold start): the same as Powertools' would be.
    from aws_lambda_powertools.utilities.data_classes.api_gateway_authorizer_event import (
        APIGatewayAuthorizerRequestEvent,
        APIGatewayAuthorizerResponse,
    )

    header = f"Bearer {orchestrator.peer_token}" if case == "peer" else "Basic abc"
    answer = authorize(header)
    arn = APIGatewayAuthorizerRequestEvent(
        load_event("api/peer_authorizer_request.json", AUTHORIZATION=header)
    ).parsed_arn
    expected = APIGatewayAuthorizerResponse(
        principal_id=TEST_PEER if case == "peer" else UNIDENTIFIED,
        region=arn.region,
        aws_account_id=arn.aws_account_id,
        api_id=arn.api_id,
        stage=arn.stage,
        context={"peer": TEST_PEER} if case == "peer" else None,
        usage_identifier_key=usage_key("orchestrator", TEST_PEER if case == "peer" else UNIDENTIFIED),
        partition=arn.partition,
    )
    expected.allow_all_routes()
    assert answer == expected.asdict()


def test_the_previous_token_is_allowed_during_a_rotation_grace(orchestrator):
    old = orchestrator.peer_token
    orchestrator.registry.rotate(TEST_PEER, new_token(TEST_PEER), grace_ms=60_000)
    assert authorize(f"Bearer {old}")["usageIdentifierKey"] == usage_key("orchestrator", TEST_PEER)


def test_a_registry_outage_is_an_authorizer_failure(orchestrator, monkeypatch):
    from flightdeck.wiring import state_store

    def down(**_):
        raise ClientError({"Error": {"Code": "InternalServerError", "Message": "down"}}, "GetItem")

    monkeypatch.setattr(state_store().client, "get_item", down)
    with pytest.raises(ClientError):  # API Gateway: AUTHORIZER_FAILURE, mapped to 503 by the stack
        authorize(f"Bearer {orchestrator.peer_token}")
