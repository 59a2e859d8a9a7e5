"""Delegation tools built from a peer's card (issue 25): two agents on the local stack, real HTTP on
loopback. The orchestrator reads the worker's card; each worker skill with a schema becomes a tool of
its own (`worker__<skill>`), called as a structured call; the answer comes back as JSON, held to the
skill's output schema (or the caller's response_schema), and a mismatch is marked, never dropped.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import requests

from flightdeck.local.stack import LocalStack
from tests.integration.test_two_agents import AS_USER, USER_TOKEN, tool_results, wait_idle

pytestmark = pytest.mark.slow

ORCHESTRATOR_TOKEN = "fdp_orchestrator_test-only-orchestrator-token-0123456789"
CONFIG = f"""
[agents.orchestrator]
allow = ["worker"]
callback_secret = "test-only-orchestrator-secret-0123456789abcdef"
[[agents.orchestrator.delegates]]
agent = "worker"
[agents.orchestrator.peers]
user = "{USER_TOKEN}"

[agents.worker]
allow = ["orchestrator"]
callback_secret = "test-only-worker-secret-0123456789abcdef01234"
[agents.worker.peers]
orchestrator = "{ORCHESTRATOR_TOKEN}"
user = "{USER_TOKEN}"
[[agents.worker.skills]]
id = "count_words"
name = "Count words"
handler = "word_count"
[[agents.worker.skills]]
id = "get_quote"
name = "Get a quote"
description = "Price a product"
input_schema = {{ type = "object", properties = {{ product = {{ type = "string" }} }}, required = ["product"] }}
output_schema = {{ type = "object", properties = {{ product = {{ type = "string" }}, price = {{ type = "number" }} }}, required = ["price"] }}
[[agents.worker.skills]]
id = "summarise"
description = "Summarise a text (no schema: reached through the free-text tool)"
"""


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    path = Path(tmp_path_factory.mktemp("skills")) / "agents.toml"
    path.write_text(CONFIG)
    with LocalStack(path, relay=None) as local:
        yield local


def chat(stack, content, agent="orchestrator", **fields):
    resp = requests.post(
        f"{stack.urls[agent]}/api/chat", json={"content": content, **fields}, headers=AS_USER, timeout=10
    )
    assert resp.status_code == 202, resp.text
    return resp.json()["session_id"]


def tool_uses(session):
    return [b["toolUse"] for m in session["messages"] for b in m["content"] if "toolUse" in b]


def test_a_skill_of_the_peer_s_card_is_a_tool_called_as_a_structured_call(stack):
    sid = chat(stack, '@worker:count_words {"text": "one two three four"}')
    session = wait_idle(stack, sid)
    [use] = tool_uses(session)
    assert (use["name"], use["input"]) == ("worker__count_words", {"text": "one two three four"})
    [result] = tool_results(session)
    assert result["status"] == "success" and json.loads(result["content"][0]["text"]) == {"words": 4}


def test_a_model_skill_answers_json_held_to_its_output_schema(stack):
    sid = chat(stack, '@worker:get_quote {"product": "widget"}')
    session = wait_idle(stack, sid)
    [result] = tool_results(session)
    answer = json.loads(result["content"][0]["text"])
    assert set(answer) == {"product", "price"} and isinstance(answer["price"], (int, float))


def test_the_caller_s_response_schema_travels_with_a_free_text_delegation(stack):
    sid = chat(stack, '@worker review the launch plan => {"pages": "number", "issues": "string[]"}')
    session = wait_idle(stack, sid)
    [use] = tool_uses(session)
    assert use["input"]["response_schema"] == {"pages": "number", "issues": "string[]"}
    [result] = tool_results(session)
    answer = json.loads(result["content"][0]["text"])
    assert isinstance(answer["pages"], (int, float)) and isinstance(answer["issues"], list)


def test_an_answer_that_does_not_match_reaches_the_model_marked(stack):
    sid = chat(stack, '@worker review it !prose => {"pages": "number"}')
    session = wait_idle(stack, sid)
    # What is stored is what came back; the model reads it held to the schema (flightdeck.domain.skills.peers).
    assert "schema_mismatch" in session["messages"][-1]["content"][0]["text"]
    [result] = tool_results(session)
    assert result["content"][0]["text"].startswith("[worker] Task:")


def test_a_call_with_wrong_arguments_is_refused_by_the_peer_and_the_model_hears_why(stack):
    sid = chat(stack, '@worker:get_quote {"colour": "red"}')
    session = wait_idle(stack, sid)
    [result] = tool_results(session)
    assert result["status"] == "error" and "product" in result["content"][0]["text"]


# --- flightdeck peers discover ------------------------------------------------------------------------


def discover(capsys, *args):
    from flightdeck.cli import main

    code = main(["peers", "discover", *args])
    return code, capsys.readouterr().out


def test_discover_reads_a_good_card_prints_its_skills_with_schemas_and_the_snippet(stack, capsys, tmp_path):
    base = stack.urls["worker"]
    config = tmp_path / "mine.toml"
    config.write_text(f'[agents.mine]\nallowed_hosts = {{ partner = "{base}" }}\ncallback_secret = "{"s" * 40}"\n')
    code, out = discover(capsys, base, "--config", str(config), "--agent", "mine")
    assert code == 0, out
    assert "skill get_quote (structured): Price a product" in out
    assert '"required": ["product"]' in out and "skill summarise (free text)" in out
    assert "security: peerToken: http bearer" in out and "allowed: under agent mine's allowed_hosts" in out
    assert f'card_url = "{base}/.well-known/agent-card.json"' in out and 'protocol = "a2a"' in out
    code, out = discover(capsys, base, "--json")
    assert code == 0 and json.loads(out)["ok"] is True


class _CardServer:
    def __init__(self, card):
        import threading
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        body = json.dumps(card).encode()

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802 - stdlib name
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_port}"

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def test_discover_names_what_is_wrong_with_a_bad_card(capsys):
    bad = {
        "protocolVersion": "0.1",
        "name": "shady",
        "skills": [{"name": "no id"}, {"id": "x"}],
        "capabilities": {
            "extensions": [
                {
                    "uri": "urn:flightdeck:a2a:ext:skill-contracts:v1",
                    "params": {"skills": {"x": {"inputSchema": {"$ref": "https://attacker.example/s.json"}}}},
                }
            ]
        },
    }
    server = _CardServer(bad)
    try:
        code, out = discover(capsys, server.url)
    finally:
        server.close()
    assert code == 1
    assert "problem: protocol version 0.1" in out and "problem: no JSON-RPC endpoint" in out
    assert "problem: skills[0] has no id" in out and "is not local" in out
    assert "To add it as a delegate" not in out


def test_discover_says_when_a_card_lies_outside_the_agent_s_allowlist(stack, capsys, tmp_path):
    config = tmp_path / "mine.toml"
    config.write_text(
        f'[agents.mine]\nallowed_hosts = {{ other = "http://127.0.0.1:9" }}\ncallback_secret = "{"s" * 40}"\n'
    )
    code, out = discover(capsys, stack.urls["worker"], "--config", str(config), "--agent", "mine")
    assert code == 1 and "not allowed: " in out and "allowed_hosts" in out
