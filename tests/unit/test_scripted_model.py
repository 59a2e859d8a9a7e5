"""The deterministic local model: delegation by @mention, answers, final composition."""

from __future__ import annotations

import json
import re

import pytest

from flightdeck.adapters.model_choice import build_model
from flightdeck.domain.agent import AgentDefinition, DelegateTool, ModelConfig
from flightdeck.domain.model import ModelReply
from flightdeck.domain.scripted_model import ScriptedModel
from flightdeck.domain.toolbox import tool_specs


def _orchestrator(**model) -> AgentDefinition:
    return AgentDefinition(
        name="orchestrator",
        model=ModelConfig(**model),
        delegates=[DelegateTool(agent="worker"), DelegateTool(agent="helper-b", tool_name="ask_helper")],
        builtin_tools=["word_count", "calculator"],
    )


def _user(text: str) -> dict:
    return {"role": "user", "content": [{"text": text}]}


def _model(agent: AgentDefinition, sleep=lambda s: None) -> ScriptedModel:
    return ScriptedModel(agent.model, agent, sleep=sleep)


def _converse(agent: AgentDefinition, messages, tools=None, **kw) -> ModelReply:
    return _model(agent, **kw).converse(
        system=agent.system_prompt, messages=messages, tools=tool_specs(agent) if tools is None else tools
    )


def _results(reply: ModelReply, *results: tuple[str, str]) -> dict:
    """A user message answering the reply's toolUse blocks, in order, with (status, text)."""
    return {
        "role": "user",
        "content": [
            {"toolResult": {"toolUseId": use["toolUseId"], "content": [{"text": text}], "status": status}}
            for use, (status, text) in zip(reply.tool_uses, results, strict=True)
        ],
    }


def test_one_mention_one_tool_use():
    reply = _converse(_orchestrator(), [_user("@worker summarise the quarterly report")])
    assert reply.stop_reason == "tool_use"
    assert reply.message["role"] == "assistant"
    [use] = reply.tool_uses
    assert use["name"] == "ask_worker"
    assert use["input"] == {"task": "summarise the quarterly report"}
    assert re.fullmatch(r"tooluse_[A-Za-z0-9_-]{22}", use["toolUseId"])


def test_two_mentions_are_parallel_delegations_with_distinct_deterministic_ids():
    agent = _orchestrator()
    messages = [_user("Please: @worker count the apples @helper-b: count the pears")]
    reply = _converse(agent, messages)
    assert reply.stop_reason == "tool_use"
    uses = reply.tool_uses
    assert [(u["name"], u["input"]["task"]) for u in uses] == [
        ("ask_worker", "count the apples"),
        ("ask_helper", "count the pears"),
    ]
    assert len({u["toolUseId"] for u in uses}) == 2
    # Leading text block, then the toolUse blocks in one assistant message.
    assert "Delegating 2 task(s)" in reply.message["content"][0]["text"]
    # Pure function of the input: same ids again, from a fresh model too.
    again = _converse(agent, [_user("Please: @worker count the apples @helper-b: count the pears")])
    assert again.message == reply.message
    # Another conversation gives other ids.
    other = _converse(agent, [_user("Please: @worker count the plums @helper-b: count the pears")])
    assert {u["toolUseId"] for u in other.tool_uses}.isdisjoint({u["toolUseId"] for u in uses})


def test_ids_differ_between_turns_of_one_session():
    agent = _orchestrator()
    first = _converse(agent, [_user("@worker do it")])
    messages = [
        _user("@worker do it"),
        first.message,
        _results(first, ("success", "done")),
        {"role": "assistant", "content": [{"text": "ok"}]},
        _user("@worker do it"),
    ]
    second = _converse(agent, messages)
    assert second.tool_uses[0]["toolUseId"] != first.tool_uses[0]["toolUseId"]


def test_no_mention_answers_the_task_itself():
    worker = AgentDefinition(name="worker")
    reply = _converse(worker, [_user("summarise the quarterly report")], tools=[])
    assert reply.stop_reason == "end_turn"
    assert reply.tool_uses == []
    assert reply.text == (
        '[worker] Task: "summarise the quarterly report" — answer: 4 words; reversed: "report quarterly the summarise"'
    )
    assert reply.usage["inputTokens"] > 0 and reply.usage["outputTokens"] > 0


def test_unknown_agent_mention_is_not_delegated():
    agent = _orchestrator()
    reply = _converse(agent, [_user("@ghost find the treasure")])
    assert reply.stop_reason == "end_turn"
    assert reply.tool_uses == []
    assert "find the treasure" in reply.text
    assert "unknown agent(s): @ghost" in reply.text


def test_known_and_unknown_mentions_delegate_only_the_known_and_the_answer_says_so():
    agent = _orchestrator()
    messages = [_user("@worker do A @ghost do B")]
    reply = _converse(agent, messages)
    assert [u["name"] for u in reply.tool_uses] == ["ask_worker"]
    messages += [reply.message, _results(reply, ("success", "A is done"))]
    final = _converse(agent, messages)
    assert final.stop_reason == "end_turn"
    assert "A is done" in final.text
    assert "@ghost" in final.text and "unknown" in final.text


def test_a_delegate_whose_tool_is_not_offered_is_unknown():
    agent = _orchestrator()
    reply = _converse(agent, [_user("@worker do A")], tools=[])
    assert reply.stop_reason == "end_turn"
    assert "unknown agent(s): @worker" in reply.text


def test_mentions_are_not_taken_from_email_addresses():
    agent = _orchestrator()
    reply = _converse(agent, [_user("write to bob@worker.example.com")])
    assert reply.stop_reason == "end_turn"


def test_consecutive_mentions_share_the_task():
    reply = _converse(_orchestrator(), [_user("@worker @helper-b compare notes")])
    assert [(u["name"], u["input"]["task"]) for u in reply.tool_uses] == [
        ("ask_worker", "compare notes"),
        ("ask_helper", "compare notes"),
    ]


def test_results_in_final_answer_quotes_each_result_and_names_failures():
    agent = _orchestrator()
    messages = [_user("@worker count the apples @helper-b count the pears @worker count the plums")]
    reply = _converse(agent, messages)
    assert len(reply.tool_uses) == 3
    answer = "There are 3 apples.\n  (Really: three.)"
    messages += [
        reply.message,
        _results(
            reply,
            ("success", answer),
            ("error", json.dumps({"status": "error", "reason": "timeout"})),
            ("error", json.dumps({"status": "error", "reason": "dispatch_failed", "detail": "peer said 503"})),
        ),
    ]
    final = _converse(agent, messages)
    assert final.stop_reason == "end_turn"
    assert final.tool_uses == []
    text = final.text
    assert text.splitlines()[0] == "1 of 3 delegations answered."
    assert answer in text  # verbatim, newlines and spacing kept
    assert "@worker via ask_worker" in text
    assert 'ask_helper ("count the pears") failed: timeout' in text
    assert "@helper-b" in text
    assert 'ask_worker ("count the plums") failed: dispatch_failed (peer said 503)' in text
    # Deterministic.
    assert _converse(agent, messages).message == final.message


def test_all_answered_summary_and_non_json_error():
    agent = _orchestrator()
    messages = [_user("@worker a @helper-b b")]
    reply = _converse(agent, messages)
    messages += [reply.message, _results(reply, ("success", "answer a"), ("success", "answer b"))]
    final = _converse(agent, messages)
    assert final.text.splitlines()[0] == "2 of 2 delegations answered."
    assert "answer a" in final.text and "answer b" in final.text

    messages[-1] = _results(reply, ("success", "answer a"), ("error", "peer exploded"))
    final = _converse(agent, messages)
    assert final.text.splitlines()[0] == "1 of 2 delegations answered."
    assert 'ask_helper ("b") failed: peer exploded' in final.text


def test_local_tool_directive_becomes_a_local_tool_use():
    agent = _orchestrator()
    messages = [_user("!word_count the quick brown fox @worker check it")]
    reply = _converse(agent, messages)
    assert reply.stop_reason == "tool_use"
    assert [(u["name"], u["input"]) for u in reply.tool_uses] == [
        ("word_count", {"text": "the quick brown fox"}),
        ("ask_worker", {"task": "check it"}),
    ]
    messages += [reply.message, _results(reply, ("success", "4"), ("success", "checked"))]
    final = _converse(agent, messages)
    assert final.text.splitlines()[0] == "1 of 1 delegation answered. 1 of 1 local tool call succeeded."
    assert '!word_count ("the quick brown fox") → 4' in final.text
    assert "checked" in final.text


def test_local_tool_directive_only_for_the_agents_own_tools():
    worker = AgentDefinition(name="worker")  # no local tools
    reply = _converse(worker, [_user("!word_count a b c")], tools=[])
    assert reply.stop_reason == "end_turn"
    assert "!word_count a b c" in reply.text


def test_think_delay_sleeps_every_call():
    slept: list[float] = []
    agent = _orchestrator(think_delay_ms=1500)
    model = _model(agent, sleep=slept.append)
    model.converse(system="", messages=[_user("hello")], tools=tool_specs(agent))
    model.converse(system="", messages=[_user("@worker go")], tools=tool_specs(agent))
    assert slept == [1.5, 1.5]


def test_no_delay_no_sleep():
    slept: list[float] = []
    _converse(_orchestrator(), [_user("hello")], sleep=slept.append)
    assert slept == []


def test_conversation_must_end_with_a_user_message():
    agent = _orchestrator()
    with pytest.raises(ValueError):
        _converse(agent, [])
    with pytest.raises(ValueError):
        _converse(agent, [_user("x"), {"role": "assistant", "content": [{"text": "y"}]}])


def test_build_model_and_tool_specs():
    agent = _orchestrator()
    assert isinstance(build_model(agent), ScriptedModel)
    names = [s["toolSpec"]["name"] for s in tool_specs(agent)]
    assert names == ["ask_worker", "ask_helper", "word_count", "calculator", "ask_user"]
    assert "ask_user" not in [s["toolSpec"]["name"] for s in tool_specs(agent.model_copy(update={"ask_user": False}))]
    # Two tools of one name: the configuration is refused when it is read, not at a think.
    with pytest.raises(ValueError, match="several tools named word_count"):
        AgentDefinition(
            name="x", delegates=[DelegateTool(agent="w", tool_name="word_count")], builtin_tools=["word_count"]
        )
    with pytest.raises(ValueError, match="several tools named ask_w"):
        AgentDefinition(name="x", delegates=[DelegateTool(agent="w"), DelegateTool(agent="w", service="other")])


def test_an_mcp_tool_marker_calls_the_tool_with_the_text_as_its_required_string():
    from flightdeck.domain.agent import McpServer

    agent = AgentDefinition(
        name="reader", mcp_servers=[McpServer(name="notes", url="http://127.0.0.1:8931/mcp", credential="")]
    )
    tools = [
        {
            "toolSpec": {
                "name": "notes__search",
                "inputSchema": {
                    "json": {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]}
                },
            }
        }
    ]
    model = ScriptedModel(ModelConfig(), agent)
    reply = model.converse(
        system="", messages=[{"role": "user", "content": [{"text": "!notes__search owls"}]}], tools=tools
    )
    [use] = reply.tool_uses
    assert (use["name"], use["input"]) == ("notes__search", {"query": "owls"})
    json_reply = model.converse(
        system="", messages=[{"role": "user", "content": [{"text": '!notes__search {"query": "x"}'}]}], tools=tools
    )
    assert json_reply.tool_uses[0]["input"] == {"query": "x"}


def test_an_mcp_tool_that_is_not_offered_is_said_to_be_unavailable_not_answered_as_text():
    """Issue 41: with the server down (or the tool not among those it lists) the tool is not offered; the turn
    says so in its answer instead of echoing the task as if nothing was wanted."""
    from flightdeck.domain.agent import McpServer

    agent = AgentDefinition(
        name="reader", mcp_servers=[McpServer(name="notes", url="http://127.0.0.1:8931/mcp", credential="")]
    )
    reply = ScriptedModel(ModelConfig(), agent).converse(
        system="", messages=[{"role": "user", "content": [{"text": "!notes__search owls"}]}], tools=[]
    )
    assert reply.stop_reason == "end_turn" and not reply.tool_uses
    [block] = reply.message["content"]
    assert "Not called, not available: !notes__search (its MCP server did not list it" in block["text"]
    # `!word` naming no server of the agent stays ordinary text.
    plain = ScriptedModel(ModelConfig(), agent).converse(
        system="", messages=[{"role": "user", "content": [{"text": "wow!great__stuff"}]}], tools=[]
    )
    assert "not available" not in plain.message["content"][0]["text"]


def test_the_syntax_table_is_the_readmes_and_chat_helps():
    """The local model's markers, one table (SYNTAX) shown in the README and in `flightdeck chat --help`."""
    from pathlib import Path

    from flightdeck.cli import build_parser
    from flightdeck.domain.scripted_model import SYNTAX

    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    section = readme.split("### The local model's syntax", 1)[1].split("\n#", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| ") and not line.startswith("| in a")]
    shown = [tuple(c.strip().strip("`") for c in row.strip("|").split("|")) for row in rows]
    assert shown == list(SYNTAX)
    parser = build_parser()
    chat = parser._subparsers._group_actions[0].choices["chat"]  # the `chat` subcommand's own parser
    help_text = chat.format_help()
    for marker, meaning in SYNTAX:
        assert marker in help_text and meaning in help_text
