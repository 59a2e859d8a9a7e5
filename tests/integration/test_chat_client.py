"""`flightdeck chat` as a user runs it (cli.main, stdin fed, stdout/stderr read), over real loopback HTTP:

* against our agents: the bundled two-agent example on the local stack (moto, the real handlers,
  every hop through the local gateway): a delegation's timeline and answer, a REPL whose follow-up
  goes into the same session, a follow-up that waits for a busy session, clear auth and URL errors;
* against a2a-sdk agents served by uvicorn: a conversation by contextId, an input-required round by
  taskId, a streamed answer (message/stream), the fallback to message/send, Ctrl-C as tasks/cancel,
  and an agent that cannot cancel.

Ctrl-C is the user's: stderr raises KeyboardInterrupt when the line the user reacts to is written.
"""

from __future__ import annotations

import asyncio
import io
import json
import socket
import sys
import threading
import time
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Iterator

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
USER_TOKEN = config_file.load(config_file.DEFAULT_CONFIG).agents["orchestrator"].peers["user"]
WORKER_THINK_MS = 700  # long enough for a session to be seen busy


def chat(*args: str) -> int:
    return cli.main(["chat", *args])


def feed(monkeypatch, *lines: str) -> None:
    monkeypatch.setattr(sys, "stdin", io.StringIO("".join(f"{line}\n" for line in lines)))


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


@pytest.fixture(scope="module")
def stack() -> Iterator[LocalStack]:
    deployment = config_file.load(config_file.DEFAULT_CONFIG)
    deployment.agents["worker"].model.think_delay_ms = WORKER_THINK_MS
    with LocalStack(deployment, relay=None) as running:
        yield running


@pytest.fixture
def orchestrator(stack, monkeypatch) -> str:
    monkeypatch.delenv("FLIGHTDECK_TOKEN", raising=False)
    return stack.urls["orchestrator"]


def session(url: str, session_id: str) -> dict[str, Any]:
    response = requests.get(f"{url}/api/sessions/{session_id}", headers={"Authorization": f"Bearer {USER_TOKEN}"},
                            timeout=10)
    assert response.status_code == 200, response.text
    return response.json()


def session_id_in(err: str) -> str:
    return next(line.split()[1] for line in err.splitlines() if line.startswith("session "))


def texts(message: dict[str, Any]) -> str:
    return "\n".join(b["text"] for b in message["content"] if "text" in b)


def test_one_message_shows_the_delegation_timeline_then_the_answer(orchestrator, capsys):
    assert chat(orchestrator, "--token", USER_TOKEN, "@worker count these words @worker and these") == 0
    out, err = capsys.readouterr()
    lines = [line.split("s  ", 1)[1].strip() for line in err.splitlines() if line.strip()[:1].isdigit()]
    assert lines[:4] == ["sent: turn 1, think iteration 1", "think 1: Delegating 2 task(s) to @worker.",
                         "delegating to worker: count these words", "delegating to worker: and these"]
    answered = [line for line in lines if line.startswith("worker answered: ")]
    assert sorted(answered) == ['worker answered: [worker] Task: "and these" — answer: 2 words; reversed: "these and"',
                                'worker answered: [worker] Task: "count these words" — answer: 3 words; reversed: '
                                '"words these count"']
    assert lines[-2:] == ["think 2: answer", "idle: 1 message(s), 2 think iteration(s)"]
    # The answer, on stdout alone, is the session's last message.
    view = session(orchestrator, session_id_in(err))
    assert out == texts(view["messages"][-1]) + "\n"
    assert out.startswith("2 of 2 delegations answered.")


def test_the_repl_sends_follow_ups_into_the_same_session(orchestrator, capsys, monkeypatch):
    monkeypatch.setenv("FLIGHTDECK_TOKEN", USER_TOKEN)  # the token from the environment
    feed(monkeypatch, "@worker first question", "", "a follow-up", "/card")
    assert chat(orchestrator) == 0  # stdin ends: Ctrl-D
    out, err = capsys.readouterr()
    assert [line for line in err.splitlines() if line.startswith("session ")] == [
        f"session {session_id_in(err)}"]  # one session for both messages
    view = session(orchestrator, session_id_in(err))
    assert view["turn"] == 2 and view["status"] == "idle"
    first_answer, second_answer = texts(view["messages"][3]), texts(view["messages"][-1])
    assert second_answer == '[orchestrator] Task: "a follow-up" — answer: 2 words; reversed: "follow-up a"'
    assert "sent: turn 2, think iteration 3" in err and "think 3: answer" in err
    card = json.loads(out[out.index("{"):])
    assert out[:out.index("{")] == f"{first_answer}\n{second_answer}\n"
    assert card["name"] == "orchestrator" and card["url"] == f"{orchestrator}/a2a"


def test_a_follow_up_to_a_busy_session_waits_until_it_is_idle(orchestrator, capsys):
    first = requests.post(f"{orchestrator}/api/chat", json={"content": "@worker take a moment"},
                          headers={"Authorization": f"Bearer {USER_TOKEN}"}, timeout=10)
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

    first = requests.post(f"{orchestrator}/api/chat", json={"content": "@worker busy for a while"},
                          headers={"Authorization": f"Bearer {USER_TOKEN}"}, timeout=10)
    sid = first.json()["session_id"]
    out, err = io.StringIO(), io.StringIO()
    with requests.Session() as http:
        # No catching up first: this client believes the session idle, and its POST is queued (202).
        client = SessionChat(orchestrator, USER_TOKEN, sid, Console(out, err), Polling(), http)
        assert client.say("second") == 0
    assert "queued (position 1): it is its own turn once the turns before it end" in err.getvalue()
    view = session(orchestrator, sid)
    assert [texts(m) for m in view["messages"] if m["role"] == "user" and texts(m)] == [
        "@worker busy for a while", "second"]
    assert out.getvalue().endswith(texts(view["messages"][-1]) + "\n")


class Stdin(io.StringIO):
    """Piped lines; the user presses Ctrl-C at the prompt first."""

    def __init__(self, *lines: str):
        super().__init__("".join(f"{line}\n" for line in lines))
        self.interrupted = False

    def readline(self, *args) -> str:
        if not self.interrupted:
            self.interrupted = True
            raise KeyboardInterrupt
        return super().readline(*args)


def test_ctrl_c_stops_watching_and_the_next_message_waits_for_the_session(orchestrator, capsys, monkeypatch):
    monkeypatch.setattr(sys, "stdin", Stdin("@worker something long", "and then this"))
    stderr = CtrlCWhen("delegating to worker")
    monkeypatch.setattr(sys, "stderr", stderr)
    assert chat(orchestrator, "--token", USER_TOKEN) == 0
    err = stderr.getvalue()
    sid = session_id_in(err)
    assert "(Ctrl-D exits)" in err  # Ctrl-C at the prompt
    assert (f"stopped watching session {sid}; it keeps working (a chat session is not canceled from here). "
            f"Follow it with: flightdeck chat {orchestrator} --session {sid}") in err
    # The next message waits for the first turn to end (drawn meanwhile), then goes into the same session.
    waited = err.index("the session is busy: waiting until it is idle before sending")
    assert waited < err.index("worker answered:") < err.index("sent: turn 2")
    view = session(orchestrator, sid)
    assert view["turn"] == 2 and capsys.readouterr().out == texts(view["messages"][-1]) + "\n"


class InboxAgent:
    """Loopback HTTP scripted as an agent with an inbox (POST /api/chat answers 202 "queued"): GET
    /api/sessions/{id} answers the given views in turn, then the last one again."""

    def __init__(self, views: list[dict[str, Any]]):
        self.views, self.posts = views, []
        agent = self

        class Handler(BaseHTTPRequestHandler):
            def _send(self, payload: Any, status: int = 200) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self):  # noqa: N802
                self._send(agent.views.pop(0) if len(agent.views) > 1 else agent.views[0])

            def do_POST(self):  # noqa: N802
                agent.posts.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
                self._send({"session_id": "s-1", "turn": 2, "iteration": 1, "status": "queued", "position": 1}, 202)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_port}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def _view(status: str, *messages: tuple[str, str]) -> dict[str, Any]:
    return {"session_id": "s-1", "status": status, "turn": 1, "iteration": 1, "created_at": 1, "updated_at": 1,
            "messages": [{"role": role, "content": [{"text": text}]} for role, text in messages]}


def test_a_queued_message_is_waited_for_until_the_session_has_taken_it(capsys):
    answered = [("user", "first"), ("assistant", "first answer")]
    agent = InboxAgent([
        _view("idle", *answered),  # joining (--session): idle, so the client sends...
        # ...but a message from elsewhere got in first: this one is queued behind it.
        _view("busy", *answered, ("user", "from elsewhere")),
        _view("idle", *answered, ("user", "from elsewhere"), ("assistant", "elsewhere answer")),  # between turns
        _view("busy", *answered, ("user", "from elsewhere"), ("assistant", "elsewhere answer"), ("user", "mine")),
        _view("idle", *answered, ("user", "from elsewhere"), ("assistant", "elsewhere answer"), ("user", "mine"),
              ("assistant", "my answer")),
    ])
    try:
        assert chat(agent.url, "--session", "s-1", "mine") == 0
    finally:
        agent.close()
    out, err = capsys.readouterr()
    assert out == "my answer\n"  # not the answer of the message queued before it
    assert "queued (position 1): it is its own turn once the turns before it end" in err
    assert "message: from elsewhere" in err and "answer to an earlier message: elsewhere answer" in err
    assert agent.posts == [{"content": "mine", "session_id": "s-1"}] and agent.views == [agent.views[-1]]


@pytest.mark.parametrize(("token", "says"), [
    (None, "needs a bearer token (a peer bearer token is required"),
    ("not-a-peer-token", "refused the token as malformed or invalid"),
    ("fdp_user_not-the-right-secret-0123456789abcdef", "does not accept this token (this token is not accepted"),
])
def test_a_refused_token_says_what_to_fix(orchestrator, capsys, token, says):
    assert chat(orchestrator, *(["--token", token] if token else []), "hello") == 1
    out, err = capsys.readouterr()
    assert out == ""
    assert says in err and "--token or FLIGHTDECK_TOKEN" in err, err
    assert "[agents.NAME.peers]" in err and "flightdeck peers add" in err


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


def test_a2a_mode_talks_to_our_agent_too(orchestrator, capsys):
    assert chat("--a2a", orchestrator, "--token", USER_TOKEN, "@worker over a2a") == 0
    out, err = capsys.readouterr()
    assert "orchestrator (A2A 0.3.0)" in err and "message/stream" in err  # our card says it streams
    assert "working" in err and "completed" in err
    assert out.startswith("1 of 1 delegation answered.") and '[worker] Task: "over a2a"' in out
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
            await updater.requires_input(updater.new_agent_message([sdk.Part(root=sdk.TextPart(text="which one?"))]),
                                         final=True)
            return
        await asyncio.sleep(self.slow_s if "slow" in text else 0.05)
        answer = f"echo: {text} (message {len(said)} of the context)"
        size = -(-len(answer) // self.chunks)
        pieces = [answer[i:i + size] for i in range(0, len(answer), size)]
        for i, piece in enumerate(pieces):
            await updater.add_artifact([sdk.Part(root=sdk.TextPart(text=piece))], artifact_id="answer", name="answer",
                                       append=i > 0, last_chunk=i == len(pieces) - 1)
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
        name="conversations", description="a2a-sdk agent that remembers its contexts", url=url + "/",
        version="1.0.0", protocol_version="0.3.0", preferred_transport="JSONRPC",
        default_input_modes=["text/plain"], default_output_modes=["text/plain"],
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
    for _ in range(500):
        if server.started:
            break
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
    answers, card = out[:out.index("{")], json.loads(out[out.index("{"):])
    assert answers.splitlines() == ["echo: hello (message 1 of the context)", "which one?",
                                    "echo: the blue one (message 3 of the context)"]
    assert card["name"] == "conversations"
    first, ask, reply = log.sent()
    [context] = agent.contexts
    assert "contextId" not in first and ask["contextId"] == reply["contextId"] == context
    # The task waiting for input is continued; the others are new tasks of the context.
    assert "taskId" not in first and "taskId" not in ask and reply["taskId"] == agent.messages[1]["task"]
    assert agent.messages[2]["task"] == agent.messages[1]["task"] != agent.messages[0]["task"]
    assert "input-required: which one?" in err and f"your next message continues task {agent.messages[1]['task']}" in err
    assert "conversations (A2A 0.3.0)" in err and "message/send, then tasks/get" in err
    assert set(log.methods) == {"message/send", "tasks/get"}


def test_a2a_streams_the_answer_when_the_card_says_so(capsys, monkeypatch):
    agent = Conversations(chunks=4)
    with sdk_agent(agent, streams=True) as (url, log):
        feed(monkeypatch, "stream this", "and this")
        assert chat("--a2a", f"{url}/.well-known/agent-card.json") == 0
    out, err = capsys.readouterr()
    assert out.splitlines() == ["echo: stream this (message 1 of the context)",
                                "echo: and this (message 2 of the context)"]
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
        assert ("the agent cannot cancel this task (-32004: this agent cannot cancel a task): the remote task "
                f"{task} is still running (working)") in stderr.getvalue()
        assert log.methods[-2:] == ["tasks/cancel", "tasks/get"]
    assert capsys.readouterr().out == ""
