"""Bedrock Converse adapter, checked against botocore's real bedrock-runtime service model."""

from __future__ import annotations

import json

import boto3
import pytest
from botocore.stub import ANY, Stubber

from flightdeck.adapters.bedrock import BedrockModel, BedrockModelError
from flightdeck.adapters.model_choice import build_model
from flightdeck.domain.agent import AgentDefinition, DelegateTool, ModelConfig
from flightdeck.domain.model import ModelError, delegate_tool_spec

MODEL_ID = "anthropic.claude-3-5-haiku-20241022-v1:0"
TOOLS = [delegate_tool_spec("ask_worker", "worker")]
MESSAGES = [{"role": "user", "content": [{"text": "@worker summarise the report"}]}]


@pytest.fixture
def client():
    return boto3.client("bedrock-runtime", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x")


@pytest.fixture
def model(client):
    return BedrockModel(
        ModelConfig(provider="bedrock", model_id=MODEL_ID, max_tokens=512, temperature=0.2), client=client
    )


def _response(content, stop_reason, usage=None):
    return {
        "output": {"message": {"role": "assistant", "content": content}},
        "stopReason": stop_reason,
        "usage": usage or {"inputTokens": 12, "outputTokens": 34, "totalTokens": 46},
        "metrics": {"latencyMs": 321},
    }


def test_tool_use_response_maps_to_tool_uses(client, model):
    tool_use = {
        "toolUseId": "tooluse_abcdefghijklmnopqrstuv",
        "name": "ask_worker",
        "input": {"task": "summarise the report"},
    }
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
        {
            "role": "assistant",
            "content": [{"toolUse": {"toolUseId": "t1", "name": "ask_worker", "input": {"task": "x"}}}],
        },
        {
            "role": "user",
            "content": [{"toolResult": {"toolUseId": "t1", "content": [{"text": "done"}], "status": "success"}}],
        },
    ]
    with Stubber(client) as stub:
        stub.add_response(
            "converse",
            _response([{"text": "All done."}], "end_turn"),
            {
                "modelId": MODEL_ID,
                "system": ANY,
                "messages": messages,
                "toolConfig": ANY,
                "inferenceConfig": ANY,
            },
        )
        reply = model.converse(system="s", messages=messages, tools=TOOLS)
    assert reply.text == "All done."


def test_throttling_becomes_model_error(client, model):
    with Stubber(client) as stub:
        stub.add_client_error(
            "converse",
            service_error_code="ThrottlingException",
            service_message="Too many requests",
            http_status_code=429,
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
    from flightdeck.domain.scripted_model import ScriptedModel
    from flightdeck.domain.toolbox import tool_specs

    agent = AgentDefinition(
        name="a", delegates=[DelegateTool(agent="worker")], builtin_tools=["word_count", "calculator"]
    )
    local = ScriptedModel(agent.model, agent)
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


# --- ConverseStream --------------------------------------------------------------------------------

from flightdeck.domain.model import ModelReply, TextDelta, collect  # noqa: E402
from tests.support import eventstream as es  # noqa: E402


def _stream_of(*events: bytes) -> bytes:
    return b"".join(events)


def test_converse_stream_yields_text_as_it_comes_then_the_reply_converse_would_give(client, model):
    sent: list = []
    es.answer_with(
        client,
        _stream_of(
            es.event("messageStart", {"role": "assistant"}),
            es.event("contentBlockDelta", {"delta": {"text": "Delegating "}, "contentBlockIndex": 0}),
            es.event("contentBlockDelta", {"delta": {"text": "now."}, "contentBlockIndex": 0}),
            es.event("contentBlockStop", {"contentBlockIndex": 0}),
            es.event(
                "contentBlockStart",
                {"start": {"toolUse": {"toolUseId": "tooluse_x", "name": "ask_worker"}}, "contentBlockIndex": 1},
            ),
            es.event("contentBlockDelta", {"delta": {"toolUse": {"input": '{"task": "summ'}}, "contentBlockIndex": 1}),
            es.event("contentBlockDelta", {"delta": {"toolUse": {"input": 'arise"}'}}, "contentBlockIndex": 1}),
            es.event("contentBlockStop", {"contentBlockIndex": 1}),
            es.event("messageStop", {"stopReason": "tool_use"}),
            es.event(
                "metadata",
                {"usage": {"inputTokens": 5, "outputTokens": 7, "totalTokens": 12}, "metrics": {"latencyMs": 9}},
            ),
        ),
        sent,
    )
    items = list(model.converse_stream(system="You orchestrate.", messages=MESSAGES, tools=TOOLS))
    assert items[:-1] == [TextDelta("Delegating "), TextDelta("now.")]
    reply = items[-1]
    assert isinstance(reply, ModelReply) and reply.stop_reason == "tool_use"
    assert reply.message == {
        "role": "assistant",
        "content": [
            {"text": "Delegating now."},
            {"toolUse": {"toolUseId": "tooluse_x", "name": "ask_worker", "input": {"task": "summarise"}}},
        ],
    }
    assert reply.usage == {"inputTokens": 5, "outputTokens": 7, "totalTokens": 12}
    # The same request as converse's.
    assert sent == [
        {
            k: v
            for k, v in model.request(system="You orchestrate.", messages=MESSAGES, tools=TOOLS).items()
            if k != "modelId"
        }
    ]


def test_converse_stream_keeps_reasoning_and_its_signature(client, model):
    es.answer_with(
        client,
        _stream_of(
            es.event("messageStart", {"role": "assistant"}),
            es.event("contentBlockDelta", {"delta": {"reasoningContent": {"text": "think"}}, "contentBlockIndex": 0}),
            es.event(
                "contentBlockDelta", {"delta": {"reasoningContent": {"signature": "sig"}}, "contentBlockIndex": 0}
            ),
            es.event("contentBlockDelta", {"delta": {"text": "Done."}, "contentBlockIndex": 1}),
            es.event("messageStop", {"stopReason": "end_turn"}),
        ),
    )
    reply = collect(model.converse_stream(system="", messages=MESSAGES, tools=[]))
    assert reply.message["content"] == [
        {"reasoningContent": {"reasoningText": {"text": "think", "signature": "sig"}}},
        {"text": "Done."},
    ]
    assert reply.text == "Done."


@pytest.mark.parametrize(
    "kind,retryable",
    [("throttlingException", True), ("modelStreamErrorException", True), ("validationException", False)],
)
def test_an_exception_event_mid_stream_is_a_model_error(client, model, kind, retryable):
    es.answer_with(
        client,
        _stream_of(
            es.event("messageStart", {"role": "assistant"}),
            es.event("contentBlockDelta", {"delta": {"text": "par"}, "contentBlockIndex": 0}),
            es.exception(kind, "it broke"),
        ),
    )
    got = []
    with pytest.raises(BedrockModelError) as failed:
        for item in model.converse_stream(system="", messages=MESSAGES, tools=[]):
            got.append(item)
    assert got == [TextDelta("par")]  # what came before, and no reply made of half a message
    assert failed.value.retryable is retryable and failed.value.code == kind[0].upper() + kind[1:]
    assert "it broke" in str(failed.value)


def test_a_stream_cut_off_before_message_stop_is_a_model_error(client, model):
    es.answer_with(
        client,
        _stream_of(
            es.event("messageStart", {"role": "assistant"}),
            es.event("contentBlockDelta", {"delta": {"text": "half"}, "contentBlockIndex": 0}),
        ),
    )
    with pytest.raises(BedrockModelError, match="stopped with ''"):
        collect(model.converse_stream(system="", messages=MESSAGES, tools=[]))


def test_a_tool_input_that_is_not_json_is_a_model_error(client, model):
    es.answer_with(
        client,
        _stream_of(
            es.event(
                "contentBlockStart",
                {"start": {"toolUse": {"toolUseId": "t", "name": "ask_worker"}}, "contentBlockIndex": 0},
            ),
            es.event("contentBlockDelta", {"delta": {"toolUse": {"input": '{"task": '}}, "contentBlockIndex": 0}),
            es.event("messageStop", {"stopReason": "tool_use"}),
        ),
    )
    with pytest.raises(BedrockModelError) as failed:
        collect(model.converse_stream(system="", messages=MESSAGES, tools=TOOLS))
    assert failed.value.code == "BadToolInput"


@pytest.mark.parametrize("code,retryable", [("ThrottlingException", True), ("AccessDeniedException", False)])
def test_converse_stream_call_refused_is_a_model_error(client, model, code, retryable):
    with Stubber(client) as stub:
        stub.add_client_error(
            "converse_stream",
            service_error_code=code,
            service_message="no",
            http_status_code=400,
            expected_params={"modelId": MODEL_ID, "messages": MESSAGES, "inferenceConfig": ANY},
        )
        with pytest.raises(BedrockModelError) as failed:
            list(model.converse_stream(system="", messages=MESSAGES, tools=[]))
        stub.assert_no_pending_responses()
    assert failed.value.code == code and failed.value.retryable is retryable


# --- ConverseStream in a think: the relay gets the same reply converse gives, and the same errors ----------


def test_a_text_only_stream_is_the_reply_converse_gives_for_the_same_answer(client, model):
    usage = {"inputTokens": 3, "outputTokens": 4, "totalTokens": 7}
    es.answer_with(
        client,
        _stream_of(
            es.event("messageStart", {"role": "assistant"}),
            *[
                es.event("contentBlockDelta", {"delta": {"text": piece}, "contentBlockIndex": 0})
                for piece in ("The tide ", "turns ", "twice a day.")
            ],
            es.event("contentBlockStop", {"contentBlockIndex": 0}),
            es.event("messageStop", {"stopReason": "end_turn"}),
            es.event("metadata", {"usage": usage, "metrics": {"latencyMs": 5}}),
        ),
    )
    streamed = list(model.converse_stream(system="", messages=MESSAGES, tools=[]))
    with Stubber(client) as stub:
        stub.add_response("converse", _response([{"text": "The tide turns twice a day."}], "end_turn", usage))
        whole = model.converse(system="", messages=MESSAGES, tools=[])
    assert streamed[-1] == whole and [d.text for d in streamed[:-1]] == ["The tide ", "turns ", "twice a day."]


class _Clock:
    def __init__(self):
        self.ms = 0

    def now_ms(self):
        self.ms += 400  # every look at the clock: 400 ms later (a slow model)
        return self.ms


class _Live:
    def __init__(self):
        self.calls = []

    def watch(self, *args):
        self.calls.append(("watch", *args))

    def put_text(self, session_id, live, ttl_ms):
        self.calls.append(("put", live.text))

    def clear_text(self, *args):
        self.calls.append(("clear", *args))


def _think_deps(model, port):
    from types import SimpleNamespace

    agent = AgentDefinition(name="orchestrator", delegates=[DelegateTool(agent="worker")])
    settings = SimpleNamespace(stream_poll_interval_ms=300, model_max_attempts=3, agent=agent)
    return SimpleNamespace(settings=settings, clock=_Clock(), live=port, model=lambda: model)


def test_a_watched_think_on_bedrock_streams_and_stores_what_converse_would(client, model):
    from flightdeck.domain import turn_loop
    from flightdeck.domain.live import LiveRelay

    es.answer_with(
        client,
        _stream_of(
            es.event("messageStart", {"role": "assistant"}),
            es.event("contentBlockDelta", {"delta": {"text": "Asking "}, "contentBlockIndex": 0}),
            es.event("contentBlockDelta", {"delta": {"text": "the worker."}, "contentBlockIndex": 0}),
            es.event(
                "contentBlockStart",
                {"start": {"toolUse": {"toolUseId": "tooluse_y", "name": "ask_worker"}}, "contentBlockIndex": 1},
            ),
            es.event(
                "contentBlockDelta", {"delta": {"toolUse": {"input": '{"task": "sum it up"}'}}, "contentBlockIndex": 1}
            ),
            es.event("messageStop", {"stopReason": "tool_use"}),
        ),
    )
    port = _Live()
    deps = _think_deps(model, port)
    reply = turn_loop._think(deps, MESSAGES, 1, LiveRelay(deps, "s1", 1, 1))
    assert reply.stop_reason == "tool_use" and reply.text == "Asking the worker."
    assert reply.tool_uses == [{"toolUseId": "tooluse_y", "name": "ask_worker", "input": {"task": "sum it up"}}]
    assert port.calls == [("put", "Asking "), ("put", "Asking the worker."), ("clear", "s1", 1, 1)]


def test_throttling_mid_stream_is_a_retryable_think(client, model):
    from flightdeck.domain import turn_loop
    from flightdeck.domain.live import LiveRelay

    es.answer_with(
        client,
        _stream_of(
            es.event("messageStart", {"role": "assistant"}),
            es.event("contentBlockDelta", {"delta": {"text": "Half "}, "contentBlockIndex": 0}),
            es.exception("throttlingException", "slow down"),
        ),
    )
    port = _Live()
    deps = _think_deps(model, port)
    with pytest.raises(turn_loop.ThinkRetry):
        turn_loop._think(deps, MESSAGES, 1, LiveRelay(deps, "s1", 1, 1))
    assert port.calls == [("put", "Half "), ("clear", "s1", 1, 1)]  # what it wrote is gone again
    # The last attempt: the turn ends with an error answer instead, as converse's failures do.
    reply = turn_loop._think(deps, MESSAGES, 3, LiveRelay(deps, "s1", 1, 3))
    assert reply.error == "model_error" and "ThrottlingException" in reply.text


# --- Forced structured output: a contract's output_schema answered through the respond tool -------------

from flightdeck.domain.model import RESPOND_TOOL  # noqa: E402

QUOTE = {
    "type": "object",
    "properties": {"price": {"type": "number"}, "currency": {"type": "string"}},
    "required": ["price", "currency"],
}


def _respond_spec(schema):
    return {
        "toolSpec": {
            "name": RESPOND_TOOL,
            "description": ANY,
            "inputSchema": {"json": schema},
        }
    }


def test_an_output_schema_forces_the_respond_tool_when_the_agent_has_no_other(client, model):
    respond = {"toolUseId": "tooluse_r", "name": RESPOND_TOOL, "input": {"price": 9.5, "currency": "EUR"}}
    expected = {
        "modelId": MODEL_ID,
        "messages": MESSAGES,
        "inferenceConfig": ANY,
        "toolConfig": {"tools": [_respond_spec(QUOTE)], "toolChoice": {"tool": {"name": RESPOND_TOOL}}},
    }
    usage = {"inputTokens": 20, "outputTokens": 8, "totalTokens": 28}
    with Stubber(client) as stub:
        stub.add_response(
            "converse", _response([{"text": "Here it is:"}, {"toolUse": respond}], "tool_use", usage), expected
        )
        reply = model.converse(system="", messages=MESSAGES, tools=[], output_schema=QUOTE)
        stub.assert_no_pending_responses()
    # The final answer: its text is the respond call's input, and nothing else (the preamble would make it no JSON).
    assert reply.stop_reason == "end_turn" and reply.tool_uses == []
    assert reply.message == {"role": "assistant", "content": [{"text": '{"price": 9.5, "currency": "EUR"}'}]}
    assert reply.usage == usage


def test_an_output_schema_with_other_tools_lets_the_model_delegate_first(client, model):
    delegate = {"toolUseId": "tooluse_d", "name": "ask_worker", "input": {"task": "price it"}}
    expected = {
        "modelId": MODEL_ID,
        "system": [{"text": "s"}],
        "messages": MESSAGES,
        "inferenceConfig": ANY,
        "toolConfig": {"tools": [*TOOLS, _respond_spec(QUOTE)], "toolChoice": {"any": {}}},
    }
    with Stubber(client) as stub:
        stub.add_response("converse", _response([{"toolUse": delegate}], "tool_use"), expected)
        reply = model.converse(system="s", messages=MESSAGES, tools=TOOLS, output_schema=QUOTE)
        stub.assert_no_pending_responses()
    assert reply.stop_reason == "tool_use" and reply.tool_uses == [delegate]


def test_respond_called_beside_other_tools_is_dropped_and_the_others_run(client, model):
    delegate = {"toolUseId": "tooluse_d", "name": "ask_worker", "input": {"task": "price it"}}
    respond = {"toolUseId": "tooluse_r", "name": RESPOND_TOOL, "input": {"price": 1, "currency": "X"}}
    with Stubber(client) as stub:
        stub.add_response("converse", _response([{"toolUse": delegate}, {"toolUse": respond}], "tool_use"))
        reply = model.converse(system="s", messages=MESSAGES, tools=TOOLS, output_schema=QUOTE)
    assert reply.stop_reason == "tool_use" and reply.tool_uses == [delegate]


def test_a_schema_that_is_not_an_object_s_travels_wrapped_and_comes_back_bare(client, model):
    schema = {"type": "array", "items": {"$ref": "#/$defs/n"}, "$defs": {"n": {"type": "number"}}}
    wrapped = {
        "type": "object",
        "properties": {"value": {"type": "array", "items": {"$ref": "#/$defs/n"}}},
        "required": ["value"],
        "$defs": {"n": {"type": "number"}},
    }
    respond = {"toolUseId": "tooluse_r", "name": RESPOND_TOOL, "input": {"value": [1, 2]}}
    with Stubber(client) as stub:
        stub.add_response(
            "converse",
            _response([{"toolUse": respond}], "tool_use"),
            {
                "modelId": MODEL_ID,
                "messages": MESSAGES,
                "inferenceConfig": ANY,
                "toolConfig": {"tools": [_respond_spec(wrapped)], "toolChoice": {"tool": {"name": RESPOND_TOOL}}},
            },
        )
        reply = model.converse(system="", messages=MESSAGES, tools=[], output_schema=schema)
    assert reply.text == "[1, 2]" and reply.stop_reason == "end_turn"
    assert schema["$defs"] == {"n": {"type": "number"}}  # the caller's schema is left as it was


def test_a_respond_call_cut_off_stays_a_truncated_tool_call(client, model):
    respond = {"toolUseId": "tooluse_r", "name": RESPOND_TOOL, "input": {"price": 1}}
    with Stubber(client) as stub:
        stub.add_response("converse", _response([{"toolUse": respond}], "max_tokens"))
        reply = model.converse(system="", messages=MESSAGES, tools=[], output_schema=QUOTE)
    assert reply.stop_reason == "max_tokens" and reply.tool_uses == [respond]  # the turn loop ends it as an error


def test_converse_stream_with_an_output_schema_forces_respond_and_answers_its_input(client, model):
    sent: list = []
    usage = {"inputTokens": 5, "outputTokens": 7, "totalTokens": 12}
    es.answer_with(
        client,
        _stream_of(
            es.event("messageStart", {"role": "assistant"}),
            es.event(
                "contentBlockStart",
                {"start": {"toolUse": {"toolUseId": "tooluse_r", "name": RESPOND_TOOL}}, "contentBlockIndex": 0},
            ),
            es.event("contentBlockDelta", {"delta": {"toolUse": {"input": '{"price": 3,'}}, "contentBlockIndex": 0}),
            es.event(
                "contentBlockDelta", {"delta": {"toolUse": {"input": ' "currency": "USD"}'}}, "contentBlockIndex": 0}
            ),
            es.event("contentBlockStop", {"contentBlockIndex": 0}),
            es.event("messageStop", {"stopReason": "tool_use"}),
            es.event("metadata", {"usage": usage, "metrics": {"latencyMs": 9}}),
        ),
        sent,
    )
    items = list(model.converse_stream(system="s", messages=MESSAGES, tools=TOOLS, output_schema=QUOTE))
    reply = items[-1]
    assert isinstance(reply, ModelReply) and reply.stop_reason == "end_turn" and reply.usage == usage
    assert json.loads(reply.text) == {"price": 3, "currency": "USD"} and reply.tool_uses == []
    [body] = sent
    assert body["toolConfig"]["toolChoice"] == {"any": {}}
    assert [t["toolSpec"]["name"] for t in body["toolConfig"]["tools"]] == ["ask_worker", RESPOND_TOOL]
    assert body["toolConfig"]["tools"][-1]["toolSpec"]["inputSchema"] == {"json": QUOTE}


def test_no_output_schema_no_respond_tool():
    m = BedrockModel(ModelConfig(provider="bedrock", model_id=MODEL_ID), client=object())
    assert m.request(system="s", messages=MESSAGES, tools=TOOLS)["toolConfig"] == {"tools": TOOLS}


def test_a_delegate_may_not_take_the_respond_tool_s_name():
    with pytest.raises(ValueError, match="reserved"):
        AgentDefinition(name="a", delegates=[DelegateTool(agent="worker", tool_name=RESPOND_TOOL)])
