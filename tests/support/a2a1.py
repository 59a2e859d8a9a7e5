"""The a2a-sdk 1.x in a venv of its own (.venv-a2a1): the project's dev extra pins the 0.3 SDK for the v0.3
interop tests, and both cannot share one environment. Made on first use (python -m venv, pip install of the
pinned SDK), under a file lock so parallel test workers make it once; `./dev.sh test` and `.ci/run` need
nothing else. dev.sh makes it while it installs the dev venv (`python -m tests.support.a2a1`), so the tests
find it made."""

from __future__ import annotations

import fcntl
import subprocess
import sys
from pathlib import Path

SDK = "a2a-sdk[http-server]==1.3.0"
ROOT = Path(__file__).resolve().parents[2]
VENV = ROOT / ".venv-a2a1"
STAMP = VENV / ".installed-a2a-sdk-1.3.0"


def python() -> str:
    """The 1.x venv's interpreter, made if missing."""
    lock_path = ROOT / ".pytest_cache" / "venv-a2a1.lock"
    lock_path.parent.mkdir(exist_ok=True)
    with open(lock_path, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not STAMP.exists():
            if not (VENV / "bin" / "python").exists():
                subprocess.run([sys.executable, "-m", "venv", str(VENV)], check=True)
            subprocess.run(
                [str(VENV / "bin" / "python"), "-m", "pip", "install", "--quiet", SDK, "uvicorn"], check=True
            )
            STAMP.touch()
    return str(VENV / "bin" / "python")


if __name__ == "__main__":
    print(python())
