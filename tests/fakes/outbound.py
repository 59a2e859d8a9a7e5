"""The outbound ports in memory: queues, think starts, HTTP to peers. Each records what it was handed."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


def _as_sent(body: Any) -> Any:
    """A message body as a queue or a peer receives it: JSON (a body that is not JSON fails here, as it would)."""
    return json.loads(json.dumps(body, allow_nan=False))


@dataclass
class FakeQueues:
    """QueuePort: what each queue was sent, in order."""

    dispatches: list[dict[str, Any]] = field(default_factory=list)
    deliveries: list[dict[str, Any]] = field(default_factory=list)
    dead_letters: list[dict[str, Any]] = field(default_factory=list)
    timers: list[tuple[dict[str, Any], int]] = field(default_factory=list)  # (body, delay_s)
    retries: list[tuple[str, str, int]] = field(default_factory=list)  # (queue_url, receipt_handle, delay_s)

    def send_dispatch(self, body: dict[str, Any]) -> None:
        self.dispatches.append(_as_sent(body))

    def send_delivery(self, body: dict[str, Any]) -> None:
        self.deliveries.append(_as_sent(body))

    def send_delivery_dead_letter(self, body: dict[str, Any]) -> None:
        self.dead_letters.append(_as_sent(body))

    def send_timer(self, body: dict[str, Any], delay_s: int) -> None:
        self.timers.append((_as_sent(body), delay_s))

    def delay_retry(self, queue_url: str, receipt_handle: str, delay_s: int) -> None:
        self.retries.append((queue_url, receipt_handle, delay_s))

    def delay_retries(self, queue_url: str, receipt_handles: list[str], delay_s: int) -> None:
        self.retries.extend((queue_url, handle, delay_s) for handle in receipt_handles)


class ThinkSendFailed(RuntimeError):
    """The think start was lost (the invoke failed, or the function died first)."""


@dataclass
class FakeThinks:
    """ThinkPort: the thinks started and the retries asked for; `fail_next` loses that many starts."""

    started: list[tuple[str, int]] = field(default_factory=list)  # (session_id, turn)
    retries: list[tuple[str, int, int, int]] = field(default_factory=list)  # (session_id, turn, attempt, delay_s)
    fail_next: int = 0

    def start(self, session_id: str, turn: int, traceparent: str = "", snapshot: str = "") -> None:
        if self.fail_next:
            self.fail_next -= 1
            raise ThinkSendFailed(f"think {session_id}/{turn} not started")
        self.started.append((session_id, turn))

    def resend(self, session_id: str, turn: int, traceparent: str = "") -> None:
        self.start(session_id, turn, traceparent)

    def retry_later(self, session_id: str, turn: int, traceparent: str, attempt: int, delay_s: int) -> None:
        self.retries.append((session_id, turn, attempt, delay_s))

    def take(self) -> list[tuple[str, int]]:
        """The thinks started since the last take (a test runs them)."""
        out, self.started[:] = list(self.started), []
        return out


@dataclass(frozen=True)
class PeerReply:
    """A PeerAnswer (flightdeck.domain.http_ports): status 0 is no HTTP answer at all."""

    status: int
    body: Any = None
    error: str = ""
    request_sha256: str = ""


@dataclass(frozen=True)
class Post:
    url: str
    body: Any
    headers: dict[str, str]


Answerer = Callable[[Post], PeerReply]


@dataclass
class FakePeers:
    """PeerPort: every POST recorded; answered by what the test scripted for its URL (in order, the last one
    again once they run out), else as a connection refused (status 0) would be."""

    posts: list[Post] = field(default_factory=list)
    _script: dict[str, list[PeerReply | Answerer]] = field(default_factory=dict)

    def answer(self, url: str, *replies: PeerReply | Answerer) -> None:
        self._script[url] = list(replies)

    def post_json(
        self, url: str, body: Any, headers: dict[str, str] | None = None, timeout_s: float | None = None
    ) -> PeerReply:
        post = Post(url, _as_sent(body), dict(headers or {}))
        self.posts.append(post)
        script = self._script.get(url)
        if not script:
            return PeerReply(0, None, f"connection refused: nothing listens at {url}")
        reply = script.pop(0) if len(script) > 1 else script[0]
        return reply(post) if callable(reply) else reply

    def to(self, url: str) -> list[Post]:
        return [p for p in self.posts if p.url == url]
