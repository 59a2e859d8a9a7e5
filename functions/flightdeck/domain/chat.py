"""Taking a task in: append it to a session and start a turn (B side when a reply route comes along)."""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from flightdeck.domain.peers import require_caller, visible_to
from flightdeck.domain.ports import Deps
from flightdeck.domain.records import ReplayedError, Session, SessionNotFoundError
from flightdeck.observability import count, logger, timeline


@dataclass(frozen=True)
class ReplyRequest:
    callback_service: str
    bearer_token: str


@dataclass(frozen=True)
class Accepted:
    session_id: str
    turn: int  # the think iteration started (the session's turn counter)
    replayed: bool  # the same delegation arrived again: nothing new was started
    # The number of user messages of the session, when known without another read (None: ask user_turn).
    user_messages: int | None = None


def user_turn(deps: Deps, accepted: Accepted) -> int:
    """The session's user-facing counter after `accepted`: its number of user messages.

    Free for a new session (iteration 1); a follow-up message costs one read of the session.
    """
    if accepted.user_messages is not None:
        return accepted.user_messages
    if accepted.turn == 1:
        return 1
    session = deps.store.get_session(accepted.session_id)
    return session.user_messages if session is not None else 1


def ingest_chat(deps: Deps, content: str, session_id: str | None = None, reply: ReplyRequest | None = None,
                traceparent: str = "", caller: str | None = None, continue_session: bool = False) -> Accepted:
    """Raises UnknownServiceError (callbackService not allowed), SessionBusyError, or SessionNotFoundError
    (the session belongs to another peer: for the caller it does not exist; with continue_session, a
    session that does not exist is not created either).

    caller: the authenticated peer, who owns a session it creates and alone may continue it;
    None only when inbound authentication is off.
    """
    s = deps.settings
    require_caller(s.inbound_auth, caller)
    route = None
    if reply is not None:
        # Fail closed before anything is stored: the answer can only go to a listed service.
        s.allowed_host_mapping.resolve(reply.callback_service)
        route = (reply.callback_service, reply.bearer_token, s.reply_to_state_ttl_ms)
    sid = session_id or str(uuid.uuid4())
    message = {"role": "user", "content": [{"text": content}]}
    try:
        # The store enforces ownership in the same conditional write that claims the turn. A fresh
        # id, or a delegation's derived one, is tried as new first: one write, no read.
        turn = deps.store.start_turn_with_message(sid, message, s.session_retention_ms, route=route,
                                                  parent={"traceparent": traceparent} if traceparent else None,
                                                  owner=caller, likely_new=session_id is None or reply is not None,
                                                  must_exist=continue_session and session_id is not None)
    except ReplayedError as replay:
        # A redelivered dispatch: the task is already under way (or answered).
        return Accepted(sid, replay.turn, replayed=True, user_messages=replay.user_messages)
    try:
        deps.thinks.start(sid, turn, traceparent)
    except Exception:  # noqa: BLE001 - the message is stored and its think marked owed: the sweep sends it
        # Answering an error here would make the caller retry a message that is already in
        # (a 409, or a second session); the owed-think mark makes the sweep the owner of the send.
        logger.exception("think not sent after the message was stored; the sweep will send it",
                         extra={"session_id": sid, "turn": turn})
        count("ThinkSendsDeferred")
    timeline("chat_received", "task received" + (f" (answer goes to {reply.callback_service})" if reply else ""),
             session_id=sid, turn=turn, traceparent=traceparent or None)
    return Accepted(sid, turn, replayed=False)


def read_session(deps: Deps, session_id: str, caller: str | None = None) -> Session:
    """The session, if it exists for the caller (its owner; anyone when authentication is off)."""
    require_caller(deps.settings.inbound_auth, caller)
    session = deps.store.get_session(session_id)
    if session is None or not visible_to(session.owner, caller):
        raise SessionNotFoundError(session_id)
    return session
