"""Prompt caching (issue 37): the cache points Bedrock is sent, checked by botocore's Stubber against the real
bedrock-runtime service model, and the local model's billing of a scripted sequence by the same rules."""

from __future__ import annotations

import boto3
import pytest
from botocore.stub import Stubber

from flightdeck.adapters.bedrock import BedrockModel
from flightdeck.adapters.prompt_cache_ledger import FileLedger
from flightdeck.domain import prompt_cache
from flightdeck.domain.agent import AgentDefinition, ModelConfig
from flightdeck.domain.model import delegate_tool_spec
from flightdeck.domain.prompt_cache import CACHE_POINT
from flightdeck.domain.scripted_model import ScriptedModel

CACHING = "us.anthropic.claude-sonnet-4-20250514-v1:0"  # 1,024 tokens a point
NOT_CACHING = "meta.llama3-70b-instruct-v1:0"
SMALL_TOOLS = [delegate_tool_spec("ask_worker", "worker")]
# 1,024 tokens: a text is billed as its own bytes / 4.
LONG_SYSTEM = "s" * 4096
INFERENCE = {"maxTokens": 1024, "temperature": 0.0}


def user(n: int, tokens: int = 100) -> dict:
    # Compact JSON {"role":"user","content":[{"text":"..."}]} is the text's length + 39 bytes.
    return {"role": "user", "content": [{"text": str(n) * (tokens * 4 - 39)}]}


def assistant(n: int, tokens: int = 100) -> dict:
    return {"role": "assistant", "content": [{"text": str(n) * (tokens * 4 - 44)}]}


def pointed(message: dict) -> dict:
    return {**message, "content": [*message["content"], CACHE_POINT]}


@pytest.fixture
def client():
    return boto3.client("bedrock-runtime", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x")


def bedrock(client, model_id: str = CACHING, **config) -> BedrockModel:
    return BedrockModel(ModelConfig(provider="bedrock", model_id=model_id, **config), client=client)


def reply(usage: dict | None = None) -> dict:
    return {
        "output": {"message": {"role": "assistant", "content": [{"text": "ok"}]}},
        "stopReason": "end_turn",
        "usage": usage or {"inputTokens": 1, "outputTokens": 1, "totalTokens": 2},
        "metrics": {"latencyMs": 1},
    }


def sent(client, model: BedrockModel, expected: dict, **ask) -> None:
    with Stubber(client) as stub:
        stub.add_response("converse", reply(), expected)  # expected_params must match exactly
        model.converse(**ask)
        stub.assert_no_pending_responses()


def test_a_caching_model_gets_points_after_the_system_prompt_and_the_last_message(client):
    messages = [user(1)]
    expected = {
        "modelId": CACHING,
        "system": [{"text": LONG_SYSTEM}, CACHE_POINT],
        "messages": [pointed(user(1))],
        # The tool specs alone are under the minimum: no point after them.
        "toolConfig": {"tools": SMALL_TOOLS},
        "inferenceConfig": INFERENCE,
    }
    sent(client, bedrock(client), expected, system=LONG_SYSTEM, messages=messages, tools=SMALL_TOOLS)


def test_tool_specs_past_the_minimum_get_their_own_point(client):
    tools = [delegate_tool_spec("ask_worker", "worker", description="d" * 5000)]
    expected = {
        "modelId": CACHING,
        "system": [{"text": "short"}, CACHE_POINT],
        "messages": [pointed(user(1))],
        "toolConfig": {"tools": [*tools, CACHE_POINT]},
        "inferenceConfig": INFERENCE,
    }
    sent(client, bedrock(client), expected, system="short", messages=[user(1)], tools=tools)


def test_without_tools_no_tool_config_is_sent(client):
    expected = {
        "modelId": CACHING,
        "system": [{"text": LONG_SYSTEM}, CACHE_POINT],
        "messages": [pointed(user(1))],
        "inferenceConfig": INFERENCE,
    }
    sent(client, bedrock(client), expected, system=LONG_SYSTEM, messages=[user(1)], tools=[])


@pytest.mark.parametrize("model_id, config", [(NOT_CACHING, {}), (CACHING, {"prompt_cache": False})])
def test_a_model_without_caching_or_an_agent_that_turned_it_off_gets_no_point(client, model_id, config):
    messages = [user(1), assistant(2), user(3)]
    expected = {
        "modelId": model_id,
        "system": [{"text": LONG_SYSTEM}],
        "messages": messages,
        "toolConfig": {"tools": SMALL_TOOLS},
        "inferenceConfig": INFERENCE,
    }
    sent(
        client,
        bedrock(client, model_id, **config),
        expected,
        system=LONG_SYSTEM,
        messages=messages,
        tools=[*SMALL_TOOLS],
    )


def test_a_conversation_gets_its_points_once_it_crosses_the_minimum(client):
    model = bedrock(client)
    short = [user(1), assistant(2), user(3)]  # about 300 tokens with the system prompt: under 1,024
    sent(
        client,
        model,
        {"modelId": CACHING, "system": [{"text": "short"}], "messages": short, "inferenceConfig": INFERENCE},
        system="short",
        messages=short,
        tools=[],
    )
    # Past it: a point after the last message the previous think sent (its prefix is cached) and after the last.
    long = [user(1, 1100), assistant(2), user(3)]
    sent(
        client,
        model,
        {
            "modelId": CACHING,
            "system": [{"text": "short"}],
            "messages": [pointed(long[0]), long[1], pointed(long[2])],
            "inferenceConfig": INFERENCE,
        },
        system="short",
        messages=long,
        tools=[],
    )


def test_usage_with_cache_reads_and_writes_is_parsed(client):
    usage = {
        "inputTokens": 12,
        "outputTokens": 34,
        "totalTokens": 2146,
        "cacheReadInputTokens": 2000,
        "cacheWriteInputTokens": 100,
    }
    with Stubber(client) as stub:
        stub.add_response("converse", reply(usage))
        got = bedrock(client).converse(system=LONG_SYSTEM, messages=[user(1)], tools=[])
    assert got.usage == usage


AGENT = AgentDefinition(name="a")


class Clock:
    def __init__(self) -> None:
        self.ms = 1_000_000

    def __call__(self) -> int:
        return self.ms


def test_the_local_model_bills_a_scripted_sequence_by_the_published_rules():
    """system 1,024 tokens, each message 100: the known answer, request by request."""
    clock = Clock()
    model = ScriptedModel(ModelConfig(model_id=CACHING), AGENT, ledger=prompt_cache.MemoryLedger(), clock_ms=clock)

    def billed(messages: list[dict], system: str = LONG_SYSTEM) -> tuple[int, int, int]:
        usage = model.converse(system=system, messages=messages, tools=[]).usage
        assert usage["outputTokens"] > 0
        return usage["inputTokens"], usage.get("cacheReadInputTokens", 0), usage.get("cacheWriteInputTokens", 0)

    first = [user(1)]
    # Nothing cached: the system prompt and the message (1,124 tokens) are written, nothing is input.
    assert billed(first) == (0, 0, 1124)
    clock.ms += 60_000
    second = [*first, assistant(2), user(3)]
    # The previous request's prefix is read; the reply and the new message are written.
    assert billed(second) == (0, 1124, 200)
    clock.ms += 60_000
    # Another system prompt: another prefix, nothing read.
    assert billed(second, system="t" * 4096) == (0, 0, 1324)
    clock.ms += 301_000  # past the 5 minutes since the second request's entries were last used
    third = [*second, assistant(4), user(5)]
    assert billed(third) == (0, 0, 1524)
    clock.ms += 1_000
    # Under the minimum: no point, all input.
    assert billed([user(1)], system="short") == (102, 0, 0)


def test_a_model_without_caching_is_billed_all_input_by_the_local_model():
    model = ScriptedModel(ModelConfig(model_id=NOT_CACHING), AGENT, ledger=prompt_cache.MemoryLedger())
    for _ in range(2):
        usage = model.converse(system=LONG_SYSTEM, messages=[user(1)], tools=[]).usage
        assert (usage["inputTokens"], "cacheReadInputTokens" in usage) == (1124, False)


def test_the_file_ledger_is_shared_by_two_models(tmp_path):
    """A local stack's thinks run in several processes: what one writes, the next reads."""
    path = str(tmp_path / "entries.sqlite3")
    clock = Clock()
    one, two = (
        ScriptedModel(ModelConfig(model_id=CACHING), AGENT, ledger=FileLedger(path), clock_ms=clock) for _ in range(2)
    )
    one.converse(system=LONG_SYSTEM, messages=[user(1)], tools=[])
    usage = two.converse(system=LONG_SYSTEM, messages=[user(1), assistant(2), user(3)], tools=[]).usage
    assert usage["cacheReadInputTokens"] == 1124
