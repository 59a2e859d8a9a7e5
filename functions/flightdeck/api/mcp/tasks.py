"""MCP tasks: a tools/call whose answer outlasts its request, polled by the client (docs/MCP.md, "Long work").

Both eras' mechanisms, over the session the call started:

- 2026-07-28: the tasks extension (SEP-2663, `io.modelcontextprotocol/tasks`). A client that declares it
  in a request's `_meta` client capabilities gets a CreateTaskResult for a call that starts work (`ask`, a
  skill), as soon as the message is stored; `tasks/get` answers the task with its result inlined,
  `tasks/update` answers the agent's question (an `elicitation/create` input request), `tasks/cancel`
  acks. Without the extension these methods answer -32021.
- 2025-11-25: experimental tasks. A tools/call with a `task` param on a tool whose `execution.taskSupport`
  is optional answers `{task}`; `tasks/get`, `tasks/result` (waits within the request's budget) and
  `tasks/cancel` serve it. The agent's question is an answer there, as `ask` gives it (no server requests).

A task is stored nowhere of its own: it is one user message of the caller's session and the rounds that
answered the agent's questions after it. Its id names the session, that message's number among the
session's user messages, and the tool (`<session>:<n>:<tool>`), so every read is the session read that
get_result makes, and isolation is the session's: another client's task does not exist.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from typing import Any

from flightdeck.api.mcp import tools
from flightdeck.api.mcp.wire import AGENT_BUSY, INVALID_PARAMS, McpError
from flightdeck.domain.asking import pending_question
from flightdeck.domain.chat import ingest_chat, read_session
from flightdeck.domain.ports import Deps
from flightdeck.domain.records import (
    SESSION_CANCELED,
    AgentBusyError,
    InboxFullError,
    Session,
    SessionBusyError,
    SessionNotFoundError,
    Stamp,
)
from flightdeck.domain.session_cancel import CLOSING_TEXT, cancel_session, close_question
from flightdeck.domain.timeline import iso_ms

EXTENSION = "io.modelcontextprotocol/tasks"
MISSING_CAPABILITY = -32021  # 2026-07-28: Missing Required Client Capability
RELATED_TASK = "io.modelcontextprotocol/related-task"  # 2025-11-25's _meta key on tasks/result
POLL_INTERVAL_MS = 1_000
_TASK_ID = re.compile(r"^([A-Za-z0-9._:-]{1,128}):([1-9][0-9]{0,5}):([a-z0-9][a-z0-9_-]{0,63})$")
# The one field an answer to the agent's question has (its elicitation's requested schema).
_ANSWER_SCHEMA = {
    "type": "object",
    "properties": {"answer": {"type": "string", "title": "Your answer", "minLength": 1, "maxLength": 100_000}},
    "required": ["answer"],
}
DECLINED_TEXT = "The user declined to answer."


@dataclass(frozen=True)
class TaskRef:
    session_id: str
    number: int  # its message's number among the session's user messages (1: the first)
    tool: str

    def __str__(self) -> str:
        return f"{self.session_id}:{self.number}:{self.tool}"


@dataclass(frozen=True)
class TaskView:
    """A task as a client sees it: its status, times, and its answer's state once it has one."""

    ref: TaskRef
    status: str  # working | input_required | completed | cancelled
    created_ms: int
    updated_ms: int
    state: dict[str, Any]  # flightdeck.api.mcp.tools.state_of's answer for the task's messages
    question_key: str = ""  # input_required: the key of the question (unique in the task's life)


def negotiated(params: dict[str, Any]) -> bool:
    """Whether a 2026-07-28 request declares the tasks extension in its per-request client capabilities."""
    meta = params.get("_meta")
    capabilities = meta.get("io.modelcontextprotocol/clientCapabilities") if isinstance(meta, dict) else None
    extensions = capabilities.get("extensions") if isinstance(capabilities, dict) else None
    return isinstance(extensions, dict) and isinstance(extensions.get(EXTENSION), dict)


def missing_capability(method: str) -> McpError:
    return McpError(
        MISSING_CAPABILITY,
        f"Missing required client capability: {method} needs the {EXTENSION} extension in "
        "_meta.io.modelcontextprotocol/clientCapabilities.extensions",
        {"requiredCapabilities": {"extensions": {EXTENSION: {}}}},
    )


def task_id_param(params: dict[str, Any]) -> str:
    raw = params.get("taskId")
    if not isinstance(raw, str) or not raw:
        raise McpError(INVALID_PARAMS, "Invalid params: taskId: a string is required")
    return raw


def _unknown(raw: str) -> McpError:
    # Another client's task does not exist for this one, exactly as one never made.
    return McpError(INVALID_PARAMS, f"Invalid params: taskId: no task {raw[:200]!r} of yours")


def _is_user_text(message: dict[str, Any]) -> bool:
    content = message.get("content", [])
    return (
        message.get("role") == "user"
        and any(isinstance(b, dict) and "text" in b for b in content)
        and not any(isinstance(b, dict) and "toolResult" in b for b in content)
    )


def _span(messages: list[dict[str, Any]], number: int) -> tuple[int, int] | None:
    """Where the task of the number-th user message lies in the conversation: [start, end). It runs up to
    the next user message that is not an answer to the agent's question; None: not stored yet."""
    seen, start = 0, -1
    for index, message in enumerate(messages):
        if not _is_user_text(message):
            continue
        if start >= 0 and pending_question(messages[:index]) is None:
            return start, index
        seen += 1
        if seen == number:
            start = index
    return (start, len(messages)) if start >= 0 else None


def _stamp_at(stamps: tuple[Stamp, ...], index: int) -> int:
    return stamps[index].at if 0 <= index < len(stamps) else 0


def view(session: Session, ref: TaskRef) -> TaskView | None:
    """The task in the session as it stands; None when the session has no such message."""
    if ref.number > session.user_messages:
        return None
    messages, stamps = session.messages, session.stamps
    span = _span(messages, ref.number)
    if span is None:  # taken, not yet a message of the conversation (it waits in the inbox)
        created = session.updated_at
        return TaskView(ref, "working", created, created, tools.state_of(session.session_id, True, []))
    start, end = span
    latest = end == len(messages)
    own = messages[start:end]
    created = _stamp_at(stamps, start) or session.created_at
    updated = max([created, *(_stamp_at(stamps, i) for i in range(start, end))])
    if latest:
        updated = max(updated, session.updated_at)
    if (latest and session.status == SESSION_CANCELED) or tools.last_answer(own) == CLOSING_TEXT:
        return TaskView(ref, "cancelled", created, updated, tools.state_of(session.session_id, False, own))
    state = tools.state_of(session.session_id, latest and session.status != "idle", own)
    key = f"question-{end - 1}" if state["status"] == "input_required" else ""
    return TaskView(ref, state["status"], created, updated, state, key)


def find(d: Deps, raw: str, caller: str | None) -> tuple[Session, TaskView]:
    """The caller's task by its id: -32602 for a malformed id, another client's, or none."""
    match = _TASK_ID.fullmatch(raw)
    if match is None or not tools.starts_work(d, match.group(3)):
        raise _unknown(raw)
    ref = TaskRef(match.group(1), int(match.group(2)), match.group(3))
    try:
        session = read_session(d, ref.session_id, caller)
    except SessionNotFoundError:
        raise _unknown(raw) from None
    task = view(session, ref)
    if task is None:
        raise _unknown(raw)
    return session, task


def tool_result(d: Deps, task: TaskView) -> dict[str, Any]:
    """A finished task's CallToolResult: what the tools/call would have answered."""
    skill = tools.skill_named(d, task.ref.tool)
    if task.status == "cancelled":
        return tools.cancelled_result(skill, task.ref.session_id, CLOSING_TEXT)
    return tools.skill_result(skill, task.state) if skill is not None else tools.state_result(task.state)


def _ttl_ms(d: Deps) -> int:
    # A session (and so its tasks) lives this long after its last update: at least this long after creation.
    return int(d.settings.session_retention_ms)


def modern_task(d: Deps, task: TaskView) -> dict[str, Any]:
    """2026-07-28's Task: `ttlMs`, `pollIntervalMs`, and, by status, the inlined result or input requests."""
    out: dict[str, Any] = {
        "taskId": str(task.ref),
        "status": task.status,
        "createdAt": iso_ms(task.created_ms),
        "lastUpdatedAt": iso_ms(task.updated_ms),
        "ttlMs": _ttl_ms(d),
        "pollIntervalMs": POLL_INTERVAL_MS,
    }
    if task.status == "input_required":
        out["statusMessage"] = task.state.get("answer") or ""
        out["inputRequests"] = {
            task.question_key: {
                "method": "elicitation/create",
                "params": {
                    "mode": "form",
                    "message": task.state.get("answer") or "",
                    "requestedSchema": _ANSWER_SCHEMA,
                },
            }
        }
    elif task.status == "completed":
        out["result"] = tool_result(d, task)
    elif task.status == "cancelled":
        out["statusMessage"] = CLOSING_TEXT
    return out


def legacy_task(d: Deps, task: TaskView) -> dict[str, Any]:
    """2025-11-25's Task: `ttl`, `pollInterval`; the agent's question is a completed call there (as `ask`
    answers it: status input_required and the question), since that era's input goes over server requests."""
    status = "completed" if task.status == "input_required" else task.status
    out: dict[str, Any] = {
        "taskId": str(task.ref),
        "status": status,
        "createdAt": iso_ms(task.created_ms),
        "lastUpdatedAt": iso_ms(task.updated_ms),
        "ttl": _ttl_ms(d),
        "pollInterval": POLL_INTERVAL_MS,
    }
    if task.status == "cancelled":
        out["statusMessage"] = CLOSING_TEXT
    return out


def created(d: Deps, started: tools.TaskStarted, modern: bool) -> dict[str, Any]:
    """The CreateTaskResult of a call just taken as a task (stored: tasks/get resolves it from now on)."""
    now = int(time.time() * 1000)
    ref = TaskRef(started.session_id, started.number, started.tool)
    task = TaskView(ref, "working", now, now, tools.state_of(started.session_id, True, []))
    if modern:
        return {"resultType": "task", **modern_task(d, task)}
    return {"task": legacy_task(d, task)}


def update(d: Deps, raw: str, responses: Any, caller: str | None) -> None:
    """tasks/update: an answer to the task's outstanding question continues the session with it. Keys that
    are not outstanding (never asked, answered already) are ignored, as the extension asks."""
    if not isinstance(responses, dict):
        raise McpError(INVALID_PARAMS, "Invalid params: inputResponses: an object keyed by input request is required")
    session, task = find(d, raw, caller)
    response = responses.get(task.question_key) if task.question_key else None
    if response is None:
        return
    text = _answer_text(task.question_key, response)
    try:
        # Keyed by the question: a repeat of this update is the same message, not a second answer.
        ingest_chat(
            d,
            text,
            session.session_id,
            caller=caller,
            message_id=f"{raw}#{task.question_key}",
            queue=False,
            id_kind="mcp-task",
        )
    except (SessionBusyError, InboxFullError):
        return  # answered already: the session is working on the answer
    except SessionNotFoundError:
        raise _unknown(raw) from None
    except AgentBusyError as exc:
        # Not taken (the question stays outstanding): an error, not the ack, so that the client sends it again.
        raise McpError(
            AGENT_BUSY,
            f"Agent busy: {exc.limit} tasks are under way (its max_concurrent_tasks); the answer was not taken: "
            f"send this tasks/update again in {exc.retry_after_s} s",
            {"reason": "agent_busy", "maxConcurrentTasks": exc.limit, "retryAfterSeconds": exc.retry_after_s},
        ) from None


def _answer_text(key: str, response: Any) -> str:
    """An elicitation result as the user's answer: accept's `answer`; decline or cancel says so."""
    if not isinstance(response, dict) or response.get("action") not in ("accept", "decline", "cancel"):
        raise McpError(
            INVALID_PARAMS,
            f"Invalid params: inputResponses.{key}: an elicitation result "
            '({"action": "accept", "content": {"answer": "..."}}, or action decline / cancel) is required',
        )
    if response["action"] != "accept":
        return DECLINED_TEXT
    content = response.get("content")
    answer = content.get("answer") if isinstance(content, dict) else None
    if not isinstance(answer, str) or not answer.strip() or len(answer) > 100_000:
        raise McpError(
            INVALID_PARAMS,
            f"Invalid params: inputResponses.{key}.content.answer: non-empty text, at most 100,000 characters",
        )
    return answer


def cancel(d: Deps, raw: str, caller: str | None, modern: bool) -> dict[str, Any] | None:
    """tasks/cancel: the session stops if this task is the one it works on (its delegations are told to stop);
    a task waiting for input has its question closed (the session's next message is not its answer).
    2026-07-28 acks always (idempotent); 2025-11-25 answers the cancelled task, and -32602 for a finished one."""
    session, task = find(d, raw, caller)
    if task.status in ("working", "input_required") and session.status != "idle":
        cancel_session(d, session.session_id, caller)
        _, task = find(d, raw, caller)
    elif modern and task.status == "input_required":
        if not close_question(d, session, caller):
            cancel_session(d, session.session_id, caller)  # its answer was taken first: the task works on it
        _, task = find(d, raw, caller)
    elif not modern and task.status == "input_required":
        task = TaskView(task.ref, "completed", task.created_ms, task.updated_ms, task.state)
    if modern:
        return None
    if task.status != "cancelled":
        raise McpError(INVALID_PARAMS, f"Invalid params: taskId: task {raw[:200]!r} has finished ({task.status})")
    return legacy_task(d, task)


STILL_WORKING = -32000  # 2025-11-25 tasks/result past the request's budget (see result())


def result(d: Deps, raw: str, caller: str | None, budget_ms: int) -> dict[str, Any]:
    """2025-11-25 tasks/result: the call's result once the task has finished, waited for within the
    request's budget. That era asks it to block until then; a request cannot outlive its function (nor
    API Gateway's timeout), so past the budget it answers -32000, and the client asks again (docs/MCP.md)."""
    deadline = time.monotonic() + budget_ms / 1000
    pause = tools.POLL_FIRST_S
    while True:
        _, task = find(d, raw, caller)
        if task.status != "working":
            return {**tool_result(d, task), "_meta": {RELATED_TASK: {"taskId": raw}}}
        now = time.monotonic()
        if now >= deadline:
            raise McpError(
                STILL_WORKING,
                f"Task {raw[:200]!r} is still working after {budget_ms // 1000} s: poll tasks/get, "
                "and call tasks/result again once it has finished",
                {"taskId": raw, "status": "working"},
            )
        time.sleep(min(pause, deadline - now))
        pause = min(tools.POLL_MAX_S, pause * 1.5)
