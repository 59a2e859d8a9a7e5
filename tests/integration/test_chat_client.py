"""`flightdeck chat` as a user runs it (cli.main, stdin fed, stdout/stderr read), over real loopback HTTP:

* against our agents: the bundled two-agent example on the local stack (moto, the real handlers,
  every hop through the local gateway), seen through a proxy that records (and may cut) what the
  client asks: a delegation's timeline from the events stream and its answer as it is written, a
  broken stream reconnected, a REPL whose follow-up goes into the same session, a follow-up that
  waits for a busy session, clear auth and URL errors; the fallback to polling against an agent
  with STREAMING=off (in-process gateway) and scripted agents (no events route, streams that
  break, garbage, a queued message);
* against a2a-sdk agents served by uvicorn: a conversation by contextId, an input-required round by
  taskId, a streamed answer (message/stream), the fallback to message/send, Ctrl-C as tasks/cancel,
  and an agent that cannot cancel.

Ctrl-C is the user's: stderr raises KeyboardInterrupt when the line the user reacts to is written.
"""

from __future__ import annotations

import asyncio
import io
import json
import re
import socket
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
import requests
import uvicorn
from a2a import types as sdk
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.apps import A2AStarletteApplication
from a2a.server.events import EventQueue
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.tasks import InMemoryTaskStore, TaskUpdater
from a2a.utils import new_task
from a2a.utils.errors import ServerError

from flightdeck import cli, config_file
from flightdeck.local.stack import LocalStack

pytestmark = pytest.mark.slow

# The example's LOCAL ONLY token of the orchestrator's `user` peer (examples/two-agents.toml).
USER_TOKEN = config_file.load(config_file.DEFAULT_CONFIG).agents["orchestrator"].users["user"]
WORKER_THINK_MS = 700  # long enough for a session to be seen busy
# The orchestrator's answer is written over this long: the events stream polls every 100 ms, and sends
# the text as it grows.
ORCHESTRATOR_THINK_MS = 500
STREAM_ENV = {"STREAM_POLL_INTERVAL_MS": "100"}


def chat(*args: str) -> int:
    return cli.main(["chat", *args])


class Typed(io.StringIO):
    """Lines typed at a terminal (piped stdin is one message: the REPL reads a terminal)."""

    def isatty(self) -> bool:
        return True


def _typed_line(prompt: str = "") -> str:
    line = sys.stdin.readline()
    if not line:
        raise EOFError
    return line.rstrip("\n")


def at_terminal(monkeypatch, stdin: io.StringIO) -> None:
    monkeypatch.setattr(sys, "stdin", stdin)
    monkeypatch.setattr("builtins.input", _typed_line)  # no prompt on stdout, as a test reads it


def feed(monkeypatch, *lines: str) -> None:
    at_terminal(monkeypatch, Typed("".join(f"{line}\n" for line in lines)))


class CtrlCWhen(io.StringIO):
    """The user's stderr: they press Ctrl-C as soon as `trigger` is written (once)."""

    def __init__(self, trigger: str):
        super().__init__()
        self.trigger, self.pressed = trigger, False

    def write(self, text: str) -> int:
        written = super().write(text)
        if not self.pressed and self.trigger in text:
            self.pressed = True
            raise KeyboardInterrupt
        return written


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


# --- our agents, on the local stack ------------------------------------------------------------


class Proxy:
    """Loopback HTTP in front of an agent: records each request (method, path) and relays each answer as it
    comes, an event stream chunk by chunk. `cut_at`: the next event stream to carry these bytes is broken
    off right after them (the connection closed mid-stream, as a network drop would)."""

    def __init__(self, target: str):
        self.target, self.requests, self.cut_at = target, [], None
        self.asked = threading.Condition()  # notified at each request
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _relay(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                with proxy.asked:
                    proxy.requests.append((self.command, self.path))
                    proxy.asked.notify_all()
                headers = {k: v for k, v in self.headers.items() if k.lower() not in ("host", "content-length")}
                with requests.request(
                    self.command, proxy.target + self.path, data=body, headers=headers, stream=True, timeout=60
                ) as answer:
                    self.send_response(answer.status_code)
                    for name, value in answer.headers.items():
                        if name.lower() not in ("content-length", "transfer-encoding", "connection", "date", "server"):
                            self.send_header(name, value)
                    if not answer.headers.get("Content-Type", "").startswith("text/event-stream"):
                        payload = answer.content
                        self.send_header("Content-Length", str(len(payload)))
                        self.end_headers()
                        self.wfile.write(payload)
                        return
                    self.send_header("Transfer-Encoding", "chunked")
                    self.end_headers()
                    seen = b""
                    for chunk in answer.iter_content(chunk_size=None):
                        cut, seen = proxy.cut_at, seen + chunk
                        if cut is not None and cut in seen:
                            proxy.cut_at = None
                            chunk = chunk[: max(0, len(chunk) - (len(seen) - seen.index(cut) - len(cut)))]
                            self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk) if chunk else b"")
                            self.wfile.flush()
                            self.close_connection = True  # no last chunk: the stream broke
                            return
                        self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                        self.wfile.flush()
                    self.wfile.write(b"0\r\n\r\n")

            do_GET = do_POST = _relay

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_port}"

    def paths(self, method: str = "GET") -> list[str]:
        return [path for m, path in self.requests if m == method]

    def wait_for(self, ending: str, timeout_s: float = 30.0) -> bool:
        """Until a request for a path ending so has come (whether it did)."""
        with self.asked:
            return self.asked.wait_for(lambda: any(p.endswith(ending) for _, p in self.requests), timeout_s)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class Screen:
    """A terminal: stdout and stderr written to one log, in order; stdout says it is a tty (so the client
    prints the answer as it is written)."""

    def __init__(self):
        self.log: list[tuple[str, str]] = []
        screen = self

        class Stream(io.StringIO):
            def __init__(self, name: str):
                super().__init__()
                self.name_ = name

            def write(self, text: str) -> int:
                screen.log.append((self.name_, text))
                return super().write(text)

            def isatty(self) -> bool:
                return self.name_ == "out"

        self.out, self.err = Stream("out"), Stream("err")


@pytest.fixture(scope="module")
def stack() -> Iterator[LocalStack]:
    deployment = config_file.load(config_file.DEFAULT_CONFIG)
    deployment.agents["worker"].model.think_delay_ms = WORKER_THINK_MS
    deployment.agents["orchestrator"].model.think_delay_ms = ORCHESTRATOR_THINK_MS
    with LocalStack(deployment, relay=None, extra_env=STREAM_ENV) as running:
        yield running


@pytest.fixture
def proxy(stack) -> Iterator[Proxy]:
    seen = Proxy(stack.urls["orchestrator"])
    yield seen
    seen.close()


@pytest.fixture
def orchestrator(proxy, monkeypatch) -> str:
    """The orchestrator's URL, through the proxy."""
    monkeypatch.delenv("FLIGHTDECK_TOKEN", raising=False)
    return proxy.url


def session(url: str, session_id: str) -> dict[str, Any]:
    response = requests.get(
        f"{url}/api/sessions/{session_id}", headers={"Authorization": f"Bearer {USER_TOKEN}"}, timeout=10
    )
    assert response.status_code == 200, response.text
    return response.json()


def session_id_in(err: str) -> str:
    return next(line.split()[1] for line in err.splitlines() if line.startswith("session "))


def texts(message: dict[str, Any]) -> str:
    return "\n".join(b["text"] for b in message["content"] if "text" in b)


def timeline(err: str) -> list[str]:
    return [line.split("s  ", 1)[1].strip() for line in err.splitlines() if line.strip()[:1].isdigit()]


DELEGATION = "@worker count these words @worker and these"
DELEGATION_STEPS = [
    "sent: turn 1, think iteration 1",
    "think 1",
    "delegating to worker: count these words",
    "delegating to worker: and these",
]
ANSWERED = [
    'worker answered: [worker] Task: "and these" — answer: 2 words; reversed: "these and"',
    'worker answered: [worker] Task: "count these words" — answer: 3 words; reversed: "words these count"',
]


def test_one_message_follows_the_delegation_on_the_events_stream(orchestrator, proxy, capsys):
    assert chat(orchestrator, "--token", USER_TOKEN, DELEGATION) == 0
    out, err = capsys.readouterr()
    lines = timeline(err)
    # Progress: "2 of 2" once the turn completed ("1 of 2" too when a poll fell between the two answers).
    counted = [line for line in lines if line.endswith(" of 2 delegations answered")]
    assert counted[-1:] == ["2 of 2 delegations answered"] and len(set(counted)) == len(counted), lines
    lines = [line for line in lines if line not in counted]
    assert lines[:4] == DELEGATION_STEPS
    assert sorted(line for line in lines if line.startswith("worker answered: ")) == ANSWERED
    assert lines[-2:] == ["think 2", "think 2: answer"]  # the answer ends the message
    assert len(lines) == 8, lines  # each step once
    # All of it came from one events stream: the session was not polled.
    sid = session_id_in(err)
    assert proxy.paths("POST") == ["/api/chat"] and proxy.paths() == [f"/api/sessions/{sid}/events"]
    # The answer, on stdout alone (not a terminal: printed once it is in), is the session's last message.
    view = session(orchestrator, sid)
    assert out == texts(view["messages"][-1]) + "\n"
    assert out.startswith("2 of 2 delegations answered.")


def test_the_answer_is_printed_as_it_is_written(orchestrator, monkeypatch):
    screen = Screen()
    monkeypatch.setattr(sys, "stdout", screen.out)
    monkeypatch.setattr(sys, "stderr", screen.err)
    assert chat(orchestrator, "--token", USER_TOKEN, "@worker tell me about the tides of the northern sea") == 0
    answer = texts(session(orchestrator, session_id_in(screen.err.getvalue()))["messages"][-1])
    out = screen.out.getvalue()
    assert out.endswith(answer + "\n") and out.count(answer) == 1  # printed once (after any text of think 1)
    # It came in pieces while think 2 ran, before the line that says the answer is in.
    pieces, said_in = [], None
    for i, (stream, text) in enumerate(screen.log):
        if stream == "err" and "think 2: answer" in text:
            said_in = i
        elif stream == "out" and said_in is None and text.strip() and answer.startswith("".join(pieces) + text):
            pieces.append(text)
    assert said_in is not None and len(pieces) >= 3, screen.log
    assert "".join(pieces) == answer[: len("".join(pieces))] and answer.startswith(pieces[0])


def test_a_broken_event_stream_is_opened_again_and_nothing_is_drawn_twice(orchestrator, proxy, capsys):
    proxy.cut_at = b"event: delegating"  # mid-event: that event is not whole yet
    assert chat(orchestrator, "--token", USER_TOKEN, DELEGATION) == 0
    out, err = capsys.readouterr()
    lines = timeline(err)
    assert proxy.cut_at is None and "the event stream broke" in err and "reconnecting" in err
    steps = [
        line
        for line in lines
        if not line.startswith("the event stream broke") and not line.endswith(" of 2 delegations answered")
    ]
    assert "2 of 2 delegations answered" in lines
    assert steps[:4] == DELEGATION_STEPS and sorted(s for s in steps if s.startswith("worker")) == ANSWERED
    assert steps[-2:] == ["think 2", "think 2: answer"] and len(steps) == 8, lines
    sid = session_id_in(err)
    assert proxy.paths() == [f"/api/sessions/{sid}/events"] * 2  # opened again; not polled
    assert out == texts(session(orchestrator, sid)["messages"][-1]) + "\n"  # once


def test_the_repl_sends_follow_ups_into_the_same_session(orchestrator, stack, proxy, capsys, monkeypatch):
    monkeypatch.setenv("FLIGHTDECK_TOKEN", USER_TOKEN)  # the token from the environment
    feed(monkeypatch, "@worker first question", "", "a follow-up", "/card")
    assert chat(orchestrator) == 0  # stdin ends: Ctrl-D
    out, err = capsys.readouterr()
    assert [line for line in err.splitlines() if line.startswith("session ")] == [
        f"session {session_id_in(err)}"
    ]  # one session for both messages
    # Each message followed on its own events stream (the first stream's replay is not drawn again).
    sid = session_id_in(err)
    assert proxy.paths() == ["/api/sessions?limit=1"] + [f"/api/sessions/{sid}/events"] * 2 + [
        "/.well-known/agent-card.json"
    ]
    assert timeline(err).count("think 1") == 1 and timeline(err).count("think 3") == 1
    view = session(orchestrator, session_id_in(err))
    assert view["turn"] == 2 and view["status"] == "idle"
    first_answer, second_answer = texts(view["messages"][3]), texts(view["messages"][-1])
    assert second_answer == '[orchestrator] Task: "a follow-up" — answer: 2 words; reversed: "follow-up a"'
    assert "sent: turn 2, think iteration 3" in err and "think 3: answer" in err
    card = json.loads(out[out.index("{") :])
    assert out[: out.index("{")] == f"{first_answer}\n{second_answer}\n"
    assert card["name"] == "orchestrator" and card["url"] == f"{stack.urls['orchestrator']}/a2a"


def test_a_follow_up_to_a_busy_session_waits_until_it_is_idle(orchestrator, capsys):
    first = requests.post(
        f"{orchestrator}/api/chat",
        json={"content": "@worker take a moment"},
        headers={"Authorization": f"Bearer {USER_TOKEN}"},
        timeout=10,
    )
    assert first.status_code == 202, first.text
    sid = first.json()["session_id"]
    assert chat(orchestrator, "--token", USER_TOKEN, "--session", sid, "and now this") == 0
    out, err = capsys.readouterr()
    assert f"session {sid}: 1 message(s) so far" in err and "busy" in err.splitlines()[0]
    assert "the session is busy: waiting until it is idle before sending" in err
    # The first message's delegation is drawn while waiting; the follow-up is sent after it ended.
    assert err.index("worker answered:") < err.index("sent: turn 2") < err.index("think 3: answer")
    view = session(orchestrator, sid)
    assert view["turn"] == 2 and out == texts(view["messages"][-1]) + "\n"


def test_a_message_the_busy_session_queues_is_answered_after_the_turn_before_it(orchestrator, capsys):
    from flightdeck.chat_client.sessions import SessionChat
    from flightdeck.chat_client.transport import Console, Polling

    first = requests.post(
        f"{orchestrator}/api/chat",
        json={"content": "@worker busy for a while"},
        headers={"Authorization": f"Bearer {USER_TOKEN}"},
        timeout=10,
    )
    sid = first.json()["session_id"]
    out, err = io.StringIO(), io.StringIO()
    with requests.Session() as http:
        # No catching up first: this client believes the session idle, and its POST is queued (202).
        client = SessionChat(orchestrator, USER_TOKEN, sid, Console(out, err), Polling(), http)
        assert client.say("second") == 0
    assert "queued (position 1): it is its own turn once the turns before it end" in err.getvalue()
    view = session(orchestrator, sid)
    assert [texts(m) for m in view["messages"] if m["role"] == "user" and texts(m)] == [
        "@worker busy for a while",
        "second",
    ]
    assert out.getvalue().endswith(texts(view["messages"][-1]) + "\n")


class Stdin(Typed):
    """Typed lines; the user presses Ctrl-C at the prompt first."""

    def __init__(self, *lines: str):
        super().__init__("".join(f"{line}\n" for line in lines))
        self.interrupted = False

    def readline(self, *args) -> str:
        if not self.interrupted:
            self.interrupted = True
            raise KeyboardInterrupt
        return super().readline(*args)


def test_ctrl_c_stops_watching_and_the_next_message_waits_for_the_session(orchestrator, capsys, monkeypatch):
    at_terminal(monkeypatch, Stdin("@worker something long", "and then this"))
    stderr = CtrlCWhen("delegating to worker")
    monkeypatch.setattr(sys, "stderr", stderr)
    assert chat(orchestrator, "--token", USER_TOKEN) == 0
    err = stderr.getvalue()
    sid = session_id_in(err)
    assert "(Ctrl-D exits)" in err  # Ctrl-C at the prompt
    assert (
        f"stopped watching session {sid}; it keeps working (a chat session is not canceled from here). "
        f"Follow it with: flightdeck chat {orchestrator} --session {sid}"
    ) in err
    # The next message waits for the first turn to end (drawn meanwhile), then goes into the same session.
    waited = err.index("the session is busy: waiting until it is idle before sending")
    assert waited < err.index("worker answered:") < err.index("sent: turn 2")
    view = session(orchestrator, sid)
    assert view["turn"] == 2 and capsys.readouterr().out == texts(view["messages"][-1]) + "\n"


CUT = b""  # in a scripted stream: the connection breaks off there (no last chunk)


def sse(kind: str, event_id: str | None = None, **data: Any) -> bytes:
    """One event as the events route frames it."""
    body = {"kind": kind, "session_id": "s-1", **({"id": event_id} if event_id else {}), **data}
    return (f"id: {event_id}\n" if event_id else "").encode() + f"event: {kind}\ndata: {json.dumps(body)}\n\n".encode()


def delta(iteration: int, offset: int, text: str) -> bytes:
    return sse(
        "text_delta",
        f"text.{iteration}.1.{offset + len(text)}",
        iteration=iteration,
        attempt=1,
        offset=offset,
        text=text,
    )


class ScriptedAgent:
    """Loopback HTTP scripted as one of our agents. POST /api/chat answers `accepted` (202); GET
    /api/sessions/{id} the given views in turn, then the last one again; GET .../events the given streams in
    turn, then 404 (a status: that answer; else the stream's pieces, each written as it comes, CUT breaking
    the connection off)."""

    def __init__(
        self, views: list[dict[str, Any]], streams: list[int | list[bytes]] = (), accepted: dict[str, Any] | None = None
    ):
        self.views, self.streams, self.posts, self.gets = list(views), list(streams), [], []
        self.accepted = accepted or {"session_id": "s-1", "turn": 2, "iteration": 1, "status": "queued", "position": 1}
        agent = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _send(self, payload: Any, status: int = 200) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _stream(self, script: int | list[bytes]) -> None:
                if isinstance(script, int):
                    return self._send({"error": {"code": f"http_{script}", "message": "no events here"}}, script)
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream; charset=utf-8")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                for piece in script:
                    if piece == CUT:
                        self.close_connection = True
                        return
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece))
                    self.wfile.flush()
                self.wfile.write(b"0\r\n\r\n")

            def do_GET(self):  # noqa: N802
                agent.gets.append(self.path)
                if self.path.endswith("/events"):
                    return self._stream(agent.streams.pop(0) if agent.streams else 404)
                self._send(agent.views.pop(0) if len(agent.views) > 1 else agent.views[0])

            def do_POST(self):  # noqa: N802
                agent.posts.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
                self._send(agent.accepted, 202)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_port}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def _view(status: str, *messages: tuple[str, str]) -> dict[str, Any]:
    return {
        "session_id": "s-1",
        "status": status,
        "turn": 1,
        "iteration": 1,
        "created_at": 1,
        "updated_at": 1,
        "messages": [{"role": role, "content": [{"text": text}]} for role, text in messages],
    }


@pytest.mark.parametrize("events", [404, 405, 501], ids=["no-route", "no-method", "not-implemented"])
def test_a_queued_message_is_waited_for_until_the_session_has_taken_it(capsys, events):
    answered = [("user", "first"), ("assistant", "first answer")]
    agent = ScriptedAgent(
        [
            _view("idle", *answered),  # joining (--session): idle, so the client sends...
            # ...but a message from elsewhere got in first: this one is queued behind it.
            _view("busy", *answered, ("user", "from elsewhere")),
            _view("idle", *answered, ("user", "from elsewhere"), ("assistant", "elsewhere answer")),  # between turns
            _view("busy", *answered, ("user", "from elsewhere"), ("assistant", "elsewhere answer"), ("user", "mine")),
            _view(
                "idle",
                *answered,
                ("user", "from elsewhere"),
                ("assistant", "elsewhere answer"),
                ("user", "mine"),
                ("assistant", "my answer"),
            ),
        ],
        streams=[events],
    )  # an agent without the events route: polled
    try:
        assert chat(agent.url, "--session", "s-1", "mine") == 0
    finally:
        agent.close()
    out, err = capsys.readouterr()
    assert out == "my answer\n"  # not the answer of the message queued before it
    assert "queued (position 1): it is its own turn once the turns before it end" in err
    assert "message: from elsewhere" in err and "answer to an earlier message: elsewhere answer" in err
    assert f"does not stream the session's events (HTTP {events} from GET .../events: no events here" in err
    assert agent.posts == [{"content": "mine", "session_id": "s-1"}] and agent.views == [agent.views[-1]]
    assert agent.gets[:2] == ["/api/sessions/s-1", "/api/sessions/s-1/events"]


def _screen(monkeypatch) -> Screen:
    screen = Screen()
    monkeypatch.setattr(sys, "stdout", screen.out)
    monkeypatch.setattr(sys, "stderr", screen.err)
    return screen


def test_a_queued_message_followed_on_the_events_stream(monkeypatch):
    agent = ScriptedAgent(
        [_view("idle", ("user", "first"), ("assistant", "first answer"))],
        streams=[
            [
                # The replay: what the client has drawn already (joining), then the message queued before this one.
                sse("message", "input.1", text="first"),
                sse("thinking", "think.1", think=1),
                sse("answer", "answer.1", think=1, text="first answer"),
                sse("message", "input.2", text="from elsewhere"),
                sse("thinking", "think.2", think=2),
                delta(2, 0, "elsewhere"),
                sse("answer", "answer.2", think=2, text="elsewhere answer"),
                sse("message", "input.3", text="mine"),
                sse("thinking", "think.3", think=3),
                delta(3, 0, "my "),
                delta(3, 3, "ans"),
                sse("answer", "answer.3", think=3, text="my answer"),
            ]
        ],
    )
    screen = _screen(monkeypatch)
    try:
        assert chat(agent.url, "--session", "s-1", "mine") == 0
    finally:
        agent.close()
    err = screen.err.getvalue()
    assert [text for stream, text in screen.log if stream == "out"] == ["my ", "ans", "wer", "\n"]
    assert timeline(err) == [
        "queued (position 1): it is its own turn once the turns before it end",
        "message: from elsewhere",
        "think 2",
        "think 2: answer",
        "answer to an earlier message: elsewhere answer",
        "think 3",
        "think 3: answer",
    ]
    assert agent.gets == ["/api/sessions/s-1", "/api/sessions/s-1/events"]  # joined, then followed: no polls


def test_the_stored_answer_wins_over_text_that_was_not_its_beginning_and_garbage_is_skipped(monkeypatch):
    agent = ScriptedAgent(
        [],
        accepted={"session_id": "s-1", "turn": 1, "iteration": 1, "status": "accepted"},
        streams=[
            [
                sse("message", "input.1", text="hi"),
                sse("thinking", "think.1", think=1),
                b": keep-alive\n\n",
                b"data: {not json\n\n",
                b"data: [1, 2]\n\n",
                sse("input_required", "ask.1", question="which one?"),  # a kind from a newer server
                delta(1, 0, "Hel"),
                delta(1, 3, "lo"),
                delta(1, 9, "gap"),  # a piece missed in between: not printed
                delta(1, 0, "Goodbye"),  # the think starts over
                sse("answer", "answer.1", think=1, text="Good day"),
            ]
        ],
    )
    screen = _screen(monkeypatch)
    try:
        assert chat(agent.url, "hi") == 0
    finally:
        agent.close()
    err = screen.err.getvalue()
    assert screen.out.getvalue() == "Hello\nGoodbye\nGood day\n"
    assert timeline(err) == [
        "sent: turn 1, think iteration 1",
        "think 1",
        "skipped an event this client cannot read: {not json",
        "skipped an event this client cannot read: [1, 2]",
        "input_required: which one?",
        "think 1: answer (the text shown as it was written is not the answer stored; the answer follows whole)",
    ]
    assert agent.gets == ["/api/sessions/s-1/events"]


def test_a_session_idle_with_no_answer_to_the_message_is_a_failure(capsys):
    agent = ScriptedAgent(
        [],
        accepted={"session_id": "s-1", "turn": 1, "iteration": 1, "status": "accepted"},
        streams=[[sse("message", "input.1", text="hi"), sse("idle", "idle.1", turn=1, iteration=0)]],
    )
    try:
        assert chat(agent.url, "hi") == 1
    finally:
        agent.close()
    out, err = capsys.readouterr()
    assert out == "" and "the session is idle, with no answer to this message" in err
    assert timeline(err) == ["sent: turn 1, think iteration 1", "idle: 1 message(s), 0 think iteration(s)"]


def test_streams_that_break_time_out_or_fail_are_opened_again_and_nothing_is_printed_twice(monkeypatch):
    def replay(*more: bytes) -> list[bytes]:
        return [
            sse("message", "input.1", text="go"),
            sse("thinking", "think.1", think=1),
            sse("delegating", "tool.t1", agent="worker", task="x"),
            *more,
        ]

    answered = sse("callback_accepted", "result.t1", agent="worker", status="success", text="done")
    agent = ScriptedAgent(
        [],
        accepted={"session_id": "s-1", "turn": 1, "iteration": 1, "status": "accepted"},
        streams=[
            [*replay()[:2], sse("delegating", "tool.t1", agent="worker", task="x")[:20], CUT],  # breaks mid-event
            replay(answered, b": stream closed after 840 s without a final event; reconnect to follow on\n\n"),
            replay(
                answered,
                sse("thinking", "think.2", think=2),
                delta(2, 0, "The answer"),
                sse("error", None, code="stream_failed", message="the stream could not go on; reconnect"),
            ),
            # A new stream sends the text so far from offset 0: only what is new is printed.
            replay(
                answered,
                sse("thinking", "think.2", think=2),
                delta(2, 0, "The answer so far"),
                delta(2, 17, " and more."),
                sse("answer", "answer.2", think=2, text="The answer so far and more."),
                sse("idle", "idle.1", turn=1, iteration=2),
            ),
        ],
    )
    screen = _screen(monkeypatch)
    try:
        assert chat(agent.url, "go") == 0
    finally:
        agent.close()
    err = screen.err.getvalue()
    assert screen.out.getvalue() == "The answer so far and more.\n"
    assert [text for stream, text in screen.log if stream == "out"] == ["The answer", " so far", " and more.", "\n"]
    steps = [line for line in timeline(err) if not line.startswith("the event stream")]
    assert steps == [
        "sent: turn 1, think iteration 1",
        "think 1",
        "delegating to worker: x",
        "worker answered: done",
        "think 2",
        "think 2: answer",
    ]
    assert "the event stream broke" in err and "the event stream reached the server's time limit" in err
    assert "the event stream failed at the server (the stream could not go on; reconnect)" in err
    assert agent.gets == ["/api/sessions/s-1/events"] * 4


def test_streams_that_bring_nothing_new_give_way_to_polling(capsys):
    stuck = [sse("message", "input.1", text="go"), sse("thinking", "think.1", think=1), CUT]
    agent = ScriptedAgent(
        [_view("idle", ("user", "go"), ("assistant", "the answer"))],
        accepted={"session_id": "s-1", "turn": 1, "iteration": 1, "status": "accepted"},
        streams=[stuck] * 4,
    )
    try:
        assert chat(agent.url, "go") == 0
    finally:
        agent.close()
    out, err = capsys.readouterr()
    assert out == "the answer\n"
    assert "3 event streams in a row brought nothing new: polling instead" in err
    assert [line for line in timeline(err) if not line.startswith(("the event stream", "3 event"))] == [
        "sent: turn 1, think iteration 1",
        "think 1",
        "think 1: answer",
        "idle: 1 message(s), 1 think iteration(s)",
    ]
    assert agent.gets == ["/api/sessions/s-1/events"] * 4 + ["/api/sessions/s-1"]


def test_an_agent_with_streaming_off_is_polled(aws, monkeypatch, capsys):
    """STREAMING=off: the events route answers the timeline so far and ends; the client polls, and does not
    ask for the events of the next message."""
    from tests.support.harness import make_agent
    from tests.support.inprocess import gateway

    with gateway("orchestrator") as url:
        agent = make_agent(monkeypatch, extra_env={"STREAMING": "off"})
        seen = Proxy(url)
        stop = threading.Event()

        def turns() -> None:
            # The turn runs once the events request has been answered (the timeline so far) and the client
            # polls: that answer cannot hold the answer already.
            seen.wait_for("/events")
            with seen.asked:
                seen.asked.wait_for(lambda: any(re.fullmatch(r"/api/sessions/[^/?]+", p) for _, p in seen.requests), 30)
            while not stop.is_set():
                agent.run_queue("turns")
                time.sleep(0.05)

        pump = threading.Thread(target=turns, daemon=True)
        pump.start()
        feed(monkeypatch, "hello there", "and again")
        try:
            assert chat(seen.url, "--token", agent.peer_token) == 0
        finally:
            stop.set()
            pump.join(30)
            seen.close()
    out, err = capsys.readouterr()
    # The agent runs in this process: its logs and metrics (EMF) lines are on stdout too.
    out = "".join(line for line in out.splitlines(True) if not line.startswith(('{"level"', '{"_aws"')))
    assert out.splitlines() == [
        '[orchestrator] Task: "hello there" — answer: 2 words; reversed: "there hello"',
        '[orchestrator] Task: "and again" — answer: 2 words; reversed: "again and"',
    ]
    assert (
        err.count(
            "the agent does not stream the session's events (the events route answered the timeline so "
            "far and ended (STREAMING=off?)): polling"
        )
        == 1
    )
    sid = session_id_in(err)
    gets = seen.paths()
    assert gets[:2] == ["/api/sessions?limit=1", f"/api/sessions/{sid}/events"]
    assert set(gets[2:]) == {f"/api/sessions/{sid}"}  # polled, the second message too
    lines = timeline(err)
    assert lines.count("think 1: answer") == 1 and lines.count("think 2: answer") == 1


@pytest.mark.parametrize(
    ("token", "says"),
    [
        (None, "needs a bearer token (a peer bearer token is required"),
        ("not-a-peer-token", "refused the token as malformed or invalid"),
        ("fdp_user_not-the-right-secret-0123456789abcdef", "does not accept this token (this token is not accepted"),
    ],
)
def test_a_refused_token_says_what_to_fix(orchestrator, capsys, token, says):
    assert chat(orchestrator, *(["--token", token] if token else []), "hello") == 1
    out, err = capsys.readouterr()
    assert out == ""
    assert says in err and "--token or FLIGHTDECK_TOKEN" in err, err
    assert "[agents.NAME.users]" in err and "flightdeck peers add" in err


def test_the_repl_checks_the_token_before_the_first_message(orchestrator, capsys, monkeypatch):
    feed(monkeypatch, "never sent")
    assert chat(orchestrator, "--token", "not-a-peer-token") == 1
    assert "refused the token as malformed or invalid" in capsys.readouterr().err


def test_an_unknown_session_a_wrong_url_and_no_agent_say_so(orchestrator, capsys):
    assert chat(orchestrator, "--token", USER_TOKEN, "--session", "no-such-session", "hi") == 1
    assert "has no session 'no-such-session' for this token" in capsys.readouterr().err
    assert chat(f"{orchestrator}/a2a", "--token", USER_TOKEN, "hi") == 1
    assert "has no such route" in capsys.readouterr().err
    assert chat(f"http://127.0.0.1:{free_port()}", "hi") == 1
    assert "connection refused. Is the agent running" in capsys.readouterr().err
    assert chat("127.0.0.1:8080", "hi") == 2
    assert "give one starting with http:// or https://" in capsys.readouterr().err


@pytest.mark.parametrize("version", ["1.0", "0.3"])
def test_a2a_mode_talks_to_our_agent_too(orchestrator, capsys, monkeypatch, version):
    if version == "0.3":  # as to a card without the 1.0 interface
        from flightdeck.domain.a2a import wire_v1

        monkeypatch.setattr(wire_v1, "offers_v1", lambda card: None)
    assert chat("--a2a", orchestrator, "--token", USER_TOKEN, "@worker over a2a") == 0
    out, err = capsys.readouterr()
    said = "orchestrator (A2A 1.0)" if version == "1.0" else "orchestrator (A2A 0.3.0)"
    assert said in err and "message/stream" in err  # our card says it streams
    assert "working" in err and "completed" in err
    assert out.startswith("1 of 1 delegation answered.") and '[worker] Task: "over a2a"' in out
    if version == "0.3":
        return
    # Without the token: the card says which scheme /a2a wants.
    assert chat("--a2a", orchestrator, "hi") == 1
    assert "requires peerToken" in capsys.readouterr().err


# --- a2a-sdk agents -------------------------------------------------------------------------------


class Conversations(AgentExecutor):
    """Answers "echo: <text> (message N of the context)"; "?ask" asks which one first (input-required);
    "slow" takes `slow_s`; the answer is streamed as `chunks` artifact chunks. Records what it saw."""

    def __init__(self, cancelable: bool = True, chunks: int = 1, slow_s: float = 5.0):
        self.cancelable, self.chunks, self.slow_s = cancelable, chunks, slow_s
        self.contexts: dict[str, list[str]] = {}
        self.messages: list[dict[str, Any]] = []  # each message: its text and the ids it came with
        self.canceled: list[str] = []

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        task = context.current_task
        if task is None:
            task = new_task(context.message)
            await event_queue.enqueue_event(task)
        text = context.get_user_input()
        self.messages.append({"text": text, "task": task.id, "context": task.context_id})
        said = self.contexts.setdefault(task.context_id, [])
        said.append(text)
        updater = TaskUpdater(event_queue, task.id, task.context_id)
        await updater.start_work()
        if "?ask" in text:
            await updater.requires_input(
                updater.new_agent_message([sdk.Part(root=sdk.TextPart(text="which one?"))]), final=True
            )
            return
        await asyncio.sleep(self.slow_s if "slow" in text else 0.05)
        answer = f"echo: {text} (message {len(said)} of the context)"
        size = -(-len(answer) // self.chunks)
        pieces = [answer[i : i + size] for i in range(0, len(answer), size)]
        for i, piece in enumerate(pieces):
            await updater.add_artifact(
                [sdk.Part(root=sdk.TextPart(text=piece))],
                artifact_id="answer",
                name="answer",
                append=i > 0,
                last_chunk=i == len(pieces) - 1,
            )
            await asyncio.sleep(0.02)
        await updater.complete()

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        if not self.cancelable:
            raise ServerError(error=sdk.UnsupportedOperationError(message="this agent cannot cancel a task"))
        self.canceled.append(context.task_id)
        await TaskUpdater(event_queue, context.task_id, context.context_id).cancel()


class MethodLog:
    """ASGI middleware: every JSON-RPC request POSTed, in order (the body is replayed to the app)."""

    def __init__(self, app):
        self.app, self.requests = app, []

    @property
    def methods(self) -> list[str]:
        return [r.get("method") for r in self.requests]

    def sent(self) -> list[dict[str, Any]]:
        """The messages the client sent, as they were on the wire."""
        return [r["params"]["message"] for r in self.requests if r.get("method") in ("message/send", "message/stream")]

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or scope["method"] != "POST":
            return await self.app(scope, receive, send)
        chunks, more = [], True
        while more:
            message = await receive()
            chunks.append(message.get("body", b""))
            more = message.get("more_body", False)
        body = b"".join(chunks)
        self.requests.append(json.loads(body))
        replayed = False

        async def replay():
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        return await self.app(scope, replay, send)


@contextmanager
def sdk_agent(executor: Conversations, streams: bool, advertise_streaming: bool | None = None):
    """An a2a-sdk agent on loopback; its card may advertise streaming it does not do (advertise_streaming)."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    card = sdk.AgentCard(
        name="conversations",
        description="a2a-sdk agent that remembers its contexts",
        url=url + "/",
        version="1.0.0",
        protocol_version="0.3.0",
        preferred_transport="JSONRPC",
        default_input_modes=["text/plain"],
        default_output_modes=["text/plain"],
        capabilities=sdk.AgentCapabilities(streaming=streams, push_notifications=False),
        skills=[sdk.AgentSkill(id="echo", name="echo", description="echoes", tags=["echo"])],
    )
    modifier = None
    if advertise_streaming is not None:

        def modifier(served: sdk.AgentCard) -> sdk.AgentCard:
            return served.model_copy(update={"capabilities": sdk.AgentCapabilities(streaming=advertise_streaming)})

    handler = DefaultRequestHandler(agent_executor=executor, task_store=InMemoryTaskStore())
    app = MethodLog(A2AStarletteApplication(agent_card=card, http_handler=handler, card_modifier=modifier).build())
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    # Waited for, not given a fixed time: on a busy machine the server takes longer to start.
    started_by = time.monotonic() + 60
    while not server.started:
        assert thread.is_alive() and time.monotonic() < started_by, "the server did not start"
        time.sleep(0.01)
    try:
        yield url, app
    finally:
        server.should_exit = True
        thread.join(10)


def test_a2a_conversation_continues_by_context_and_answers_input_required_by_task(capsys, monkeypatch):
    agent = Conversations()
    with sdk_agent(agent, streams=False) as (url, log):
        feed(monkeypatch, "hello", "pick one ?ask", "the blue one", "/card")
        assert chat("--a2a", url) == 0
    out, err = capsys.readouterr()
    answers, card = out[: out.index("{")], json.loads(out[out.index("{") :])
    assert answers.splitlines() == [
        "echo: hello (message 1 of the context)",
        "which one?",
        "echo: the blue one (message 3 of the context)",
    ]
    assert card["name"] == "conversations"
    first, ask, reply = log.sent()
    [context] = agent.contexts
    assert "contextId" not in first and ask["contextId"] == reply["contextId"] == context
    # The task waiting for input is continued; the others are new tasks of the context.
    assert "taskId" not in first and "taskId" not in ask and reply["taskId"] == agent.messages[1]["task"]
    assert agent.messages[2]["task"] == agent.messages[1]["task"] != agent.messages[0]["task"]
    assert (
        "input-required: which one?" in err and f"your next message continues task {agent.messages[1]['task']}" in err
    )
    assert "conversations (A2A 0.3.0)" in err and "message/send, then tasks/get" in err
    assert set(log.methods) == {"message/send", "tasks/get"}


def test_a2a_streams_the_answer_when_the_card_says_so(capsys, monkeypatch):
    agent = Conversations(chunks=4)
    with sdk_agent(agent, streams=True) as (url, log):
        feed(monkeypatch, "stream this", "and this")
        assert chat("--a2a", f"{url}/.well-known/agent-card.json") == 0
    out, err = capsys.readouterr()
    assert out.splitlines() == [
        "echo: stream this (message 1 of the context)",
        "echo: and this (message 2 of the context)",
    ]
    assert log.methods == ["message/stream", "message/stream"]  # no polling
    assert "streams its answers (message/stream)" in err
    assert err.count("working") == 2 and err.count("completed") == 2
    [context] = agent.contexts
    first, second = log.sent()
    assert "contextId" not in first and second["contextId"] == context


def test_a2a_falls_back_to_message_send_when_streaming_is_refused(capsys):
    agent = Conversations()
    with sdk_agent(agent, streams=False, advertise_streaming=True) as (url, log):
        assert chat("--a2a", url, "no stream here") == 0
    out, err = capsys.readouterr()
    assert out == "echo: no stream here (message 1 of the context)\n"
    assert "the agent does not stream after all (-32603: Streaming is not supported by the agent)" in err
    assert log.methods[:2] == ["message/stream", "message/send"] and set(log.methods[2:]) <= {"tasks/get"}


@pytest.mark.parametrize("streams", [False, True], ids=["polled", "streamed"])
def test_ctrl_c_during_a_task_cancels_it_and_the_conversation_goes_on(capsys, monkeypatch, streams):
    agent = Conversations()
    with sdk_agent(agent, streams=streams) as (url, log):
        feed(monkeypatch, "something slow", "something quick")
        stderr = CtrlCWhen("working")
        monkeypatch.setattr(sys, "stderr", stderr)
        assert chat("--a2a", url) == 0
    err = stderr.getvalue()
    assert stderr.pressed
    slow_task = agent.messages[0]["task"]
    assert agent.canceled == [slow_task] and "tasks/cancel" in log.methods
    assert f"Ctrl-C: canceling task {slow_task} (tasks/cancel)" in err and "canceled" in err
    # The next message starts a new task in the same context.
    assert capsys.readouterr().out == "echo: something quick (message 2 of the context)\n"
    [context] = agent.contexts
    assert log.sent()[1]["contextId"] == context and "taskId" not in log.sent()[1]
    assert agent.messages[1]["task"] != slow_task


@pytest.mark.parametrize("streams", [False, True], ids=["polled", "streamed"])
def test_ctrl_c_against_an_agent_that_cannot_cancel_says_the_task_still_runs(capsys, monkeypatch, streams):
    agent = Conversations(cancelable=False, slow_s=1.0)
    with sdk_agent(agent, streams=streams) as (url, log):
        stderr = CtrlCWhen("working")
        monkeypatch.setattr(sys, "stderr", stderr)
        assert chat("--a2a", url, "slow and unstoppable") == 130
        task = agent.messages[0]["task"]
        assert (
            "the agent cannot cancel this task (-32004: this agent cannot cancel a task): the remote task "
            f"{task} is still running (working)"
        ) in stderr.getvalue()
        assert log.methods[-2:] == ["tasks/cancel", "tasks/get"]
    assert capsys.readouterr().out == ""
