"""Skills with contracts on the agent's own API (issue 25): structured calls checked against the skill's
input schema before anything is stored, handler skills answered without the model, model skills and
callers' responseSchemas held to their schema, mismatches marked, hostile schemas refused.

One agent's real handlers on moto; the local scripted model answers a schema with an instance of it.
"""

from __future__ import annotations

import json

import pytest

from tests.support.harness import agent_config, make_agent, new_session_id

QUOTE_IN = {
    "type": "object",
    "properties": {"product": {"type": "string", "minLength": 1}, "quantity": {"type": "integer", "minimum": 1}},
    "required": ["product"],
    "additionalProperties": False,
}
QUOTE_OUT = {
    "type": "object",
    "properties": {"product": {"type": "string"}, "price": {"type": "number"}},
    "required": ["product", "price"],
}
SKILLS = [
    {"id": "count_words", "name": "Count words", "handler": "word_count", "expose": ["a2a", "mcp"]},
    {
        "id": "get_quote",
        "name": "Get a quote",
        "description": "Price a product",
        "input_schema": QUOTE_IN,
        "output_schema": QUOTE_OUT,
        "examples": [{"product": "widget", "quantity": 2}],
    },
    {"id": "secret_sauce", "expose": ["internal"]},
]


def config_with_skills(name: str = "worker", **extra) -> str:
    config = json.loads(agent_config(name, []))
    config.update(skills=SKILLS, **extra)
    return json.dumps(config)


@pytest.fixture
def agent(aws, monkeypatch):
    return make_agent(monkeypatch, "worker", delegates=[], extra_env={"AGENT_CONFIG": config_with_skills()})


def chat(agent, **body):
    return agent.api("chat_post", body=body)


def answered(agent, sid):
    agent.run_queue("turns")
    status, _, view = agent.api("session_get", SESSION_ID=sid)
    assert status == 200 and view["status"] == "idle", view
    return view


def model_calls(monkeypatch):
    """Count the model's converse calls (a handler skill makes none)."""
    from flightdeck.domain.scripted_model import ScriptedModel

    calls = []
    real = ScriptedModel._reply

    def counted(self, *args, **kwargs):
        calls.append(args)
        return real(self, *args, **kwargs)

    monkeypatch.setattr(ScriptedModel, "_reply", counted)
    return calls


def test_a_structured_call_to_a_handler_skill_is_answered_without_the_model(agent, monkeypatch):
    calls = model_calls(monkeypatch)
    sid = new_session_id()
    status, _, body = chat(agent, session_id=sid, skill="count_words", arguments={"text": "one two three"})
    assert status == 202, body
    view = answered(agent, sid)
    assert view["result"] == {"data": {"words": 3}, "schema_version": "1"}
    assert calls == []  # no model call
    assert view["messages"][0]["content"][0]["text"] == 'skill:count_words {"text":"one two three"}'


def test_the_text_form_of_a_structured_call_is_the_same_call(agent):
    sid = new_session_id()
    assert chat(agent, session_id=sid, content='skill:count_words {"text": "a b"}')[0] == 202
    assert answered(agent, sid)["result"]["data"] == {"words": 2}


def test_a_model_skill_answers_an_instance_of_its_output_schema(agent):
    sid = new_session_id()
    status, _, _ = chat(agent, session_id=sid, skill="get_quote", arguments={"product": "widget", "quantity": 3})
    assert status == 202
    result = answered(agent, sid)["result"]
    assert set(result["data"]) == {"product", "price"} and isinstance(result["data"]["price"], (int, float))


@pytest.mark.parametrize(
    "call, problem",
    [
        ({"skill": "get_quote", "arguments": {"quantity": 0}}, '"product" is a required property'),
        ({"skill": "get_quote", "arguments": {"product": "x", "colour": "red"}}, "Additional properties"),
        ({"skill": "get_quote", "arguments": {"product": 7}}, 'at /product: 7 is not of type "string"'),
        ({"skill": "no_such_skill", "arguments": {}}, "no skill 'no_such_skill' is offered here"),
        ({"content": "skill:get_quote {not json"}, "are not JSON"),
        ({"content": "skill:get_quote [1, 2]"}, "a JSON object, not list"),
    ],
)
def test_arguments_that_do_not_match_get_400_listing_what_is_wrong_and_store_nothing(agent, call, problem):
    sid = new_session_id()
    before = agent.table_items()
    status, _, body = chat(agent, session_id=sid, **call)
    assert (status, body["error"]["code"]) == (400, "invalid_arguments"), body
    assert problem in body["error"]["message"]
    assert agent.table_items() == before and agent.bodies("turns") == []


@pytest.mark.parametrize(
    "response_schema",
    [
        {"pages": "number", "issues": "string[]"},
        {"type": "object", "properties": {"pages": {"type": "number"}, "issues": {"type": "array"}}},
        {"$schema": "https://json-schema.org/draft/2020-12/schema", "type": "object", "required": ["pages"]},
    ],
)
def test_a_caller_s_response_schema_shapes_the_answer_in_either_form(agent, response_schema):
    sid = new_session_id()
    assert chat(agent, session_id=sid, content="review the launch plan", responseSchema=response_schema)[0] == 202
    result = answered(agent, sid)["result"]
    assert result["schema_version"] == "1" and "schema_mismatch" not in result, result
    assert isinstance(result["data"], dict)


def test_an_answer_that_does_not_match_is_returned_marked_never_dropped(agent):
    sid = new_session_id()
    schema = {"pages": "number"}
    assert chat(agent, session_id=sid, content="review it !prose", response_schema=schema)[0] == 202
    result = answered(agent, sid)["result"]
    assert result["schema_mismatch"] is True and result["errors"] == ["the answer is not JSON"]
    assert result["raw"].startswith("[worker] Task:")


@pytest.mark.parametrize(
    "schema, problem",
    [
        ({"$ref": "https://attacker.example/schema.json"}, "is not local"),
        ({"type": "object", "properties": {"a": {"$ref": "http://127.0.0.1:9/x"}}}, "is not local"),
        ({"a": "strng"}, "unknown type 'strng'"),
        ({"type": "nope"}, "not a valid JSON Schema"),
        ({"type": "object", "properties": {f"p{i}": {"type": "string"} for i in range(600)}}, "bytes; at most"),
        (json.loads('{"a":' * 14 + '"number"' + "}" * 14), "deeper than 12"),
        ("number[", "unknown type"),
    ],
)
def test_a_hostile_response_schema_is_400_and_never_fetched(agent, schema, problem):
    sid = new_session_id()
    before = agent.table_items()
    status, _, body = chat(agent, session_id=sid, content="x", responseSchema=schema)
    assert (status, body["error"]["code"]) == (400, "invalid_response_schema"), body
    assert problem in body["error"]["message"]
    assert agent.table_items() == before


def test_a_recursive_local_ref_is_a_schema_like_any_other(agent):
    schema = {
        "$defs": {"node": {"type": "object", "properties": {"next": {"$ref": "#/$defs/node"}}}},
        "$ref": "#/$defs/node",
    }
    sid = new_session_id()
    assert chat(agent, session_id=sid, content="walk the list", responseSchema=schema)[0] == 202
    assert "data" in answered(agent, sid)["result"]


def test_the_card_publishes_the_contracts_of_exposed_skills_only(agent):
    status, _, card = agent.api("agent_card_get")
    assert status == 200
    assert [s["id"] for s in card["skills"]] == ["count_words", "get_quote"]  # secret_sauce is internal
    [extension] = [e for e in card["capabilities"]["extensions"] if e["uri"].endswith(":skill-contracts:v1")]
    assert extension["uri"] == "urn:flightdeck:a2a:ext:skill-contracts:v1" and extension["required"] is False
    contracts = extension["params"]["skills"]
    assert contracts["get_quote"] == {"inputSchema": QUOTE_IN, "outputSchema": QUOTE_OUT, "structured": True}
    assert contracts["count_words"]["handler"] is True and "inputSchema" in contracts["count_words"]
    quote = next(s for s in card["skills"] if s["id"] == "get_quote")
    assert quote["examples"] == ['skill:get_quote {"product":"widget","quantity":2}']


def test_an_internal_skill_is_called_on_the_agent_s_own_api(agent):
    sid = new_session_id()
    assert chat(agent, session_id=sid, skill="secret_sauce", arguments={})[0] == 202
