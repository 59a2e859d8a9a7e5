"""Streams read in pieces: a connection reads a few events and is dropped, the next resumes (the stream
resumption tests: tests/integration/test_stream_resumption.py, test_a2a_stream_resumption_ext.py)."""

from __future__ import annotations

import random
import uuid
from collections.abc import Callable
from typing import Any

import requests

from flightdeck.chat_client.sse import ServerEvent, read_events

STREAMING = {"STREAMING": "on", "STREAM_POLL_INTERVAL_MS": "100", "STREAM_KEEPALIVE_MS": "1000"}


def answer_delegation(url: str, token: str) -> None:
    """The worker's answer (it is never reached): on the callback route, with the delegation's token."""
    answered = requests.post(
        f"{url}/api/tools/response", json={"result": "Nile, Rhine"}, headers={"Authorization": f"Bearer {token}"}
    )
    assert answered.status_code == 202, answered.text


def read_some(
    response: requests.Response, budget: int, pause: Callable[[ServerEvent], bool] = lambda event: False
) -> tuple[list[ServerEvent], bool]:
    """Up to `budget` events, then the connection is dropped (also right after an event `pause` picks: the
    test acts on it before it reconnects); (events, whether the stream ended by itself)."""
    got: list[ServerEvent] = []
    with response:
        for item in read_events(response.iter_content(chunk_size=None)):
            if isinstance(item, ServerEvent):
                got.append(item)
                if len(got) >= budget or pause(item):
                    return got, False
    return got, True


def reconnecting(
    open_stream: Callable[[int, ServerEvent | None], requests.Response],
    rng: random.Random,
    ended: Callable[[ServerEvent], bool],
    delegated: Callable[[ServerEvent], Any],
) -> list[ServerEvent]:
    """Open, read a few events, drop; again from the last event read, until the stream ends by itself.
    `delegated`: the delegation an event shows, (url, token) or None: the worker's answer goes in before the
    next connection."""
    seen: list[ServerEvent] = []
    answered = False
    for attempt in range(200):
        got, over = read_some(open_stream(attempt, seen[-1] if seen else None), rng.randint(1, 3), delegated)
        seen.extend(got)
        for use in filter(None, map(delegated, got)):
            if not answered:
                answered = True
                answer_delegation(*use)
        if over or (got and ended(got[-1])):
            # The last event was the end: a reconnect from it gets nothing more.
            assert read_some(open_stream(attempt + 1, seen[-1]), 5)[0] == []
            return seen
    raise AssertionError("the stream never ended")


def rpc(method: str, params: dict[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": str(uuid.uuid4()), "method": method, "params": params}
