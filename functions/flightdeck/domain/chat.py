"""Taking a task in: append it to a session and start a turn (B side when a reply route comes along)."""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from flightdeck.domain.ports import Deps
from flightdeck.domain.records import Session, SessionNotFoundError
from flightdeck.observability import timeline


@dataclass(frozen=True)
class ReplyRequest:
    callback_service: str
    bearer_token: str


@dataclass(frozen=True)
class Accepted:
    session_id: str
    turn: int
    replayed: bool  # the same delegation arrived again: nothing new was started


def ingest_chat(deps: Deps, content: str, session_id: str | None = None, reply: ReplyRequest | None = None,
                traceparent: str = "") -> Accepted:
    """Raises UnknownServiceError (callbackService not allowed) or SessionBusyError."""
    s = deps.settings
    route = None
    if reply is not None:
        # Fail closed before anything is stored: the answer can only go to a listed service.
        s.allowed_host_mapping.resolve(reply.callback_service)
        route = (reply.callback_service, reply.bearer_token, s.reply_to_state_ttl_ms)
    sid = session_id or str(uuid.uuid4())
    if reply is not None:
        existing = deps.store.get_route(sid)
        if existing is not None and existing.bearer_token == reply.bearer_token:
            # A redelivered dispatch: the task is already under way (or answered).
            session = deps.store.get_session(sid)
            return Accepted(sid, session.turn if session else 0, replayed=True)
    message = {"role": "user", "content": [{"text": content}]}
    turn = deps.store.start_turn_with_message(sid, message, s.session_retention_ms, route=route,
                                              parent={"traceparent": traceparent} if traceparent else None)
    deps.queues.send_turn(sid, turn, traceparent)
    timeline("chat_received", "task received" + (f" (answer goes to {reply.callback_service})" if reply else ""),
             session_id=sid, turn=turn, traceparent=traceparent or None)
    return Accepted(sid, turn, replayed=False)


def read_session(deps: Deps, session_id: str) -> Session:
    session = deps.store.get_session(session_id)
    if session is None:
        raise SessionNotFoundError(session_id)
    return session
