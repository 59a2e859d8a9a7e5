"""`flightdeck chat --a2a` (issue 27): `--task ID` reattaches to a running task (its history, then its events
over SubscribeToTask to its end), a stream that breaks is resumed with Last-Event-ID, and piped stdin is one
message (and a tmux pane, the reattach at a real terminal). In one process: our agent behind the local gateway (moto, the local model, streaming on); the chat
client speaks v1.0 to it (the card lists JSONRPC 1.0)."""

from __future__ import annotations

import io
import os
import shutil
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest
import requests

from flightdeck import cli
from flightdeck.chat_client import a2a_chat
from tests.support.harness import make_agent
from tests.support.inprocess import gateway, pumping

STREAMING = {"STREAMING": "on", "STREAM_POLL_INTERVAL_MS": "100", "STREAM_KEEPALIVE_MS": "1000"}


@pytest.fixture
def served(aws, monkeypatch):
    with gateway("orchestrator") as url:
        yield make_agent(monkeypatch, extra_env=STREAMING), url


def _running_task(agent, url: str) -> tuple[str, str, str]:
    """A task waiting on its delegation: (task id, session id, tool use id)."""
    body = {
        "jsonrpc": "2.0",
        "id": "1",
        "method": "SendMessage",
        "params": {
            "message": {"messageId": str(uuid.uuid4()), "role": "ROLE_USER", "parts": [{"text": "@worker two rivers"}]},
            "configuration": {"returnImmediately": True},
        },
    }
    task = requests.post(f"{url}/a2a", json=body, headers={**agent.auth_headers(), "A2A-Version": "1.0"}).json()
    task = task["result"]["task"]
    agent.run_queue("turns")
    s = agent.api("session_get", SESSION_ID=task["contextId"])[2]
    [use] = [b["toolUse"] for m in s["messages"] for b in m["content"] if "toolUse" in b]
    return task["id"], task["contextId"], use["toolUseId"]


def _answer_later(agent, url: str, sid: str, tool_use_id: str, after_s: float) -> threading.Thread:
    token = agent.token(sid, 1, tool_use_id)

    def run():
        time.sleep(after_s)
        requests.post(
            f"{url}/api/tools/response", json={"result": "Nile, Rhine"}, headers={"Authorization": f"Bearer {token}"}
        )

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def test_chat_reattaches_to_a_running_task_and_replays_its_history(served, capsys, monkeypatch):
    agent, url = served
    monkeypatch.setattr(sys, "stdin", io.StringIO(""))  # not a terminal: the exit code, no REPL after
    task_id, sid, use = _running_task(agent, url)
    helper = _answer_later(agent, url, sid, use, 1.0)
    with pumping(agent, "turns"):
        code = cli.main(["chat", "--a2a", url, "--token", agent.peer_token, "--task", task_id])
    helper.join(5)
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "(A2A 1.0)" in err and "you: @worker two rivers" in err
    assert "completed" in err and "Nile, Rhine" in out


def test_a_broken_stream_is_resumed_from_its_last_event(served, capsys, monkeypatch):
    agent, url = served
    monkeypatch.setattr(sys, "stdin", io.StringIO(""))
    task_id, sid, use = _running_task(agent, url)
    # Each stream breaks after two events: the client resubscribes with Last-Event-ID each time.
    real = a2a_chat.sse_events
    resumed: list[str | None] = []

    def breaking(response):
        resumed.append(response.request.headers.get("Last-Event-ID"))
        for count, event in enumerate(real(response)):
            if count == 2:
                raise requests.exceptions.ChunkedEncodingError("cut")
            yield event

    monkeypatch.setattr(a2a_chat, "sse_events", breaking)
    helper = _answer_later(agent, url, sid, use, 0.5)
    with pumping(agent, "turns"):
        code = cli.main(["chat", "--a2a", url, "--token", agent.peer_token, "--task", task_id])
    helper.join(5)
    out, err = capsys.readouterr()
    assert code == 0, err
    assert resumed[0] is None and len(resumed) >= 2 and all(resumed[1:])  # each reconnect names the last event
    assert "Nile, Rhine" in out and out.count("Nile, Rhine") == 1  # nothing drawn twice


def test_piped_stdin_is_one_message(served, capsys, monkeypatch):
    agent, url = served
    monkeypatch.setattr(sys, "stdin", io.StringIO("first line\nsecond line\n"))
    with pumping(agent, "turns"):
        code = cli.main(["chat", "--a2a", url, "--token", agent.peer_token])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert err.count("task ") == 1  # one task, not one a line
    assert "first line" in out and "second line" in out


def test_chat_reattaches_at_a_terminal_in_tmux(served, tmp_path):
    """The same reattach at a real terminal: `flightdeck chat --a2a URL --task ID` in a tmux pane."""
    if shutil.which("tmux") is None:
        # .ci/run installs tmux: in CI a missing one is a broken setup, not a reason to skip the test.
        if os.environ.get("CI") == "true":
            pytest.fail("tmux is not installed, and CI=true: .ci/run installs it (apt-get)")
        pytest.skip("tmux is not installed")
    agent, url = served
    task_id, sid, use = _running_task(agent, url)
    session = f"fd-{uuid.uuid4().hex[:8]}"
    cli_path = Path(sys.executable).parent / "flightdeck"
    command = f"{cli_path} chat --a2a {url} --token {agent.peer_token} --task {task_id}; sleep 30"
    subprocess.run(["tmux", "new-session", "-d", "-s", session, "-x", "200", "-y", "50", command], check=True)
    try:
        helper = _answer_later(agent, url, sid, use, 1.0)
        screen = ""
        with pumping(agent, "turns"):
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline and "Nile, Rhine" not in screen:
                time.sleep(0.3)
                screen = subprocess.run(
                    ["tmux", "capture-pane", "-p", "-t", session], capture_output=True, text=True
                ).stdout
        helper.join(5)
    finally:
        subprocess.run(["tmux", "kill-session", "-t", session], check=False)
    assert "you: @worker two rivers" in screen and "Nile, Rhine" in screen, screen
