"""Chat with one of our agents: POST /api/chat, then follow the session until the answer is in.

Following is GET /api/sessions/{id}/events, the session's timeline as Server-Sent Events
(flightdeck.domain.timeline): each step as it happens, and the answer's text as the model writes
it (`text_delta`). Where that route is missing or refused (404, 405, 501), or does not follow (with
STREAMING=off it answers the timeline so far and ends), the client polls GET /api/sessions/{id}
instead; a stream that breaks, or ends at the server's time limit, is opened again (it replays the
timeline from the start), and polled after a few tries that bring nothing new.

Both ways draw one timeline, keyed by the server's event ids (input.N, think.N, tool.<toolUseId>,
result.<toolUseId>, progress.N.n, answer.N), which polling derives from the session's messages as the
server does (`timeline_of`; a waiting turn's progress counts come from its TURN item, which only the
stream sends): a reconnect, or a switch to polling, draws nothing twice. From the messages (Converse
shapes): each assistant message is one think iteration of the model (its reply); its toolUse blocks
are the delegations it starts ("delegating to worker: task"); the toolResult blocks that come back
say who answered, failed or timed out; an assistant message without tool calls is an answer.
"""

from __future__ import annotations

import json
from contextlib import closing
from dataclasses import dataclass, field
from typing import Any, Literal
from urllib.parse import quote

import requests
from pydantic import ValidationError

from flightdeck.chat_client.session_view import ChatAccepted, SessionView, base_url, describe_result, timeline_of
from flightdeck.chat_client.sse import Comment, StreamError, read_events
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

TEXT_DELTA = "text_delta"  # flightdeck.domain.session_events.TEXT_DELTA
# The timeline kinds of a tool's result (flightdeck.domain.timeline).
RESULT_KINDS = frozenset({"callback_accepted", "timeout", "dispatch_failed", "canceled", "tool_result"})
# A quiet stream carries keep-alive comments (every 15 s by default): past this without a byte, it is
# taken as broken and opened again.
STREAM_READ_TIMEOUT_S = 120.0
# Streams opened in a row that bring nothing new before the client polls instead.
MAX_FRUITLESS_STREAMS = 3
# Statuses with which a server says it has no events route for us (then the conversation polls).
_NO_EVENTS_ROUTE = (404, 405, 501)

Outcome = Literal["done", "reconnect", "poll", "off"]


def _holds(text: str, mine: str) -> bool:
    """Whether a user message's text (the events route's preview of it, cut with "…") holds `mine` (an inbox
    may join several messages into one)."""
    return mine in text or (text.endswith("…") and mine.startswith(text[:-1]))


@dataclass
class _Watch:
    """Following the session for one message (`mine`; None: waiting for the session to be idle)."""

    mine: str | None
    accepted: ChatAccepted | None
    deadline: float
    seen_mine: bool = False  # the message is in the session: the next answer is its answer
    answers: list[str] = field(default_factory=list)
    live: dict[int, str] = field(default_factory=dict)  # think -> its text printed as the model wrote it

    def is_mine(self, event_id: str, text: str) -> bool:
        if self.mine is None or self.seen_mine:
            return False
        accepted = self.accepted
        if accepted is not None and accepted.status != "queued" and accepted.turn > 0:
            return event_id == f"input.{accepted.turn}"  # the turn it started
        return _holds(text, self.mine)

    @property
    def taken(self) -> bool:
        return self.mine is None or self.seen_mine


class SessionChat:
    """A conversation with one of our agents: one session, one message at a time."""

    def __init__(
        self,
        url: str,
        token: str | None,
        session_id: str | None,
        console: Console,
        polling: Polling,
        http: requests.Session,
    ):
        self.url = base_url(url)
        self.token, self.session_id = token, session_id
        self.console, self.polling, self.http = console, polling, http
        self.drawn: set[str] = set()  # the timeline's event ids drawn so far
        self.idle = True  # as far as this client knows: it waits for a busy session before sending
        self.streams = True  # whether the agent streams the session's events (until it says otherwise)
        self.last_raw: Any = None  # the last JSON the agent answered (a body, or an event's data): /raw

    # --- HTTP -------------------------------------------------------------------------------

    def _not_an_agent(self) -> Problem | None:
        """After an answer no agent of ours gives: GET /health (public) tells whether this is one at all.
        A Problem saying what answered instead (the moto URL, another web server), or None: it is an agent."""
        try:
            response = send(self.http, "GET", f"{self.url}/health", token=None)
        except Problem:
            return None  # unreachable now: the answer that led here says enough
        try:
            body = response.json()
        except ValueError:
            body = None
        healthy = response.status_code == 200 and isinstance(body, dict) and body.get("status") == "ok"
        error = body.get("error") if isinstance(body, dict) else None
        ours = isinstance(error, dict) and isinstance(error.get("code"), str) and "message" in error
        if healthy or ours:  # an agent; or one of ours under a wrong path (its own 404 says so)
            return None
        said = server_message(response) if response.content else "an empty body"
        return Problem(
            f"this is not a Flightdeck agent: {self.url} answered {response.status_code} to GET /health ({said}). "
            "Give an agent's base URL: the one `flightdeck local up` prints for it (not moto's), or its stage URL "
            "on AWS (the ApiUrl output); for another A2A agent use --a2a CARD_URL",
            code=EXIT_USAGE,
        )

    def _refused(self, response: requests.Response) -> Problem:
        problem = auth_problem(response, self.url, self.token)
        if problem is not None:
            return problem
        said, status = server_message(response), response.status_code
        if status == 404 or status >= 500:
            stranger = self._not_an_agent()
            if stranger is not None:
                return stranger
        if status == 404:
            if "session_not_found" in said and self.session_id:
                return Problem(
                    f"{self.url} has no session {self.session_id!r} for this token ({said}); a "
                    "session of another peer does not exist for you: drop --session to start a new one"
                )
            return Problem(
                f"{self.url} has no such route ({said}): give the agent's base URL, as `flightdeck "
                "local up` prints it; for another A2A agent use --a2a CARD_URL"
            )
        if status == 413:
            return Problem(f"the agent refused the message as too large ({said})", fatal=False)
        if status in (400, 422):
            return Problem(f"the agent refused the message ({status}: {said})", fatal=False)
        return Problem(f"{self.url} answered {status} ({said}); try again", fatal=False)

    def _json(self, response: requests.Response) -> Any:
        try:
            self.last_raw = response.json()
            return self.last_raw
        except ValueError:
            raise self._not_an_agent() or Problem(
                f"{self.url} did not answer JSON (HTTP {response.status_code}): is it a Flightdeck agent's base URL?"
            ) from None

    @property
    def _session_path(self) -> str:
        assert self.session_id is not None
        return f"{self.url}/api/sessions/{quote(self.session_id, safe='')}"

    def check(self) -> None:
        """Before the first message of a REPL: is the agent there, and does it take our token?"""
        if self.session_id:
            self._catch_up()
            return
        response = send(self.http, "GET", f"{self.url}/api/sessions?limit=1", token=self.token)
        if response.status_code in (401, 403):
            raise self._refused(response)
        if response.status_code != 200:
            stranger = self._not_an_agent()
            if stranger is not None:
                raise stranger

    def _get(self) -> SessionView:
        response = send(self.http, "GET", self._session_path, token=self.token)
        if response.status_code != 200:
            raise self._refused(response)
        try:
            return SessionView.model_validate(self._json(response))
        except ValidationError as exc:
            raise Problem(f"{self.url} answered a session this client cannot read: {preview(str(exc), 300)}") from None

    def _catch_up(self) -> None:
        """Joining a session (--session): its history is taken as drawn; what happens next is drawn."""
        view = self._get()
        self.drawn.update(event["id"] for event in timeline_of(view.messages, busy=False))
        self.idle = view.status == "idle"
        self.console.note(
            f"session {view.session_id}: {view.turn} message(s) so far, "
            f"{view.iteration} think iteration(s), {view.status}"
        )

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
            raise Problem(
                f"{self.url} accepted the message with an answer this client cannot read: {preview(str(exc), 300)}"
            ) from None

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
            self.console.end_chunks()
            self.idle = False  # not known any more: the next message waits for idle first
            if self.session_id:
                self.console.note(
                    f"\nstopped watching session {self.session_id}; it keeps working (a chat "
                    f"session is not canceled from here). Follow it with: flightdeck chat {self.url} "
                    f"--session {self.session_id}"
                )
            else:
                self.console.note("\ninterrupted before the agent took the message")
            return EXIT_INTERRUPTED
        if not answers:
            self.console.note("the session is idle, with no answer to this message")
            return EXIT_FAILURE
        return EXIT_OK

    def _watch(self, mine: str | None, accepted: ChatAccepted | None) -> list[str]:
        """Follow the session, drawing what is new, until the answer to `mine` is in (or, with none, until the
        session is idle); the answers printed."""
        watch = _Watch(mine, accepted, deadline=self.console.clock() + self.polling.wait_s)
        if not (self.streams and self._stream(watch)):
            self._poll(watch)
        if watch.answers:
            # The turn ended with the answer: the next message is sent at once (a session busy again by
            # then answers 409, and the client waits; one with an inbox queues it).
            self.idle = True
        return watch.answers

    def _check_deadline(self, watch: _Watch, status: str = "busy") -> None:
        if self.console.clock() > watch.deadline:
            raise Problem(
                f"no answer within {self.polling.wait_s:.0f} s; session {self.session_id} is "
                f"still {status}. Follow it with: flightdeck chat {self.url} --session "
                f"{self.session_id}",
                fatal=False,
            )

    # --- drawing: one timeline event (the events route's shape), streamed or polled ---------------

    def _step(self, watch: _Watch, event: dict[str, Any]) -> bool:
        """Draw one timeline event, once; whether it is the answer to the message watched."""
        kind, event_id = event.get("kind"), event.get("id")
        if kind == TEXT_DELTA:
            self._delta(watch, event)
            return False
        if not isinstance(event_id, str) or event_id in self.drawn:
            return False
        self.drawn.add(event_id)
        console = self.console
        if kind == "message":
            text = str(event.get("text", ""))
            if watch.is_mine(event_id, text):
                watch.seen_mine = True  # in the session now; the "sent" line said so
            else:
                console.event(f"message: {preview(text)}")
        elif kind == "thinking":
            said = event.get("text")  # polling has a delegating think's text; the stream does not
            console.event(f"think {event.get('think')}" + (f": {preview(str(said), 80)}" if said else ""))
        elif kind == "delegating":
            console.event(f"delegating to {event.get('agent')}: {preview(str(event.get('task', '')))}", 1)
        elif kind == "tool_call":
            args = event.get("input")
            shown = f": {preview(json.dumps(args, ensure_ascii=False))}" if args is not None else ""
            console.event(f"running {event.get('tool')}{shown}", 1)
        elif kind in RESULT_KINDS:
            who = str(event.get("agent") or event.get("tool") or "a tool")
            result = {"status": event.get("status"), "content": [{"text": str(event.get("text", ""))}]}
            console.event(describe_result(who, result), 1)
        elif kind == "progress":  # "2 of 3 delegations answered"
            console.event(str(event.get("text", "")), 1)
        elif kind == "answer":
            return self._answered(watch, event.get("think"), str(event.get("text", "")))
        elif kind == "question":  # the agent asks for input: the question is the answer; the next message answers it
            console.event(f"think {event.get('think')}: asks for input (your next message answers it)")
            return self._answered(watch, event.get("think"), str(event.get("text", "")))
        else:  # a kind this client does not know yet (a newer server): named, with what it says
            said = next((event[k] for k in ("text", "question", "message") if isinstance(event.get(k), str)), "")
            console.event(f"{kind}" + (f": {preview(said)}" if said else ""), 1)
        return False

    def _answered(self, watch: _Watch, think: Any, text: str) -> bool:
        console = self.console
        if not watch.seen_mine:  # an answer to an earlier message (waiting to send, or queued behind it): drawn only
            console.event(f"think {think}: answer")
            console.event(f"answer to an earlier message: {preview(text)}", 1)
            return False
        shown = watch.live.pop(think, "") if isinstance(think, int) else ""
        if not shown:
            console.event(f"think {think}: answer")
            console.answer(text)
        elif text.startswith(shown):  # what was printed as it was written is the answer's beginning
            console.chunk(text[len(shown) :])
            console.end_chunks()
            console.event(f"think {think}: answer")
        else:  # the stored answer is the truth
            console.end_chunks()
            console.event(
                f"think {think}: answer (the text shown as it was written is not the answer stored; "
                "the answer follows whole)"
            )
            console.answer(text)
        watch.answers.append(text)
        return True

    def _delta(self, watch: _Watch, event: dict[str, Any]) -> None:
        """Print the answer's text as the model writes it (text goes at offset of think iteration's text)."""
        think, offset, text = event.get("iteration"), event.get("offset"), event.get("text")
        if not (watch.seen_mine and self.console.shows_live_text):
            return
        if not (isinstance(think, int) and isinstance(offset, int) and isinstance(text, str)) or offset < 0:
            return
        shown = watch.live.get(think, "")
        if offset > len(shown):
            return  # a piece missed in between: the stored answer fills it in
        whole = shown[:offset] + text
        if whole.startswith(shown):  # more of the same text (a reconnected stream resends it from 0)
            self.console.chunk(whole[len(shown) :])
        else:  # the think starts over (a retried attempt): on a new line
            self.console.end_chunks()
            self.console.chunk(whole)
        watch.live[think] = whole

    # --- following: the events stream ------------------------------------------------------

    def _stream(self, watch: _Watch) -> bool:
        """Follow GET /api/sessions/{id}/events; whether that ended the watch (else it is polled on)."""
        self.polling.reset()
        fruitless = 0
        while True:
            outcome, progressed = self._stream_once(watch)
            if outcome == "done":
                return True
            if outcome == "off":
                self.streams = False
                return False
            if outcome == "poll":
                return False
            fruitless = 0 if progressed else fruitless + 1
            if fruitless >= MAX_FRUITLESS_STREAMS:
                self.console.aside(f"{fruitless} event streams in a row brought nothing new: polling instead", 1)
                return False
            self._check_deadline(watch)
            self.polling.pause(progressed)

    def _stream_once(self, watch: _Watch) -> tuple[Outcome, bool]:
        """One events stream, read to its end: how the watch goes on, and whether it drew anything."""
        url = f"{self._session_path}/events"
        # A quiet stream is not read past the watch's deadline (by more than a second).
        quiet_s = max(1.0, min(STREAM_READ_TIMEOUT_S, watch.deadline - self.console.clock() + 1))
        try:
            response = send(
                self.http,
                "GET",
                url,
                token=self.token,
                stream=True,
                read_timeout_s=quiet_s,
                headers={"Accept": "text/event-stream"},
            )
        except Problem as problem:
            if problem.fatal:
                raise
            self.console.event(f"the event stream did not open ({problem.message}): polling", 1)
            return "poll", False
        with closing(response):
            status = response.status_code
            said = server_message(response) if status != 200 else ""  # (a 200's body is the stream)
            if (
                status in (401, 403)
                and said != "Missing Authentication Token"
                or (status == 404 and "session_not_found" in said)
            ):
                raise self._refused(response)
            # API Gateway answers a route it does not have 403 "Missing Authentication Token".
            if status in _NO_EVENTS_ROUTE or status == 403:
                self._not_streaming(f"HTTP {status} from GET .../events: {said}")
                return "off", False
            if status != 200:
                self.console.event(f"the event stream answered HTTP {status} ({said}): polling", 1)
                return "poll", False
            if not response.headers.get("Content-Type", "").startswith("text/event-stream"):
                self._not_streaming("GET .../events did not answer an event stream")
                return "off", False
            drawn, time_up = len(self.drawn), False
            try:
                for item in read_events(response.iter_content(chunk_size=None)):  # None: each chunk as it arrives
                    self._check_deadline(watch)
                    if isinstance(item, Comment):
                        time_up = "reconnect" in item.text  # the server's time is up: follow on in a new stream
                        continue
                    outcome = self._streamed(watch, item.data)
                    if outcome is not None:
                        return outcome, len(self.drawn) > drawn
            except (requests.exceptions.RequestException, StreamError) as exc:
                self.console.aside(f"the event stream broke ({preview(str(exc), 80)}): reconnecting", 1)
                return "reconnect", len(self.drawn) > drawn
        if time_up:
            self.console.aside("the event stream reached the server's time limit: reconnecting", 1)
            return "reconnect", len(self.drawn) > drawn
        # A stream that ends before the session is idle, without saying why, is the timeline so far: the
        # route does not follow sessions here (STREAMING=off, or an HTTP front that does not stream).
        self._not_streaming("the events route answered the timeline so far and ended (STREAMING=off?)")
        return "off", len(self.drawn) > drawn

    def _streamed(self, watch: _Watch, data: str) -> Outcome | None:
        """One event of the stream: None, or how the watch goes on."""
        try:
            event = json.loads(data)
        except ValueError:
            event = None
        if not isinstance(event, dict) or not isinstance(event.get("kind"), str):
            self.console.aside(f"skipped an event this client cannot read: {preview(data, 80)}", 1)
            return None
        self.last_raw = event
        kind = event["kind"]
        if kind == "error":  # the server could not go on (it says: reconnect)
            self.console.aside(
                f"the event stream failed at the server ({preview(str(event.get('message')))}): reconnecting", 1
            )
            return "reconnect"
        if kind == "idle":
            self.idle = True
            if not watch.taken:
                return "poll"  # idle before it took the queued message: polling waits for it to be taken
            if watch.accepted is not None:
                self.console.event(f"idle: {event.get('turn')} message(s), {event.get('iteration')} think iteration(s)")
            return "done"
        return "done" if self._step(watch, event) else None

    def _not_streaming(self, why: str) -> None:
        self.console.event(
            f"the agent does not stream the session's events ({why}): polling GET /api/sessions/{{id}}", 1
        )

    # --- following: polling ------------------------------------------------------------------

    def _poll(self, watch: _Watch) -> None:
        """Poll the session, drawing what is new, until the answer to `mine` is in (or it is idle and has
        taken `mine`)."""
        self.polling.reset()
        status = ""
        while True:
            view = self._get()
            drawn = len(self.drawn)
            answered = any(self._step(watch, event) for event in timeline_of(view.messages, view.status == "busy"))
            changed = len(self.drawn) != drawn or view.status != status
            status = view.status
            self.idle = status == "idle"
            if answered or (status == "idle" and watch.taken):
                if status == "idle" and watch.accepted is not None:
                    self.console.event(f"idle: {view.turn} message(s), {view.iteration} think iteration(s)")
                return
            self._check_deadline(watch, status)
            self.polling.pause(changed)

    def cancel(self) -> None:
        """/cancel: POST /api/sessions/{id}/cancel (the session stops; its delegations are told to stop)."""
        if self.session_id is None:
            self.console.note("no session yet: nothing to cancel")
            return
        response = send(self.http, "POST", f"{self._session_path}/cancel", token=self.token, body={})
        if response.status_code == 409:
            self.console.note(f"session {self.session_id} is idle: nothing to cancel")
            return
        if response.status_code != 200:
            raise self._refused(response)
        self._json(response)
        self.idle = False  # it closes (idle again) once its think or the cancel's own close runs
        self.console.note(f"session {self.session_id} canceled")

    def print_card(self) -> None:
        response = send(self.http, "GET", f"{self.url}/.well-known/agent-card.json", token=None)
        if response.status_code != 200:
            raise Problem(f"{self.url} has no agent card (HTTP {response.status_code})", fatal=False)
        self.console.answer(json.dumps(self._json(response), indent=2, ensure_ascii=False))
