"""Bedrock Converse adapter, checked against botocore's real bedrock-runtime service model."""

from __future__ import annotations

import boto3
import pytest
from botocore.stub import ANY, Stubber

from flightdeck.adapters.bedrock import BedrockModel, BedrockModelError
from flightdeck.adapters.models import build_model
from flightdeck.domain.agent import AgentDefinition, DelegateTool, ModelConfig
from flightdeck.domain.model import ModelError, delegate_tool_spec

MODEL_ID = "anthropic.claude-3-5-haiku-20241022-v1:0"
TOOLS = [delegate_tool_spec("ask_worker", "worker")]
MESSAGES = [{"role": "user", "content": [{"text": "@worker summarise the report"}]}]


@pytest.fixture
def client():
    return boto3.client(
        "bedrock-runtime", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x"
    )


@pytest.fixture
def model(client):
    return BedrockModel(ModelConfig(provider="bedrock", model_id=MODEL_ID, max_tokens=512, temperature=0.2), client=client)


def _response(content, stop_reason, usage=None):
    return {
        "output": {"message": {"role": "assistant", "content": content}},
        "stopReason": stop_reason,
        "usage": usage or {"inputTokens": 12, "outputTokens": 34, "totalTokens": 46},
        "metrics": {"latencyMs": 321},
    }


def test_tool_use_response_maps_to_tool_uses(client, model):
    tool_use = {"toolUseId": "tooluse_abcdefghijklmnopqrstuv", "name": "ask_worker", "input": {"task": "summarise the report"}}
    expected = {
        "modelId": MODEL_ID,
        "system": [{"text": "You orchestrate."}],
        "messages": MESSAGES,
        "toolConfig": {"tools": TOOLS},
        "inferenceConfig": {"maxTokens": 512, "temperature": 0.2},
    }
    with Stubber(client) as stub:
        stub.add_response("converse", _response([{"text": "Delegating."}, {"toolUse": tool_use}], "tool_use"), expected)
        reply = model.converse(system="You orchestrate.", messages=MESSAGES, tools=TOOLS)
        stub.assert_no_pending_responses()
    assert reply.stop_reason == "tool_use"
    assert reply.tool_uses == [tool_use]
    assert reply.message == {"role": "assistant", "content": [{"text": "Delegating."}, {"toolUse": tool_use}]}
    assert reply.usage == {"inputTokens": 12, "outputTokens": 34, "totalTokens": 46}


def test_end_turn_text_response_maps_and_no_tool_config_without_tools(client, model):
    expected = {
        "modelId": MODEL_ID,
        "system": [{"text": "You work."}],
        "messages": MESSAGES,
        "inferenceConfig": {"maxTokens": 512, "temperature": 0.2},
    }
    with Stubber(client) as stub:
        # expected_params must match exactly: a toolConfig key would fail the call.
        stub.add_response("converse", _response([{"text": "Here is the summary."}], "end_turn"), expected)
        reply = model.converse(system="You work.", messages=MESSAGES, tools=[])
        stub.assert_no_pending_responses()
    assert reply.stop_reason == "end_turn"
    assert reply.text == "Here is the summary."
    assert reply.tool_uses == []


def test_request_shape():
    m = BedrockModel(ModelConfig(provider="bedrock", model_id=MODEL_ID), client=object())
    assert "toolConfig" not in m.request(system="s", messages=MESSAGES, tools=[])
    assert m.request(system="s", messages=MESSAGES, tools=TOOLS)["toolConfig"] == {"tools": TOOLS}
    assert "system" not in m.request(system="", messages=MESSAGES, tools=[])


def test_tool_results_round_trip_is_accepted_by_the_service_model(client, model):
    messages = MESSAGES + [
        {"role": "assistant", "content": [{"toolUse": {"toolUseId": "t1", "name": "ask_worker", "input": {"task": "x"}}}]},
        {
            "role": "user",
            "content": [{"toolResult": {"toolUseId": "t1", "content": [{"text": "done"}], "status": "success"}}],
        },
    ]
    with Stubber(client) as stub:
        stub.add_response("converse", _response([{"text": "All done."}], "end_turn"), {
            "modelId": MODEL_ID, "system": ANY, "messages": messages, "toolConfig": ANY, "inferenceConfig": ANY,
        })
        reply = model.converse(system="s", messages=messages, tools=TOOLS)
    assert reply.text == "All done."


def test_throttling_becomes_model_error(client, model):
    with Stubber(client) as stub:
        stub.add_client_error(
            "converse", service_error_code="ThrottlingException", service_message="Too many requests", http_status_code=429
        )
        with pytest.raises(ModelError, match="ThrottlingException") as info:
            model.converse(system="s", messages=MESSAGES, tools=TOOLS)
    assert isinstance(info.value, BedrockModelError)
    assert info.value.code == "ThrottlingException"
    assert info.value.retryable


def test_validation_error_becomes_non_retryable_model_error(client, model):
    with Stubber(client) as stub:
        stub.add_client_error(
            "converse", service_error_code="ValidationException", service_message="bad input", http_status_code=400
        )
        with pytest.raises(ModelError, match="ValidationException: bad input") as info:
            model.converse(system="s", messages=MESSAGES, tools=[])
    assert not info.value.retryable


def test_invalid_request_is_a_model_error_not_a_crash(client, model):
    with Stubber(client) as stub:
        # Queued so that the call reaches botocore's parameter validation, which refuses it.
        stub.add_response("converse", _response([{"text": "never"}], "end_turn"))
        with pytest.raises(ModelError, match="ParamValidationError") as info:
            model.converse(system="s", messages=[{"role": "user"}], tools=[])
    assert not info.value.retryable


def test_context_window_exceeded_maps_to_max_tokens_and_malformed_output_is_an_error(client, model):
    with Stubber(client) as stub:
        stub.add_response("converse", _response([{"text": "cut"}], "model_context_window_exceeded"))
        stub.add_response("converse", _response([{"text": "??"}], "malformed_tool_use"))
        assert model.converse(system="s", messages=MESSAGES, tools=[]).stop_reason == "max_tokens"
        with pytest.raises(ModelError, match="malformed_tool_use"):
            model.converse(system="s", messages=MESSAGES, tools=[])


def test_model_id_is_required():
    with pytest.raises(ValueError, match="model_id"):
        BedrockModel(ModelConfig(provider="bedrock"))


def test_client_is_created_lazily_with_standard_retries_and_timeouts(monkeypatch):
    created = {}

    def fake_client(service, **kwargs):
        created.update(kwargs, service=service)
        return "client"

    monkeypatch.setattr("flightdeck.adapters.bedrock.boto3.client", fake_client)
    m = BedrockModel(ModelConfig(provider="bedrock", model_id=MODEL_ID), read_timeout=90)
    assert created == {}
    assert m.client == "client"
    assert created["service"] == "bedrock-runtime"
    config = created["config"]
    assert config.retries["mode"] == "standard"
    assert config.read_timeout == 90


def test_build_model_picks_bedrock():
    agent = AgentDefinition(
        name="a", model=ModelConfig(provider="bedrock", model_id=MODEL_ID), delegates=[DelegateTool(agent="worker")]
    )
    assert isinstance(build_model(agent), BedrockModel)


def test_local_model_conversations_are_valid_converse_requests(client, model):
    """What the local model writes (ids, blocks, tool specs) is a request Bedrock's model accepts."""
    from flightdeck.adapters.models import tool_specs
    from flightdeck.domain.local_model import LocalModel

    agent = AgentDefinition(name="a", delegates=[DelegateTool(agent="worker")], local_tools=["word_count", "calculator"])
    local = LocalModel(agent.model, agent)
    tools = tool_specs(agent)
    messages = [{"role": "user", "content": [{"text": "@worker do A !calculator 1+2"}]}]
    reply = local.converse(system="s", messages=messages, tools=tools)
    messages += [
        reply.message,
        {
            "role": "user",
            "content": [
                {"toolResult": {"toolUseId": u["toolUseId"], "content": [{"text": "r"}], "status": "success"}}
                for u in reply.tool_uses
            ],
        },
    ]
    with Stubber(client) as stub:
        stub.add_response("converse", _response([{"text": "ok"}], "end_turn"))
        model.converse(system="s", messages=messages, tools=tools)
        stub.assert_no_pending_responses()
