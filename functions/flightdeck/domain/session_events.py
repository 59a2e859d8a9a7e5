"""GET /api/sessions/{id}/events: a session's timeline (flightdeck.domain.timeline), live.

Opening checks that the session exists for the caller (404 otherwise, as GET
/api/sessions/{id}). Then every poll reads the session (StatePort.get_session: one Query)
and, while its turn waits on tool results, the results recorded so far (get_results: one
Query): at most two requests a poll, nothing written. It sends each new event once and
ends after the `idle` event (the session answered), or when the stream's time is up.
With `follow` false it sends the timeline as it stands and ends.
"""

from __future__ import annotations

from typing import Iterator

from flightdeck.domain.peers import require_caller, visible_to
from flightdeck.domain.ports import Deps
from flightdeck.domain.records import Session, SessionNotFoundError
from flightdeck.domain.streaming import Note, Pace, Step, paced
from flightdeck.domain.timeline import TimelineEvent, derive, waits_on_results


def open_session(deps: Deps, session_id: str, caller: str | None) -> Session:
    """The session, if it exists for the caller; raises SessionNotFoundError (another peer's is not found either)."""
    require_caller(deps.settings.inbound_auth, caller)
    session = deps.store.get_session(session_id)
    if session is None or not visible_to(session.owner, caller):
        raise SessionNotFoundError(session_id)
    return session


def read_timeline(deps: Deps, session: Session) -> list[TimelineEvent]:
    pending = deps.store.get_results(session.session_id, session.turn) if waits_on_results(session) else []
    return derive(session, pending, deps.settings.agent)


def session_events(deps: Deps, session: Session, pace: Pace, follow: bool = True) -> Iterator[TimelineEvent | Note]:
    """The timeline of an opened session (open_session), each event once, to its idle event."""
    sent: set[str] = set()
    current = [session]  # the first poll uses the read that opened the stream

    def step() -> Step[TimelineEvent]:
        found = current.pop() if current else deps.store.get_session(session.session_id)
        if found is None:  # expired meanwhile (retention): nothing more will happen
            return Step([], done=True)
        new = [e for e in read_timeline(deps, found) if e.id not in sent]
        sent.update(e.id for e in new)
        return Step(new, done=found.status == "idle" or not follow)

    return paced(pace, step)
