"""Chat with one of our agents: POST /api/chat, then GET /api/sessions/{id} until the session is idle.

The timeline is drawn from what the API exposes, the session's messages (Converse shapes): each
assistant message is one think iteration of the model (its reply); its toolUse blocks are the
delegations it starts ("delegating to worker: task"); the toolResult blocks that come back say who
answered, failed or timed out; an assistant message without tool calls is an answer.
"""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import quote, urlsplit

import requests
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from flightdeck.chat_client.transport import (
    EXIT_FAILURE,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_USAGE,
    Console,
    Polling,
    Problem,
    auth_problem,
    preview,
    send,
    server_message,
)

DELEGATE_TOOL_PREFIX = "ask_"  # flightdeck.domain.agent.DelegateTool.name, unless a tool_name is configured


# The client's own, lenient view of the API's payloads (flightdeck.api.models is the server's, strict
# one): a newer server may add fields or statuses ("queued"), and the client keeps working.
class _Lenient(BaseModel):
    model_config = ConfigDict(extra="allow")


class ChatAccepted(_Lenient):
    session_id: str
    turn: int = 0
    iteration: int | None = 0  # null while the message is queued
    status: str = "accepted"
    position: int | None = None  # in the session's inbox, when the answer is 202 "queued"


class SessionView(_Lenient):
    session_id: str
    status: str
    turn: int = 0
    iteration: int = 0
    messages: list[dict[str, Any]] = Field(default_factory=list)


def base_url(url: str) -> str:
    """The agent's base URL from what the user typed (with or without a trailing /api/chat)."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise Problem(f"{url!r} is not an agent URL: give one starting with http:// or https://, as "
                      "`flightdeck local up` prints it", code=EXIT_USAGE)
    url = url.rstrip("/")
    return url.removesuffix("/api/chat").rstrip("/")


def _blocks(message: dict[str, Any]) -> list[dict[str, Any]]:
    content = message.get("content")
    return [b for b in content if isinstance(b, dict)] if isinstance(content, list) else []


def _text(blocks: list[dict[str, Any]]) -> str:
    parts = []
    for block in blocks:
        if isinstance(block.get("text"), str):
            parts.append(block["text"])
        elif "json" in block:
            parts.append(json.dumps(block["json"], ensure_ascii=False))
    return "\n".join(parts)


def delegate_of(tool_name: str) -> str:
    return tool_name.removeprefix(DELEGATE_TOOL_PREFIX) if tool_name.startswith(DELEGATE_TOOL_PREFIX) else tool_name


def describe_result(who: str, result: dict[str, Any]) -> str:
    """One timeline line for a toolResult block: answered, timed out, failed (and why)."""
    text = _text(_blocks(result))
    if result.get("status") == "success":
        return f"{who} answered: {preview(text)}"
    try:
        body = json.loads(text)
    except ValueError:
        body = None
    if not isinstance(body, dict):
        return f"{who} failed: {preview(text)}"
    reason, detail = body.get("reason"), body.get("detail") or body.get("question") or body.get("message")
    if reason == "timeout":
        return f"{who} timed out: no answer before the delegation's deadline"
    if body.get("status") not in (None, "error"):  # e.g. a delegate asking for input
        return f"{who}: {body['status']}" + (f": {preview(str(detail))}" if detail else "")
    if reason:
        return f"{who} failed: {reason}" + (f" ({preview(str(detail))})" if detail else "")
    return f"{who} failed: {preview(text)}"


class Timeline:
    """Turns the session's new messages into timeline lines; returns the answers among them."""

    def __init__(self, console: Console):
        self.console = console
        self.shown = 0  # messages of the session already drawn
        self.thinks = 0  # assistant messages so far: the think iteration of the next one is thinks + 1
        self.tools: dict[str, str] = {}  # toolUseId -> who it went to

    def catch_up(self, messages: list[dict[str, Any]]) -> None:
        """Take in a session's history without drawing it (joining with --session)."""
        for message in messages:
            if message.get("role") == "assistant":
                self.thinks += 1
            for block in _blocks(message):
                use = block.get("toolUse")
                if isinstance(use, dict):
                    self.tools[str(use.get("toolUseId"))] = delegate_of(str(use.get("name", "")))
        self.shown = len(messages)

    def draw(self, messages: list[dict[str, Any]], mine: str | None,
             seen_mine: bool = False) -> tuple[list[tuple[str, bool]], bool]:
        """Draw messages[self.shown:]: (each answer among them with whether it came after `mine`, whether
        `mine` has been seen). `mine`: the message just sent, looked for among the user messages."""
        if len(messages) < self.shown:  # the server trimmed the history: start over from what it has
            self.shown = len(messages)
        answers: list[tuple[str, bool]] = []
        for message in messages[self.shown:]:
            blocks = _blocks(message)
            if message.get("role") == "assistant":
                answer = self._think(blocks)
                if answer is not None:
                    answers.append((answer, seen_mine))
                continue
            for block in blocks:
                result = block.get("toolResult")
                if isinstance(result, dict):
                    who = self.tools.get(str(result.get("toolUseId")), "a tool")
                    self.console.event(describe_result(who, result), 1)
            text = _text([b for b in blocks if "text" in b])
            if text and not any("toolResult" in b for b in blocks):
                if mine is not None and not seen_mine and mine in text:
                    seen_mine = True  # in the session now (an inbox may join several messages into one)
                else:
                    self.console.event(f"message: {preview(text)}")
        self.shown = len(messages)
        return answers, seen_mine

    def _think(self, blocks: list[dict[str, Any]]) -> str | None:
        self.thinks += 1
        text = _text([b for b in blocks if "text" in b])
        uses = [b["toolUse"] for b in blocks if isinstance(b.get("toolUse"), dict)]
        if not uses:
            self.console.event(f"think {self.thinks}: answer")
            return text
        self.console.event(f"think {self.thinks}" + (f": {preview(text, 80)}" if text else ""))
        for use in uses:
            name, args = str(use.get("name", "")), use.get("input")
            self.tools[str(use.get("toolUseId"))] = who = delegate_of(name)
            if isinstance(args, dict) and set(args) == {"task"}:
                self.console.event(f"delegating to {who}: {preview(str(args['task']))}", 1)
            else:
                self.console.event(f"running {name}: {preview(json.dumps(args, ensure_ascii=False))}", 1)
        return None


class SessionChat:
    """A conversation with one of our agents: one session, one message at a time."""

    def __init__(self, url: str, token: str | None, session_id: str | None, console: Console,
                 polling: Polling, http: requests.Session):
        self.url = base_url(url)
        self.token, self.session_id = token, session_id
        self.console, self.polling, self.http = console, polling, http
        self.timeline = Timeline(console)
        self.idle = True  # as far as this client knows: it only sends to an idle session

    # --- HTTP -------------------------------------------------------------------------------

    def _refused(self, response: requests.Response) -> Problem:
        problem = auth_problem(response, self.url, self.token)
        if problem is not None:
            return problem
        said, status = server_message(response), response.status_code
        if status == 404:
            if "session_not_found" in said and self.session_id:
                return Problem(f"{self.url} has no session {self.session_id!r} for this token ({said}); a "
                               "session of another peer does not exist for you: drop --session to start a new one")
            return Problem(f"{self.url} has no such route ({said}): give the agent's base URL, as `flightdeck "
                           "local up` prints it; for another A2A agent use --a2a CARD_URL")
        if status == 413:
            return Problem(f"the agent refused the message as too large ({said})", fatal=False)
        if status in (400, 422):
            return Problem(f"the agent refused the message ({status}: {said})", fatal=False)
        return Problem(f"{self.url} answered {status} ({said}); try again", fatal=False)

    def _json(self, response: requests.Response) -> Any:
        try:
            return response.json()
        except ValueError:
            raise Problem(f"{self.url} did not answer JSON (HTTP {response.status_code}): is it a Flightdeck "
                          "agent's base URL?") from None

    def check(self) -> None:
        """Before the first message of a REPL: is the agent there, and does it take our token?"""
        if self.session_id:
            self._catch_up()
            return
        response = send(self.http, "GET", f"{self.url}/api/sessions?limit=1", token=self.token)
        if response.status_code in (401, 403):
            raise self._refused(response)

    def _get(self) -> SessionView:
        assert self.session_id is not None
        response = send(self.http, "GET", f"{self.url}/api/sessions/{quote(self.session_id, safe='')}",
                        token=self.token)
        if response.status_code != 200:
            raise self._refused(response)
        try:
            return SessionView.model_validate(self._json(response))
        except ValidationError as exc:
            raise Problem(f"{self.url} answered a session this client cannot read: {preview(str(exc), 300)}") from None

    def _catch_up(self) -> None:
        view = self._get()
        self.timeline.catch_up(view.messages)
        self.idle = view.status == "idle"
        self.console.note(f"session {view.session_id}: {view.turn} message(s) so far, "
                          f"{view.iteration} think iteration(s), {view.status}")

    def _post(self, content: str) -> ChatAccepted | None:
        """The message accepted (or queued in the session's inbox); None when the session could not take it (409)."""
        body: dict[str, Any] = {"content": content}
        if self.session_id:
            body["session_id"] = self.session_id
        response = send(self.http, "POST", f"{self.url}/api/chat", token=self.token, body=body)
        if response.status_code == 409:
            return None
        if response.status_code not in (200, 202):
            raise self._refused(response)
        try:
            return ChatAccepted.model_validate(self._json(response))
        except ValidationError as exc:
            raise Problem(f"{self.url} accepted the message with an answer this client cannot read: "
                          f"{preview(str(exc), 300)}") from None

    # --- the conversation -------------------------------------------------------------------

    def say(self, content: str) -> int:
        """Send one message, draw the timeline, print the answer; the exit code of a one-shot chat."""
        self.console.start()
        try:
            if not self.idle:
                self.console.event("the session is busy: waiting until it is idle before sending")
                self._watch(mine=None, accepted=None)
            accepted = self._post(content)
            while accepted is None:  # someone else's turn started in between
                self.console.event("the session is busy: waiting until it is idle before sending")
                self._watch(mine=None, accepted=None)
                accepted = self._post(content)
            if self.session_id is None:
                self.console.note(f"session {accepted.session_id}")
            self.session_id = accepted.session_id
            self.idle = False
            if accepted.status == "queued":
                where = f" (position {accepted.position})" if accepted.position is not None else ""
                self.console.event(f"queued{where}: it is its own turn once the turns before it end")
            else:
                self.console.event(f"sent: turn {accepted.turn}, think iteration {accepted.iteration}")
            answers = self._watch(mine=content, accepted=accepted)
        except KeyboardInterrupt:
            self.idle = False  # not known any more: the next message waits for idle first
            if self.session_id:
                self.console.note(f"\nstopped watching session {self.session_id}; it keeps working (a chat "
                                  f"session is not canceled from here). Follow it with: flightdeck chat {self.url} "
                                  f"--session {self.session_id}")
            else:
                self.console.note("\ninterrupted before the agent took the message")
            return EXIT_INTERRUPTED
        if not answers:
            self.console.note("the session is idle, with no answer to this message")
            return EXIT_FAILURE
        return EXIT_OK

    def _watch(self, mine: str | None, accepted: ChatAccepted | None) -> list[str]:
        """Poll the session, drawing what is new, until it is idle (and has taken `mine`); the answers drawn."""
        deadline = self.console.clock() + self.polling.wait_s
        self.polling.reset()
        answers: list[str] = []
        seen_mine, status = False, ""
        while True:
            view = self._get()
            before = self.timeline.shown
            drawn, seen_mine = self.timeline.draw(view.messages, mine, seen_mine)
            for answer, to_mine in drawn:
                if to_mine:
                    self.console.answer(answer)
                    answers.append(answer)
                else:  # an answer to an earlier message (waiting to send, or queued behind it): drawn only
                    self.console.event(f"answer to an earlier message: {preview(answer)}", 1)
            changed = self.timeline.shown != before or view.status != status
            status = view.status
            self.idle = status == "idle"
            taken = accepted is None or seen_mine or (accepted.status != "queued" and view.turn >= accepted.turn)
            if self.idle and taken:
                if accepted is not None:
                    self.console.event(f"idle: {view.turn} message(s), {view.iteration} think iteration(s)")
                return answers
            if self.console.clock() > deadline:
                raise Problem(f"no answer within {self.polling.wait_s:.0f} s; session {self.session_id} is "
                              f"still {status}. Follow it with: flightdeck chat {self.url} --session "
                              f"{self.session_id}", fatal=False)
            self.polling.pause(changed)

    def print_card(self) -> None:
        response = send(self.http, "GET", f"{self.url}/.well-known/agent-card.json", token=None)
        if response.status_code != 200:
            raise Problem(f"{self.url} has no agent card (HTTP {response.status_code})", fatal=False)
        self.console.answer(json.dumps(self._json(response), indent=2, ensure_ascii=False))
