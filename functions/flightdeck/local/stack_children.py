"""The local stack's child processes (flightdeck.local.stack): one child (whether it exited, the last lines of its
output to explain a failed start), the environment every child starts from (nothing that could reach real AWS),
and what an agent whose model is Bedrock gets on top of it (this machine's credentials, Bedrock's endpoint).
"""

from __future__ import annotations

import collections
import os
import subprocess
import threading
from dataclasses import dataclass, field
from typing import TextIO

from flightdeck.local.invocation import LOCAL_REGION
from flightdeck.local.net import StackError

# Lines of a child's output kept to explain a failed start.
TAIL_LINES = 40
LOOPBACK_NAMES = ("127.0.0.1", "localhost", "::1")


@dataclass
class Child:
    """One child process of the stack (moto, an agent, an MCP server): its last lines of output, its relays."""

    name: str
    process: subprocess.Popen[bytes]
    tail: collections.deque[str] = field(default_factory=lambda: collections.deque(maxlen=TAIL_LINES))
    relays: list[threading.Thread] = field(default_factory=list)
    stopping: bool = False
    log_file: TextIO | None = None  # every line it writes (LocalStack's log_dir)

    @property
    def pid(self) -> int:
        return self.process.pid

    def exited(self) -> bool:
        """Whether the process has exited, without reaping it (its pid keeps its process group reserved)."""
        try:
            return os.waitid(os.P_PID, self.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
        except ChildProcessError:
            return True  # already reaped

    def describe_exit(self) -> str:
        output = "\n".join(self.tail) or "(no output)"
        return f"{self.name} exited with code {self.process.poll()}; its last output:\n{output}"


def child_base_environment() -> dict[str, str]:
    """The parent's environment without anything that could reach real AWS."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env["AWS_CONFIG_FILE"] = env["AWS_SHARED_CREDENTIALS_FILE"] = os.devnull
    no_proxy = [p for p in env.get("NO_PROXY", env.get("no_proxy", "")).split(",") if p]
    env["NO_PROXY"] = env["no_proxy"] = ",".join(dict.fromkeys([*no_proxy, *LOOPBACK_NAMES]))
    env["PYTHONUNBUFFERED"] = "1"  # log lines reach the relay as they are written
    return env


def bedrock_access() -> dict[str, str]:
    """What an agent whose model is Bedrock needs to reach it, while everything else goes to moto.

    moto has no Bedrock, so the Bedrock Runtime endpoint alone points at AWS (boto3's
    service-specific AWS_ENDPOINT_URL_BEDROCK_RUNTIME), in the local stack's region (its requests
    are signed for that region), and the agent gets this machine's credentials instead of moto's
    dummy ones (moto accepts any). Only that agent's process sees them.
    """
    import boto3
    from botocore.exceptions import BotoCoreError

    try:
        found = boto3.Session().get_credentials()
        frozen = found.get_frozen_credentials() if found is not None else None
    except BotoCoreError as exc:
        raise StackError(f"cannot read AWS credentials for Bedrock: {exc}") from None
    if frozen is None or not frozen.access_key or not frozen.secret_key:
        raise StackError(
            'an agent\'s model is "bedrock" but there are no AWS credentials: provide them '
            "(aws configure, AWS_PROFILE) or run it with the local model (--local-model)"
        )
    return {
        "AWS_ACCESS_KEY_ID": frozen.access_key,
        "AWS_SECRET_ACCESS_KEY": frozen.secret_key,
        **({"AWS_SESSION_TOKEN": frozen.token} if frozen.token else {}),
        "AWS_ENDPOINT_URL_BEDROCK_RUNTIME": f"https://bedrock-runtime.{LOCAL_REGION}.amazonaws.com",
    }
