"""What the live relay (flightdeck.domain.live) needs from the state store: the watch mark and the text.

Its own module so that flightdeck.domain.ports (Deps) and flightdeck.domain.live do not import each other.
"""

from __future__ import annotations

from typing import Protocol

from flightdeck.domain.records import LiveText


class LivePort(Protocol):
    def watch(self, session_id: str, until_ms: int) -> None: ...
    def put_text(self, session_id: str, live: LiveText, ttl_ms: int) -> None: ...
    def clear_text(self, session_id: str, turn: int, attempt: int) -> None: ...
