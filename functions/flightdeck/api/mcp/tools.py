"""MCP tools from the agent's skills, and the calls that run them (docs/MCP.md).

- every skill exposed to "mcp" is a tool of its id: its input schema, its output schema (an object
  schema as is; any other wrapped under `value`), answered with structuredContent and a text rendering;
- `ask`: a message to the agent (its model, its delegations), optionally continuing one of the
  caller's sessions; answered with the session id, the status and the answer;
- `get_result`: the answer of a call that outlasted its request, by the session id it handed back;
- `cancel`: stops a session of the caller's that is still working (its delegations are told to stop).

A call is taken exactly as POST /api/chat takes one (flightdeck.domain.chat: the skill's contract
bound and checked before anything is stored), then waited for, within the request's budget. A call
that takes longer is not lost: its result says `working` with the session id, `get_result` collects
it later. Sessions belong to the client that made them: another client's id does not exist.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from flightdeck import tracing
from flightdeck.api.mcp.wire import INVALID_PARAMS, McpError
from flightdeck.domain.asking import pending_question
from flightdeck.domain.chat import derived_session_id, ingest_chat, read_session, user_turn
from flightdeck.domain.ports import Deps
from flightdeck.domain.records import (
    AgentBusyError,
    InboxFullError,
    Session,
    SessionBusyError,
    SessionNotFoundError,
)
from flightdeck.domain.session_cancel import cancel_session
from flightdeck.domain.skills.contract import CallError, Skill, SkillCall, bind, checked_result
from flightdeck.domain.skills.schemas import errors as schema_errors

CHANNEL = "mcp"
ASK, GET_RESULT, CANCEL = "ask", "get_result", "cancel"
BUILTIN = (ASK, GET_RESULT, CANCEL)
SESSION_ID_SCHEMA = {"type": "string", "minLength": 1, "maxLength": 128, "pattern": "^[A-Za-z0-9._:-]+$"}
# Polls of a waiting call: quick at first (a handler skill answers in well under a second), then every second.
POLL_FIRST_S, POLL_MAX_S = 0.1, 1.0

_STATUS_OUTPUT: dict[str, Any] = {
    "type": "object",
    "properties": {
        "session_id": {"type": "string", "description": "the session of this call: get_result and cancel take it"},
        "status": {"enum": ["completed", "working", "input_required", "canceled"]},
        # anyOf branches of one type each, not a type array or an empty schema: clients that map tool schemas
        # onto a one-type dialect (Gemini's OpenAPI subset) take them (the MCP Inspector's --strict check).
        "answer": {
            "anyOf": [{"type": "string"}, {"type": "null"}],
            "description": "the agent's answer (input_required: its question)",
        },
        "data": {
            "anyOf": [{"type": t} for t in ("object", "array", "string", "number", "boolean", "null")],
            "description": "a skill call's answer, held to the skill's output schema",
        },
        "schema_mismatch": {"type": "boolean"},
        "errors": {"type": "array", "items": {"type": "string"}},
    },
    "required": ["session_id", "status", "answer"],
}
_ANNOTATIONS_READ = {"readOnlyHint": True, "openWorldHint": False}


def _builtin_tools() -> list[dict[str, Any]]:
    return [
        {
            "name": ASK,
            "title": "Ask the agent",
            "description": "Send a message to the agent (it may delegate to its peers) and get its answer. "
            "Pass session_id to continue one of your conversations (or to answer its question). "
            "When the answer takes longer than one request, status is 'working': call get_result with the "
            "session_id later.",
            "inputSchema": {
                "type": "object",
                "properties": {
                    "message": {"type": "string", "minLength": 1, "maxLength": 100_000},
                    "session_id": SESSION_ID_SCHEMA,
                },
                "required": ["message"],
                "additionalProperties": False,
            },
            "outputSchema": _STATUS_OUTPUT,
        },
        {
            "name": GET_RESULT,
            "title": "Collect an answer",
            "description": "The answer of a call that outlasted its request (status 'working'), by its session_id; "
            "status is 'working' again while it runs.",
            "inputSchema": {
                "type": "object",
                "properties": {"session_id": SESSION_ID_SCHEMA},
                "required": ["session_id"],
                "additionalProperties": False,
            },
            "outputSchema": _STATUS_OUTPUT,
            "annotations": _ANNOTATIONS_READ,
        },
        {
            "name": CANCEL,
            "title": "Cancel a call",
            "description": "Stop a call still working, by its session_id: its delegations are told to stop too.",
            "inputSchema": {
                "type": "object",
                "properties": {"session_id": SESSION_ID_SCHEMA},
                "required": ["session_id"],
                "additionalProperties": False,
            },
            "outputSchema": {
                "type": "object",
                "properties": {"session_id": {"type": "string"}, "canceled": {"type": "boolean"}},
                "required": ["session_id", "canceled"],
            },
            "annotations": {"destructiveHint": True, "idempotentHint": True, "openWorldHint": False},
        },
    ]


def _is_object_schema(schema: dict[str, Any]) -> bool:
    return schema.get("type") == "object"


def _output_schema(skill: Skill) -> dict[str, Any] | None:
    """An MCP outputSchema is an object's: a skill answering anything else has it wrapped under `value`."""
    if skill.output_schema is None:
        return None
    if _is_object_schema(skill.output_schema):
        return skill.output_schema
    return {"type": "object", "properties": {"value": skill.output_schema}, "required": ["value"]}


def skill_tools(skills: list[Skill]) -> list[Skill]:
    return [s for s in skills if s.exposed_to(CHANNEL) and s.id not in BUILTIN]


def starts_work(d: Deps, name: str) -> bool:
    """A tool whose call is work for the agent (a session's turn), which may be taken as a task: `ask` and
    the skills; get_result and cancel answer at once."""
    return name == ASK or skill_named(d, name) is not None


def skill_named(d: Deps, name: str) -> Skill | None:
    """The skill whose tool this name is (exposed to MCP), or None."""
    return next((s for s in skill_tools(d.settings.agent.skills) if s.id == name), None)


def list_tools(d: Deps, task_support: bool = False) -> list[dict[str, Any]]:
    """Every tool, in a fixed order (the skills in the file's order, then the built-in ones).
    task_support: say which may be called as a task (2025-11-25's execution.taskSupport)."""
    tools: list[dict[str, Any]] = []
    for skill in skill_tools(d.settings.agent.skills):
        tool: dict[str, Any] = {
            "name": skill.id,
            "title": skill.title,
            "description": skill.description or skill.title,
            "inputSchema": skill.input_schema if skill.input_schema is not None else {"type": "object"},
        }
        output = _output_schema(skill)
        if output is not None:
            tool["outputSchema"] = output
        tools.append(tool)
    tools += _builtin_tools()
    if task_support:
        for tool in tools:
            if tool["name"] not in (GET_RESULT, CANCEL):
                tool["execution"] = {"taskSupport": "optional"}
    return tools


@dataclass(frozen=True)
class TaskStarted:
    """A call taken as a task: its session and the number of its message among the session's user messages."""

    session_id: str
    number: int
    tool: str


@dataclass(frozen=True)
class Waiting:
    """A call still running: a progress step for clients that asked for progress."""

    session_id: str
    elapsed_ms: int


def _text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def _result(structured: dict[str, Any] | None, text: str, is_error: bool = False) -> dict[str, Any]:
    result: dict[str, Any] = {"content": [{"type": "text", "text": text}], "isError": is_error}
    if structured is not None:
        result["structuredContent"] = structured
    return result


def last_answer(messages: list[dict[str, Any]]) -> str:
    for message in reversed(messages):
        if message.get("role") == "assistant":
            return "".join(b.get("text", "") for b in message.get("content", []) if isinstance(b, dict))
    return ""


def _state(session: Session) -> dict[str, Any]:
    """What a client learns of its session: get_result's and ask's structured answer."""
    return state_of(session.session_id, session.status != "idle", session.messages)


def state_of(session_id: str, working: bool, messages: list[dict[str, Any]]) -> dict[str, Any]:
    """The structured answer of a conversation (a session's, or one task's messages in it)."""
    out: dict[str, Any] = {"session_id": session_id}
    if working:
        out.update(status="working", answer=None)
        return out
    question = pending_question(messages)
    if question is not None:
        out.update(status="input_required", answer=question)
        return out
    out.update(status="completed", answer=last_answer(messages))
    marked = checked_result(messages)
    if marked is not None:
        if marked.get("schema_mismatch"):
            out.update(schema_mismatch=True, errors=marked.get("errors", []))
        else:
            out["data"] = marked.get("data")
    return out


def state_result(state: dict[str, Any]) -> dict[str, Any]:
    if state["status"] == "working":
        text = (
            f"still working: call {GET_RESULT} with session_id {state['session_id']!r} for the answer "
            f"(or {CANCEL} to stop it)"
        )
    else:
        text = state["answer"] or ""
    return _result(state, text)


def cancelled_result(skill: Skill | None, session_id: str, text: str) -> dict[str, Any]:
    """A call whose session was canceled: `ask` says so in its status; a skill has no data to give."""
    structured = None if skill is not None else {"session_id": session_id, "status": "canceled", "answer": text}
    return {**_result(structured, text, True), "_meta": {"flightdeck/session_id": session_id}}


def skill_result(skill: Skill, state: dict[str, Any]) -> dict[str, Any]:
    """A finished skill call, as its tool answers it: the data, held to the skill's output schema."""
    sid = state["session_id"]
    if state["status"] == "working":
        # Its structuredContent would have to match the skill's output schema, which a handle does not:
        # a tool error that says how to collect the answer (docs/MCP.md, "Long work").
        return {
            **_result(
                None, f"the call is still working: call {GET_RESULT} with session_id {sid!r} for its answer", True
            ),
            "_meta": {"flightdeck/session_id": sid, "flightdeck/status": "working"},
        }
    if state["status"] != "completed" or state.get("schema_mismatch") or "data" not in state:
        detail = "; ".join(state.get("errors", [])) or state["status"]
        return {
            **_result(None, f"the answer does not match the skill's output schema ({detail}): {state['answer']}", True),
            "_meta": {"flightdeck/session_id": sid},
        }
    data = state["data"]
    structured = data if skill.output_schema is None or _is_object_schema(skill.output_schema) else {"value": data}
    if not isinstance(structured, dict):
        structured = {"value": structured}
    return {**_result(structured, _text(data)), "_meta": {"flightdeck/session_id": sid}}


def agent_busy_result(exc: AgentBusyError) -> dict[str, Any]:
    """A call refused because the agent is at its max_concurrent_tasks (nothing stored): a tool execution
    error, so that the model reads it and calls again later (docs/MCP.md, "A busy agent, and failures")."""
    text = (
        f"the agent is busy: {exc.limit} tasks are under way, its max_concurrent_tasks; nothing was started. "
        f"Call again in {exc.retry_after_s} s."
    )
    meta = {"flightdeck/reason": "agent_busy", "flightdeck/retry_after_s": exc.retry_after_s}
    return {**_result(None, text, True), "_meta": meta}


class InvalidArguments(Exception):
    """Arguments that do not match the tool's input schema: a tool execution error (isError, the problems
    listed, as MCP asks of input validation: the model can correct them); nothing was stored."""

    def __init__(self, message: str, problems: list[str] | None = None):
        super().__init__(message)
        self.problems = problems or [message]


def _invalid(exc: InvalidArguments) -> dict[str, Any]:
    return {**_result(None, f"invalid arguments: {exc}", True), "_meta": {"flightdeck/problems": exc.problems}}


def _session_id(arguments: dict[str, Any]) -> str:
    wrong = schema_errors(SESSION_ID_SCHEMA, arguments.get("session_id"))
    if wrong:
        raise InvalidArguments(f"session_id: {'; '.join(wrong)}", wrong)
    return str(arguments["session_id"])


def _wait(d: Deps, session_id: str, caller: str | None, budget_ms: int) -> Iterator[Waiting | Session]:
    """Polls the session until it is idle or the budget is spent: Waiting steps, then the session."""
    start = time.monotonic()
    deadline = start + budget_ms / 1000
    pause = POLL_FIRST_S
    while True:
        session = read_session(d, session_id, caller)
        now = time.monotonic()
        if session.status == "idle" or now >= deadline:
            yield session
            return
        yield Waiting(session_id, int((now - start) * 1000))
        time.sleep(min(pause, max(0.0, deadline - now)))
        pause = min(POLL_MAX_S, pause * 1.5)


def _not_found(session_id: str) -> InvalidArguments:
    # Another client's session does not exist for this one, exactly as one never made.
    return InvalidArguments(f"no session {session_id[:128]!r} of yours")


def call_tool(
    d: Deps,
    name: str,
    arguments: dict[str, Any],
    caller: str | None,
    budget_ms: int,
    request_key: str = "",
    as_task: bool = False,
) -> Iterator[Waiting | TaskStarted | dict[str, Any]]:
    """Run one tools/call: Waiting steps while it runs, its CallToolResult last. Raises McpError -32602 for
    an unknown tool; arguments that do not match its input schema are a tool execution error (nothing stored).
    request_key: the request's identity (request_key()); a call that starts a session then starts the one
    request_session() names, so that a notifications/cancelled for the request can find it.
    as_task: a call that starts work answers TaskStarted as soon as it is stored, instead of waiting."""
    try:
        yield from _call(d, name, arguments, caller, budget_ms, request_key, as_task)
    except InvalidArguments as exc:
        yield _invalid(exc)


def request_key(mcp_session: str, request_id: str | int) -> str:
    """A request's identity among its client's: JSON-RPC ids are unique within one MCP session only."""
    return f"mcp:{mcp_session}:{type(request_id).__name__}:{request_id}"


def request_session(caller: str | None, key: str) -> str:
    """The session a tools/call of this identity started (derived, as a chat message id's is: no state)."""
    return derived_session_id(caller, key)


def _call(
    d: Deps,
    name: str,
    arguments: dict[str, Any],
    caller: str | None,
    budget_ms: int,
    key: str = "",
    as_task: bool = False,
) -> Iterator[Waiting | TaskStarted | dict[str, Any]]:
    skill = skill_named(d, name)
    session_id: str | None
    if name in (GET_RESULT, CANCEL):
        handle = _session_id(arguments)
        if set(arguments) - {"session_id"}:
            raise InvalidArguments(f"{name} takes session_id alone")
        try:
            if name == CANCEL:
                outcome = cancel_session(d, handle, caller)
                text = "canceled" if outcome.canceled else "nothing to cancel: the session is idle"
                yield _result({"session_id": handle, "canceled": outcome.canceled}, text)
                return
            yield state_result(_state(read_session(d, handle, caller)))
        except SessionNotFoundError:
            raise _not_found(handle) from None
        return
    if name == ASK:
        message = arguments.get("message")
        wrong = [k for k in arguments if k not in ("message", "session_id")]
        if not isinstance(message, str) or not message.strip() or len(message) > 100_000 or wrong:
            raise InvalidArguments(
                "ask takes message (non-empty text, at most 100,000 characters) and optionally session_id"
                + (f"; unknown: {', '.join(map(str, wrong))[:200]}" if wrong else "")
            )
        session_id = _session_id(arguments) if "session_id" in arguments else None
        text, contract = message, None
    elif skill is not None:
        try:
            contract = bind(d.settings.agent.skills, CHANNEL, SkillCall(skill=name, arguments=arguments), None)
        except CallError as exc:
            raise InvalidArguments(str(exc), exc.problems) from None
        text, session_id = SkillCall(skill=name, arguments=arguments).as_text(), None
    else:
        raise McpError(INVALID_PARAMS, f"Invalid params: unknown tool {name[:128]!r}")
    try:
        # A new session is named by the request (a repeat of it is the same call, not a second one); one
        # continued (ask with session_id) is the client's to cancel with the cancel tool.
        message_id = key if key and session_id is None else None
        accepted = ingest_chat(
            d,
            text,
            session_id,
            traceparent=tracing.traceparent(),
            caller=caller,
            message_id=message_id,
            queue=False,
            id_kind="mcp",
            contract=contract,
        )
    except SessionNotFoundError:
        raise _not_found(session_id or "") from None
    except (SessionBusyError, InboxFullError):
        yield _result(None, f"session {session_id!r} is working on an earlier message: call {GET_RESULT} first", True)
        return
    except AgentBusyError as exc:
        yield agent_busy_result(exc)
        return
    if as_task:
        # Stored (a tasks/get of it resolves from now on): the client polls instead of this request waiting.
        yield TaskStarted(accepted.session_id, user_turn(d, accepted), name)
        return
    final: Session | None = None
    for step in _wait(d, accepted.session_id, caller, budget_ms):
        if isinstance(step, Waiting):
            yield step
        else:
            final = step
    assert final is not None
    state = _state(final)
    yield skill_result(skill, state) if skill is not None else state_result(state)


def cancel_stream_call(d: Deps, session_id: str, caller: str | None) -> bool:
    """2026-07-28: the SSE stream of a call was closed before its answer: cancel the session it works in."""
    try:
        return cancel_session(d, session_id, caller).canceled
    except SessionNotFoundError:
        return False


def cancel_request(d: Deps, caller: str | None, key: str) -> bool:
    """notifications/cancelled: cancel the session the request started, if it did and still works (its
    delegations are told to stop); anything else (unknown, another client's, finished) changes nothing."""
    try:
        return cancel_session(d, request_session(caller, key), caller).canceled
    except SessionNotFoundError:
        return False
