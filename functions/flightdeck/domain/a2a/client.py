"""A delegating tool whose peer is any A2A agent (v1.0 or v0.3), found by its card URL.

The card decides the version: a JSONRPC interface with protocolVersion 1.x in `supportedInterfaces` is
spoken in v1.0 (`A2A-Version: 1.0`, SendMessage/GetTask/CancelTask, v1.0 shapes through
flightdeck.domain.a2a.wire_v1's converters), else v0.3 at the card's `url`. The task's record keeps the
version (RemoteTask.extra) so its polls and its cancel speak it too. Below, the v0.3 names.

Dispatch sends a non-blocking `message/send`. When the peer's card says it
pushes, the request carries a pushNotificationConfig pointing at our
POST /api/a2a/push with the callback token we mint for every delegation as its
notification token; the receiver verifies it as /api/tools/response does. A peer
that does not push is polled with `tasks/get` on the timers queue (kind
"a2a_poll") until its task is terminal or the turn's deadline passes.
Every failure becomes a structured error result, never a crash. Every answer, on
every path (a direct message, a task finished in the send answer, a poll, a push),
is held to MAX_RESULT_BYTES like a callback's: one over it becomes a
`result_too_large` error result.
"""

from __future__ import annotations

import enum
import time
import uuid
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, Field, ValidationError

from flightdeck import tracing
from flightdeck.domain.a2a import wire_v1 as v1
from flightdeck.domain.a2a.constants import POLL_KIND
from flightdeck.domain.a2a.contracts import answer_text
from flightdeck.domain.a2a.ports import RemoteTask, ports
from flightdeck.domain.a2a.protocol import INTERRUPTED_STATES, PUSH_NOT_SUPPORTED, TERMINAL_STATES
from flightdeck.domain.a2a.wire import Task, text_of_parts
from flightdeck.domain.agent import DelegateTool
from flightdeck.domain.aggregation import record_and_advance
from flightdeck.domain.allowlist import CALLBACK_ENDPOINT, UnknownServiceError
from flightdeck.domain.asking import input_required_result
from flightdeck.domain.callbacks import CallbackStatus, accept_callback, too_large_result, verified_claims
from flightdeck.domain.delegation_cancel import CANCEL_TIMEOUT_S, CancelMessage
from flightdeck.domain.dispatch import (
    RETRYABLE_STATUSES,
    DispatchMessage,
    DispatchOutcome,
    DispatchStatus,
    _fail,
    backoff_s,
)
from flightdeck.domain.ports import Deps, audit_post, bearer
from flightdeck.domain.records import RecordOutcome, ResultSource, ToolResult, error_result
from flightdeck.domain.skills.peers import card_body
from flightdeck.observability import count, logger, timeline

PUSH_PATH = "/api/a2a/push"
POLL_FIRST_S = 1
POLL_MAX_S = 30
CARD_CACHE_TTL_S = 300.0
_MESSAGE_NS = uuid.UUID("3c1e5d8a-93f4-4b0e-8f7e-5d7a9e0c2b61")

_cards: dict[str, tuple[float, PeerCard]] = {}


def clear_card_cache() -> None:
    _cards.clear()


@dataclass(frozen=True)
class PeerCard:
    name: str
    rpc_url: str
    push: bool
    version: str = "0.3"  # "1.0" when the card offers JSONRPC 1.x


class CardProblem(Exception):
    def __init__(self, detail: str, retryable: bool):
        super().__init__(detail)
        self.detail, self.retryable = detail, retryable


def fetch_card(deps: Deps, card_url: str) -> PeerCard:
    """The peer's JSON-RPC endpoint and whether it pushes; raises CardProblem."""
    cached = _cards.get(card_url)
    if cached and cached[0] > time.monotonic():
        return cached[1]
    card = card_body(card_url)  # read already by the think that offered its skills' tools
    if card is None:
        answer = ports(deps).http.get_json(card_url)
        if answer.status != 200 or not isinstance(answer.body, dict):
            detail = f"agent card: HTTP {answer.status}" if answer.status else f"agent card unreachable: {answer.error}"
            raise CardProblem(detail, answer.status in RETRYABLE_STATUSES)
        card = answer.body
    transport = card.get("preferredTransport") or "JSONRPC"
    v1_url = v1.offers_v1(card)
    rpc_url = v1_url or (card.get("url") if transport == "JSONRPC" else None)
    if rpc_url is None:
        rpc_url = next(
            (
                i.get("url")
                for i in card.get("additionalInterfaces") or []
                if isinstance(i, dict) and i.get("transport") == "JSONRPC"
            ),
            None,
        )
    if not isinstance(rpc_url, str) or not rpc_url:
        raise CardProblem("agent card offers no JSONRPC interface", retryable=False)
    checked = deps.settings.allowed_host_mapping.check_url(rpc_url)
    if checked is None:
        raise CardProblem(f"agent card points at {rpc_url}, which is not under ALLOWED_HOST_MAPPING", retryable=False)
    rpc_url = checked  # the normalised form is what is called
    capabilities = card.get("capabilities")
    if not isinstance(capabilities, dict):
        capabilities = {}
    peer = PeerCard(
        name=str(card.get("name", "")),
        rpc_url=rpc_url,
        push=capabilities.get("pushNotifications") is True,
        version=v1.PROTOCOL_VERSION if v1_url else "0.3",
    )
    _cards[card_url] = (time.monotonic() + CARD_CACHE_TTL_S, peer)
    return peer


def push_receiver_url(deps: Deps, delegate: DelegateTool) -> str | None:
    """Where peers push to: our callback function's URL (the lean front door), else PUBLIC_BASE_URL, else our
    own entry in ALLOWED_HOST_MAPPING."""
    s = deps.settings
    base = (s.public_endpoints.get(CALLBACK_ENDPOINT) or s.public_base_url).rstrip("/")
    if not base:
        try:
            base = s.allowed_host_mapping.resolve(delegate.callback_service or s.agent_name, CALLBACK_ENDPOINT)
        except UnknownServiceError:
            return None
    return base + PUSH_PATH


# --- what a peer's task means for our turn ------------------------------------------------


def task_answer(task: Task) -> str:
    """The text of a finished task: its artifacts (an artifact with a data part: the JSON of its data, what a
    structured call answers; its text parts are one text, as a peer that streams appends them), else its status
    message, else the last agent message."""
    texts = [t for t in (answer_text(a.parts) or text_of_parts(a.parts, "") for a in task.artifacts or []) if t]
    if texts:
        return "\n".join(texts)
    if task.status.message is not None:
        return text_of_parts(task.status.message.parts)
    for message in reversed(task.history or []):
        if message.role == "agent":
            return text_of_parts(message.parts)
    return ""


def task_result(tool_use_id: str, task: Task) -> ToolResult:
    """A terminal (or interrupted) peer task as our tool result. A task that waits for input is the peer's
    question (flightdeck.domain.asking): our model may answer it by delegating again in its context."""
    state = task.status.state
    if state == "completed":
        return ToolResult(tool_use_id, "success", task_answer(task), ResultSource.CALLBACK)
    if state == "input-required":
        message = task.status.message
        question = (text_of_parts(message.parts) if message is not None else "") or task_answer(task)
        return ToolResult(
            tool_use_id, "success", input_required_result(question, task.contextId, task.id), ResultSource.CALLBACK
        )
    detail = task_answer(task) or f"A2A task {task.id} ended in state {state}"
    return error_result(tool_use_id, f"peer_{state.replace('-', '_')}", ResultSource.CALLBACK, detail[:1000])


def _finished(task: Task, remote: RemoteTask | None) -> bool:
    """Whether the task ended or waits on us. A task we answered that still shows the question answered (that
    message, or none newer) works on the answer: peers republish the stored task, or send a bare state change
    or an artifact, before their new state."""
    state = task.status.state
    if state in TERMINAL_STATES:
        return True
    if state not in INTERRUPTED_STATES:
        return False
    if state != "input-required" or remote is None or "answered" not in remote.extra:
        return True
    return _asks_anew(task, str(remote.extra["answered"]), str(remote.extra.get("answer_id", "")))


def _asks_anew(task: Task, answered: str, answer_id: str) -> bool:
    """An input-required task we answered asks again: a status message other than the question answered, or
    (none) an agent message after our answer in its history."""
    message = task.status.message
    if message is not None:
        return text_of_parts(message.parts) != answered
    history = task.history or []
    after = next((i for i, m in enumerate(history) if m.messageId == answer_id), None)
    return after is not None and any(
        m.role == "agent" and text_of_parts(m.parts) != answered for m in history[after + 1 :]
    )


def size_checked(deps: Deps, result: ToolResult) -> ToolResult:
    """An answer over MAX_RESULT_BYTES (UTF-8), measured as a callback's is: an error result that says
    so, so the turn goes on. Never cut short, never stored."""
    # surrogatepass: measure text that is not valid Unicode too, rather than fail on it here.
    if (
        result.status != "success"
        or len(result.text.encode("utf-8", "surrogatepass")) <= deps.settings.max_result_bytes
    ):
        return result
    count("A2AAnswersTooLarge")
    logger.warning("A2A answer refused: too large", extra={"tool_use_id": result.tool_use_id})
    return too_large_result(deps, result.tool_use_id)


def _record(deps: Deps, session_id: str, turn: int, result: ToolResult, by: str) -> RecordOutcome:
    """Every answer a peer's task gives us (direct message, send answer, poll) is size-checked here."""
    return record_and_advance(deps, session_id, turn, size_checked(deps, result), by=by).outcome


def _rpc(
    deps: Deps, url: str, method: str, params: dict[str, Any], headers: dict[str, str], service: str, **kw: Any
) -> tuple[int, Any, str]:
    """_rpc_once in the A2A convention's client span, whose trace context the request carries."""
    with tracing.a2a_client(method, url, headers.get("traceparent", ""), params, kw.get("version", "0.3")) as current:
        answer = _rpc_once(deps, url, method, params, {**headers, **tracing.headers()}, service, **kw)
        tracing.a2a_answer(current, *answer)
    return answer


def _rpc_once(
    deps: Deps,
    url: str,
    method: str,
    params: dict[str, Any],
    headers: dict[str, str],
    service: str,
    *,
    timeout_s: float | None = None,
    version: str = "0.3",
    **ids: Any,
) -> tuple[int, Any, str]:
    """(HTTP status, result or None, problem). problem "" on a JSON-RPC result.

    service: the delegate's service name, whose peer token (if we have one) goes along as a bearer token.
    timeout_s: shorter than PEER_TIMEOUT_MS for this call (a best-effort cancel).
    version: "1.0": `method` (a v0.3 name) goes by its v1.0 name, with the A2A-Version header; the params
    are the caller's (already v1.0's); the result is v1.0's.
    """
    if version == v1.PROTOCOL_VERSION:
        method = v1.METHOD_NAMES[method]
        headers = {**headers, "A2A-Version": v1.PROTOCOL_VERSION}
    body = {"jsonrpc": "2.0", "id": str(uuid.uuid4()), "method": method, "params": params}
    answer = deps.peers.post_json(url, body, {**headers, **bearer(deps.token_for(service))}, timeout_s=timeout_s)
    audit_post(f"a2a:{method}", service, answer, **ids)
    if not 200 <= answer.status < 300:
        return answer.status, None, (f"HTTP {answer.status}" if answer.status else f"unreachable: {answer.error}")
    if not isinstance(answer.body, dict):
        return answer.status, None, "not a JSON-RPC response"
    error = answer.body.get("error")
    if isinstance(error, dict):
        return answer.status, error, f"JSON-RPC error {error.get('code')}: {str(error.get('message', ''))[:200]}"
    if "result" not in answer.body:
        return answer.status, None, "not a JSON-RPC response"
    return answer.status, answer.body["result"], ""


# --- dispatch ---------------------------------------------------------------------------


def dispatch_a2a(deps: Deps, msg: DispatchMessage, delegate: DelegateTool, token: str, attempt: int) -> DispatchOutcome:
    s, dispatches = deps.settings, deps.dispatches
    ids: dict[str, Any] = {"session_id": msg.session_id, "turn": msg.turn, "tool_use_id": msg.tool_use_id}

    def retry_or_fail(detail: str, retryable: bool) -> DispatchOutcome:
        if retryable and attempt < s.dispatch_max_attempts:
            count("DispatchRetries")
            delay = backoff_s(attempt)
            logger.warning("A2A dispatch will be retried", extra={**ids, "detail": detail, "retry_in_s": delay})
            return DispatchOutcome(DispatchStatus.RETRY, retry_after_s=delay, detail=detail)
        return _fail(deps, msg, detail)

    card_url = s.allowed_host_mapping.check_url(delegate.card_url) if delegate.card_url else None
    if card_url is None:
        return _fail(deps, msg, f"A2A card URL {delegate.card_url!r} is not under ALLOWED_HOST_MAPPING")
    try:
        card = fetch_card(deps, card_url)
    except CardProblem as exc:
        return retry_or_fail(f"{delegate.agent}: {exc.detail}", exc.retryable)
    push_url = push_receiver_url(deps, delegate) if card.push else None
    # A structured call (a tool built from the peer's card) goes as the data part the skill-contracts extension
    # names; the caller's responseSchema in the message's metadata, where a2a-sdk clients put theirs.
    part = (
        {"kind": "data", "data": {"skill": msg.skill, "arguments": msg.arguments or {}}}
        if msg.skill
        else {"kind": "text", "text": msg.task}
    )
    message_id = str(uuid.uuid5(_MESSAGE_NS, f"{s.agent_name}/{msg.session_id}/{msg.turn}/{msg.tool_use_id}"))
    message: dict[str, Any] = {
        "kind": "message",
        "role": "user",
        "parts": [part],
        # The same delegation always sends the same message id: a peer may recognise a re-send.
        "messageId": message_id,
        # A continuation: in the peer's context, and of its task that asked for input (flightdeck.domain.asking).
        **({"contextId": msg.context_id} if msg.context_id else {}),
        **({"taskId": msg.task_id} if msg.task_id else {}),
        **({"metadata": {"responseSchema": msg.response_schema}} if msg.response_schema is not None else {}),
    }
    structured = bool(msg.skill) or msg.response_schema is not None
    modes = ["text/plain", "application/json"] if structured else ["text/plain"]
    configuration: dict[str, Any] = {"blocking": False, "acceptedOutputModes": modes}
    if push_url:
        configuration["pushNotificationConfig"] = {"url": push_url, "token": token}
    headers = {"traceparent": msg.traceparent} if msg.traceparent else {}

    def send() -> tuple[int, Any, str]:
        params = {"message": message, "configuration": configuration}
        return _rpc(
            deps,
            card.rpc_url,
            "message/send",
            _send_params(params) if card.version == v1.PROTOCOL_VERSION else params,
            headers,
            delegate.peer_service,
            version=card.version,
            **ids,
        )

    answering = None
    if msg.task_id:
        # An answer: its record goes first, for a push that comes before the send's answer to be read against
        # the question answered (_finished).
        answering = _remote_record(
            msg, delegate, card, msg.task_id, "push" if push_url else "poll", message["messageId"]
        )
        ports(deps).store.put_remote(answering, s.session_retention_ms)
    status, result, problem = send()
    if problem and push_url and isinstance(result, dict) and result.get("code") == PUSH_NOT_SUPPORTED:
        # The card said it pushes, the peer says it does not: poll instead.
        push_url = None
        configuration.pop("pushNotificationConfig")
        status, result, problem = send()
    if problem:
        detail = f"{delegate.agent} (A2A message/send): {problem}"
        return retry_or_fail(detail, result is None and status in RETRYABLE_STATUSES)
    if card.version == v1.PROTOCOL_VERSION:
        result = v1.event_from_wire(result)
    kind = result.get("kind") if isinstance(result, dict) else None
    if kind == "message":
        # A direct answer, no task: the result is in.
        parts = result.get("parts") or []
        text = answer_text(parts) or text_of_parts(parts)
        _record(
            deps,
            msg.session_id,
            msg.turn,
            ToolResult(msg.tool_use_id, "success", text, ResultSource.CALLBACK),
            "a2a_dispatch",
        )
        dispatches.finish_dispatch(msg.session_id, msg.turn, msg.tool_use_id, "sent")
        timeline("dispatched", f"A2A task sent to {delegate.agent}: answered at once", **ids)
        return DispatchOutcome(DispatchStatus.SENT)
    try:
        task = Task.model_validate(result)
    except ValidationError as exc:
        return _fail(
            deps,
            msg,
            f"{delegate.agent} (A2A message/send): not a Task or Message: {exc.errors()[0].get('msg', '')}"[:300],
        )
    remote = _remote_record(msg, delegate, card, task.id, "push" if push_url else "poll", message_id)
    if remote != answering:
        ports(deps).store.put_remote(remote, s.session_retention_ms)
    mode = remote.mode
    dispatches.finish_dispatch(msg.session_id, msg.turn, msg.tool_use_id, "sent")
    count("DelegationsDispatched")
    if _finished(task, remote):
        _record(deps, msg.session_id, msg.turn, task_result(msg.tool_use_id, task), "a2a_dispatch")
    elif mode == "poll":
        schedule_poll(deps, msg.session_id, msg.turn, msg.tool_use_id, msg.deadline_ms, 0)
    timeline(
        "dispatched",
        f"A2A task {task.id} sent to {delegate.agent} ({mode}, {task.status.state})",
        traceparent=msg.traceparent or None,
        **ids,
    )
    return DispatchOutcome(DispatchStatus.SENT)


def _remote_record(
    msg: DispatchMessage, delegate: DelegateTool, card: PeerCard, task_id: str, mode: str, message_id: str
) -> RemoteTask:
    """The delegation's record: the peer's version, and for an answer the question answered and our message."""
    extra: dict[str, Any] = {"a2a": card.version} if card.version != "0.3" else {}
    if msg.task_id:
        extra.update(answered=msg.question, answer_id=message_id)
    return RemoteTask(
        msg.session_id, msg.turn, msg.tool_use_id, delegate.agent, card.rpc_url, task_id, mode, msg.deadline_ms, extra
    )


def _send_params(params: dict[str, Any]) -> dict[str, Any]:
    """message/send's params (the core's v0.3 shape) as SendMessage's: the message through wire_v1, blocking
    false as returnImmediately, the push config flat."""
    config = params["configuration"]
    out: dict[str, Any] = {
        "acceptedOutputModes": config["acceptedOutputModes"],
        "returnImmediately": not config.get("blocking", False),
    }
    push = config.get("pushNotificationConfig")
    if push:
        out["taskPushNotificationConfig"] = {"url": push["url"], "token": push["token"]}
    return {"message": v1.message_to_wire(params["message"]), "configuration": out}


def _version(remote: RemoteTask) -> str:
    return str(remote.extra.get("a2a") or "0.3")


def _remote_task(remote: RemoteTask, result: Any) -> Any:
    """A GetTask / tasks/get result as the core's Task JSON (a v1.0 Task is the result itself, not wrapped)."""
    return v1.task_from_wire(result) if _version(remote) == v1.PROTOCOL_VERSION else result


# --- polling (the timers queue) -------------------------------------------------------------


class PollMessage(BaseModel):
    kind: Literal["a2a_poll"]
    session_id: str
    turn: int = Field(ge=1)
    tool_use_id: str
    deadline_ms: int
    polls: int = Field(0, ge=0)


def schedule_poll(deps: Deps, session_id: str, turn: int, tool_use_id: str, deadline_ms: int, polls: int) -> bool:
    """Queue the next tasks/get, never past the deadline (the deadline timer covers that)."""
    left_s = (deadline_ms - deps.clock.now_ms()) / 1000
    delay = min(POLL_MAX_S, POLL_FIRST_S * 2 ** min(polls, 10), int(left_s) - 1)
    if delay < 1:
        return False
    deps.queues.send_timer(
        {
            "kind": POLL_KIND,
            "session_id": session_id,
            "turn": turn,
            "tool_use_id": tool_use_id,
            "deadline_ms": deadline_ms,
            "polls": polls + 1,
        },
        delay,
    )
    return True


def poll_remote_task(deps: Deps, poll: PollMessage) -> str:
    """One tasks/get. Returns: recorded | pending | stopped | failed."""
    ids: dict[str, Any] = {"session_id": poll.session_id, "turn": poll.turn, "tool_use_id": poll.tool_use_id}
    agg = deps.turns.get_turn(poll.session_id, poll.turn)
    if agg is None or agg.status != "waiting":
        return "stopped"  # timed out, canceled, or answered otherwise
    remote = ports(deps).store.get_remote(poll.session_id, poll.turn, poll.tool_use_id)
    if remote is None or deps.clock.now_ms() >= poll.deadline_ms:
        return "stopped"
    rpc_url = deps.settings.allowed_host_mapping.check_url(remote.rpc_url)
    if rpc_url is None:
        return _poll_failed(deps, poll, "peer_not_allowed", f"{remote.rpc_url} is no longer under ALLOWED_HOST_MAPPING")
    delegate = deps.settings.agent.delegate_for_agent(remote.agent)
    service = delegate.peer_service if delegate else remote.agent
    status, result, problem = _rpc(
        deps, rpc_url, "tasks/get", {"id": remote.remote_task_id}, {}, service, version=_version(remote), **ids
    )
    if problem:
        if result is None and status in RETRYABLE_STATUSES:
            logger.warning("A2A poll failed; polling on", extra={**ids, "detail": problem})
            schedule_poll(deps, poll.session_id, poll.turn, poll.tool_use_id, poll.deadline_ms, poll.polls)
            return "pending"
        return _poll_failed(deps, poll, "poll_failed", f"{remote.agent} (A2A tasks/get): {problem}"[:1000])
    try:
        task = Task.model_validate(_remote_task(remote, result))
    except ValidationError:
        return _poll_failed(deps, poll, "poll_failed", f"{remote.agent} (A2A tasks/get): the result is not a Task")
    if _finished(task, remote):
        _record(deps, poll.session_id, poll.turn, task_result(poll.tool_use_id, task), "a2a_poll")
        timeline("a2a_poll_done", f"A2A task {task.id} of {remote.agent}: {task.status.state}", **ids)
        return "recorded"
    schedule_poll(deps, poll.session_id, poll.turn, poll.tool_use_id, poll.deadline_ms, poll.polls)
    return "pending"


def _poll_failed(deps: Deps, poll: PollMessage, reason: str, detail: str) -> str:
    """The poll gives up: the delegation's result is an error saying why."""
    failure = error_result(poll.tool_use_id, reason, ResultSource.CALLBACK, detail)
    _record(deps, poll.session_id, poll.turn, failure, "a2a_poll")
    return "failed"


# --- the push receiver ----------------------------------------------------------------------


class PushStatus(str, enum.Enum):
    ACCEPTED = "accepted"
    DUPLICATE = "duplicate"
    LATE = "late"
    UNAUTHORIZED = "unauthorized"
    TOO_LARGE = "too_large"
    INVALID = "invalid"
    IN_PROGRESS = "in_progress"  # a non-terminal update: noted, nothing recorded


@dataclass(frozen=True)
class PushOutcome:
    status: PushStatus
    completed: bool = False
    detail: str = ""
    peer: str | None = None  # the delegate the verified token names (for the audit line)


_FROM_CALLBACK = {
    CallbackStatus.ACCEPTED: PushStatus.ACCEPTED,
    CallbackStatus.DUPLICATE: PushStatus.DUPLICATE,
    CallbackStatus.LATE: PushStatus.LATE,
    CallbackStatus.UNAUTHORIZED: PushStatus.UNAUTHORIZED,
    CallbackStatus.TOO_LARGE: PushStatus.TOO_LARGE,
}
_FROM_RECORD = {
    RecordOutcome.ACCEPTED: PushStatus.ACCEPTED,
    RecordOutcome.DUPLICATE: PushStatus.DUPLICATE,
    RecordOutcome.LATE: PushStatus.LATE,
}


def receive_push(deps: Deps, token: str, body: Any) -> PushOutcome:
    """A peer's push notification: the token is our callback token, checked as for /api/tools/response."""
    claims = verified_claims(deps, token, "A2A push")
    if claims is None:
        return PushOutcome(PushStatus.UNAUTHORIZED)
    peer = claims.name
    if isinstance(body, dict) and "kind" not in body and body.keys() & _V1_EVENTS:
        body = _v1_push(deps, claims.session_id, claims.turn, claims.tool_use_id, body)
        if body is None:
            return PushOutcome(PushStatus.IN_PROGRESS, peer=peer)
    try:
        task = Task.model_validate(body)
    except ValidationError as exc:
        first = exc.errors()[0]
        return PushOutcome(
            PushStatus.INVALID, detail=f"{'.'.join(map(str, first['loc'])) or 'body'}: {first['msg']}", peer=peer
        )
    # The delegation's record only matters (and is only read) for a task waiting on us.
    remote = (
        ports(deps).store.get_remote(claims.session_id, claims.turn, claims.tool_use_id)
        if task.status.state == "input-required"
        else None
    )
    if not _finished(task, remote):
        return PushOutcome(PushStatus.IN_PROGRESS, peer=peer)
    ids = {"session_id": claims.session_id, "turn": claims.turn, "tool_use_id": claims.tool_use_id}
    result = task_result(claims.tool_use_id, task)
    if result.status == "success":
        # Too large to keep: accept_callback records a result_too_large error, and the turn goes on.
        outcome = accept_callback(deps, token, result.text)
        return PushOutcome(_FROM_CALLBACK[outcome.status], outcome.completed, peer=peer)
    advance = record_and_advance(deps, claims.session_id, claims.turn, result, by="a2a_push", total=claims.total_tools)
    status = _FROM_RECORD[advance.outcome]
    timeline(f"callback_{status.value}", f"A2A push from {claims.name}: {task.status.state}", **ids)
    return PushOutcome(status, advance.completed, peer=peer)


_V1_EVENTS = frozenset({"task", "statusUpdate", "artifactUpdate", "message"})


def _v1_push(deps: Deps, session_id: str, turn: int, tool_use_id: str, body: dict[str, Any]) -> Any:
    """A v1.0 push (a StreamResponse: a2a-sdk 1.x pushes every event) as the core's Task JSON, or None for an
    event that ends nothing. A status update that ends the task carries no artifacts: the task is read."""
    if "task" in body:
        return v1.task_from_wire(body["task"])
    event = v1.event_from_wire(body)
    if not (isinstance(event, dict) and event.get("kind") == "status-update" and event.get("final")):
        return None
    remote = ports(deps).store.get_remote(session_id, turn, tool_use_id)
    rpc_url = deps.settings.allowed_host_mapping.check_url(remote.rpc_url) if remote else None
    if remote is not None and rpc_url is not None:
        delegate = deps.settings.agent.delegate_for_agent(remote.agent)
        _, result, problem = _rpc(
            deps,
            rpc_url,
            "tasks/get",
            {"id": remote.remote_task_id},
            {},
            delegate.peer_service if delegate else remote.agent,
            version=_version(remote),
            session_id=session_id,
            turn=turn,
            tool_use_id=tool_use_id,
        )
        if not problem:
            return _remote_task(remote, result)
    # The task cannot be read: its status is what we know (its message, if any, is the answer).
    return {
        "kind": "task",
        "id": event.get("taskId", ""),
        "contextId": event.get("contextId", ""),
        "status": event["status"],
    }


# tasks/cancel answered with these (task not found, not cancelable): nothing left to stop there.
_SETTLED_CODES = frozenset({-32001, -32002})


def cancel_a2a(deps: Deps, message: CancelMessage, service: str) -> tuple[int, bool, str]:
    """tasks/cancel on the peer's task: (HTTP status, settled without canceling, detail)."""
    remote = ports(deps).store.get_remote(message.session_id, message.turn, message.tool_use_id)
    if remote is None:
        return 200, True, "no remote task (answered at once, or never sent)"
    rpc_url = deps.settings.allowed_host_mapping.check_url(remote.rpc_url)
    if rpc_url is None:
        return 403, False, f"{remote.rpc_url} is no longer under ALLOWED_HOST_MAPPING"
    status, result, problem = _rpc(
        deps,
        rpc_url,
        "tasks/cancel",
        {"id": remote.remote_task_id},
        {},
        service,
        timeout_s=CANCEL_TIMEOUT_S,
        version=_version(remote),
        session_id=message.session_id,
        turn=message.turn,
        tool_use_id=message.tool_use_id,
    )
    if problem and isinstance(result, dict) and result.get("code") in _SETTLED_CODES:
        return status, True, problem  # already terminal, or gone: nothing to stop
    if problem:
        # A JSON-RPC error other than those is the peer's final word; no answer at all may be retried.
        return (status if result is None else 400), False, problem
    return status, False, ""
