"""Skills with contracts over A2A v0.3 (issue 25), through the real handlers on moto.

Server: message/send takes a structured call (a data part {skill, arguments}, or the text `skill:<id> {json}`)
checked against the skill's input schema before anything is stored, a responseSchema in the request's or the
message's metadata, a timeout_seconds; the answer of a task held to a schema is a data part beside the text,
or the text with the mismatch marked; tasks/get and push bodies alike.
Client: a tool built from an A2A peer's card sends its call as a data part, the caller's response_schema in
message.metadata, and a data answer is recorded as its JSON.
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from a2a import types as sdk

from tests.integration.test_a2a_client import CARD_PATH, A2APeer, _result, _task
from tests.integration.test_a2a_server import Webhook, err, ok, rpc
from tests.integration.test_skills_api import QUOTE_IN, QUOTE_OUT, config_with_skills, model_calls
from tests.support.harness import make_agent, new_session_id


@pytest.fixture
def agent(aws, monkeypatch):
    return make_agent(monkeypatch, "worker", delegates=[], extra_env={"AGENT_CONFIG": config_with_skills()})


def message(*parts, **extra):
    return {"kind": "message", "role": "user", "messageId": f"m-{time.monotonic_ns()}", "parts": list(parts), **extra}


def data(value):
    return {"kind": "data", "data": value}


def text(value):
    return {"kind": "text", "text": value}


def send(agent, *parts, metadata=None, message_metadata=None, configuration=None):
    params = {"message": message(*parts, **({"metadata": message_metadata} if message_metadata else {}))}
    if metadata is not None:
        params["metadata"] = metadata
    if configuration is not None:
        params["configuration"] = configuration
    return rpc(agent, "message/send", params)


def answered(agent, task):
    assert agent.run_queue("turns") == {"batchItemFailures": []}
    done = ok(rpc(agent, "tasks/get", {"id": task["id"]}))
    sdk.Task.model_validate(done)
    assert done["status"]["state"] == "completed", done
    [artifact] = done["artifacts"]
    return artifact["parts"]


# --- the server: structured calls, responseSchema, the answer as data --------------------------------------


def test_a_data_part_call_to_a_handler_skill_answers_data_without_the_model(agent, monkeypatch):
    calls = model_calls(monkeypatch)
    task = ok(send(agent, data({"skill": "count_words", "arguments": {"text": "one two three"}})))
    assert task["history"][0]["parts"] == [data({"skill": "count_words", "arguments": {"text": "one two three"}})]
    parts = answered(agent, task)
    assert parts == [data({"words": 3}), text('{"words": 3}')]
    assert calls == []
    session = agent.api("session_get", SESSION_ID=task["contextId"])[2]
    assert session["messages"][0]["content"][0]["text"] == 'skill:count_words {"text":"one two three"}'


def test_the_text_form_of_a_call_is_the_same_call(agent):
    task = ok(send(agent, text('skill:count_words {"text": "a b"}')))
    assert answered(agent, task)[0] == data({"words": 2})


def test_a_model_skill_answers_data_matching_its_output_schema(agent):
    task = ok(send(agent, data({"skill": "get_quote", "arguments": {"product": "widget", "quantity": 2}})))
    [answer, rendering] = answered(agent, task)
    assert answer["kind"] == "data" and set(answer["data"]) == {"product", "price"}
    assert json.loads(rendering["text"]) == answer["data"]


@pytest.mark.parametrize(
    "parts, problem",
    [
        ([data({"skill": "get_quote", "arguments": {"quantity": 0}})], '"product" is a required property'),
        ([data({"skill": "get_quote", "arguments": {"product": 7}})], 'at /product: 7 is not of type "string"'),
        ([data({"skill": "get_quote", "arguments": [1]})], "arguments must be a JSON object"),
        ([data({"skill": "no_such_skill"})], "no skill 'no_such_skill' is offered here"),
        # Exposed to the agent's own users only: over A2A it is not offered.
        ([data({"skill": "secret_sauce", "arguments": {}})], "no skill 'secret_sauce' is offered here"),
        ([data({"skill": "x" * 65})], "message.parts.0: skill"),
        ([text("skill:get_quote {not json")], "are not JSON"),
        ([text("see below"), text('skill:get_quote {"product": 1}')], "message.parts.1:"),
        (
            [data({"skill": "count_words", "arguments": {"text": "a"}}), text('skill:count_words {"text": "b"}')],
            "one structured call per message",
        ),
    ],
)
def test_a_call_that_does_not_match_is_invalid_params_listing_what_is_wrong_and_stores_nothing(agent, parts, problem):
    before = agent.table_items()
    error = err(send(agent, *parts), -32602)
    assert problem in error["message"], error
    assert agent.table_items() == before and agent.bodies("turns") == []


def test_the_problems_are_listed_in_the_error_s_data(agent):
    error = err(send(agent, data({"skill": "get_quote", "arguments": {"product": 7, "colour": "red"}})), -32602)
    assert error["data"]["part"] == 0 and len(error["data"]["problems"]) == 2


def test_a_data_part_that_is_no_call_is_data_for_the_model(agent):
    task = ok(send(agent, data({"skill": "count_words", "text": "not a call: another key"})))
    session = agent.api("session_get", SESSION_ID=task["contextId"])[2]
    assert json.loads(session["messages"][0]["content"][0]["text"])["text"] == "not a call: another key"
    assert answered(agent, task)[0]["kind"] == "text"  # no contract: the text, as before


@pytest.mark.parametrize(
    "where",
    [
        {"metadata": {"responseSchema": {"pages": "number", "issues": "string[]"}}},
        {"message_metadata": {"responseSchema": {"pages": "number", "issues": "string[]"}}},
        {"metadata": {"response_schema": {"pages": "number", "issues": "string[]"}}},
        {"message_metadata": {"response_schema": {"type": "object", "required": ["pages", "issues"]}}},
    ],
)
def test_a_response_schema_in_either_metadata_shapes_the_answer_as_data(agent, where):
    task = ok(send(agent, text("review the launch plan"), **where))
    [answer, rendering] = answered(agent, task)
    assert answer["kind"] == "data" and {"pages", "issues"} <= set(answer["data"]), answer
    assert rendering["kind"] == "text" and json.loads(rendering["text"]) == answer["data"]


def test_an_answer_that_does_not_match_carries_the_text_and_the_mismatch_marked(agent):
    task = ok(send(agent, text("review it !prose"), metadata={"responseSchema": {"pages": "number"}}))
    [raw, marked] = answered(agent, task)
    assert raw["kind"] == "text" and raw["text"].startswith("[worker] Task:")
    assert marked["data"] == {
        "schema_mismatch": True,
        "errors": ["the answer is not JSON"],
        "raw": raw["text"],
        "schema_version": "1",
    }


def _counting_server():
    hits: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 - stdlib name
            hits.append(self.path)
            self.send_response(200)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"{}")

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    return server, hits


@pytest.mark.parametrize(
    "schema, problem",
    [
        ({"$ref": "REMOTE/schema.json"}, "is not local"),
        ({"type": "object", "properties": {"a": {"$ref": "REMOTE/x"}}}, "is not local"),
        ({"type": "object", "properties": {f"p{i}": {"type": "string"} for i in range(600)}}, "bytes; at most"),
        (json.loads('{"a":' * 14 + '"number"' + "}" * 14), "deeper than 12"),
        ({"type": "nope"}, "not a valid JSON Schema"),
        ("number[", "unknown type"),
    ],
)
def test_a_hostile_response_schema_is_invalid_params_never_fetched_nothing_stored(agent, schema, problem):
    server, hits = _counting_server()
    remote = f"http://127.0.0.1:{server.server_port}"
    try:
        schema = json.loads(json.dumps(schema).replace("REMOTE", remote))
        before = agent.table_items()
        for where in ({"metadata": {"responseSchema": schema}}, {"message_metadata": {"responseSchema": schema}}):
            error = err(send(agent, text("x"), **where), -32602)
            assert problem in error["message"] and "responseSchema" in error["message"], error
        assert agent.table_items() == before and hits == []
    finally:
        server.shutdown()
        server.server_close()


def test_two_different_response_schemas_are_refused(agent):
    before = agent.table_items()
    error = err(
        send(
            agent,
            text("x"),
            metadata={"responseSchema": {"a": "number"}},
            message_metadata={"responseSchema": {"b": "number"}},
        ),
        -32602,
    )
    assert "differ" in error["message"] and agent.table_items() == before


def test_timeout_seconds_bounds_the_request_and_is_kept_with_the_task(agent):
    from flightdeck.domain.a2a.ports import parse_task_id

    task = ok(send(agent, text("x"), metadata={"timeout_seconds": 5}))
    _, key = parse_task_id(task["id"])
    item = agent.item(f"S#{task['contextId']}", f"A2A#TASK#{key}")
    # Computed when the message was checked, just before the task was stored.
    assert 4_000 <= json.loads(item["contract"])["deadline_ms"] - int(item["created_ms"]) <= 5_000
    for bad in (0, -1, "5", True, 8 * 86_400):
        before = agent.table_items()
        assert (
            "timeout_seconds"
            in err(send(agent, text("x"), message_metadata={"timeout_seconds": bad}), -32602)["message"]
        )
        assert agent.table_items() == before


def test_a_message_sent_again_is_answered_with_its_task_and_keeps_its_contract(agent):
    params = {"message": message(data({"skill": "count_words", "arguments": {"text": "a b c"}}))}
    first = ok(rpc(agent, "message/send", params))
    again = ok(rpc(agent, "message/send", params))
    assert again["id"] == first["id"]
    assert answered(agent, first)[0] == data({"words": 3})


@pytest.fixture
def hook():
    p = Webhook()
    yield p
    p.close()


def test_the_push_body_carries_the_same_answer_as_tasks_get(aws, monkeypatch, hook):
    agent = make_agent(
        monkeypatch,
        "worker",
        delegates=[],
        allow=f"hooks:{hook.url}/hooks",
        extra_env={"AGENT_CONFIG": config_with_skills()},
    )
    config = {"pushNotificationConfig": {"url": f"{hook.url}/hooks/a2a"}}
    task = ok(send(agent, data({"skill": "count_words", "arguments": {"text": "x y"}}), configuration=config))
    parts = answered(agent, task)
    assert agent.run_queue("delivery") == {"batchItemFailures": []}
    [pushed] = hook.requests
    assert pushed["body"]["artifacts"][0]["parts"] == parts == [data({"words": 2}), text('{"words": 2}')]
    sdk.Task.model_validate(pushed["body"])


def test_a_question_s_answer_is_held_to_the_task_s_schema(agent):
    task = ok(send(agent, text("?ask which year? review the plan"), metadata={"responseSchema": {"year": "integer"}}))
    agent.run_queue("turns")
    asked = ok(rpc(agent, "tasks/get", {"id": task["id"]}))
    assert asked["status"]["state"] == "input-required"
    ok(rpc(agent, "message/send", {"message": message(text("2024"), taskId=task["id"])}))
    [answer, _] = answered(agent, task)
    assert answer["kind"] == "data" and isinstance(answer["data"]["year"], int)


# --- the client: a tool from an A2A peer's card --------------------------------------------------------


class SkilledPeer(A2APeer):
    """A scripted A2A peer whose card publishes get_quote's contract (the skill-contracts extension)."""

    def card(self):
        card = super().card()
        card["skills"] = [{"id": "get_quote", "name": "Get a quote", "description": "Price a product", "tags": []}]
        card["capabilities"]["extensions"] = [
            {
                "uri": "urn:flightdeck:a2a:ext:skill-contracts:v1",
                "params": {"skills": {"get_quote": {"inputSchema": QUOTE_IN, "outputSchema": QUOTE_OUT}}},
            }
        ]
        return card


@pytest.fixture
def peer():
    p = SkilledPeer()
    yield p
    p.close()


@pytest.fixture
def delegating(aws, monkeypatch, peer):
    from flightdeck.domain.a2a.client import clear_card_cache
    from flightdeck.domain.skills.peers import clear_cache

    clear_card_cache()
    clear_cache()
    config = {
        "name": "orchestrator",
        "model": {"provider": "local"},
        "delegates": [{"agent": "peer", "protocol": "a2a", "card_url": f"{peer.url}{CARD_PATH}"}],
    }
    yield make_agent(
        monkeypatch,
        delegates=[],
        allow=f"peer:{peer.url},orchestrator:http://127.0.0.1:9",
        extra_env={"AGENT_CONFIG": json.dumps(config)},
    )
    clear_cache()


def _completed_with_data(body, value):
    task = _task("completed", json.dumps(value))
    task["artifacts"][0]["parts"] = [data(value), text(json.dumps(value))]
    return 200, _result(body, task)


def _delegate(agent, content):
    sid = new_session_id()
    assert agent.api("chat_post", body={"session_id": sid, "content": content})[0] == 202
    agent.run_queue("turns")
    assert agent.run_queue("dispatch") == {"batchItemFailures": []}
    agent.run_queue("turns")
    session = agent.api("session_get", SESSION_ID=sid)[2]
    assert session["status"] == "idle", session
    return session


def test_a_tool_from_an_a2a_peer_s_card_sends_a_data_part_call_and_records_its_data_as_json(delegating, peer):
    answer = {"product": "widget", "price": 9.5}
    peer.rpc = lambda body: _completed_with_data(body, answer)
    session = _delegate(delegating, '@peer:get_quote {"product": "widget"}')
    [use] = [b["toolUse"] for m in session["messages"] for b in m["content"] if "toolUse" in b]
    assert (use["name"], use["input"]) == ("peer__get_quote", {"product": "widget"})
    [post] = peer.posts
    sent = post["body"]["params"]
    assert sent["message"]["parts"] == [data({"skill": "get_quote", "arguments": {"product": "widget"}})]
    assert "application/json" in sent["configuration"]["acceptedOutputModes"]
    [result] = [b["toolResult"] for m in session["messages"] for b in m["content"] if "toolResult" in b]
    assert result["status"] == "success" and json.loads(result["content"][0]["text"]) == answer


def test_a_free_text_delegation_sends_its_response_schema_in_the_message_metadata(delegating, peer):
    peer.rpc = lambda body: _completed_with_data(body, {"pages": 3})
    session = _delegate(delegating, '@peer review the plan => {"pages": "number"}')
    [post] = peer.posts
    sent = post["body"]["params"]["message"]
    assert sent["parts"] == [text("review the plan")]
    assert sent["metadata"] == {"responseSchema": {"pages": "number"}}
    [result] = [b["toolResult"] for m in session["messages"] for b in m["content"] if "toolResult" in b]
    assert json.loads(result["content"][0]["text"]) == {"pages": 3}


def test_a_peer_s_marked_mismatch_reaches_our_model_marked_against_our_schema(delegating, peer):
    marked = {
        "schema_mismatch": True,
        "errors": ["the answer is not JSON"],
        "raw": "about three",
        "schema_version": "1",
    }

    def rpc_answer(body):
        task = _task("completed", "about three")
        task["artifacts"][0]["parts"] = [text("about three"), data(marked)]
        return 200, _result(body, task)

    peer.rpc = rpc_answer
    session = _delegate(delegating, '@peer review the plan => {"pages": "number"}')
    [result] = [b["toolResult"] for m in session["messages"] for b in m["content"] if "toolResult" in b]
    assert result["content"][0]["text"] == "about three"  # stored as it came: the raw answer
    # What the model read: the raw text held to our schema (flightdeck.domain.skills.peers.mark_results).
    assert "schema_mismatch" in session["messages"][-1]["content"][0]["text"]
