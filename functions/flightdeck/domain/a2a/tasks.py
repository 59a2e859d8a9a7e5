"""This agent as an A2A server, the task methods: message/send, tasks/get, tasks/cancel; a task is one of our
sessions' turns.

* A task is the turns of one session (its context) from the turn its message
  started until a turn of it ends with no message of its own to go on with.
  `message/send` stores the task, then hands the text to `domain.chat.ingest_chat`,
  so the same turn pipeline runs. A message with the taskId of a working task
  continues it: it waits in the session's inbox and becomes the task's next turn.
* The next message on an `input-required` task (its taskId, or its contextId
  alone) continues it: the task works again, in the same session, whose model
  sees its question and the answer.
* A cancel is one conditional write; what follows it (the waiting turn completed, the session closed, the
  push, the delegations' peers told) is redone by a retry, and `recover_task` is the sweep's owner of a
  hand-off that died.

Elsewhere: what is checked before anything is stored (flightdeck.domain.a2a.checks), the Task as rendered
(.render), push notifications and their config methods (.push), the turn loop's hooks that complete, ask
and stop a task (.turn_hooks), streams (.stream).
"""

from __future__ import annotations

import json
import re
import time
import uuid
from collections.abc import Callable
from typing import Any

from flightdeck import tracing
from flightdeck.domain.a2a.checks import message_text, validate_push_config, visible_task
from flightdeck.domain.a2a.contracts import (
    continuing_contract,
    message_contract,
    record_contract,
    stored_contract,
)
from flightdeck.domain.a2a.core_models import (
    CancelTaskRequest,
    GetTaskRequest,
    SendConfiguration,
    SendMessageRequest,
    message_record,
    record_message,
)
from flightdeck.domain.a2a.ports import TaskRecord, ports, task_id_of
from flightdeck.domain.a2a.protocol import (
    AGENT_BUSY,
    INTERRUPTED_STATES,
    INVALID_PARAMS,
    TASK_NOT_CANCELABLE,
    TASK_NOT_FOUND,
    TERMINAL_STATES,
    A2AError,
)
from flightdeck.domain.a2a.push import notify
from flightdeck.domain.a2a.reliable import BadIdempotencyKey, idempotency_key
from flightdeck.domain.a2a.render import MESSAGE_NS, render_task
from flightdeck.domain.a2a.test_agent import direct_reply
from flightdeck.domain.a2a.turn_hooks import CANCELED_TEXT, canceled_result, close_canceled
from flightdeck.domain.chat import derived_session_id, ingest_chat
from flightdeck.domain.delegation_cancel import stop_delegations
from flightdeck.domain.liveness import Overdue
from flightdeck.domain.peers import require_caller, visible_to
from flightdeck.domain.ports import Deps
from flightdeck.domain.records import (
    AgentBusyError,
    InboxFullError,
    SessionBusyError,
    SessionNotFoundError,
    TaskNotOpenError,
)
from flightdeck.domain.skills.contract import Contract
from flightdeck.observability import count, timeline

# A send that waits (v0.3 configuration.blocking, v1.0 without returnImmediately): at most this long, below the
# API function's 25 s timeout and API Gateway's 29 s integration limit, then answer the task as it stands.
BLOCKING_WAIT_MAX_S = 20.0
# Time kept back from the function's remaining time for answering.
BLOCKING_MARGIN_S = 3.0
BLOCKING_POLL_FIRST_S = 0.1
BLOCKING_POLL_MAX_S = 1.0

SESSION_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$")
# "<session_id>~<key>": 128 + 1 + 64 at most (flightdeck.domain.a2a.ports.parse_task_id).
MAX_TASK_ID_CHARS = 193
# The task record keeps the message as received, JSON-encoded (flightdeck.adapters.a2a_state), in one
# DynamoDB item of at most 400 KB that later also holds the answer: a larger message is refused up front
# (-32602), not failed in the write (-32603).
MAX_TASK_MESSAGE_BYTES = 250_000


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
    return uuid.uuid5(MESSAGE_NS, f"task/{session_id}/{message_id}").hex


def send_message(
    deps: Deps,
    params: SendMessageRequest,
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
    content = message_text(params)
    contract = message_contract(deps, params)  # checked before anything is stored (-32602 lists what is wrong)
    message = params.message
    reply = direct_reply(s.a2a_test_agent, message)  # the TCK's test agent only (flightdeck.domain.a2a.test_agent)
    if reply is not None:
        return reply
    config = params.configuration
    stored = len(json.dumps(message_record(message)))  # the form the task record stores
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
        waiting = visible_task(deps, message.taskId, caller)
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
        validate_push_config(deps, config.taskPushNotificationConfig, task_id)
        if config.taskPushNotificationConfig
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
    user_message = {**message_record(message), "contextId": session_id, "taskId": task_id}
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
        own = SendMessageRequest(message=record_message(rec.user_message))
        try:
            _hand_off(deps, rec, message_text(own), rec.owner or None, None)
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


def _answer(deps: Deps, rec: TaskRecord, config: SendConfiguration, remaining_ms: int | None) -> dict[str, Any]:
    """message/send's result: the task, after waiting for its end when the client asked to block."""
    if not config.returnImmediately and rec.state not in TERMINAL_STATES:
        _wait_terminal(deps, rec.session_id, rec.key, remaining_ms)
        rec = ports(deps).store.get_task(rec.session_id, rec.key) or rec
    return render_task(deps, rec, config.historyLength)


def _continue_task(
    deps: Deps, params: SendMessageRequest, content: str, caller: str | None, contract: Contract | None = None
) -> TaskRecord:
    """Add a message to a working task: it waits in the session's inbox for its own turn, which the task
    goes on into (or starts that turn at once when the session is idle). The task, as it stands."""
    message = params.message
    rec = visible_task(deps, str(message.taskId), caller)
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
        own = SendMessageRequest(message=record_message(rec.user_message))
        rec = _hand_off(deps, rec, message_text(own), caller, None)
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
    config: SendConfiguration,
    remaining_ms: int | None,
    caller: str | None,
    contract: Contract | None = None,
) -> dict[str, Any]:
    """The message answers the question of a task in input-required: the task works again (a conditional
    write: one message wins), and the message starts the next turn of its session."""
    a2a = ports(deps).store
    push = (
        validate_push_config(deps, config.taskPushNotificationConfig, rec.task_id)
        if config.taskPushNotificationConfig
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
    if not config.returnImmediately:
        _wait_terminal(deps, rec.session_id, rec.key, remaining_ms)
    current = a2a.get_task(rec.session_id, rec.key)
    assert current is not None
    return render_task(deps, current, config.historyLength)


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
    deps: Deps, params: GetTaskRequest, remaining_ms: int | None = None, caller: str | None = None
) -> dict[str, Any]:
    return render_task(deps, visible_task(deps, params.id, caller), params.historyLength)


def cancel_task(
    deps: Deps, params: CancelTaskRequest, remaining_ms: int | None = None, caller: str | None = None
) -> dict[str, Any]:
    rec = visible_task(deps, params.id, caller)
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
        session_id, session.turn, canceled_result, "a2a_cancel", s.tool_agg_tombstone_ttl_ms, s.session_retention_ms
    )
    if expiry.won:
        # The transaction moved the session to the next turn; nobody will think it.
        close_canceled(deps, session_id, session.turn + 1, key)
    return session.turn, expiry.synthesized
