"""A stream steered through files in the directory the query's `dir` names.

It sends `data: 1`, waits (up to 10 s) for <dir>/go, then sends `data: 2` and `data: 3`; with
?endless=1 it then sends keep-alive comments until its reader goes away. When its generator is
closed or ends it creates <dir>/closed. Each chunk names the sandbox's process id in <dir>/pid.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from flightdeck.api.sse import StreamReply


def _chunks(directory: Path, endless: bool) -> Iterator[bytes]:
    try:
        (directory / "pid").write_text(str(os.getpid()))
        yield b"data: 1\n\n"
        deadline = time.monotonic() + 10
        while not (directory / "go").exists() and time.monotonic() < deadline:
            time.sleep(0.01)
        yield b"data: 2\n\n"
        yield b"data: 3\n\n"
        while endless:
            yield b": keep-alive\n\n"
            time.sleep(0.01)
    finally:
        (directory / "closed").touch()


def handler(event: dict[str, Any], context: Any) -> StreamReply:
    query = event.get("queryStringParameters") or {}
    return StreamReply(_chunks(Path(query["dir"]), bool(query.get("endless"))))
