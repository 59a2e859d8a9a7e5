"""`flightdeck bench --quick --json FILE`, started in the background when the tests are collected.

tests/integration/test_bench_quick.py checks what the quick bench prints and writes. The bench takes
100-150 s on the 2-core CI machine, most of it waiting on its local stacks (about 50 s of CPU): run in
its test module, it kept one of `./dev.sh test`'s two xdist workers waiting that long. So the first
worker to collect the module starts it at once (tests/conftest.py, pytest_collection_finish), in a
directory the workers share; the module runs last (tests/conftest.py, RUN_LAST) and reads what it wrote,
waiting for it if it is not done. Never a timed test: the bench's figures are checked for their shape.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

MODULE = "tests/integration/test_bench_quick.py"
TIMEOUT_S = 600
# Runs the bench and writes its exit status when it ends, whichever worker waits for it.
_WRAPPER = (
    "import subprocess, sys; "
    "out, err, status = (open(p, 'w') for p in sys.argv[1:4]); "
    "code = subprocess.run(sys.argv[4:], stdout=out, stderr=err).returncode; "
    "status.write(str(code))"
)
_started: list[subprocess.Popen] = []


def _directory(config: pytest.Config) -> Path:
    base = config._tmp_path_factory.getbasetemp()  # type: ignore[attr-defined]
    # Under xdist each worker's base is <run's base>/popen-gwN: the parent is this run's, shared by the workers.
    return (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "bench-quick"


def start(session: pytest.Session) -> None:
    """Starts the bench if the bench module was collected and no other worker has started it."""
    if not any(item.nodeid.startswith(MODULE + "::") for item in session.items):
        return
    directory = _directory(session.config)
    try:
        directory.mkdir()  # the first worker to get here starts it
    except FileExistsError:
        return
    _started.append(subprocess.Popen(_command(directory), stdin=subprocess.DEVNULL))


def _command(directory: Path) -> list[str]:
    bench = [sys.executable, "-m", "flightdeck.cli", "bench", "--quick", "--json", str(directory / "bench.json")]
    files = [str(directory / name) for name in ("stdout", "stderr", "status")]
    return [sys.executable, "-c", _WRAPPER, *files, *bench]


def stop(interrupted: bool) -> None:
    """At the end of the worker's session: the bench it started ends (killed if the run was interrupted)."""
    for process in _started:
        if interrupted:
            process.kill()
        try:
            process.wait(timeout=TIMEOUT_S)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def result(config: pytest.Config) -> dict[str, Any]:
    """The bench's JSON plus its stdout under `_stdout`, once it has ended; the test fails if it failed."""
    directory = _directory(config)
    status = directory / "status"
    if not directory.exists():  # collected without the hook (never by ./dev.sh test): run it here
        directory.mkdir(parents=True)
        subprocess.run(_command(directory), stdin=subprocess.DEVNULL, timeout=TIMEOUT_S, check=True)
    deadline = time.monotonic() + TIMEOUT_S
    while not (status.exists() and status.read_text()):
        assert time.monotonic() < deadline, f"the bench did not end within {TIMEOUT_S} s"
        time.sleep(0.5)
    stderr = (directory / "stderr").read_text()
    assert status.read_text() == "0", stderr[-3000:]
    data = json.loads((directory / "bench.json").read_text())
    data["_stdout"] = (directory / "stdout").read_text()
    return data
