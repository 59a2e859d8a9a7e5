"""GET /api/sessions/{id}/events: a session's timeline (flightdeck.domain.timeline), live.

Opening checks that the session exists for the caller (404 otherwise, as GET
/api/sessions/{id}). Then every poll reads the session (SessionsPort.get_session: one Query)
and, while its turn waits on tool results, the results recorded so far (get_results: one
Query): at most two requests a poll. It sends each new event once and ends after the `idle`
event (the session answered), or when the stream's time is up. With `follow` false it sends
the timeline as it stands and ends.

Following a busy session marks it watched (flightdeck.domain.live: one write, again each
WATCH_MS / 2): a think that starts while it is marked relays its text, and the stream sends
it as `text_delta` events, {iteration, attempt, offset, text}: `text` goes at `offset` in the
text of think `iteration` (offset 0 after other deltas of that iteration: it starts over, a
retried think). Once the think's reply is stored the rest of its text follows as one more
delta, before the event that ends the think (`answer`, `delegating`...): the deltas of an
iteration joined are then its text, the `answer` event's text for the think that answered.
A think that started before the mark, or ended within one poll interval, sends no delta: its
text is in its `answer` event, as ever.

Each event's SSE id is the stream's position after it (flightdeck.domain.resume): opened again with
Last-Event-ID, the stream sends the events after that one, none twice (the replay from the start is
skipped up to there; a delta goes on from its offset).
"""

from __future__ import annotations

from collections.abc import Iterator

from flightdeck.domain.live import TextFollower, keep_watching, live_text, stored_text
from flightdeck.domain.peers import require_caller, visible_to
from flightdeck.domain.ports import Deps
from flightdeck.domain.records import Session, SessionNotFoundError
from flightdeck.domain.resume import Cursor, Marked, handled_ids, mark
from flightdeck.domain.streaming import Note, Pace, Step, paced
from flightdeck.domain.timeline import TimelineEvent, derive, waits_on_results

TEXT_DELTA = "text_delta"
# The timeline events that come after a think's text: its deltas go before the first of them.
_AFTER_THE_TEXT = frozenset({"answer", "delegating", "tool_call", "idle"})


def open_session(deps: Deps, session_id: str, caller: str | None) -> Session:
    """The session, if it exists for the caller; raises SessionNotFoundError (another peer's is not found either)."""
    require_caller(deps.settings.inbound_auth, caller)
    session = deps.sessions.get_session(session_id)
    if session is None or not visible_to(session.owner, caller):
        raise SessionNotFoundError(session_id)
    return session


def read_timeline(deps: Deps, session: Session) -> list[TimelineEvent]:
    pending = deps.turns.get_results(session.session_id, session.turn) if waits_on_results(session) else []
    return derive(session, pending, deps.settings.agent)


def resume_text(relayed: TextFollower, session: Session, position: tuple[int, int, int]) -> None:
    """Set `relayed` to what a client had of a think's text: the live text's (or the stored reply's) first
    `offset` characters; when neither is that think's any more, a text nothing starts with (the next delta
    starts over at offset 0, the stored text wins)."""
    iteration, attempt, offset = position
    live = live_text(session)
    if live is not None and (live.turn, live.attempt) == (iteration, attempt) and len(live.text) >= offset:
        text = live.text[:offset]
    else:
        stored = stored_text(session, iteration)
        text = stored[:offset] if stored is not None and len(stored) >= offset else "\0"
    relayed.key, relayed.sent = (iteration, attempt), text


def session_events(
    deps: Deps, session: Session, pace: Pace, follow: bool = True, cursor: Cursor | None = None
) -> Iterator[Marked[TimelineEvent] | Note]:
    """The timeline of an opened session (open_session), each event once, to its idle event; after `cursor`
    (a Last-Event-ID) when given."""
    sent: set[str] = set()
    current = [session]  # the first poll uses the read that opened the stream
    relayed = TextFollower()
    finished: set[int] = set()  # the iterations whose stored text was sent whole
    resumed = [cursor]
    position: list[tuple[int, int, int] | None] = [cursor.t if cursor else None]

    def deltas(found: Session) -> list[TimelineEvent]:
        out = []
        if relayed.key is not None and relayed.key[0] not in finished:
            stored = stored_text(found, relayed.key[0])
            rest = relayed.rest(stored) if stored is not None else None
            if stored is not None:
                finished.add(relayed.key[0])
            if rest:
                out.append(_delta(relayed.key, len(relayed.sent), rest))
        live = live_text(found) if follow else None
        piece = relayed.next_piece(live) if live is not None else None
        if live is not None and piece is not None:
            out.append(_delta((live.turn, live.attempt), piece[1], piece[0]))
        return out

    def step() -> Step[Marked[TimelineEvent]]:
        found = current.pop() if current else deps.sessions.get_session(session.session_id)
        if found is None:  # expired meanwhile (retention): nothing more will happen
            return Step([], done=True)
        if follow:
            keep_watching(deps, found)
        timeline = read_timeline(deps, found)
        resume = resumed.pop() if resumed else None
        if resume is not None:
            sent.update(handled_ids(timeline, resume))
            if resume.t is not None:
                resume_text(relayed, found, resume.t)
        new = [e for e in timeline if e.id not in sent]
        marked = []
        for event in _placed(new, deltas(found)):
            if event.kind == TEXT_DELTA:
                d = event.data
                position[0] = (d["iteration"], d["attempt"], d["offset"] + len(d["text"]))
            else:
                sent.add(event.id)
            anchor, extra = mark(timeline, lambda e: e.id in sent)
            cursor_now = Cursor(a=anchor, x=extra, t=position[0])
            # Where the event's own id says it all (everything up to it sent, no text under way): that id.
            plain = anchor == event.id and not extra and position[0] is None
            marked.append(Marked(event, event.id if plain else cursor_now.encode()))
        return Step(marked, done=found.status == "idle" or not follow)

    return paced(pace, step)


def _delta(key: tuple[int, int], offset: int, text: str) -> TimelineEvent:
    iteration, attempt = key
    return TimelineEvent(
        f"text.{iteration}.{attempt}.{offset + len(text)}",
        TEXT_DELTA,
        {"iteration": iteration, "attempt": attempt, "offset": offset, "text": text},
    )


def _placed(events: list[TimelineEvent], texts: list[TimelineEvent]) -> list[TimelineEvent]:
    """The poll's timeline events with its text deltas where they happened: after the thinking event of their
    iteration, else before the first event that follows a think's text, else last."""
    if not texts:
        return events
    at = next(
        (
            i + 1
            for i, e in enumerate(events)
            if e.kind == "thinking" and e.data.get("think") == texts[-1].data["iteration"]
        ),
        None,
    )
    if at is None:
        at = next((i for i, e in enumerate(events) if e.kind in _AFTER_THE_TEXT), len(events))
    return events[:at] + texts + events[at:]
