"""The pace of a stream: it reads the state at a bounded rate, says something now and then, and ends.

Every stream (flightdeck.domain.a2a.stream, flightdeck.domain.session_events) is a generator
that calls its `step` once per poll interval: one step is a fixed handful of reads (see
each stream), so a streamed second costs at most 1 / poll interval steps, whatever happens.
It ends when the step says so (a final event), or after `max_s` (the client reconnects:
tasks/resubscribe, or the events route again), whichever comes first. When nothing was
said for `keepalive_s` it yields a Note, which the HTTP layer writes as an SSE comment.

Nothing here sleeps in tests: the clock and the sleep are injected.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from flightdeck.domain.config import DomainSettings

T = TypeVar("T")

# Kept back from the function's remaining time: the last write and the response's end.
REMAINING_MARGIN_S = 2.0


@dataclass(frozen=True)
class Note:
    """Something to tell the client outside the event stream (an SSE comment)."""

    text: str


@dataclass(frozen=True)
class Pace:
    poll_s: float
    max_s: float
    keepalive_s: float
    monotonic: Callable[[], float] = time.monotonic
    sleep: Callable[[float], None] = time.sleep

    @classmethod
    def of(cls, settings: DomainSettings, remaining_ms: int | None = None, **clock: Callable[..., Any]) -> Pace:
        """From the STREAM_* settings, cut to the invocation's remaining time (when known)."""
        max_s = settings.stream_max_ms / 1000
        if remaining_ms is not None:
            max_s = max(0.0, min(max_s, remaining_ms / 1000 - REMAINING_MARGIN_S))
        return cls(
            poll_s=settings.stream_poll_interval_ms / 1000,
            max_s=max_s,
            keepalive_s=settings.stream_keepalive_ms / 1000,
            **clock,
        )


@dataclass
class Step(Generic[T]):
    """What one poll found: events to send, and whether the stream is over."""

    events: list[T]
    done: bool = False


def paced(pace: Pace, step: Callable[[], Step[T]]) -> Iterator[T | Note]:
    """Run `step` once per poll interval until it is done or max_s has passed; yield its events."""
    started = pace.monotonic()
    last_said = started
    while True:
        found = step()
        now = pace.monotonic()
        for event in found.events:
            yield event
            last_said = now
        if found.done:
            return
        if now - started >= pace.max_s:
            yield Note(f"stream closed after {round(now - started)} s without a final event; reconnect to follow on")
            return
        if now - last_said >= pace.keepalive_s:
            yield Note("keep-alive")
            last_said = now
        pace.sleep(max(0.0, min(pace.poll_s, started + pace.max_s - now)))
