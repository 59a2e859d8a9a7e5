"""Live relay: a think's text, as the model produces it, to the streams that watch its session.

The think runs in the turn worker; the streams (message/stream, tasks/resubscribe, GET
/api/sessions/{id}/events) run in another function. They meet in the session's partition:

- a stream that follows a busy session marks it watched (LivePort.watch: one write, an expiry
  WATCH_MS ahead), and marks it again only when less than half of that is left: at most one
  write per WATCH_MS / 2 and session, whatever the number of streams;
- a think reads that mark in the query it makes anyway (SessionsPort.get_session). Watched, it asks
  the model for a stream (converse_stream) and writes the text so far as one item (put_text) at
  most once per STREAM_POLL_INTERVAL_MS, the first after one interval (a think shorter than
  that writes nothing), then deletes it once the reply is in (clear_text). Not watched, it calls
  converse as ever: no request more;
- each poll of a stream reads that item in its own session query and relays what is new
  (TextFollower).

The stored reply stays the source of truth: a stream ends with the part of the stored answer
it has not relayed (or all of it, when what it relayed is not its beginning: a retried think, an
earlier think that called tools). A failed write ends the relay of that think, never the think.
"""

from __future__ import annotations

from typing import Any

from flightdeck.domain.model import ModelError, ModelReply
from flightdeck.domain.ports import Deps
from flightdeck.domain.records import LiveText, Session
from flightdeck.observability import count, logger

# How long a stream's mark keeps the session watched (it marks again at half of it).
WATCH_MS = 120_000
# Past this much text a think stops writing it: each write costs a write unit per KB of the
# text so far. The rest comes with the stored answer.
LIVE_MAX_BYTES = 32_000
# The live item outlives a think that crashed before deleting it by at most this long.
LIVE_TTL_MS = 3_600_000


def watched(deps: Deps, session: Session) -> bool:
    return deps.live is not None and session.watched_until_ms > deps.clock.now_ms()


def _mark(deps: Deps, session_id: str) -> None:
    assert deps.live is not None
    try:
        deps.live.watch(session_id, deps.clock.now_ms() + WATCH_MS)
    except Exception:  # best effort: without the mark the stream still gets the answer, at the end
        logger.warning("could not mark the session watched", exc_info=True, extra={"session_id": session_id})
        count("LiveRelayFailures")
        return
    count("LiveWatchMarks")


def start_watching(deps: Deps, session_id: str) -> None:
    """A stream is about to start a task in this session: mark it watched before its think is due."""
    if deps.live is not None:
        _mark(deps, session_id)


def keep_watching(deps: Deps, session: Session) -> None:
    """A stream follows this busy session: mark it watched, unless a mark lasts long enough already."""
    if deps.live is None or session.status != "busy":
        return
    now = deps.clock.now_ms()
    if session.watched_until_ms - now < WATCH_MS // 2:
        _mark(deps, session.session_id)


def live_text(session: Session) -> LiveText | None:
    """The text of the think under way so far, if its turn worker wrote some (and the reply is not stored yet)."""
    live = session.live
    if live is None or session.status != "busy" or session.iteration is not None or live.turn != session.turn:
        return None
    return live


def stored_text(session: Session, turn: int) -> str | None:
    """The text of think `turn`'s stored reply, while the session still holds it as its current iteration."""
    iteration = session.iteration
    if iteration is None or iteration.turn != turn:
        return None
    return ModelReply.model_validate(iteration.reply).text


class LiveRelay:
    """One think's relay: ask the model for a stream, write its text at a bounded rate, delete it at the end."""

    def __init__(self, deps: Deps, session_id: str, turn: int, attempt: int):
        self.deps, self.session_id, self.turn, self.attempt = deps, session_id, turn, attempt
        self.interval_ms = deps.settings.stream_poll_interval_ms
        self.writes = 0

    def think(self, model: Any, **ask: Any) -> ModelReply:
        stream = getattr(model, "converse_stream", None)
        if stream is None:  # a model that cannot stream answers at once
            answer: ModelReply = model.converse(**ask)
            return answer
        live, clock = self.deps.live, self.deps.clock.now_ms
        assert live is not None
        parts: list[str] = []
        relaying, written, last_ms = True, 0, clock()
        reply: ModelReply | None = None
        try:
            for item in stream(**ask):
                if isinstance(item, ModelReply):
                    reply = item
                    continue
                parts.append(item.text)
                now = clock()
                if not relaying or now - last_ms < self.interval_ms:
                    continue
                text = "".join(parts)
                if len(text) == written:
                    continue
                if len(text.encode("utf-8")) > LIVE_MAX_BYTES:
                    relaying = False
                    continue
                relaying = self._write(
                    lambda: live.put_text(self.session_id, LiveText(self.turn, self.attempt, text), LIVE_TTL_MS)
                )
                written, last_ms = len(text), now
        finally:
            if self.writes:
                self._write(lambda: live.clear_text(self.session_id, self.turn, self.attempt))
        if reply is None:
            raise ModelError("the model stream ended without a reply")
        return reply

    def _write(self, write: Any) -> bool:
        try:
            write()
        except Exception:  # best effort: the stored reply is what counts, the think goes on
            logger.warning(
                "live relay write failed; this think is no longer relayed",
                exc_info=True,
                extra={"session_id": self.session_id, "turn": self.turn},
            )
            count("LiveRelayFailures")
            return False
        self.writes += 1
        count("LiveRelayWrites")
        return True


def relay_for(deps: Deps, session: Session, attempt: int) -> LiveRelay | None:
    """The relay of this think when a stream watches its session, else None (the think as ever)."""
    return LiveRelay(deps, session.session_id, session.turn, attempt) if watched(deps, session) else None


class TextFollower:
    """What one stream has relayed of a think's text: the next piece of it, and the rest at the end."""

    def __init__(self) -> None:
        self.key: tuple[int, int] | None = None  # (turn, attempt) of the text relayed
        self.sent = ""

    def next_piece(self, live: LiveText) -> tuple[str, int] | None:
        """What is new: (piece, offset). Offset 0 after an earlier text means the text starts over."""
        key = (live.turn, live.attempt)
        if key == self.key and live.text.startswith(self.sent):
            if len(live.text) == len(self.sent):
                return None
            piece, offset = live.text[len(self.sent) :], len(self.sent)
        elif live.text:
            piece, offset = live.text, 0
        else:
            return None
        self.key, self.sent = key, live.text
        return piece, offset

    def rest(self, final: str, turn: int | None = None) -> str | None:
        """What is left of `final` after what was relayed; None when the relayed text is not its beginning
        (or nothing was relayed, or it was another think's: `turn` given and not the one relayed)."""
        if self.key is None or (turn is not None and self.key[0] != turn) or not final.startswith(self.sent):
            return None
        return final[len(self.sent) :]
