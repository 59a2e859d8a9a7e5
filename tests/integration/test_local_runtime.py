"""`flightdeck local up` as a user runs it: a subprocess, the READY line, real HTTP, SIGTERM.

The delegation test runs the real handlers end to end: orchestrator -> worker ->
callback -> final answer, every hop through the local gateway, moto and the pollers.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from flightdeck import config_file

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
READY_TIMEOUT_S = 60
ANSWER_TIMEOUT_S = 60
_direct = urllib.request.build_opener(urllib.request.ProxyHandler({}))


# --- helpers ----------------------------------------------------------------------------------


# The example's LOCAL ONLY token of the orchestrator's `user` peer (examples/two-agents.toml).
USER_TOKEN = config_file.load(config_file.DEFAULT_CONFIG).agents["orchestrator"].users["user"]


def http(method: str, url: str, body: Any = None, token: str | None = USER_TOKEN) -> tuple[int, Any]:
    data = None if body is None else json.dumps(body).encode()
    headers = {"Content-Type": "application/json", **({"Authorization": f"Bearer {token}"} if token else {})}
    request = urllib.request.Request(url, data=data, method=method, headers=headers)
    try:
        with _direct.open(request, timeout=15) as response:
            return response.status, json.loads(response.read() or b"null")
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode(errors="replace")


def _proc_stat(pid: int) -> tuple[int, str, str] | None:
    """(ppid, state, start time) of a process from /proc, or None when it is gone."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return None
    fields = raw.rsplit(")", 1)[1].split()  # the command name may hold spaces and parentheses
    return int(fields[1]), fields[0], fields[19]


def descendants(root: int) -> dict[int, str]:
    """Every live descendant of root: pid -> start time (to tell a reused pid apart)."""
    children: dict[int, list[int]] = {}
    starts: dict[int, str] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            stat = _proc_stat(int(entry))
            if stat:
                children.setdefault(stat[0], []).append(int(entry))
                starts[int(entry)] = stat[2]
    found: dict[int, str] = {}
    todo = [root]
    while todo:
        for child in children.get(todo.pop(), []):
            found[child] = starts[child]
            todo.append(child)
    return found


def still_alive(processes: dict[int, str]) -> list[int]:
    alive = []
    for pid, start in processes.items():
        stat = _proc_stat(pid)
        if stat and stat[2] == start and stat[1] != "Z":
            alive.append(pid)
    return alive


class LocalUp:
    """A `flightdeck local up` subprocess; stderr goes to a file shown when a test fails."""

    def __init__(self, *args: str):
        self.stderr = tempfile.NamedTemporaryFile("w+", prefix="flightdeck-up-", suffix=".log")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "flightdeck.cli", "local", "up", *args],
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=self.stderr,
            text=True,
        )

    def read_ready(self) -> dict[str, str]:
        line: list[str] = []
        reader = threading.Thread(target=lambda: line.append(self.process.stdout.readline()), daemon=True)
        reader.start()
        reader.join(READY_TIMEOUT_S)
        assert line and line[0].startswith("READY "), f"no READY line; stderr:\n{self.log()}"
        return json.loads(line[0].removeprefix("READY "))

    def log(self) -> str:
        self.stderr.seek(0)
        return self.stderr.read()[-5000:]

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process.stdout.close()
        self.stderr.close()


@pytest.fixture(scope="module")
def running() -> Iterator[tuple[LocalUp, dict[str, str]]]:
    up = LocalUp()
    try:
        yield up, up.read_ready()
    finally:
        up.close()


# --- tests ------------------------------------------------------------------------------------------


def test_ready_line_names_every_agent_of_the_default_config(running):
    _, urls = running
    assert set(urls) == {"orchestrator", "worker"}
    assert all(url.startswith("http://127.0.0.1:") for url in urls.values())


def test_both_agent_cards_are_served(running):
    _, urls = running
    for name, url in urls.items():
        status, card = http("GET", url + "/.well-known/agent-card.json")
        assert status == 200, card
        assert card["name"] == name


def test_unknown_paths_get_the_local_gateway_404(running):
    _, urls = running
    status, body = http("GET", urls["worker"] + "/no/such/path")
    assert status == 404 and json.loads(body)["error"]["code"] == "not_found"


def _final_session(base_url: str, session_id: str) -> dict[str, Any]:
    deadline = time.monotonic() + ANSWER_TIMEOUT_S
    session: Any = None
    while time.monotonic() < deadline:
        status, session = http("GET", f"{base_url}/api/sessions/{session_id}")
        if status == 200 and session.get("status") == "idle":
            last = session["messages"][-1]
            if last["role"] == "assistant" and not any("toolUse" in b for b in last["content"]):
                return session
        time.sleep(0.25)
    raise AssertionError(f"session {session_id} not idle after {ANSWER_TIMEOUT_S} s: {session}")


def test_chat_without_a_peer_token_is_refused(running):
    _, urls = running
    status, body = http("POST", urls["orchestrator"] + "/api/chat", {"content": "let me in"}, token=None)
    assert status == 401 and json.loads(body)["error"]["code"] == "unauthorized"


def test_delegation_round_trip_through_the_local_stack(running):
    up, urls = running
    status, accepted = http("POST", urls["orchestrator"] + "/api/chat", {"content": "@worker say hello"})
    assert 200 <= status < 300, accepted
    session = _final_session(urls["orchestrator"], accepted["session_id"])

    results = [
        block["toolResult"] for message in session["messages"] for block in message["content"] if "toolResult" in block
    ]
    assert len(results) == 1, session["messages"]
    assert results[0].get("status", "success") == "success", results[0]
    worker_answer = "".join(part.get("text", "") for part in results[0]["content"])
    assert "say hello" in worker_answer  # the worker answered the task it was given
    final_text = "".join(block.get("text", "") for block in session["messages"][-1]["content"])
    assert worker_answer in final_text, f"final answer {final_text!r} lacks the worker's {worker_answer!r}"


def test_sigterm_stops_the_stack_and_leaves_no_process_behind():
    up = LocalUp()
    try:
        urls = up.read_ready()
        children = descendants(up.process.pid)
        # moto and one process per agent, each started by the CLI.
        assert len(children) >= 1 + len(urls), children
        up.process.send_signal(signal.SIGTERM)
        assert up.process.wait(30) == 0, up.log()
        deadline = time.monotonic() + 5
        while still_alive(children) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert still_alive(children) == [], f"left behind: {still_alive(children)}"
        for url in urls.values():
            with pytest.raises(OSError):
                socket.create_connection(("127.0.0.1", int(url.rsplit(":", 1)[1])), timeout=1).close()
    finally:
        up.close()


def test_a_busy_port_is_a_one_line_error_and_exit_code_2():
    with socket.create_server(("127.0.0.1", 0)) as busy:
        port = busy.getsockname()[1]
        result = subprocess.run(
            [sys.executable, "-m", "flightdeck.cli", "local", "up", "--port", str(port)],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert result.returncode == 2
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert f"port {port}" in lines[0] and "already in use" in lines[0] and "--port" in lines[0]
    assert "Traceback" not in result.stderr
