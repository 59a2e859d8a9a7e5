"""Taking a task in: append it to a session and start a turn, or keep it in a busy session's inbox
(B side when a reply route comes along)."""

from __future__ import annotations

import hashlib
import uuid
from dataclasses import dataclass
from typing import Any

from flightdeck.domain.peers import PeerProof, require_caller, visible_to
from flightdeck.domain.ports import Deps
from flightdeck.domain.records import Session, SessionNotFoundError
from flightdeck.domain.skills.contract import CONTRACT_KEY, Channel, Contract, SkillCall, bind, text_call
from flightdeck.domain.skills.schemas import response_schema as response_schema_of
from flightdeck.observability import count, logger, timeline


@dataclass(frozen=True)
class ReplyRequest:
    callback_service: str
    bearer_token: str


@dataclass(frozen=True)
class Accepted:
    session_id: str
    turn: int  # the think iteration started (the session's turn counter); 0 while the message is queued
    replayed: bool  # the same message (or delegation) arrived again: nothing new was started or queued
    # The number of user messages of the session, when known without another read (None: ask user_turn).
    user_messages: int | None = None
    queued: bool = False  # it waits in the session's inbox: its turn starts when the turns before it end
    position: int = 0  # its place among the messages waiting (1: next), while queued
    caller_verified: bool = False  # the write that took it checked the caller's PeerProof


# A busy session's inbox holds at most this many waiting messages: one more is refused (429), so that
# a client cannot pile up work (and items) without bound. Each waits for the turns before it.
MAX_QUEUED_MESSAGES = 20
# Client-supplied message ids (a body field, the Idempotency-Key header): what is accepted as one.
MESSAGE_ID_MAX_CHARS = 128
_SESSION_NS = uuid.UUID("3d0c5b8e-93a4-4b9f-8c8f-5f1f0e7a2c41")


def message_key(kind: str, value: str) -> str:
    """The identity a message is deduplicated by, as stored (its inbox item's key): a digest, so any id
    (or reply token) takes the same 32 characters. kind keeps the id spaces apart: "chat" (a client's
    message id), "a2a" (an A2A messageId), "reply" (a delegation's reply token)."""
    return hashlib.sha256(f"{kind}\0{value}".encode("utf-8", "surrogatepass")).hexdigest()[:32]


def derived_session_id(caller: str | None, message_id: str) -> str:
    """The session a first message with an id (and no session id) starts: the same for its repeats."""
    return str(uuid.uuid5(_SESSION_NS, f"{caller or ''}\0{message_id}"))


def user_turn(deps: Deps, accepted: Accepted) -> int:
    """The session's user-facing counter after `accepted`: its number of user messages.

    Free for a new session (iteration 1); a follow-up message costs one read of the session.
    """
    if accepted.user_messages is not None:
        return accepted.user_messages
    if accepted.turn == 1:
        return 1
    session = deps.sessions.get_session(accepted.session_id)
    return session.user_messages if session is not None else 1


def ingest_chat(
    deps: Deps,
    content: str,
    session_id: str | None = None,
    reply: ReplyRequest | None = None,
    traceparent: str = "",
    caller: str | None = None,
    message_id: str | None = None,
    *,
    queue: bool = True,
    id_kind: str = "chat",
    continues_task: str = "",
    continue_session: bool = False,
    proof: PeerProof | None = None,
    contract: Contract | None = None,
) -> Accepted:
    """Raises UnknownServiceError (callbackService not allowed), AgentBusyError (it would start a turn, and
    the agent is at its max_concurrent_tasks), SessionBusyError (busy and queue off),
    InboxFullError, TaskNotOpenError (continues_task ended meanwhile), or SessionNotFoundError (the
    session belongs to another peer: for the caller it does not exist; with continue_session, a
    session that does not exist is not created either).

    caller: the authenticated peer, who owns a session it creates and alone may continue it;
    None only when inbound authentication is off.
    message_id: the client's id for this message: a repeat with the same id (of the same kind) changes
    nothing and gets the first one's answer. Without a session id it also names the session (derived),
    so that the repeat of a first message finds it. A delegation's reply token is its id otherwise.
    queue: a busy session keeps the message in its inbox (ARCHITECTURE §2, docs/API.md "Inbox"); off: busy
    raises SessionBusyError. continues_task: the A2A task the message continues.
    proof: the caller's token, for the write to check against the peer registry (PeerRefusedError:
    refused, nothing stored); Accepted.caller_verified says whether it did.
    contract: what the answer must match (flightdeck.domain.skills.contract.bind checked it): stored with
    the message, for the turn to hold its answer to.
    """
    s = deps.settings
    require_caller(s.inbound_auth, caller)
    route = None
    if reply is not None:
        # Fail closed before anything is stored: the answer can only go to a listed service.
        s.allowed_host_mapping.resolve(reply.callback_service)
        route = (reply.callback_service, reply.bearer_token, s.reply_to_state_ttl_ms)
    if session_id:
        sid = session_id
    else:
        sid = derived_session_id(caller, message_id) if message_id else str(uuid.uuid4())
    key = (
        message_key(id_kind, message_id)
        if message_id
        else (message_key("reply", reply.bearer_token) if reply is not None else None)
    )
    message: dict[str, Any] = {"role": "user", "content": [{"text": content}]}
    if contract is not None:
        message[CONTRACT_KEY] = contract.model_dump(exclude_none=True, exclude_defaults=False)
    # The store enforces ownership in the same conditional write that claims the turn (or queues the
    # message). A fresh id, or a delegation's derived one, is tried as new first: one write, no read.
    intake = deps.sessions.take_message(
        sid,
        message,
        s.session_retention_ms,
        route=route,
        parent={"traceparent": traceparent} if traceparent else None,
        owner=caller,
        likely_new=session_id is None or reply is not None,
        key=key,
        queue_limit=MAX_QUEUED_MESSAGES if queue else 0,
        continues_task=continues_task,
        message_id=message_id or "",
        must_exist=continue_session and session_id is not None,
        proof=proof,
        max_busy=s.agent.max_concurrent_tasks,
    )
    verified = intake.caller_verified
    queued = intake.status == "queued"
    if intake.replayed:
        # A repeat (a redelivered dispatch, a client's retry): the message is already under way or queued.
        return Accepted(
            sid,
            intake.turn,
            replayed=True,
            user_messages=intake.user_messages,
            queued=queued,
            position=intake.position,
            caller_verified=verified,
        )
    if queued:
        # Its turn starts in the write that ends the turn before it (flightdeck.domain.turn_loop).
        count("MessagesQueued")
        timeline(
            "message_queued",
            f"message queued (position {intake.position})"
            + (f"; its answer goes to {reply.callback_service}" if reply else ""),
            session_id=sid,
            traceparent=traceparent or None,
        )
        return Accepted(
            sid,
            0,
            replayed=False,
            user_messages=intake.user_messages,
            queued=True,
            position=intake.position,
            caller_verified=verified,
        )
    turn = intake.turn
    try:
        deps.thinks.start(sid, turn, traceparent, intake.snapshot)
    except Exception:  # noqa: BLE001 - the message is stored and its think marked owed: the sweep sends it
        # Answering an error here would make the caller retry a message that is already in
        # (a 409, or a second session); the owed-think mark makes the sweep the owner of the send.
        logger.exception(
            "think not sent after the message was stored; the sweep will send it",
            extra={"session_id": sid, "turn": turn},
        )
        count("ThinkSendsDeferred")
    timeline(
        "chat_received",
        "task received" + (f" (answer goes to {reply.callback_service})" if reply else ""),
        session_id=sid,
        turn=turn,
        traceparent=traceparent or None,
    )
    return Accepted(sid, turn, replayed=False, user_messages=intake.user_messages, caller_verified=verified)


def read_session(deps: Deps, session_id: str, caller: str | None = None) -> Session:
    """The session, if it exists for the caller (its owner; anyone when authentication is off)."""
    require_caller(deps.settings.inbound_auth, caller)
    session = deps.sessions.get_session(session_id)
    if session is None or not visible_to(session.owner, caller):
        raise SessionNotFoundError(session_id)
    return session


def chat_contract(
    deps: Deps,
    content: str,
    skill: str | None,
    arguments: dict[str, Any] | None,
    response_schema: Any,
    timeout_seconds: int | None,
    channel: Channel,
) -> tuple[str, Contract | None]:
    """The text and contract of a message to this agent's own API: a structured call (`skill` and
    `arguments`, or the text `skill:<id> {json}`) to a skill exposed to the caller's `channel` ("internal":
    the agent's own user, who may call every skill; "a2a": a peer agent), a caller's responseSchema (JSON
    Schema or the shorthand), a bound on the request. Raises CallError or SchemaError, listing what is wrong."""
    call = SkillCall(skill=skill, arguments=arguments or {}) if skill else text_call(content)
    schema = response_schema_of(response_schema) if response_schema is not None else None
    deadline_ms = None
    if timeout_seconds:
        bound_ms = min(timeout_seconds * 1000, deps.settings.async_tool_timeout_ms)  # capped by the agent's own
        deadline_ms = deps.clock.now_ms() + bound_ms
    contract = bind(deps.settings.agent.skills, channel, call, schema, deadline_ms)
    text = call.as_text() if call is not None and not content else content
    return text, contract
