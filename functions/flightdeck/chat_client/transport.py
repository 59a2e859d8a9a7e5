"""What both kinds of chat share: HTTP with clear failures, and the terminal the conversation is drawn on."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TextIO

import requests

from flightdeck.chat_client import DEFAULT_WAIT_S, TOKEN_ENV

EXIT_OK, EXIT_FAILURE, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130
CONNECT_TIMEOUT_S = 10.0
READ_TIMEOUT_S = 60.0
_TOKEN_SOURCES = f"--token or {TOKEN_ENV}"
_WHERE_TOKENS_COME_FROM = (
    "locally, the agent's [agents.NAME.users] (or [agents.NAME.peers]) entry of the deployment file; "
    "on AWS, `flightdeck peers add --agent NAME USER --channel user` prints one"
)


class Problem(Exception):
    """Something the user must fix or know about, said in one message.

    fatal: the conversation cannot go on (a wrong token, a wrong URL); else the REPL may take the next message.
    """

    def __init__(self, message: str, *, fatal: bool = True, code: int = EXIT_FAILURE):
        super().__init__(message)
        self.message, self.fatal, self.code = message, fatal, code


@dataclass
class Console:
    """Answers go to `out` (stdout: `answer=$(flightdeck chat URL "...")` keeps just them); the timeline,
    notes and errors to `err`. Timeline lines carry the seconds since the current message was sent."""

    out: TextIO = field(default_factory=lambda: sys.stdout)
    err: TextIO = field(default_factory=lambda: sys.stderr)
    clock: Callable[[], float] = time.monotonic
    # Whether an answer's text is printed as the model writes it (a think's text is known to be the answer
    # only once it ends: the text of a think that goes on to delegate is printed too). None: when `out` is
    # a terminal, so that `answer=$(flightdeck chat ...)` gets the answer and nothing else.
    live: bool | None = None
    started: float = 0.0
    _open_line: bool = False  # an answer is being streamed: its line is not ended yet
    _asides: list[str] = field(default_factory=list)  # timeline lines held until that line ends

    @property
    def shows_live_text(self) -> bool:
        if self.live is not None:
            return self.live
        isatty = getattr(self.out, "isatty", None)
        return bool(isatty()) if callable(isatty) else False

    def start(self) -> None:
        self.started = self.clock()

    def event(self, text: str, indent: int = 0) -> None:
        self.end_chunks()
        self.err.write(f"{self.clock() - self.started:7.2f}s  {'  ' * indent}{text}\n")
        self.err.flush()

    def aside(self, text: str, indent: int = 0) -> None:
        """A timeline line that does not cut an answer being written in two: held until its line ends."""
        if self._open_line:
            self._asides.append(f"{self.clock() - self.started:7.2f}s  {'  ' * indent}{text}")
        else:
            self.event(text, indent)

    def note(self, text: str) -> None:
        self.end_chunks()
        self.err.write(f"{text}\n")
        self.err.flush()

    def error(self, text: str) -> None:
        self.end_chunks()
        self.err.write(f"flightdeck chat: {text}\n")
        self.err.flush()

    def answer(self, text: str) -> None:
        self.end_chunks()
        self.out.write(text if text.endswith("\n") else text + "\n")
        self.out.flush()

    def chunk(self, text: str) -> None:
        """Part of an answer as it streams in: the line stays open for the next part."""
        if text:
            self.out.write(text)
            self.out.flush()
            self._open_line = not text.endswith("\n")

    def end_chunks(self) -> None:
        if self._open_line:
            self._open_line = False
            self.out.write("\n")
            self.out.flush()
        for line in self._asides:
            self.err.write(line + "\n")
        if self._asides:
            self._asides.clear()
            self.err.flush()


def preview(text: str, limit: int = 100) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def auth_header(token: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"} if token else {}


def server_message(response: requests.Response) -> str:
    """The message of an error answer: our REST shape {"error": {"code", "message"}}, JSON-RPC's, or the text."""
    try:
        body = response.json()
    except ValueError:
        return preview(response.text or response.reason or "", 300)
    error = body.get("error") if isinstance(body, dict) else None
    if isinstance(error, dict) and error.get("message"):
        code = error.get("code")
        details = error.get("details")
        where = ""
        if isinstance(details, list) and details and isinstance(details[0], dict) and details[0].get("loc"):
            where = " (at " + ".".join(str(p) for p in details[0]["loc"]) + ")"
        return f"{error['message']}{where}" + (f" [{code}]" if isinstance(code, str) else "")
    message = body.get("message") if isinstance(body, dict) else None
    if isinstance(message, str):
        return message
    return preview(json.dumps(body), 300)


def auth_problem(response: requests.Response, url: str, token: str | None) -> Problem | None:
    """A 401/403 said as what to fix; None for any other status."""
    said = server_message(response)
    if response.status_code == 401:
        if not token:
            return Problem(f"{url} needs a bearer token ({said}): pass {_TOKEN_SOURCES} ({_WHERE_TOKENS_COME_FROM})")
        return Problem(
            f"{url} refused the token as malformed or invalid ({said}): a peer token looks like "
            f"fdp_<peer id>_<secret>; check {_TOKEN_SOURCES} ({_WHERE_TOKENS_COME_FROM})"
        )
    if response.status_code == 403:
        return Problem(
            f"{url} does not accept this token ({said}): it is unknown, wrong or revoked; check "
            f"{_TOKEN_SOURCES}, or get a new one ({_WHERE_TOKENS_COME_FROM})"
        )
    return None


def send(
    http: requests.Session,
    method: str,
    url: str,
    *,
    token: str | None,
    body: Any = None,
    stream: bool = False,
    read_timeout_s: float = READ_TIMEOUT_S,
    headers: dict[str, str] | None = None,
) -> requests.Response:
    """One HTTP request; a network failure becomes a Problem that says what to check."""
    try:
        return http.request(
            method,
            url,
            json=body,
            stream=stream,
            timeout=(CONNECT_TIMEOUT_S, read_timeout_s),
            headers={**auth_header(token), **(headers or {})},
        )
    except requests.exceptions.ConnectionError as exc:
        text = str(exc)
        if "refused" in text.lower():
            raise Problem(
                f"cannot connect to {url}: connection refused. Is the agent running, and is this its "
                "URL (`flightdeck local up` prints each agent's)?",
                fatal=False,
            ) from None
        if "Name or service not known" in text or "nodename nor servname" in text or "getaddrinfo" in text:
            raise Problem(f"cannot connect to {url}: the host name does not resolve; check the URL") from None
        raise Problem(f"cannot connect to {url}: {preview(text, 300)}", fatal=False) from None
    except requests.exceptions.Timeout:
        raise Problem(f"{url} did not answer within {read_timeout_s:.0f} s", fatal=False) from None
    except requests.exceptions.InvalidURL as exc:
        raise Problem(f"{url} is not a valid URL ({exc})", code=EXIT_USAGE) from None
    except requests.exceptions.RequestException as exc:
        raise Problem(f"request to {url} failed: {preview(str(exc), 300)}", fatal=False) from None


@dataclass
class Polling:
    """How often a conversation asks for news: `first_s`, growing by `growth` while nothing changes, up to
    `max_s`; back to `first_s` on any change. `wait_s` bounds one message's wait for its answer."""

    first_s: float = 0.25
    max_s: float = 2.0
    growth: float = 1.5
    wait_s: float = DEFAULT_WAIT_S
    sleep: Callable[[float], None] = time.sleep
    _interval: float = 0.0

    def reset(self) -> None:
        self._interval = self.first_s

    def pause(self, changed: bool) -> None:
        self._interval = (
            self.first_s if changed or not self._interval else min(self.max_s, self._interval * self.growth)
        )
        self.sleep(self._interval)
