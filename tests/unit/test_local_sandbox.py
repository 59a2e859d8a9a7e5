"""The local runtime's sandboxes: each function's invocations in worker processes of its own, as on Lambda.

Handlers are the modules of tests/sandbox_handlers, run in real sandboxes (forked by the fork
server of this test process).
"""

from __future__ import annotations

import http.client
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from flightdeck.local.gateway import ApiGateway, GatewayServer
from flightdeck.local.invocation import FunctionRegistry, InvocationError
from flightdeck.local.lambda_api import AsyncInvoker, LambdaApi
from flightdeck.local.sandbox import PRELOAD, SandboxedFunction, Sandboxes, SandboxPolicy, lambda_variables

HANDLERS = "tests.sandbox_handlers"


class Lines:
    """What the sandboxes wrote, a line at a time (their output, as the host relays it)."""

    def __init__(self) -> None:
        self.lines: list[bytes] = []
        self._lock = threading.Lock()

    def __call__(self, line: bytes) -> None:
        with self._lock:
            self.lines.append(line)

    def json(self) -> list[dict]:
        with self._lock:
            return [json.loads(line) for line in self.lines if line.startswith(b"{")]


@pytest.fixture
def output() -> Lines:
    return Lines()


@pytest.fixture
def sandboxes(output) -> Iterator[Sandboxes]:
    made: list[SandboxedFunction] = []
    pool = Sandboxes(output=output)
    original = pool.function

    def function(*args, **kwargs) -> SandboxedFunction:
        made.append(original(*args, **kwargs))
        return made[-1]

    pool.function = function  # type: ignore[method-assign]
    yield pool
    for each in made:
        each.close()


def wait_for(condition, timeout_s: float = 120.0) -> None:  # a bound for a hang, not a speed (a busy machine)
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


# --- isolation ---------------------------------------------------------------------------------


def test_two_functions_invoked_at_once_keep_their_own_log_keys_caller_and_metrics(sandboxes, output, tmp_path):
    """Given two functions of one agent, each binding its log keys, its request's caller and a metric,
    when the second runs (and flushes its metrics) while the first is mid-invocation,
    then the first still has its own keys, caller and metrics, and each metrics line holds its own."""
    first = sandboxes.function(f"{HANDLERS}.probe", "agent-first")
    second = sandboxes.function(f"{HANDLERS}.probe", "agent-second")
    first_bound, second_done = tmp_path / "first-bound", tmp_path / "second-done"
    answers: dict[str, dict] = {}

    def run_first() -> None:
        answers["first"] = first.invoke({"name": "A", "signal": str(first_bound), "wait_for": str(second_done)})

    thread = threading.Thread(target=run_first)
    thread.start()
    wait_for(first_bound.exists)
    answers["second"] = second.invoke({"name": "B", "signal": str(second_done)})
    thread.join(120)

    assert answers["first"] == {"session_id": "A", "peer": "A", "metrics": ["ProbeA"], "pid": first.pids()[0]}
    assert answers["second"] == {"session_id": "B", "peer": "B", "metrics": ["ProbeB"], "pid": second.pids()[0]}
    assert first.pids() != second.pids()

    def written(kind) -> list[dict]:
        return [r for r in output.json() if kind(r)]

    def probe_lines(r) -> bool:
        return r.get("message") == "probe bound its keys"

    def metric_lines(r) -> bool:
        return "_aws" in r

    wait_for(lambda: len(written(probe_lines)) == 2 and len(written(metric_lines)) == 2)  # relayed as they come
    assert sorted(r["session_id"] for r in written(probe_lines)) == ["A", "B"]
    emf = written(metric_lines)
    assert sorted(name for r in emf for name in r if name.startswith("Probe")) == ["ProbeA", "ProbeB"]
    assert all(len([n for n in r if n.startswith("Probe")]) == 1 for r in emf)


def test_a_warm_sandbox_starts_each_invocation_without_the_previous_ones_keys(sandboxes):
    probe = sandboxes.function(f"{HANDLERS}.probe", "agent-probe")
    one = probe.invoke({"name": "one"})
    two = probe.invoke({"name": "two"})
    assert one["pid"] == two["pid"]  # the same warm sandbox
    assert (two["session_id"], two["peer"], two["metrics"]) == ("two", "two", ["Probetwo"])


def test_a_sandbox_has_the_function_environment_lambda_gives_it(output):
    pool = Sandboxes(environment={"SANDBOX_SETTING": "from the agent", "PATH": os.environ["PATH"]}, output=output)
    function = pool.function(f"{HANDLERS}.turn_worker", "agent-turn-worker", memory_mb=256, timeout_s=7)
    try:
        answer = function.invoke({})
    finally:
        function.close()
    environment = answer["environment"]
    assert environment["SANDBOX_SETTING"] == "from the agent"
    assert environment["AWS_LAMBDA_FUNCTION_NAME"] == "agent-turn-worker"
    assert environment["AWS_LAMBDA_FUNCTION_MEMORY_SIZE"] == "256"
    assert environment["AWS_LAMBDA_LOG_GROUP_NAME"] == "/aws/lambda/agent-turn-worker"
    assert environment["_HANDLER"] == f"{HANDLERS}.turn_worker.handler"
    assert 0 < answer["remaining_ms"] <= 7000


def test_concurrent_invocations_of_one_function_run_in_sandboxes_of_their_own_up_to_its_maximum(output):
    pool = Sandboxes(SandboxPolicy(per_function=2), output=output)
    function = pool.function(f"{HANDLERS}.turn_worker", "agent-turn-worker")
    try:
        with_threads = [threading.Thread(target=function.invoke, args=({"sleep": 0.3},)) for _ in range(3)]
        for thread in with_threads:
            thread.start()
        wait_for(lambda: len(function.pids()) == 2)
        for thread in with_threads:
            thread.join(10)
        assert len(function.pids()) == 2  # the third waited for one of the two
    finally:
        function.close()


# --- failures ----------------------------------------------------------------------------------


def test_a_sandbox_that_exits_mid_invocation_is_a_runtime_exit_error_and_is_replaced(sandboxes):
    function = sandboxes.function(f"{HANDLERS}.turn_worker", "agent-turn-worker")
    before = function.invoke({})["pid"]
    with pytest.raises(InvocationError) as failed:
        function.invoke({"exit": 3})
    assert failed.value.error_type == "Runtime.ExitError"
    assert "Runtime exited with error: exit status 3" in str(failed.value)
    after = function.invoke({})["pid"]
    assert after != before and function.pids() == [after]


def test_the_invoke_api_reports_a_crashed_sandbox_as_lambda_does(sandboxes):
    registry = FunctionRegistry("agent", package=HANDLERS, make=sandboxes.function)
    invoker = AsyncInvoker(lambda url, body: None, workers=1)
    try:
        status, headers, body = LambdaApi(registry, invoker, {}).invoke(
            "agent-turn-worker", "RequestResponse", b'{"exit": 7}'
        )
    finally:
        invoker.stop()
        registry.close()
    payload = json.loads(body)
    assert (status, headers["X-Amz-Function-Error"]) == (200, "Unhandled")
    assert payload["errorType"] == "Runtime.ExitError" and "exit status 7" in payload["errorMessage"]


def test_the_invoke_api_refuses_a_streaming_function_and_gives_its_sandbox_back(sandboxes, tmp_path):
    registry = FunctionRegistry("agent", package=HANDLERS, make=sandboxes.function)
    invoker = AsyncInvoker(lambda url, body: None, workers=1)
    event = json.dumps({"queryStringParameters": {"dir": str(tmp_path)}}).encode()
    try:
        api = LambdaApi(registry, invoker, {})
        for _ in range(2):
            status, headers, body = api.invoke("agent-session-events", "RequestResponse", event)
            assert status == 400 and headers["x-amzn-ErrorType"] == "InvalidParameterValueException"
        assert len(registry.function("session_events").pids()) == 1  # the second reused the first's sandbox
    finally:
        invoker.stop()


def test_an_invocation_past_the_timeout_is_stopped_and_its_sandbox_replaced(output):
    function = Sandboxes(output=output).function(f"{HANDLERS}.turn_worker", "agent-turn-worker", timeout_s=0.5)
    try:
        before = function.invoke({})["pid"]
        started = time.monotonic()
        with pytest.raises(InvocationError) as failed:
            function.invoke({"sleep": 30})
        assert time.monotonic() - started < 5
        assert failed.value.error_type == "Sandbox.Timedout"
        assert "Task timed out after 0.50 seconds" in str(failed.value)
        assert function.invoke({})["pid"] != before
    finally:
        function.close()


def test_a_handler_error_comes_back_with_its_type_message_and_trace_and_the_sandbox_stays(sandboxes, output):
    function = sandboxes.function(f"{HANDLERS}.turn_worker", "agent-turn-worker")
    pid = function.invoke({})["pid"]
    with pytest.raises(InvocationError) as failed:
        function.invoke({"sleep": "not a number"})
    assert failed.value.error_type == "TypeError" and failed.value.stack_trace
    assert function.invoke({})["pid"] == pid
    wait_for(lambda: any(line.startswith(b"[ERROR] TypeError") for line in output.lines))  # the runtime's log line


def test_a_failed_init_fails_the_invocation_and_the_next_one_tries_again(sandboxes, output):
    function = sandboxes.function(f"{HANDLERS}.broken", "agent-broken")
    for _ in range(2):
        with pytest.raises(InvocationError) as failed:
            function.invoke({})
        assert failed.value.error_type == "Runtime.ImportModuleError"
        assert "broken at import" in str(failed.value)
    assert function.pids() == []
    wait_for(lambda: sum(line.startswith(b"[ERROR] Runtime.ImportModuleError") for line in output.lines) == 2)


# --- streams -----------------------------------------------------------------------------------


@pytest.fixture
def stream_server(sandboxes) -> Iterator[tuple[GatewayServer, SandboxedFunction]]:
    registry = FunctionRegistry("tester", package=HANDLERS, make=sandboxes.function)
    server = GatewayServer(ApiGateway(registry), address=("127.0.0.1", 0))
    server.start_background()
    yield server, registry.function("session_events")  # type: ignore[misc]
    server.shutdown()
    server.server_close()


def test_a_stream_comes_from_its_sandbox_chunk_by_chunk_as_it_is_produced(stream_server, tmp_path):
    server, function = stream_server
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
    conn.request("GET", f"/api/sessions/s1/events?dir={tmp_path}")
    response = conn.getresponse()
    assert response.status == 200 and response.getheader("Transfer-Encoding") == "chunked"
    assert response.read1(100) == b"data: 1\n\n"  # while the generator waits for go
    assert not (tmp_path / "closed").exists()
    (tmp_path / "go").touch()
    assert response.read() == b"data: 2\n\ndata: 3\n\n"
    wait_for((tmp_path / "closed").exists)
    conn.close()


def test_a_reader_going_away_closes_the_stream_in_its_sandbox_which_serves_again(stream_server, tmp_path):
    server, function = stream_server
    (tmp_path / "go").touch()
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
    conn.request("GET", f"/api/sessions/s1/events?dir={tmp_path}&endless=1")
    response = conn.getresponse()
    assert response.read1(100).startswith(b"data: 1")
    conn.close()  # the reader goes away mid-stream
    wait_for((tmp_path / "closed").exists)
    pid = (tmp_path / "pid").read_text()
    again = tmp_path / "again"
    again.mkdir()
    (again / "go").touch()
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
    conn.request("GET", f"/api/sessions/s2/events?dir={again}")
    assert conn.getresponse().read() == b"data: 1\n\ndata: 2\n\ndata: 3\n\n"
    conn.close()
    assert (again / "pid").read_text() == pid  # the same sandbox, given back when the first stream closed
    assert function.pids() == [int(pid)]


# --- the fork server ---------------------------------------------------------------------------


def test_what_the_fork_server_preloads_reads_no_per_function_variable_and_leaves_the_handlers_to_the_sandbox():
    """The fork server imports the shared modules in the agent's environment, for every sandbox: none
    of them may read a variable a sandbox's function adds (it would read the wrong value, or none)."""
    probe = (
        "import importlib, json, os, sys\n"
        "read = set()\n"
        "class Recording(dict):\n"
        "    def __getitem__(self, key):\n"
        "        read.add(key)\n"
        "        return super().__getitem__(key)\n"
        "    def get(self, key, default=None):\n"
        "        read.add(key)\n"
        "        return super().get(key, default)\n"
        "    def __contains__(self, key):\n"
        "        read.add(key)\n"
        "        return super().__contains__(key)\n"
        "os.environ = Recording(os.environ)\n"
        f"for name in {list(PRELOAD)!r}:\n"
        "    importlib.import_module(name)\n"
        "from flightdeck.local import sandbox_preload\n"
        "print(json.dumps({'read': sorted(read), 'failed': sandbox_preload.preload(),\n"
        "                  'modules': sorted(m for m in sys.modules if m.startswith('flightdeck'))}))\n"
    )
    root = Path(__file__).resolve().parents[2]
    result = subprocess.run(
        [sys.executable, "-c", probe],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(root / "functions"), str(root)])},
    )
    assert result.returncode == 0, result.stderr
    found = json.loads(result.stdout.splitlines()[-1])
    per_function = set(lambda_variables("f", "m", 128, "us-east-1")) - {"AWS_REGION", "AWS_DEFAULT_REGION"}
    assert "POWERTOOLS_SERVICE_NAME" in found["read"]  # the recording sees what they read
    assert per_function & set(found["read"]) == set()
    assert found["failed"] == []
    assert {"flightdeck.wiring", "flightdeck.observability", "flightdeck.domain.turn_loop"} <= set(found["modules"])
    assert not [m for m in found["modules"] if m.startswith("flightdeck.handlers.")]


def test_a_stop_signal_lets_a_busy_sandbox_finish_its_invocation_and_it_serves_on(sandboxes):
    """The stack stops an agent with SIGTERM to its process group: its sandboxes get it too, and
    in-flight invocations finish (their host gives them a grace period, then ends them itself)."""
    function = sandboxes.function(f"{HANDLERS}.turn_worker", "agent-turn-worker")
    answers: list[dict] = []
    thread = threading.Thread(target=lambda: answers.append(function.invoke({"sleep": 0.5})))
    thread.start()
    wait_for(lambda: len(function.pids()) == 1)
    [pid] = function.pids()
    time.sleep(0.1)  # its invocation under way
    os.kill(pid, signal.SIGTERM)
    thread.join(10)
    assert answers and answers[0]["pid"] == pid
    assert function.invoke({})["pid"] == pid


def test_a_process_that_never_closed_its_functions_still_exits_and_takes_its_sandboxes_along(tmp_path):
    script = (
        "from flightdeck.local.sandbox import Sandboxes\n"
        "if __name__ == '__main__':\n"
        "    function = Sandboxes().function('tests.sandbox_handlers.turn_worker', 'agent-turn-worker')\n"
        "    print(function.invoke({})['pid'], flush=True)\n"
    )
    (tmp_path / "forgetful.py").write_text(script)
    root = Path(__file__).resolve().parents[2]
    result = subprocess.run(
        [sys.executable, str(tmp_path / "forgetful.py")],
        capture_output=True,
        text=True,
        timeout=30,
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(root / "functions"), str(root)])},
    )
    assert result.returncode == 0, result.stderr
    wait_for(lambda: not _running(int(result.stdout.split()[-1])))


def _running(pid: int) -> bool:
    """Whether the process still runs (a sandbox is the fork server's child, reaped by it)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"
