"""This agent as an A2A v0.3 server: a task is one of our sessions' turns.

* A task is the turns of one session (its context) from the turn its message
  started until a turn of it ends with no message of its own to go on with.
  `message/send` stores the task, then hands the text to `domain.chat.ingest_chat`,
  so the same turn pipeline runs. A message with the taskId of a working task
  continues it: it waits in the session's inbox and becomes the task's next turn.
* The turn loop calls `on_end_turn` when a turn ends with a final answer (the
  task completes) or a question (the task waits in `input-required`, the question
  its status message; flightdeck.domain.asking; unless a message continuing the task
  already started the next turn: that is its answer), and `stop_if_canceled` before it
  thinks (a canceled task thinks no more).
* The next message on an `input-required` task (its taskId, or its contextId
  alone) continues it: the task works again, in the same session, whose model
  sees its question and the answer.
* Every terminal transition is one conditional write; its winner enqueues the
  task's push notifications on the delivery queue (kind "a2a_push"), which the
  delivery worker POSTs with retries, re-checking ALLOWED_HOST_MAPPING.
"""

from __future__ import annotations

import base64
import json
import re
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, Literal
from urllib.parse import urlsplit

from pydantic import BaseModel

from flightdeck import tracing
from flightdeck.domain.a2a.constants import PUSH_KIND
from flightdeck.domain.a2a.contracts import (
    answer_parts,
    call_of,
    continuing_contract,
    message_contract,
    record_contract,
    stored_contract,
)
from flightdeck.domain.a2a.ports import TaskRecord, parse_task_id, ports, task_id_of
from flightdeck.domain.a2a.reliable import BadIdempotencyKey, idempotency_key
from flightdeck.domain.a2a.test_agent import artifact_parts, direct_reply
from flightdeck.domain.a2a.wire import (
    ACCEPTED_PARTS,
    AGENT_BUSY,
    CONTENT_TYPE_NOT_SUPPORTED,
    INPUT_MODES,
    INTERRUPTED_STATES,
    INVALID_PARAMS,
    TASK_NOT_CANCELABLE,
    TASK_NOT_FOUND,
    TERMINAL_STATES,
    A2AError,
    DataPart,
    DeleteTaskPushNotificationConfigParams,
    GetTaskPushNotificationConfigParams,
    ListTaskPushNotificationConfigParams,
    MessageSendParams,
    PushNotificationConfig,
    TaskIdParams,
    TaskPushNotificationConfig,
    TaskQueryParams,
    TextPart,
    dump,
)
from flightdeck.domain.a2a.wire_v1 import task_to_wire
from flightdeck.domain.asking import pending_question
from flightdeck.domain.chat import derived_session_id, ingest_chat
from flightdeck.domain.delegation_cancel import stop_delegations
from flightdeck.domain.delivery import DeliveryOutcome, DeliveryStatus
from flightdeck.domain.dispatch import RETRYABLE_STATUSES, backoff_s
from flightdeck.domain.liveness import Overdue
from flightdeck.domain.peers import require_caller, visible_to
from flightdeck.domain.ports import Deps, audit_post
from flightdeck.domain.records import (
    AgentBusyError,
    InboxFullError,
    MessageSlot,
    ResultSource,
    SessionBusyError,
    SessionNotFoundError,
    TaskNotOpenError,
    ToolResult,
    error_result,
)
from flightdeck.domain.skills.contract import Contract
from flightdeck.observability import count, logger, timeline

# `configuration.blocking`: wait at most this long, below the API function's 25 s
# timeout and API Gateway's 29 s integration limit, then answer the task as it stands.
BLOCKING_WAIT_MAX_S = 20.0
# Time kept back from the function's remaining time for answering.
BLOCKING_MARGIN_S = 3.0
BLOCKING_POLL_FIRST_S = 0.1
BLOCKING_POLL_MAX_S = 1.0

SESSION_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$")
# "<session_id>~<key>": 128 + 1 + 64 at most (flightdeck.domain.a2a.ports.parse_task_id).
MAX_TASK_ID_CHARS = 193
MAX_CONTENT_CHARS = 100_000
# An SQS message holds 256 KB: a push whose task is larger goes without its history.
MAX_PUSH_TASK_BYTES = 200_000
# The task record keeps the message as received, JSON-encoded (flightdeck.adapters.a2a_state), in one
# DynamoDB item of at most 400 KB that later also holds the answer: a larger message is refused up front
# (-32602), not failed in the write (-32603).
MAX_TASK_MESSAGE_BYTES = 250_000
SUPPORTED_PUSH_SCHEMES = ("bearer", "basic")
CANCELED_TEXT = "The task was canceled by the client; no further work was done."
_MESSAGE_NS = uuid.UUID("0b9f3f55-7a52-4d7e-9a43-1a2f4b2c7e10")


# --- rendering ---------------------------------------------------------------------------


def _iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _agent_message(task_id: str, context_id: str, text: str, salt: str) -> dict[str, Any]:
    return {
        "kind": "message",
        "role": "agent",
        "messageId": str(uuid.uuid5(_MESSAGE_NS, f"{task_id}/{salt}")),
        "parts": [{"kind": "text", "text": text}],
        "contextId": context_id,
        "taskId": task_id,
    }


def _user_message(task_id: str, context_id: str, text: str, salt: str) -> dict[str, Any]:
    return {**_agent_message(task_id, context_id, text, salt), "role": "user"}


def _history(deps: Deps, rec: TaskRecord) -> list[dict[str, Any]]:
    """The messages of every turn of the task, in order: the message that started it, what the agent
    said (tool traffic left out), each message that continued it (by taskId), and those of its
    messages still waiting in the session's inbox. Its questions are in
    it, and the messages that answered them."""
    history = [rec.user_message]
    stored = ports(deps).store.task_messages(
        rec.session_id, rec.start_turn, rec.end_turn, task_key=rec.key if rec.state not in TERMINAL_STATES else ""
    )
    skipped_own = False
    for index, item in enumerate(stored):
        role = item.message.get("role")
        content = item.message.get("content", [])
        texts = [b["text"] for b in content if isinstance(b.get("text"), str)]
        if role == "user":
            if any("toolResult" in b for b in content):
                continue
            own = item.turn == rec.start_turn and item.message_id in ("", rec.user_message.get("messageId"))
            if not skipped_own and own and not item.queued and texts:
                skipped_own = True  # the session's copy of the task's own message
            elif item.message_id or item.queued:  # a message that continued the task
                history.append(_continuing_message(rec, "".join(texts), item.message_id or f"q{index}"))
            elif any(t.strip() for t in texts):  # a later message of the task: an answer to its question
                history.append(_user_message(rec.task_id, rec.session_id, "".join(texts), f"u{item.turn}-{index}"))
            continue
        said = "".join(texts)
        question = pending_question([item.message])
        if question:
            said = f"{said.strip()}\n{question}" if said.strip() else question
        if role == "assistant" and said.strip():
            history.append(_agent_message(rec.task_id, rec.session_id, said, f"h{item.turn}-{index}"))
    return history


def _continuing_message(rec: TaskRecord, text: str, message_id: str) -> dict[str, Any]:
    """A user message that continued the task, as its history shows it (its parts as the model read them)."""
    return {
        "kind": "message",
        "role": "user",
        "messageId": message_id,
        "parts": [{"kind": "text", "text": text}],
        "contextId": rec.session_id,
        "taskId": rec.task_id,
    }


def answer_artifact_id(rec: TaskRecord) -> str:
    return f"{rec.key}-answer"


def status_of(rec: TaskRecord) -> dict[str, Any]:
    """The A2A TaskStatus of a task: its state, when it got there, and the answer or the reason."""
    status: dict[str, Any] = {"state": rec.state, "timestamp": _iso(rec.updated_ms)}
    if rec.state == "completed":
        status["message"] = _agent_message(rec.task_id, rec.session_id, rec.answer, "answer")
    elif rec.status_text:
        status["message"] = _agent_message(rec.task_id, rec.session_id, rec.status_text, f"status-{rec.state}")
    return status


def agent_message(rec: TaskRecord, text: str, salt: str) -> dict[str, Any]:
    """An agent Message of this task (its messageId derived from the task and salt)."""
    return _agent_message(rec.task_id, rec.session_id, text, salt)


def render_task(deps: Deps, rec: TaskRecord, history_length: int | None = None) -> dict[str, Any]:
    """The A2A Task object. history_length: None for all of it, n for the last n messages."""
    task: dict[str, Any] = {"kind": "task", "id": rec.task_id, "contextId": rec.session_id, "status": status_of(rec)}
    if rec.state == "completed":
        task["artifacts"] = [
            {
                "artifactId": answer_artifact_id(rec),
                "name": "answer",
                "parts": artifact_parts(deps.settings.a2a_test_agent, rec.user_message)
                or answer_parts(rec.answer, rec.contract),
            }
        ]
    if history_length != 0:
        history = _history(deps, rec)
        task["history"] = history[-history_length:] if history_length else history
    else:
        task["history"] = []
    return task


# --- lookups ---------------------------------------------------------------------------------


def visible_task(deps: Deps, task_id: str, caller: str | None) -> TaskRecord:
    """The task, if it exists for the caller; A2AError -32001 otherwise."""
    return _task(deps, task_id, caller)


def _task(deps: Deps, task_id: str, caller: str | None) -> TaskRecord:
    """The task, if it exists for the caller: another peer's task is "not found", like one that never was."""
    require_caller(deps.settings.inbound_auth, caller)
    parsed = parse_task_id(task_id)
    rec = ports(deps).store.get_task(*parsed) if parsed else None
    if rec is None or not visible_to(rec.owner, caller):
        raise A2AError(TASK_NOT_FOUND, "Task not found", {"taskId": task_id})
    return rec


def _unsupported_part(index: int, what: str) -> A2AError:
    return A2AError(
        CONTENT_TYPE_NOT_SUPPORTED,
        f"message.parts.{index}: {what} is not accepted; accepted are {ACCEPTED_PARTS}",
        {"supportedInputModes": list(INPUT_MODES)},
    )


def _file_text(index: int, file: dict[str, Any]) -> str:
    """An inline text file's content, decoded; raises A2AError for anything else."""
    mime = file.get("mimeType")
    if not isinstance(mime, str):
        mime = ""
    essence, _, parameters = mime.partition(";")
    essence = essence.strip().lower()
    if "bytes" not in file:
        raise _unsupported_part(index, "a file by uri" if "uri" in file else "a file without bytes")
    if not (essence.startswith("text/") or essence == "application/json"):
        raise _unsupported_part(index, f"a file of type {essence or 'unknown (no mimeType)'}")
    charset = next(
        (
            v.strip().strip('"')
            for k, _, v in (p.partition("=") for p in parameters.split(";"))
            if k.strip().lower() == "charset"
        ),
        "utf-8",
    )
    try:
        data = base64.b64decode(str(file["bytes"]), validate=True)
    except ValueError:
        raise A2AError(INVALID_PARAMS, f"message.parts.{index}.file.bytes is not base64") from None
    try:
        text = data.decode(charset)
    except (LookupError, UnicodeDecodeError):
        raise A2AError(INVALID_PARAMS, f"message.parts.{index}.file.bytes is not {charset} text") from None
    name = file.get("name") if isinstance(file.get("name"), str) else ""
    return f"[file {name + ', ' if name else ''}{essence}]\n{text}"


def _part_text(index: int, part: Any) -> str:
    if isinstance(part, TextPart):
        return part.text
    if isinstance(part, DataPart):
        return json.dumps(part.data, ensure_ascii=False)
    return _file_text(index, part.file)


def _content(params: MessageSendParams) -> str:
    """The message as the model's text: its parts in order, one per line."""
    message = params.message
    if message.role != "user":
        raise A2AError(INVALID_PARAMS, "message.role must be 'user'")
    if not message.parts:
        raise A2AError(INVALID_PARAMS, "message.parts must not be empty")
    call = call_of(message.parts)
    # A data part that makes a structured call reads as its text form (skill:<id> {json}), as on /api/chat.
    text = "\n".join(
        call.call.as_text()
        if call is not None and call.index == index and isinstance(part, DataPart)
        else _part_text(index, part)
        for index, part in enumerate(message.parts)
    )
    if not text.strip():
        raise A2AError(INVALID_PARAMS, "message.parts hold no text")
    if len(text) > MAX_CONTENT_CHARS:
        raise A2AError(INVALID_PARAMS, f"message text exceeds {MAX_CONTENT_CHARS} characters")
    return text


def validate_push_config(deps: Deps, config: PushNotificationConfig, task_id: str) -> dict[str, Any]:
    """A config we will POST to: its URL under an ALLOWED_HOST_MAPPING base URL, a scheme we can send."""
    parts = urlsplit(config.url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise A2AError(INVALID_PARAMS, "pushNotificationConfig.url must be an http(s) URL")
    url = deps.settings.allowed_host_mapping.check_url(config.url)
    if url is None:
        raise A2AError(
            INVALID_PARAMS,
            "pushNotificationConfig.url is not under any base URL this agent is "
            "allowed to call (ALLOWED_HOST_MAPPING), or is ambiguous (dot segments "
            "above the base, escaped slashes, backslashes)",
            {"url": config.url},
        )
    if config.authentication is not None:
        schemes = [s for s in config.authentication.schemes if s.lower() in SUPPORTED_PUSH_SCHEMES]
        if not schemes:
            raise A2AError(
                INVALID_PARAMS, "pushNotificationConfig.authentication.schemes: supported are Bearer and Basic"
            )
        if not config.authentication.credentials:
            raise A2AError(INVALID_PARAMS, "pushNotificationConfig.authentication.credentials is required")
    out = dump(config)
    out["id"] = config.id or task_id
    out["url"] = url  # the normalised form: what was checked is what is sent
    return out


# --- message/send --------------------------------------------------------------------------


AGENT_BUSY_RETRY_AFTER_S = AgentBusyError.retry_after_s


def _agent_busy(exc: AgentBusyError, **data: Any) -> A2AError:
    return A2AError(
        AGENT_BUSY,
        f"the agent is at its max_concurrent_tasks ({exc.limit} tasks under way): send the message again later",
        {"maxConcurrentTasks": exc.limit, "retryAfterSeconds": AGENT_BUSY_RETRY_AFTER_S, **data},
    )


def _context_busy(deps: Deps, session_id: str) -> A2AError:
    current = ports(deps).store.get_current(session_id)
    data: dict[str, Any] = {"contextId": session_id}
    if current is not None and current.open:
        data["taskId"] = task_id_of(session_id, current.key)
    return A2AError(
        INVALID_PARAMS,
        "the context is working on another task: send the message with that taskId to "
        "continue it, or again when it is done",
        data,
    )


def task_key_of(session_id: str, message_id: str) -> str:
    """The key of the task a message starts: a function of its context and messageId, so that the same
    message sent again names the same task (and is answered with it, not started twice)."""
    return uuid.uuid5(_MESSAGE_NS, f"task/{session_id}/{message_id}").hex


def send_message(
    deps: Deps,
    params: MessageSendParams,
    remaining_ms: int | None = None,
    caller: str | None = None,
    before_start: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """A message without taskId starts a task in its context (a new one, derived from its messageId when
    it names none; a finished one: the conversation goes on, with its history); with the taskId of a
    working task it continues that task (flightdeck.domain.chat: the session's inbox), and with that of
    a task in input-required (or naming the context of one alone) it answers the task's question. A
    message sent again (same messageId) is answered with its task as it stands now, and changes nothing.
    before_start: called with the context id once the task is created, before its first think is due."""
    s, a2a = deps.settings, ports(deps).store
    require_caller(s.inbound_auth, caller)
    content = _content(params)
    contract = message_contract(deps, params)  # checked before anything is stored (-32602 lists what is wrong)
    message = params.message
    reply = direct_reply(s.a2a_test_agent, message)  # the TCK's test agent only (flightdeck.domain.a2a.test_agent)
    if reply is not None:
        return reply
    config = params.configuration
    stored = len(json.dumps(dump(message)))  # the form the task record stores
    if stored > MAX_TASK_MESSAGE_BYTES:
        raise A2AError(
            INVALID_PARAMS,
            f"message is too large to keep with its task: {stored} bytes as stored "
            f"(JSON-escaped), at most {MAX_TASK_MESSAGE_BYTES}",
            {"storedBytes": stored},
        )
    if message.taskId is not None:
        if len(message.taskId) > MAX_TASK_ID_CHARS:
            raise A2AError(
                INVALID_PARAMS,
                f"message.taskId: at most {MAX_TASK_ID_CHARS} characters (a task id of "
                "this agent is <contextId>~<key>)",
            )
        waiting = _task(deps, message.taskId, caller)
        if waiting.state == "input-required":
            if message.contextId and message.contextId != waiting.session_id:
                raise A2AError(INVALID_PARAMS, "message.contextId does not match the task's context")
            return _answer_question(deps, waiting, content, config, remaining_ms, caller, contract)
        rec = _continue_task(deps, params, content, caller, contract)
        return _answer(deps, rec, config, remaining_ms)
    try:
        # A key (flightdeck.domain.a2a.reliable) names the task instead of the messageId: a retry is the same task.
        idem = idempotency_key(params.metadata)
    except BadIdempotencyKey as exc:
        raise A2AError(INVALID_PARAMS, f"Invalid params: {exc}", {"field": "metadata"}) from None
    seed = f"idem:{idem}" if idem else message.messageId
    session_id = message.contextId or derived_session_id(caller, f"a2a:{seed}")
    if not SESSION_ID_RE.match(session_id):
        raise A2AError(INVALID_PARAMS, "message.contextId: 1-128 characters of A-Z a-z 0-9 _ . : -")
    key = task_key_of(session_id, seed)
    task_id = task_id_of(session_id, key)
    push = (
        validate_push_config(deps, config.pushNotificationConfig, task_id)
        if config and config.pushNotificationConfig
        else None
    )
    session = deps.sessions.get_session(session_id)
    if session is not None and not visible_to(session.owner, caller):
        # Another peer's context: it does not exist for this caller, yet its id is taken.
        raise A2AError(TASK_NOT_FOUND, "Task not found: no such context", {"contextId": session_id})
    if session is not None and session.status != "idle":
        again = a2a.get_task(session_id, key)
        if again is not None:  # the same message, sent again
            if again.state == "submitted":
                again = _hand_off(deps, again, content, caller, before_start)
            return _answer(deps, again, config, remaining_ms)
        raise _context_busy(deps, session_id)
    now = deps.clock.now_ms()
    user_message = {**dump(message), "contextId": session_id, "taskId": task_id}
    rec = TaskRecord(
        session_id=session_id,
        key=key,
        state="submitted",
        start_turn=(session.turn + 1) if session else 1,
        user_message=user_message,
        created_ms=now,
        updated_ms=now,
        owner=caller or "",
        contract=stored_contract(contract),
    )
    created = a2a.create_task(rec, push, s.session_retention_ms)
    if created == "exists":
        existing = a2a.get_task(session_id, key)
        if existing is not None:
            if existing.state == "submitted":
                existing = _hand_off(deps, existing, content, caller, before_start)
            return _answer(deps, existing, config, remaining_ms)
    if created != "created":
        # The context's open task may be waiting for input: this message, naming the context alone, answers it.
        current = a2a.get_current(session_id)
        pending = (
            a2a.get_task(session_id, current.key)
            if current is not None and current.open and current.state == "input-required"
            else None
        )
        if pending is not None and pending.state == "input-required" and visible_to(pending.owner, caller):
            return _answer_question(deps, pending, content, config, remaining_ms, caller, contract)
        raise _context_busy(deps, session_id)
    return _answer(deps, _hand_off(deps, rec, content, caller, before_start), config, remaining_ms)


def _hand_off(
    deps: Deps, rec: TaskRecord, content: str, caller: str | None, before_start: Callable[[str], None] | None
) -> TaskRecord:
    """Hand a submitted task's message to its session (which starts its turn), then mark the task working
    at that turn: the write after the one that stored the task. Its owner, should the function die in
    between, is whoever sends the task's message again (the client's retry with the same messageId, or a
    message naming the task): each does this again. It is idempotent: the message goes in under its
    messageId (its identity in the session's inbox), so a second hand-off finds the turn the first one
    started and marks the task at it (start_task: once). The task as it stands after."""
    a2a, session_id, key = ports(deps).store, rec.session_id, rec.key
    if before_start is not None:
        before_start(session_id)
    message_id = str(rec.user_message.get("messageId") or "") or None
    try:
        accepted = ingest_chat(
            deps,
            content,
            session_id,
            caller=caller,
            message_id=message_id,
            id_kind="a2a",
            traceparent=tracing.traceparent(),
            queue=False,
            contract=record_contract(rec.contract),
        )
    except SessionNotFoundError:
        a2a.finish_task(session_id, key, "failed", status_text="the context belongs to another client")
        raise A2AError(TASK_NOT_FOUND, "Task not found: no such context", {"contextId": session_id}) from None
    except SessionBusyError:
        a2a.finish_task(session_id, key, "failed", status_text="the context became busy before the task started")
        raise _context_busy(deps, session_id) from None
    except AgentBusyError as exc:
        # Refused, not failed: the agent declined it for now (the context is free for the client's next message).
        a2a.finish_task(session_id, key, "rejected", status_text=str(exc))
        raise _agent_busy(exc, contextId=session_id) from None
    a2a.start_task(session_id, key, accepted.turn)
    if not accepted.replayed:
        count("A2ATasksStarted")
        timeline("a2a_task_started", f"A2A task {rec.task_id} started", session_id=session_id, turn=accepted.turn)
    started = a2a.get_task(session_id, key)
    assert started is not None
    return started


def recover_task(deps: Deps, overdue: Overdue) -> bool:
    """The sweep's owner of a task whose message never reached its session (Deps.recoverers["handoff"]):
    message/send stored the task, or an answer resumed it from input-required, and the function died
    before the write that hands the message over (which clears the mark). A submitted task's own message
    is stored with it: it is handed over now (idempotent: under its messageId). An answer is not stored
    anywhere else: the question is asked again (input-required, notified), for the client to answer.
    Either way nothing stays open on an idle session. True when it moved the task on."""
    a2a = ports(deps).store
    rec = a2a.get_task(overdue.session_id, overdue.key)
    if rec is None or not rec.handoff_due:
        return False
    if rec.state == "submitted":
        count("A2AHandOffsRecovered")
        own = MessageSendParams.model_validate({"message": rec.user_message})
        try:
            _hand_off(deps, rec, _content(own), rec.owner or None, None)
        except A2AError:
            pass  # _hand_off ended the task (failed / rejected) and said why: it is settled
        return True
    if rec.state == "working":
        count("A2AHandOffsRecovered")
        question = rec.asked_text or "Please send your answer again."
        if a2a.ask_input(rec.session_id, rec.key, question, rec.asked_turn or rec.end_turn):
            latest = a2a.get_task(rec.session_id, rec.key)
            if latest is not None:
                notify(deps, latest)
            return True
        return False
    return False


def _answer(deps: Deps, rec: TaskRecord, config: Any, remaining_ms: int | None) -> dict[str, Any]:
    """message/send's result: the task, after waiting for its end when the client asked to block."""
    if config and config.blocking and rec.state not in TERMINAL_STATES:
        _wait_terminal(deps, rec.session_id, rec.key, remaining_ms)
        rec = ports(deps).store.get_task(rec.session_id, rec.key) or rec
    return render_task(deps, rec, config.historyLength if config else None)


def _continue_task(
    deps: Deps, params: MessageSendParams, content: str, caller: str | None, contract: Contract | None = None
) -> TaskRecord:
    """Add a message to a working task: it waits in the session's inbox for its own turn, which the task
    goes on into (or starts that turn at once when the session is idle). The task, as it stands."""
    message = params.message
    rec = _task(deps, str(message.taskId), caller)
    if message.contextId and message.contextId != rec.session_id:
        raise A2AError(INVALID_PARAMS, "message.contextId does not match the task's context")

    def not_open(state: str) -> A2AError:
        if state in TERMINAL_STATES:
            return A2AError(
                INVALID_PARAMS,
                f"Task {rec.task_id} is in terminal state: {state}",
                {"taskId": rec.task_id, "state": state},
            )
        return A2AError(
            INVALID_PARAMS,
            f"Task {rec.task_id} is {state}: it takes a message once it is working; send again in a moment",
            {"taskId": rec.task_id, "state": state},
        )

    if rec.state == "submitted":
        # Its own message is not in its session yet: message/send died after storing the task (or is
        # about to hand it over): this hands it over (idempotent), and the message continues the task.
        own = MessageSendParams.model_validate({"message": rec.user_message})
        rec = _hand_off(deps, rec, _content(own), caller, None)
    if rec.state != "working":
        raise not_open(rec.state)
    try:
        accepted = ingest_chat(
            deps,
            content,
            rec.session_id,
            caller=caller,
            message_id=message.messageId,
            id_kind="a2a",
            continues_task=rec.key,
            contract=continuing_contract(contract, rec),
        )
    except TaskNotOpenError:
        latest = ports(deps).store.get_task(rec.session_id, rec.key)
        raise not_open(latest.state if latest else "unknown") from None
    except InboxFullError as exc:
        raise A2AError(
            INVALID_PARAMS,
            f"the task's context already has {exc.waiting} messages waiting; send again once it has taken some",
            {"taskId": rec.task_id, "waiting": exc.waiting},
        ) from None
    except SessionNotFoundError:
        raise A2AError(TASK_NOT_FOUND, "Task not found", {"taskId": rec.task_id}) from None
    except SessionBusyError:
        raise A2AError(
            INVALID_PARAMS, "the task's context could not take the message now; send again", {"taskId": rec.task_id}
        ) from None
    except AgentBusyError as exc:  # its context was idle: this message would have started a turn
        raise _agent_busy(exc, taskId=rec.task_id) from None
    if not accepted.replayed:
        count("A2ATasksContinued")
        timeline(
            "a2a_task_continued",
            f"A2A task {rec.task_id}: a message continues it"
            + (f" (position {accepted.position} in the inbox)" if accepted.queued else ""),
            session_id=rec.session_id,
        )
    return ports(deps).store.get_task(rec.session_id, rec.key) or rec


def _answer_question(
    deps: Deps,
    rec: TaskRecord,
    content: str,
    config: Any,
    remaining_ms: int | None,
    caller: str | None,
    contract: Contract | None = None,
) -> dict[str, Any]:
    """The message answers the question of a task in input-required: the task works again (a conditional
    write: one message wins), and the message starts the next turn of its session."""
    a2a = ports(deps).store
    push = (
        validate_push_config(deps, config.pushNotificationConfig, rec.task_id)
        if config and config.pushNotificationConfig
        else None
    )
    if not a2a.resume_task(rec.session_id, rec.key):
        raise _context_busy(deps, rec.session_id)  # another message answered it first
    if push is not None:  # the answer's sender is told of what follows (a delegation's new callback token)
        a2a.put_push(rec.session_id, rec.key, push, deps.settings.session_retention_ms)
    try:
        # continues_task: the write that takes the answer clears the task's hand-off mark (resume_task set it).
        accepted = ingest_chat(
            deps,
            content,
            rec.session_id,
            caller=caller,
            contract=continuing_contract(contract, rec),
            continues_task=rec.key,
        )
    except (SessionBusyError, SessionNotFoundError, AgentBusyError, TaskNotOpenError) as exc:
        # The session took another message first (or the agent has no room): the question stands (its
        # notification was sent).
        a2a.ask_input(rec.session_id, rec.key, rec.status_text, rec.end_turn, notified=True)
        if isinstance(exc, SessionNotFoundError):
            raise A2AError(TASK_NOT_FOUND, "Task not found: no such context", {"contextId": rec.session_id}) from None
        if isinstance(exc, AgentBusyError):
            raise _agent_busy(exc, taskId=rec.task_id) from None
        raise _context_busy(deps, rec.session_id) from None
    count("A2ATasksContinued")
    timeline(
        "a2a_task_continued",
        f"A2A task {rec.task_id} continued: its question answered",
        session_id=rec.session_id,
        turn=accepted.turn,
    )
    if config and config.blocking:
        _wait_terminal(deps, rec.session_id, rec.key, remaining_ms)
    current = a2a.get_task(rec.session_id, rec.key)
    assert current is not None
    return render_task(deps, current, config.historyLength if config else None)


def _wait_terminal(deps: Deps, session_id: str, key: str, remaining_ms: int | None) -> None:
    budget = BLOCKING_WAIT_MAX_S
    if remaining_ms is not None:
        budget = min(budget, remaining_ms / 1000 - BLOCKING_MARGIN_S)
    deadline = time.monotonic() + budget
    pause = BLOCKING_POLL_FIRST_S
    while time.monotonic() < deadline:
        rec = ports(deps).store.get_task(session_id, key)
        if rec is None or rec.state in TERMINAL_STATES or rec.state in INTERRUPTED_STATES:
            return
        time.sleep(min(pause, max(0.0, deadline - time.monotonic())))
        pause = min(BLOCKING_POLL_MAX_S, pause * 1.5)


# --- tasks/get, tasks/cancel ---------------------------------------------------------------


def get_task(
    deps: Deps, params: TaskQueryParams, remaining_ms: int | None = None, caller: str | None = None
) -> dict[str, Any]:
    return render_task(deps, _task(deps, params.id, caller), params.historyLength)


def cancel_task(
    deps: Deps, params: TaskIdParams, remaining_ms: int | None = None, caller: str | None = None
) -> dict[str, Any]:
    rec = _task(deps, params.id, caller)
    not_cancelable = A2AError(
        TASK_NOT_CANCELABLE, "Task cannot be canceled: it is in a terminal state", {"taskId": rec.task_id}
    )
    a2a = ports(deps).store
    if rec.state in TERMINAL_STATES:
        # A retry: what the first cancel may not have got to (each step once), while the task is its
        # context's latest and the session not closed for it (a later turn is not the task's to stop).
        current = a2a.get_current(rec.session_id) if rec.state == "canceled" else None
        if current is not None and current.key == rec.key and not current.closed_turn:
            _after_cancel(deps, rec)
        elif current is not None and current.key == rec.key and not rec.notified:
            notify(deps, rec)
        not_cancelable.data["state"] = rec.state
        raise not_cancelable
    # Waiting for an answer, its session is idle at the question's turn: nothing to stop, and a later
    # message to the session is not this task's (closed at that turn, in the same write).
    waited = rec.state == "input-required" and a2a.finish_task(
        rec.session_id,
        rec.key,
        "canceled",
        status_text=CANCELED_TEXT,
        end_turn=rec.end_turn,
        only_from="input-required",
        closed_turn=rec.end_turn,
    )
    if not waited:
        session = deps.sessions.get_session(rec.session_id)
        end_turn = session.turn if session else rec.start_turn
        if not a2a.finish_task(rec.session_id, rec.key, "canceled", status_text=CANCELED_TEXT, end_turn=end_turn):
            latest = a2a.get_task(rec.session_id, rec.key)
            not_cancelable.data["state"] = latest.state if latest else "unknown"
            raise not_cancelable
    count("A2ATasksCanceled")
    timeline("a2a_task_canceled", f"A2A task {rec.task_id} canceled", session_id=rec.session_id)
    return render_task(deps, _after_cancel(deps, rec))


def _after_cancel(deps: Deps, rec: TaskRecord) -> TaskRecord:
    """What follows a task's cancel: its waiting turn completed and its session closed, its push sent, its
    delegations' peers told to stop. Each step is conditional, so a retried cancel redoes what is left."""
    a2a = ports(deps).store
    stopped = _stop_delegations(deps, rec.session_id, rec.key)
    latest = a2a.get_task(rec.session_id, rec.key)
    assert latest is not None
    if not latest.notified:  # closing the session may have notified already
        notify(deps, latest)
    if stopped is not None:  # last, best-effort: the delegations' peers are told to stop too
        stop_delegations(deps, rec.session_id, *stopped, "the A2A task was canceled")
    return latest


def _canceled(tool_use_id: str) -> ToolResult:
    return error_result(tool_use_id, "canceled", ResultSource.TIMEOUT, "the A2A task was canceled by its client")


def _stop_delegations(deps: Deps, session_id: str, key: str) -> tuple[int, tuple[str, ...]] | None:
    """Outstanding delegations stop counting: the waiting turn completes through the same conditional
    transition as a timeout, with a `canceled` result for every missing id, and no next think.
    Returns (turn, the ids given a canceled result), for their peers to be told, or None."""
    s = deps.settings
    session = deps.sessions.get_session(session_id)
    if session is None or session.status != "busy":
        return None
    agg = deps.turns.get_turn(session_id, session.turn)
    if agg is None or agg.status != "waiting":
        return None  # thinking: the turn loop stops at its next step (stop_if_canceled)
    expiry = deps.turns.complete_with_errors(
        session_id, session.turn, _canceled, "a2a_cancel", s.tool_agg_tombstone_ttl_ms, s.session_retention_ms
    )
    if expiry.won:
        # The transaction moved the session to the next turn; nobody will think it.
        close_canceled(deps, session_id, session.turn + 1, key)
    return session.turn, expiry.synthesized


def close_canceled(deps: Deps, session_id: str, turn: int, key: str) -> None:
    """End a canceled task's session at `turn`: results for any open tool calls, a closing line, idle."""
    sessions, retention = deps.sessions, deps.settings.session_retention_ms
    session = sessions.get_session(session_id)
    if session is None:
        return
    last = session.messages[-1] if session.messages else {}
    uses = [b["toolUse"] for b in last.get("content", []) if "toolUse" in b] if last.get("role") == "assistant" else []
    closing: list[tuple[int, dict[str, Any]]] = []
    if uses:
        # A conversation never leaves a tool call without its result (Converse requires one).
        results = {r.tool_use_id: r for t in (turn - 1, turn) for r in deps.turns.get_results(session_id, t)}
        blocks = [results.get(u["toolUseId"], _canceled(u["toolUseId"])).as_block() for u in uses]
        closing.append((int(MessageSlot.CLOSING_RESULTS), {"role": "user", "content": blocks}))
    closing.append((int(MessageSlot.CLOSING_TEXT), {"role": "assistant", "content": [{"text": CANCELED_TEXT}]}))
    a2a = ports(deps).store
    # Before the session ends: once it is idle, a later turn of it is not this task's (stop_if_canceled).
    a2a.set_closed_turn(session_id, key, turn)
    # The closing messages and the turn's end in one write (an append would clear the owed mark): until
    # it commits, the session is busy at this turn with the mark the cancel's completion wrote, so the
    # sweep's think redoes the close; a think that closes is redone by its invocation's retry.
    end = sessions.finish_session_turn(session_id, turn, retention, messages=closing)
    rec = a2a.get_task(session_id, key)
    if rec is not None and rec.state in TERMINAL_STATES and not rec.notified:
        notify(deps, rec)  # the cancel may have died before its own notification
    timeline("a2a_session_stopped", f"canceled task: session stopped at turn {turn}", session_id=session_id, turn=turn)
    if end.next_input is not None:
        # The inbox had a message: its turn started in the write that closed this one (and is owed).
        try:
            deps.thinks.start(session_id, turn + 1)
        except Exception:  # noqa: BLE001 - owed: the sweep re-sends it after its grace
            logger.exception(
                "the next think was not sent; the sweep will send it",
                extra={"session_id": session_id, "turn": turn + 1},
            )


# --- hooks the turn loop calls ---------------------------------------------------------------


def stop_if_canceled(deps: Deps, session_id: str, turn: int, input_task: str = "") -> bool:
    """True (and the session closed) when this turn belongs to an A2A task that was canceled.

    input_task: the task the message that started this turn continued (a message queued for a task
    that was canceled before its turn came gets no think: its turn is closed at once)."""
    if getattr(deps, "a2a", None) is None:
        return False
    current = ports(deps).store.get_current(session_id)
    if current is None or current.open or current.state != "canceled":
        return False
    if input_task and input_task == current.key:
        close_canceled(deps, session_id, turn, current.key)
        return True
    if turn < current.start_turn or (current.closed_turn and turn > current.closed_turn):
        return False
    close_canceled(deps, session_id, turn, current.key)
    return True


def on_session_canceled(deps: Deps, session_id: str, turn: int, text: str) -> None:
    """The session was canceled through the REST API (flightdeck.domain.session_cancel) and closed at
    `turn`: its open A2A task, if any, ends canceled too (once), and is notified."""
    if getattr(deps, "a2a", None) is None:
        return
    a2a = ports(deps).store
    current = a2a.get_current(session_id)
    if current is None or turn < current.start_turn:
        return
    if current.open and a2a.finish_task(session_id, current.key, "canceled", status_text=text, end_turn=turn):
        count("A2ATasksCanceled")
        a2a.set_closed_turn(session_id, current.key, turn)
    rec = a2a.get_task(session_id, current.key)
    if rec is not None and rec.state in TERMINAL_STATES and not rec.notified:
        notify(deps, rec)


def on_end_turn(
    deps: Deps, session_id: str, turn: int, answer: str, failed: bool = False, question: str | None = None
) -> None:
    """The session's turn ended with a final answer: its open A2A task completes (once), or fails
    when the answer is an error (the model could not answer); or with a question: the task waits in
    input-required, the question its status message (once per turn).

    Either way, unless a message continuing the task (sent with its taskId while it worked) started the
    next turn in the write that ended this one: the task goes on working into that turn. After a
    question, that message is its answer (the model is given it as the answer, as it would be given
    the client's reply), so the task does not wait for another: it never shows input-required for a
    question already answered, and a message the client sends next continues the task as any other."""
    if getattr(deps, "a2a", None) is None:
        return
    a2a = ports(deps).store
    current = a2a.get_current(session_id)
    if current is None or turn < current.start_turn:
        return
    if current.open and question is not None:
        if a2a.ask_input(session_id, current.key, question, turn):
            count("A2ATasksInputRequired")
            timeline(
                "a2a_task_input_required",
                f"A2A task {task_id_of(session_id, current.key)} input-required",
                session_id=session_id,
                turn=turn,
            )
    elif current.open:
        state = "failed" if failed else "completed"
        # Unless a message continuing the task started the next turn: the task goes on into it.
        if a2a.finish_task(
            session_id,
            current.key,
            state,
            answer=answer,
            end_turn=turn,
            status_text=answer if failed else "",
            unless_continued=True,
        ):
            count("A2ATasksFailed" if failed else "A2ATasksCompleted")
            timeline(
                f"a2a_task_{state}",
                f"A2A task {task_id_of(session_id, current.key)} {state}",
                session_id=session_id,
                turn=turn,
            )
    elif current.state == "canceled" and not current.closed_turn:
        a2a.set_closed_turn(session_id, current.key, turn)  # a think that was under way when it was canceled
    rec = a2a.get_task(session_id, current.key)
    if rec is not None and (rec.state in TERMINAL_STATES or rec.state == "input-required") and not rec.notified:
        notify(deps, rec)


# --- push notifications (server side) --------------------------------------------------------


def notify(deps: Deps, rec: TaskRecord) -> int:
    """Enqueue the task for every push config it has (at least once), then mark it notified: when it
    ended, and when it waits for input (continuing it clears the mark)."""
    a2a = ports(deps).store
    configs = a2a.list_push(rec.session_id, rec.key)
    if configs:
        task = render_task(deps, rec)
        if len(json.dumps(task)) > MAX_PUSH_TASK_BYTES:
            task["history"] = []
        for config in configs:
            deps.queues.send_delivery(
                {
                    "kind": PUSH_KIND,
                    "session_id": rec.session_id,
                    "task_id": rec.task_id,
                    "config": config,
                    "task": task,
                    "created_ms": deps.clock.now_ms(),
                }
            )
        count("A2APushesQueued", len(configs))
    a2a.mark_notified(rec.session_id, rec.key)
    return len(configs)


class PushDelivery(BaseModel):
    kind: Literal["a2a_push"]
    session_id: str
    task_id: str
    config: dict[str, Any]
    task: dict[str, Any]
    created_ms: int = 0


def push_headers(config: dict[str, Any]) -> dict[str, str]:
    headers: dict[str, str] = {}
    if config.get("token"):
        headers["X-A2A-Notification-Token"] = str(config["token"])
    auth = config.get("authentication") or {}
    credentials = auth.get("credentials")
    for scheme in auth.get("schemes") or []:
        if credentials and scheme.lower() == "bearer":
            headers["Authorization"] = f"Bearer {credentials}"
            break
        if credentials and scheme.lower() == "basic":
            # Credentials given as user:password are encoded; anything else is taken as already encoded.
            value = credentials
            if ":" in credentials:
                value = base64.b64encode(credentials.encode()).decode()
            headers["Authorization"] = f"Basic {value}"
            break
    return headers


def deliver_push(deps: Deps, item: PushDelivery, attempt: int, first_sent_ms: int) -> DeliveryOutcome:
    """POST the task to one webhook; the URL is checked against the allowlist again, now."""
    ids = {"session_id": item.session_id, "task_id": item.task_id}
    url = deps.settings.allowed_host_mapping.check_url(str(item.config.get("url", "")))
    if url is None:
        count("A2APushesRefused")
        logger.error("push notification refused: URL no longer allowed", extra=ids)
        return DeliveryOutcome(DeliveryStatus.DEAD, detail="push URL is not under ALLOWED_HOST_MAPPING")
    # A config set through v1.0 gets v1.0's body: the task in a StreamResponse ({"task": ...}).
    body = {"task": task_to_wire(item.task)} if item.config.get("a2aVersion") == "1.0" else item.task
    answer = deps.peers.post_json(url, body, push_headers(item.config))
    audit_post("push_notification", urlsplit(url).netloc or None, answer, **ids)
    detail = answer.error or (str(answer.body)[:300] if answer.status >= 300 else "")
    if 200 <= answer.status < 300:
        count("A2APushesDelivered")
        timeline("a2a_push_delivered", f"push notification delivered for {item.task_id}", **ids)
        return DeliveryOutcome(DeliveryStatus.DELIVERED)
    if answer.status in RETRYABLE_STATUSES:
        spent = deps.clock.now_ms() - (first_sent_ms or item.created_ms or deps.clock.now_ms())
        budget = deps.settings.reply_retry_max_ms
        if spent < budget:
            delay = min(backoff_s(attempt), max(1, (budget - spent) // 1000))
            logger.warning("push notification will be retried", extra={**ids, "detail": detail, "retry_in_s": delay})
            return DeliveryOutcome(DeliveryStatus.RETRY, delay, detail)
        logger.error("push notification retry budget spent", extra={**ids, "detail": detail})
        return DeliveryOutcome(DeliveryStatus.DEAD, detail=f"retry budget spent: {detail}")
    count("A2APushesRefused")
    logger.warning("push notification refused by the receiver; not retrying", extra={**ids, "detail": detail})
    return DeliveryOutcome(
        DeliveryStatus.REFUSED, detail=f"refused by the receiver: HTTP {answer.status} {detail}".rstrip()
    )


# --- tasks/pushNotificationConfig/* -----------------------------------------------------------


def _config_view(task_id: str, config: dict[str, Any]) -> dict[str, Any]:
    return {"taskId": task_id, "pushNotificationConfig": {k: v for k, v in config.items() if k != "a2aVersion"}}


def set_push_config(
    deps: Deps, params: TaskPushNotificationConfig, remaining_ms: int | None = None, caller: str | None = None
) -> dict[str, Any]:
    rec = _task(deps, params.taskId, caller)
    config = validate_push_config(deps, params.pushNotificationConfig, rec.task_id)
    ports(deps).store.put_push(rec.session_id, rec.key, config, deps.settings.session_retention_ms)
    return _config_view(rec.task_id, config)


def get_push_config(
    deps: Deps, params: GetTaskPushNotificationConfigParams, remaining_ms: int | None = None, caller: str | None = None
) -> dict[str, Any]:
    rec = _task(deps, params.id, caller)
    a2a = ports(deps).store
    if params.pushNotificationConfigId:
        config = a2a.get_push(rec.session_id, rec.key, params.pushNotificationConfigId)
    else:
        configs = a2a.list_push(rec.session_id, rec.key)
        config = next((c for c in configs if c.get("id") == rec.task_id), configs[0] if configs else None)
    if config is None:
        raise A2AError(
            INVALID_PARAMS,
            "no such push notification config for this task",
            {"taskId": rec.task_id, "pushNotificationConfigId": params.pushNotificationConfigId},
        )
    return _config_view(rec.task_id, config)


def list_push_configs(
    deps: Deps, params: ListTaskPushNotificationConfigParams, remaining_ms: int | None = None, caller: str | None = None
) -> list[dict[str, Any]]:
    rec = _task(deps, params.id, caller)
    return [_config_view(rec.task_id, c) for c in ports(deps).store.list_push(rec.session_id, rec.key)]


def delete_push_config(
    deps: Deps,
    params: DeleteTaskPushNotificationConfigParams,
    remaining_ms: int | None = None,
    caller: str | None = None,
) -> None:
    rec = _task(deps, params.id, caller)
    ports(deps).store.delete_push(rec.session_id, rec.key, params.pushNotificationConfigId)
    return None


class A2ATurnHooks:
    """The A2A add-on at the turn loop's boundaries (Deps.turn_hooks, registered in flightdeck.wiring)."""

    def stop_if_canceled(self, deps: Deps, session_id: str, turn: int, input_task: str = "") -> bool:
        return stop_if_canceled(deps, session_id, turn, input_task)

    def on_session_canceled(self, deps: Deps, session_id: str, turn: int, text: str) -> None:
        on_session_canceled(deps, session_id, turn, text)

    def on_end_turn(
        self, deps: Deps, session_id: str, turn: int, answer: str, failed: bool = False, question: str | None = None
    ) -> None:
        on_end_turn(deps, session_id, turn, answer, failed=failed, question=question)
