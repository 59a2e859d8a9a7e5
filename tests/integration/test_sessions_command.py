"""`flightdeck sessions list|show|cancel` and the chat REPL's /cancel, /raw and unknown commands (issue 29),
against scripted agents on loopback HTTP (what the public API answers, fixed): fast, no stack.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
import requests

from flightdeck import cli
from flightdeck.chat_client.command import repl
from flightdeck.chat_client.sessions import SessionChat
from flightdeck.chat_client.transport import Console, Polling

PEER_SESSION = "9b2f0c1e-0000-5000-8000-000000000001"
DELEGATOR_TOKEN = "fdp_orchestrator_" + "a" * 32


def sse(**event: Any) -> str:
    return f"id: {event['id']}\nevent: {event['kind']}\ndata: {json.dumps(event)}\n\n"


class Agent:
    """An agent scripted by route: path -> (status, body); an events body (str) is sent as an event stream.
    Each request's method, path and bearer token is kept."""

    def __init__(self, name: str, routes: dict[str, tuple[int, Any]], owner: str = "t"):
        self.seen: list[tuple[str, str, str]] = []
        agent = self

        class Handler(BaseHTTPRequestHandler):
            def _answer(self) -> None:
                token = self.headers.get("Authorization", "").removeprefix("Bearer ")
                agent.seen.append((self.command, self.path, token))
                path = self.path.split("?")[0] if self.path.startswith("/api/sessions?") else self.path
                status, body = routes.get(f"{self.command} {path}", (404, {"error": {"code": "not_found"}}))
                if path == "/health":
                    status, body = 200, {"status": "ok", "agent": name}
                elif token != owner:
                    status, body = 404, {"error": {"code": "session_not_found", "message": "no such session"}}
                is_stream = isinstance(body, str)
                data = (body if is_stream else json.dumps(body)).encode()
                self.send_response(status)
                self.send_header("Content-Type", "text/event-stream" if is_stream else "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = _answer  # noqa: N815

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_port}"


@pytest.fixture
def agents():
    timeline = "".join(
        [
            sse(id="input.1", kind="message", text="@maps chart the bay", at="2025-01-31T12:00:00.100Z"),
            sse(
                id="think.1",
                kind="thinking",
                think=1,
                at="2025-01-31T12:00:00.120Z",
                duration_ms=830,
                tokens_in=41,
                tokens_out=12,
                tokens_cache_read=1500,
                tokens_cache_write=90,
                model="anthropic.claude-sonnet-4-20250514-v1:0",
                cost_usd=0.000913,
                price={
                    "model": "anthropic.claude-sonnet-4-20250514-v1:0",
                    "region": "us-east-1",
                    "recorded": "2026-12-04",
                },
            ),
            sse(
                id="tool.t1",
                kind="delegating",
                agent="maps",
                task="chart the bay",
                peer_session_id=PEER_SESSION,
                trace_id="4bf92f3577b34da6a3ce929d0e0e4736",
                at="2025-01-31T12:00:00.950Z",
            ),
            sse(
                id="result.t1",
                kind="callback_accepted",
                agent="maps",
                status="success",
                text=json.dumps({"status": "input_required", "question": "which bay?", "context_id": PEER_SESSION}),
                question="which bay?",
                latency_ms=1250,
                at="2025-01-31T12:00:02.200Z",
            ),
            sse(
                id="idle.1",
                kind="idle",
                turn=1,
                iteration=2,
                tokens={"input": 60, "output": 30, "cache_read": 3000, "cache_write": 180, "thinks": 2},
                model="amazon.nova-pro-v1:0",
                outcome="input_required",
                at="2025-01-31T12:00:03.000Z",
            ),
        ]
    )
    lane = sse(id="think.1", kind="thinking", think=1, at="2025-01-31T12:00:01.000Z", duration_ms=400) + sse(
        id="question.1", kind="question", think=1, text="which bay?", at="2025-01-31T12:00:01.400Z"
    )
    orchestrator = Agent(
        "orchestrator",
        {
            "GET /api/sessions": (
                200,
                {
                    "sessions": [
                        {
                            "session_id": "s-1",
                            "status": "idle",
                            "created_at": 1738324800100,
                            "updated_at": 1738324803000,
                        }
                    ],
                    "next_cursor": "c2",
                },
            ),
            "GET /api/sessions/s-1/events?follow=false": (200, timeline),
            "POST /api/sessions/s-1/cancel": (200, {"session_id": "s-1", "status": "canceled", "iteration": 2}),
            "POST /api/sessions/s-2/cancel": (409, {"error": {"code": "session_idle", "message": "idle"}}),
        },
    )
    # The delegate's session is the delegator's: only its token (from the deployment file) reads it.
    maps = Agent("maps", {f"GET /api/sessions/{PEER_SESSION}/events?follow=false": (200, lane)}, owner=DELEGATOR_TOKEN)
    yield orchestrator, maps
    for a in (orchestrator, maps):
        a.server.shutdown()
        a.server.server_close()


def run(capsys, *args: str) -> tuple[int, str, str]:
    code = cli.main(["sessions", *args])
    out, err = capsys.readouterr()
    return code, out, err


def test_list_prints_a_page_and_the_next_cursor(agents, capsys):
    orchestrator, _ = agents
    code, out, _ = run(capsys, "list", orchestrator.url, "--token", "t", "--limit", "5")
    assert code == 0
    assert "s-1" in out and "idle" in out and "2025-01-31T12:00:00.100Z" in out
    assert "--cursor c2" in out
    assert orchestrator.seen[0][:2] == ("GET", "/api/sessions?limit=5")


def test_show_replays_with_times_latencies_and_the_readable_delegates_lane(agents, capsys, tmp_path):
    orchestrator, maps = agents
    code, out, _ = run(capsys, "show", orchestrator.url, "s-1", "--token", "t")
    assert code == 0
    lines = out.splitlines()
    assert lines[0] == "session s-1 at orchestrator"
    think = "think 1 (830 ms, tokens 41 in / 12 out, 1500 cache read / 90 cache write, $0.000913 list-price estimate"
    assert any(line.startswith("12:00:00.120") and think in line for line in lines)
    assert "(anthropic.claude-sonnet-4-20250514-v1:0, us-east-1 prices of 2026-12-04))" in out
    # The session's tokens, summed (issue 37), its outcome, and no cost for a model without a list price.
    assert "tokens, the session: 60 in, 30 out, 3000 cache read, 180 cache write (2 think(s))" in out
    assert "idle, input required (1 message(s), 2 think iteration(s))" in out
    assert "cost, the session: no list price for amazon.nova-pro-v1:0" in out
    assert any("+1.25 s" in line and "maps asks: which bay?" in line for line in lines)
    assert "trace 4bf92f3577b34da6a3ce929d0e0e4736" in out
    assert "┌ maps" not in out  # no --peer: the delegate's answer only

    # With the delegate's URL, but a token that does not own its session there: still its answer only.
    code, out, _ = run(capsys, "show", orchestrator.url, "s-1", "--token", "t", "--peer", f"maps={maps.url}")
    assert code == 0 and "┌ maps" not in out

    config = tmp_path / "agents.toml"
    config.write_text(
        '[agents.orchestrator]\nallow = ["maps"]\ndelegates = [{agent = "maps"}]\n'
        f'[agents.maps]\npeers = {{orchestrator = "{DELEGATOR_TOKEN}"}}\n'
    )
    args = ["show", orchestrator.url, "s-1", "--token", "t", "--peer", f"maps={maps.url}", "--config", str(config)]
    code, out, _ = run(capsys, *args)
    assert code == 0, out
    lane = out[out.index("┌ maps") :]
    assert PEER_SESSION in lane and "│ think 1 (400 ms" in lane and "│ question: which bay?" in lane
    assert maps.seen[-1][2] == DELEGATOR_TOKEN


def test_cancel_cancels_a_busy_session_and_says_when_there_is_nothing_to_cancel(agents, capsys):
    orchestrator, _ = agents
    code, out, _ = run(capsys, "cancel", orchestrator.url, "s-1", "--token", "t")
    assert (code, out.strip()) == (0, "session s-1 canceled (think iteration 2)")
    code, out, _ = run(capsys, "cancel", orchestrator.url, "s-2", "--token", "t")
    assert (code, out.strip()) == (0, "session s-2 is idle: nothing to cancel")


def test_the_repl_cancels_prints_the_raw_answer_and_refuses_unknown_commands(agents, capsys):
    orchestrator, _ = agents
    http = requests.Session()
    chat = SessionChat(orchestrator.url, "t", "s-1", Console(), Polling(wait_s=5), http)
    said: list[str] = []
    chat.say = lambda text: said.append(text) or 0  # what would go to the model
    lines = iter(["/cancel", "/raw", "/cancle", "/etc/hosts is a path", "//help me", "hello"])

    def read() -> str:
        try:
            return next(lines)
        except StopIteration:
            raise EOFError from None

    assert repl(chat, Console(), read, "the session keeps working") == 0
    out, err = capsys.readouterr()
    assert ("POST", "/api/sessions/s-1/cancel", "t") in orchestrator.seen
    assert "session s-1 canceled" in err
    assert json.loads(out) == {"session_id": "s-1", "status": "canceled", "iteration": 2}  # /raw
    assert "unknown command /cancle: the commands are /card, /raw, /cancel, /help" in err
    assert said == ["/etc/hosts is a path", "/help me", "hello"]  # a path and an escaped line are messages


def test_a_delegates_question_is_drawn_as_a_question():
    from flightdeck.chat_client.session_view import describe_result

    asked = {"status": "input_required", "question": "which year?", "context_id": "c-1"}
    result = {"status": "success", "content": [{"text": json.dumps(asked)}]}
    assert describe_result("worker", result) == "worker asks: which year?"
