"""Where a stream is, as the SSE id of each of its events, so that a client that reconnects with Last-Event-ID
(or subscribes to an A2A task again with it) gets every event after that one and none twice.

Streams are derived from stored state (flightdeck.domain.timeline, the live text, the task), never stored as
events: an id is therefore not a sequence number but the stream's position in that state, enough to derive
the rest again (no read or write is added):

- a: the anchor, a timeline event id: every event up to it in the timeline was handled (sent, or not for this
  stream); x: short hashes of the events handled after it. The anchor is never a tool result or a progress
  count: those of a think still waiting are listed in call order, so one that arrives later may come before
  one already sent; once a later event follows them, their order is final;
- t: [iteration, attempt, offset]: the live text relayed, up to offset, of that think;
- s: the task's last state sent (A2A); e: the offset in the stored answer the artifact chunks reached (A2A,
  once the task ended); f: the final event was sent;
- n: the event's sequence number in its subscription (A2A; the stream-resumption extension shows it:
  flightdeck.domain.a2a.resumption); k: a short hash of the task's id, so a cursor names one task only.

Encoded as `c1.` + base64url(JSON): opaque to clients, as SSE ids are meant to be. A plain timeline id (what
the events route sent before) is read as an anchor.
"""

from __future__ import annotations

import base64
import binascii
import json
import zlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from typing import Any, Generic, TypeVar, cast

from flightdeck.domain.numerals import parse_nonneg_int
from flightdeck.domain.timeline import TimelineEvent

T = TypeVar("T")
PREFIX = "c1."
ALL = "*"  # anchor: every event of the timeline as it stands when the stream is resumed (a task that ended)
# The events whose place in the timeline may still change (see the module's doc).
_MOVABLE = ("result.", "progress.")


@dataclass(frozen=True)
class Marked(Generic[T]):
    """An event and its SSE id (the cursor after it)."""

    event: T
    id: str


@dataclass(frozen=True)
class Cursor:
    a: str | None = None
    x: tuple[str, ...] = ()
    t: tuple[int, int, int] | None = None
    s: str | None = None
    e: int | None = None
    f: bool = False
    n: int = 0
    k: str | None = None

    def encode(self) -> str:
        body: dict[str, Any] = {}
        if self.a is not None:
            body["a"] = self.a
        if self.x:
            body["x"] = list(self.x)
        if self.t is not None:
            body["t"] = list(self.t)
        if self.s is not None:
            body["s"] = self.s
        if self.e is not None:
            body["e"] = self.e
        if self.f:
            body["f"] = 1
        if self.n:
            body["n"] = self.n
        if self.k is not None:
            body["k"] = self.k
        raw = json.dumps(body, separators=(",", ":")).encode()
        return PREFIX + base64.urlsafe_b64encode(raw).decode().rstrip("=")

    def with_(self, **changes: Any) -> Cursor:
        return replace(self, **changes)


def decode(value: str | None) -> Cursor | None:
    """The cursor a Last-Event-ID names; None for none or one this server did not hand out."""
    value = (value or "").strip()
    if not value or len(value) > 4096:
        return None
    if not value.startswith(PREFIX):
        return Cursor(a=value)  # a plain timeline id
    try:
        body = json.loads(base64.urlsafe_b64decode(value[len(PREFIX) :] + "=" * (-len(value) % 4)))
        t = body.get("t")
        position = [parse_nonneg_int(n) for n in t] if isinstance(t, list) and len(t) == 3 else None
        if position is not None and None in position:
            return None  # not a number this server wrote (Infinity, "²", -1): no cursor
        return Cursor(
            a=body.get("a") if isinstance(body.get("a"), str) else None,
            x=tuple(str(h) for h in body.get("x") or []),
            t=cast("tuple[int, int, int]", tuple(position)) if position is not None else None,
            s=body.get("s") if isinstance(body.get("s"), str) else None,
            e=_offset(body.get("e")),
            f=bool(body.get("f")),
            n=parse_nonneg_int(body.get("n")) or 0,
            k=body.get("k") if isinstance(body.get("k"), str) else None,
        )
    except (ValueError, TypeError, binascii.Error, AttributeError, IndexError):
        return None


def _offset(value: Any) -> int | None:
    # -1: the answer's chunks were all sent (flightdeck.domain.a2a.stream.ANSWERED).
    return -1 if type(value) is int and value == -1 else parse_nonneg_int(value)


def short(event_id: str) -> str:
    return f"{zlib.crc32(event_id.encode()):08x}"


def mark(timeline: list[TimelineEvent], handled: Callable[[TimelineEvent], bool]) -> tuple[str | None, tuple[str, ...]]:
    """(anchor, hashes) for a stream that handled these events of the timeline."""
    anchor = -1
    for i, event in enumerate(timeline):
        if not handled(event):
            break
        if not event.id.startswith(_MOVABLE):
            anchor = i
    rest = sorted({short(e.id) for e in timeline[anchor + 1 :] if handled(e)})
    return (timeline[anchor].id if anchor >= 0 else None), tuple(rest)


def handled_ids(timeline: Iterable[TimelineEvent], cursor: Cursor) -> set[str]:
    """The ids of the timeline's events a stream at `cursor` had handled."""
    events = list(timeline)
    if cursor.a == ALL:
        return {e.id for e in events}
    upto = next((i for i, e in enumerate(events) if e.id == cursor.a), -1) if cursor.a is not None else -1
    hashes = set(cursor.x)
    return {e.id for i, e in enumerate(events) if i <= upto or short(e.id) in hashes}
