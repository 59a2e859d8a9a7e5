"""Chat with any A2A agent over JSON-RPC: its card, then message/stream (when the card says it
streams) or message/send (non-blocking) followed by tasks/get; Ctrl-C during a task is tasks/cancel.

A card that lists a JSONRPC interface with protocolVersion 1.x (`supportedInterfaces`) is spoken to in
v1.0: `A2A-Version: 1.0`, the v1.0 names (SendStreamingMessage, SendMessage with returnImmediately,
GetTask, CancelTask, SubscribeToTask) and shapes, converted at the edge (flightdeck.domain.a2a.wire_v1)
so the rest of this module reads the v0.3 shapes either way. Other cards: v0.3. The names below are v0.3's.

A stream that breaks is resumed: tasks/resubscribe (SubscribeToTask) with Last-Event-ID, the id of the
last event read, so nothing is lost or drawn twice (a server without event ids, or one that refuses: the
task is followed with tasks/get). `--task ID` without a message reattaches to a task: its history, then
its events to its end.

A conversation is the card's agent and one contextId: every message after the first carries it, and
the taskId too while that task waits on us (input-required, auth-required). A task that ended is not
continued; the next message starts a new task in the same context.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from contextlib import closing
from typing import Annotated, Any, Literal
from urllib.parse import urljoin, urlsplit

import requests
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

from flightdeck.chat_client.sse import ServerEvent, StreamError, read_events
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
from flightdeck.domain.a2a import wire_v1 as v1
from flightdeck.domain.a2a.protocol import (
    INTERNAL_ERROR,
    INTERRUPTED_STATES,
    METHOD_NOT_FOUND,
    TASK_NOT_CANCELABLE,
    TASK_NOT_FOUND,
    TERMINAL_STATES,
    UNSUPPORTED_OPERATION,
)
from flightdeck.domain.a2a.wire import Artifact, JSONRPCError, Message, Task, TaskStatus
from flightdeck.domain.inspector import card_url_of

CARD_PATH = "/.well-known/agent-card.json"
# A stream may be quiet for a long time while the agent works (servers send keep-alive comments, a2a-sdk
# every 15 s); past this without a byte the client follows the task with tasks/get instead.
STREAM_READ_TIMEOUT_S = 120.0
# A broken stream is resumed this many times in a row (Last-Event-ID) before the client polls instead.
STREAM_RESUMES = 5
# Codes with which a server says it does not stream: then message/send is used (nothing was accepted).
_NO_STREAMING = (UNSUPPORTED_OPERATION, METHOD_NOT_FOUND)


class _Lenient(BaseModel):
    model_config = ConfigDict(extra="allow")


class AgentInterface(_Lenient):
    url: str
    transport: str


class AgentCapabilities(_Lenient):
    streaming: bool | None = None
    pushNotifications: bool | None = None


class AgentCard(_Lenient):
    name: str = ""
    description: str = ""
    url: str = ""
    version: str = ""
    protocolVersion: str = ""
    preferredTransport: str = "JSONRPC"
    additionalInterfaces: list[AgentInterface] = Field(default_factory=list)
    capabilities: AgentCapabilities = Field(default_factory=AgentCapabilities)
    securitySchemes: dict[str, dict[str, Any]] = Field(default_factory=dict)
    security: list[dict[str, list[str]]] = Field(default_factory=list)


class StatusUpdate(_Lenient):
    kind: Literal["status-update"]
    taskId: str
    contextId: str
    status: TaskStatus
    final: bool = False


class ArtifactUpdate(_Lenient):
    kind: Literal["artifact-update"]
    taskId: str
    contextId: str
    artifact: Artifact
    append: bool | None = None
    lastChunk: bool | None = None


# What message/send answers (a Task or a Message) and what a stream carries (those and the updates).
Event = Annotated[Task | Message | StatusUpdate | ArtifactUpdate, Field(discriminator="kind")]
_EVENT = TypeAdapter(Event)


class _Envelope(BaseModel):
    jsonrpc: Literal["2.0"]
    id: Any = None
    result: Any = None
    error: JSONRPCError | None = None


class RpcError(Exception):
    def __init__(self, error: JSONRPCError):
        super().__init__(f"{error.code}: {error.message}")
        self.code, self.message = error.code, error.message


class StreamingRefused(Exception):
    """The server answered message/stream with "not supported": the message was not taken."""


def card_url(url: str) -> str:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise Problem(f"{url!r} is not a card URL: give one starting with http:// or https://", code=EXIT_USAGE)
    return card_url_of(url)


def sse_data(response: requests.Response) -> Iterator[str]:
    """The data of each server-sent event as it arrives (A2A's events are data lines only; comments, the
    servers' keep-alives, are skipped)."""
    for item in sse_events(response):
        yield item.data


def sse_events(response: requests.Response) -> Iterator[ServerEvent]:
    for item in read_events(response.iter_content(chunk_size=None)):  # None: each chunk as it arrives
        if isinstance(item, ServerEvent):
            yield item


def _params_v1(params: dict[str, Any]) -> dict[str, Any]:
    """v0.3 params as v1.0's: the message through wire_v1; blocking false is returnImmediately."""
    if "message" not in params:
        return params  # {"id"}: GetTask, CancelTask, SubscribeToTask alike
    out: dict[str, Any] = {"message": v1.message_to_wire(params["message"])}
    config = params.get("configuration")
    if config is not None:
        out["configuration"] = {"returnImmediately": not config.get("blocking", False)}
    return out


def _part_text(part: Any) -> str:
    kind = getattr(part, "kind", None)
    if kind == "text":
        text: str = part.text
        return text
    if kind == "data":
        return json.dumps(part.data, ensure_ascii=False, indent=2)
    if kind == "file":
        file = part.file or {}
        return f"[file {file.get('name') or file.get('uri') or ''} ({file.get('mimeType') or 'unknown type'})]"
    return ""


def parts_text(parts: list[Any] | None, text_sep: str = "\n") -> str:
    """Each part's text, one per line; text_sep between text parts that follow one another (an artifact's
    appended chunks are one text: "")."""
    out = ""
    previous = None
    for part in parts or []:
        text = _part_text(part)
        if not text:
            continue
        kind = getattr(part, "kind", None)
        if previous is not None:
            out += text_sep if kind == "text" and previous == "text" else "\n"
        out, previous = out + text, kind
    return out


class A2AChat:
    """A conversation with one A2A agent: its card, one contextId, one task at a time."""

    def __init__(
        self,
        url: str,
        token: str | None,
        console: Console,
        polling: Polling,
        http: requests.Session,
        context_id: str | None = None,
        task_id: str | None = None,
    ):
        self.card_url = card_url(url)
        self.token, self.console, self.polling, self.http = token, console, polling, http
        self.card: AgentCard | None = None
        self.raw_card: dict[str, Any] = {}
        self.rpc_url = ""
        self.version = "0.3"  # "1.0" when the card offers JSONRPC 1.x
        self.streaming = False
        self.context_id = context_id
        self.continue_task = task_id  # the task the next message continues (it waits for input)
        self._reset()
        self.answered: str | None = None  # continuing a task: the question our message answers

    def _reset(self) -> None:
        self.task_id: str | None = None  # the task of the message being answered
        self.state = ""
        self.status_text = ""
        self.artifacts: dict[str, str] = {}
        self.printed: dict[str, str] = {}
        self.direct_answer: str | None = None  # the agent answered with a Message, no task
        self.last_agent_message = ""
        self.last_event_id: str | None = None  # of the stream followed (Last-Event-ID when it breaks)

    # --- the card -----------------------------------------------------------------------------

    def open(self) -> None:
        response = send(self.http, "GET", self.card_url, token=self.token)
        problem = auth_problem(response, self.card_url, self.token)
        if problem is not None:
            raise problem
        if response.status_code != 200:
            raise Problem(
                f"no agent card at {self.card_url} (HTTP {response.status_code}: {server_message(response)}):"
                f" give the card's URL, usually the agent's base URL + {CARD_PATH}"
            )
        try:
            self.raw_card = response.json()
            self.card = AgentCard.model_validate(self.raw_card)
        except (ValueError, ValidationError) as exc:
            raise Problem(f"{self.card_url} is not an A2A agent card: {preview(str(exc), 300)}") from None
        card = self.card
        rpc = v1.offers_v1(self.raw_card) or ""
        if rpc:
            self.version = v1.PROTOCOL_VERSION
        rpc = rpc or (card.url if card.preferredTransport.upper() == "JSONRPC" else "")
        rpc = rpc or next((i.url for i in card.additionalInterfaces if i.transport.upper() == "JSONRPC"), "")
        if not rpc:
            offered = ", ".join([card.preferredTransport] + [i.transport for i in card.additionalInterfaces])
            raise Problem(
                f"{card.name or self.card_url} offers no JSON-RPC interface (only {offered}); "
                "flightdeck chat speaks A2A over JSON-RPC"
            )
        self.rpc_url = urljoin(self.card_url, rpc)
        self.streaming = card.capabilities.streaming is True
        how = "streams its answers (message/stream)" if self.streaming else "message/send, then tasks/get"
        version = f"A2A {card.protocolVersion}" if card.protocolVersion else "A2A"
        if self.version == v1.PROTOCOL_VERSION:
            version = "A2A 1.0"
        self.console.note(f"{card.name or 'agent'} ({version}) at {self.rpc_url}: {how}")

    def print_card(self) -> None:
        self.console.answer(json.dumps(self.raw_card, indent=2, ensure_ascii=False))

    def _schemes_hint(self) -> str:
        card = self.card
        if card is None or not card.securitySchemes:
            return ""
        described = []
        for name, scheme in card.securitySchemes.items():
            kind = scheme.get("scheme") or scheme.get("type") or ""
            described.append(f"{name} ({kind})" if kind else name)
        required = [name for requirement in card.security for name in requirement]
        return f"; the card declares {', '.join(described)}" + (
            f" and requires {', '.join(dict.fromkeys(required))}" if required else ""
        )

    # --- JSON-RPC -----------------------------------------------------------------------------

    def _request(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        if self.version == v1.PROTOCOL_VERSION:
            method, params = v1.METHOD_NAMES[method], _params_v1(params)
        return {"jsonrpc": "2.0", "id": str(uuid.uuid4()), "method": method, "params": params}

    @property
    def _version_header(self) -> dict[str, str]:
        return {"A2A-Version": v1.PROTOCOL_VERSION} if self.version == v1.PROTOCOL_VERSION else {}

    def _refused(self, response: requests.Response, method: str) -> Problem:
        problem = auth_problem(response, self.rpc_url, self.token)
        if problem is not None:
            problem.message += self._schemes_hint()
            return problem
        return Problem(
            f"{self.rpc_url} answered HTTP {response.status_code} to {method} ({server_message(response)})",
            fatal=response.status_code == 404,
        )

    def _unwrap(self, body: Any, method: str) -> Any:
        try:
            envelope = _Envelope.model_validate(body)
        except ValidationError:
            raise Problem(
                f"{self.rpc_url} answered {method} with something that is not a JSON-RPC 2.0 "
                f"response: {preview(json.dumps(body), 200)}",
                fatal=False,
            ) from None
        if envelope.error is not None:
            raise RpcError(envelope.error)
        if not isinstance(body, dict) or "result" not in body:
            raise Problem(f"{self.rpc_url} answered {method} with neither a result nor an error", fatal=False)
        if self.version == v1.PROTOCOL_VERSION:
            # GetTask and CancelTask answer the Task itself; the others a StreamResponse-like wrapper.
            if method in ("tasks/get", "tasks/cancel"):
                return v1.task_from_wire(envelope.result)
            return v1.event_from_wire(envelope.result)
        return envelope.result

    def rpc(self, method: str, params: dict[str, Any]) -> Any:
        response = send(
            self.http,
            "POST",
            self.rpc_url,
            token=self.token,
            body=self._request(method, params),
            headers=self._version_header or None,
        )
        if response.status_code != 200:
            raise self._refused(response, method)
        try:
            body = response.json()
        except ValueError:
            raise Problem(f"{self.rpc_url} did not answer {method} with JSON", fatal=False) from None
        return self._unwrap(body, method)

    @staticmethod
    def _event(result: Any) -> Task | Message | StatusUpdate | ArtifactUpdate:
        try:
            return _EVENT.validate_python(result)
        except ValidationError as exc:
            raise Problem(
                f"the agent answered something that is not an A2A task, message or update: {preview(str(exc), 300)}",
                fatal=False,
            ) from None

    @staticmethod
    def _task(result: Any) -> Task:
        try:
            return Task.model_validate(result)
        except ValidationError as exc:
            raise Problem(
                f"the agent answered something that is not an A2A task: {preview(str(exc), 300)}", fatal=False
            ) from None

    # --- what the agent tells us ------------------------------------------------------------------

    def _ids(self, task_id: str, context_id: str) -> None:
        if self.task_id is None:
            self.task_id = task_id
            self.console.event(f"task {task_id} (context {context_id})")
        self.context_id = context_id

    def _status(self, status: TaskStatus) -> bool:
        text = parts_text(status.message.parts) if status.message is not None else ""
        if status.state == self.state and text == self.status_text:
            return False
        self.state, self.status_text = status.state, text
        said = text and not (status.state == "completed" and text in self.artifacts.values())  # the answer itself
        self.console.event(status.state + (f": {preview(text)}" if said else ""), 1)
        return True

    def _artifact(self, artifact: Artifact, append: bool) -> None:
        text = parts_text(artifact.parts, text_sep="")
        key = artifact.artifactId
        self.artifacts[key] = self.artifacts.get(key, "") + text if append else text

    def on(self, event: Task | Message | StatusUpdate | ArtifactUpdate) -> bool:
        """Take one thing the agent said in; whether anything changed."""
        if isinstance(event, Message):
            if event.contextId:
                self.context_id = event.contextId
            self.direct_answer = parts_text(event.parts)
            self.console.event("answered with a message (no task)", 1)
            return True
        if isinstance(event, ArtifactUpdate):
            self._ids(event.taskId, event.contextId)
            self._artifact(event.artifact, append=bool(event.append))
            return True
        if isinstance(event, StatusUpdate):
            self._ids(event.taskId, event.contextId)
            return self._status(event.status)
        self._ids(event.id, event.contextId)
        before = dict(self.artifacts)
        for artifact in event.artifacts or []:
            self._artifact(artifact, append=False)
        agent_messages = [m for m in event.history or [] if m.role == "agent"]
        if agent_messages:
            self.last_agent_message = parts_text(agent_messages[-1].parts)
        return self._status(event.status) or before != self.artifacts

    @property
    def waiting(self) -> bool:
        """Whether the task still owes us something (not ended, not waiting on us)."""
        if self.direct_answer is not None:
            return False
        if self.state == "input-required" and self.answered is not None and self.status_text in ("", self.answered):
            return True  # the question we answered, still shown (or no newer one): the task works on the answer
        return self.state not in TERMINAL_STATES | INTERRUPTED_STATES

    def _stream_answer(self, final: bool = False) -> None:
        """Print what the artifacts gained since last time (a streamed answer grows as it comes): as it comes
        on a terminal, else once the task ended (chunks may be text that the answer then replaces whole)."""
        if not final and not self.console.shows_live_text:
            return
        for key, text in self.artifacts.items():
            printed = self.printed.get(key, "")
            if text.startswith(printed) and text != printed:
                self.console.chunk(text[len(printed) :])
                self.printed[key] = text

    # --- a message, and its task ------------------------------------------------------------------

    def _message(self, text: str) -> dict[str, Any]:
        message: dict[str, Any] = {
            "kind": "message",
            "role": "user",
            "messageId": str(uuid.uuid4()),
            "parts": [{"kind": "text", "text": text}],
        }
        if self.context_id:
            message["contextId"] = self.context_id
        if self.continue_task:
            message["taskId"] = self.continue_task
        return message

    def say(self, text: str) -> int:
        """Send one message, draw its task's transitions, print the answer; the exit code of a one-shot chat."""
        self.console.start()
        self.answered = (self.status_text or self.last_agent_message) if self.continue_task else None
        self._reset()
        params = {"message": self._message(text)}
        try:
            if self.streaming:
                try:
                    self._stream(params)
                except StreamingRefused as refused:
                    self.console.note(f"the agent does not stream after all ({refused}): using message/send")
                    self.streaming = False
            if not self.streaming:
                self.on(self._event(self.rpc("message/send", {**params, "configuration": {"blocking": False}})))
            self._follow()
        except KeyboardInterrupt:
            return self._interrupted()
        except RpcError as exc:
            if exc.code == TASK_NOT_FOUND and self.continue_task:
                self.console.note(f"task {self.continue_task} is gone: the next message starts a new task")
                self.continue_task = None
            raise Problem(f"the agent answered an error ({exc.code}: {exc.message})", fatal=False) from None
        return self._finish()

    def _stream(self, params: dict[str, Any]) -> None:
        """message/stream; when it breaks, tasks/resubscribe from the last event read, a few times."""
        method, body = "message/stream", self._request("message/stream", params)
        resumes = 0
        while True:
            read_before = self.last_event_id
            if self._stream_once(method, body, first=method == "message/stream") or self.task_id is None:
                return
            if self.last_event_id != read_before:
                resumes = 0  # it went on: a new run of attempts
            if not self.waiting or self.last_event_id is None or resumes >= STREAM_RESUMES:
                if self.waiting:
                    self.console.event("following the task with tasks/get")
                return
            resumes += 1
            self.console.event("resuming the stream after its last event (tasks/resubscribe, Last-Event-ID)")
            method, body = "tasks/resubscribe", self._request("tasks/resubscribe", {"id": self.task_id})

    def _stream_once(self, method: str, body: dict[str, Any], first: bool) -> bool:
        """One stream: True when it is over (its final event, or the task no longer owes us anything), False
        when it broke or ended early. first: its first event answers the message (it may refuse streaming)."""
        headers = {"Accept": "text/event-stream", **self._version_header}
        if self.last_event_id is not None and not first:
            headers["Last-Event-ID"] = self.last_event_id
        response = send(
            self.http,
            "POST",
            self.rpc_url,
            token=self.token,
            body=body,
            stream=True,
            read_timeout_s=STREAM_READ_TIMEOUT_S,
            headers=headers,
        )
        with closing(response):
            if response.status_code != 200:
                if not first:
                    self.console.event(f"tasks/resubscribe answered HTTP {response.status_code}")
                    return False
                raise self._refused(response, method)
            if not response.headers.get("Content-Type", "").startswith("text/event-stream"):
                try:
                    answer = response.json()
                except ValueError:
                    raise Problem(
                        f"{self.rpc_url} answered {method} with neither a stream nor JSON", fatal=False
                    ) from None
                if first:
                    self._first_streamed(answer, method)
                    return True
                return False  # not a stream: the task is followed with tasks/get
            try:
                for event in sse_events(response):
                    try:
                        data = json.loads(event.data)
                    except ValueError:
                        raise Problem(
                            f"the stream carried an event that is not JSON: {preview(event.data)}", fatal=False
                        ) from None
                    if first:
                        result = self._first_streamed(data, method)
                        first = False
                    else:
                        try:
                            result = self._unwrap(data, method)
                        except RpcError as exc:
                            if method == "message/stream":
                                raise
                            self.console.event(f"{method} refused ({exc.code}: {exc.message})")
                            return False
                        self.on(self._event(result))
                    self.last_event_id = event.id
                    self._stream_answer()
                    final = isinstance(result, dict) and result.get("final") is True
                    if final or not self.waiting:
                        return True
            except (requests.exceptions.RequestException, StreamError) as exc:
                if self.task_id is None:
                    raise Problem(
                        f"the stream broke before the agent said anything: {preview(str(exc))}", fatal=False
                    ) from None
                self.console.event(f"the stream broke ({preview(str(exc), 80)})")
                return False
        if self.waiting and self.task_id is not None:
            self.console.event("the stream ended before the task did")
        return not self.waiting

    def attach(self) -> int:
        """Reattach to the task given (--task ID, no message): its history, then its events to its end (or its
        question); the exit code of a one-shot chat."""
        task_id = self.continue_task or ""
        self.console.start()
        self._reset()
        try:
            task = self._task(self.rpc("tasks/get", {"id": task_id}))
            for message in task.history or []:
                who = "you" if message.role == "user" else "agent"
                self.console.note(f"{who}: {parts_text(message.parts)}")
            self.on(task)
            if self.waiting and self.streaming:
                body = self._request("tasks/resubscribe", {"id": task_id})
                resumes = 0
                while not self._stream_once("tasks/resubscribe", body, first=False) and self.waiting:
                    resumes += 1
                    if self.last_event_id is None or resumes > STREAM_RESUMES:
                        break
            self._follow()
        except KeyboardInterrupt:
            return self._interrupted()
        except RpcError as exc:
            raise Problem(f"the agent answered an error ({exc.code}: {exc.message})", fatal=True) from None
        return self._finish()

    def _first_streamed(self, body: Any, method: str) -> Any:
        try:
            result = self._unwrap(body, method)
        except RpcError as exc:
            # a2a-sdk 0.3 refuses with -32603 "Streaming is not supported by the agent" (before running anything).
            if exc.code in _NO_STREAMING or (exc.code == INTERNAL_ERROR and "stream" in exc.message.lower()):
                raise StreamingRefused(f"{exc.code}: {exc.message}") from None
            raise
        self.on(self._event(result))
        return result

    def _follow(self) -> None:
        """Poll tasks/get until the task ends or waits on us."""
        if self.task_id is None or not self.waiting:
            return
        deadline = self.console.clock() + self.polling.wait_s
        self.polling.reset()
        changed = True
        while self.waiting:
            if self.console.clock() > deadline:
                raise Problem(
                    f"task {self.task_id} is still {self.state or 'unknown'} after "
                    f"{self.polling.wait_s:.0f} s; it goes on at the agent",
                    fatal=False,
                )
            self.polling.pause(changed)
            changed = self.on(self._task(self.rpc("tasks/get", {"id": self.task_id})))

    def _finish(self) -> int:
        if self.direct_answer is not None:
            self.console.answer(self.direct_answer)
            self.continue_task = None
            return EXIT_OK
        self._stream_answer(final=True)  # the artifacts' text not printed yet (a stream prints it as it comes)
        self.console.end_chunks()
        state = self.state
        if state in INTERRUPTED_STATES:
            question = self.status_text or self.last_agent_message
            if question:
                self.console.answer(question)
            self.continue_task = self.task_id
            what = "input" if state == "input-required" else "authentication"
            self.console.note(f"the agent asks for {what}: your next message continues task {self.task_id}")
            return EXIT_OK
        self.continue_task = None
        if state == "completed":
            # An artifact replaced (not appended to) after part of it was streamed is printed whole.
            unprinted = [t for key, t in self.artifacts.items() if t and self.printed.get(key) != t]
            if unprinted:
                self.console.answer("\n".join(unprinted))
            elif not self.printed:
                self.console.answer(
                    self.status_text or self.last_agent_message or "(the task completed with no answer)"
                )
            return EXIT_OK
        self.console.error(f"the task ended {state}" + (f": {self.status_text}" if self.status_text else ""))
        return EXIT_FAILURE

    # --- Ctrl-C -------------------------------------------------------------------------------

    def _interrupted(self) -> int:
        self.console.end_chunks()
        task_id = self.task_id
        if task_id is None:
            self.console.note("\ninterrupted before the agent answered: there is no task to cancel")
            return EXIT_INTERRUPTED
        self.continue_task = None  # a canceled or abandoned task is not continued; its context is
        if not self.waiting:
            self.console.note(f"\ninterrupted; task {task_id} had already ended ({self.state})")
            return EXIT_INTERRUPTED
        self.console.event(f"Ctrl-C: canceling task {task_id} (tasks/cancel)")
        try:
            task = self._task(self.rpc("tasks/cancel", {"id": task_id}))
        except RpcError as exc:
            if exc.code in (TASK_NOT_CANCELABLE, UNSUPPORTED_OPERATION):
                state = self._state_of(task_id)
                if state in TERMINAL_STATES:
                    self.console.note(
                        f"the agent did not cancel it ({exc.code}: {exc.message}): the task had already ended ({state})"
                    )
                else:
                    self.console.error(
                        f"the agent cannot cancel this task ({exc.code}: {exc.message}): the remote "
                        f"task {task_id} is still running" + (f" ({state})" if state else "")
                    )
            else:
                self.console.error(
                    f"tasks/cancel failed ({exc.code}: {exc.message}): the remote task {task_id} may still be running"
                )
        except Problem as problem:
            self.console.error(f"{problem.message}: the remote task {task_id} may still be running")
        except KeyboardInterrupt:
            self.console.error(f"not waiting for the cancel: the remote task {task_id} may still be running")
        else:
            self.on(task)
            if self.state != "canceled":
                self.console.error(
                    f"tasks/cancel answered the task {self.state or 'in an unknown state'}: it may still be running"
                )
        return EXIT_INTERRUPTED

    def _state_of(self, task_id: str) -> str:
        """The task's state by tasks/get ("" when that fails too)."""
        try:
            result = self.rpc("tasks/get", {"id": task_id})
            return Task.model_validate(result).status.state
        except (RpcError, Problem, ValidationError, KeyboardInterrupt):
            return ""
