"""The peer routes' REQUEST authorizer (flightdeck.handlers.peer_authorizer) on moto, with the sample event.

API Gateway maps its answers: the exception "Unauthorized" to 401, a Deny policy to 403, an
Allow to the route with the caller's usage key (its usage plan) and context {"peer": ...}.
"""

from __future__ import annotations

import importlib

import pytest
from botocore.exceptions import ClientError

from flightdeck.domain.peer_usage import usage_key
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


@pytest.mark.parametrize("header", [None, "", "Bearer", "Basic abc", "Bearer not-a-peer-token",
                                    "Bearer fdp_orchestrator_short"])
def test_no_usable_token_is_unauthorized_which_api_gateway_answers_401(orchestrator, header):
    with pytest.raises(Exception, match="^Unauthorized$"):
        authorize(header)


@pytest.mark.parametrize("case", ["unknown", "wrong_secret", "revoked"])
def test_unknown_wrong_or_revoked_tokens_get_a_deny_which_api_gateway_answers_403(orchestrator, case):
    token = {"unknown": new_token("stranger"), "wrong_secret": new_token(TEST_PEER),
             "revoked": orchestrator.peer_token}[case]
    if case == "revoked":
        orchestrator.registry.revoke(TEST_PEER)
    answer = authorize(f"Bearer {token}")
    assert not allows(answer, METHOD_ARN)
    assert "usageIdentifierKey" not in answer and "context" not in answer


def test_the_previous_token_is_allowed_during_a_rotation_grace(orchestrator):
    old = orchestrator.peer_token
    orchestrator.registry.rotate(TEST_PEER, new_token(TEST_PEER), grace_ms=60_000)
    assert allows(authorize(f"Bearer {old}"), METHOD_ARN)


def test_a_registry_outage_is_an_authorizer_failure_not_a_refusal(orchestrator, monkeypatch):
    from flightdeck.wiring import deps

    def down(**_):
        raise ClientError({"Error": {"Code": "InternalServerError", "Message": "down"}}, "GetItem")

    monkeypatch.setattr(deps().store.client, "get_item", down)
    with pytest.raises(ClientError):  # API Gateway: AUTHORIZER_FAILURE, mapped to 503 by the stack
        authorize(f"Bearer {orchestrator.peer_token}")
