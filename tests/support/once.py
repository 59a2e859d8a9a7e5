"""A session fixture's costly result made once per test run, not once per pytest-xdist worker.

`./dev.sh test` runs several workers (-n, --dist loadfile), each its own session: a session-scoped fixture
whose files are used by test modules on several would be made by each (a CDK synthesis: tens of seconds
of jsii). `once_per_run` makes it in a directory the workers share (the run's base temporary directory);
the first worker to ask makes it while the others wait on a lock, then read the same files.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest


def once_per_run(
    tmp_path_factory: pytest.TempPathFactory, name: str, make: Callable[[Path], dict[str, Any]]
) -> tuple[Path, dict[str, Any]]:
    """(directory, facts): make(directory) fills an empty directory and returns facts about it (JSON);
    called once per run, whichever worker asks first. A make that raises is tried again by the next asker."""
    base = tmp_path_factory.getbasetemp()
    # Under xdist each worker's base is <run's base>/popen-gwN: the parent is this run's, shared by the workers.
    root = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base
    directory, facts = root / name, root / f"{name}.json"
    with open(root / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not facts.exists():
            shutil.rmtree(directory, ignore_errors=True)
            directory.mkdir()
            made = make(directory)
            facts.write_text(json.dumps(made))
    return directory, json.loads(facts.read_text())
