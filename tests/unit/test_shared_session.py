"""The HTTP session a batch's threads use (flightdeck.adapters.http_peers.SharedSession): requests does not
promise that a Session is thread-safe, so each thread gets its own, and keeps it."""

from __future__ import annotations

import threading

from flightdeck.adapters.http_peers import SharedSession


def test_each_thread_gets_a_session_of_its_own_and_keeps_it():
    shared = SharedSession()
    mine = shared.get()
    assert shared.get() is mine
    seen: list[object] = []
    threads = [threading.Thread(target=lambda: seen.extend([shared.get(), shared.get()])) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    pairs = list(zip(seen[::2], seen[1::2], strict=True))
    assert all(a is b for a, b in pairs)  # one per thread, kept
    assert len({id(a) for a, _ in pairs} | {id(mine)}) == 4  # none shared


def test_a_session_given_serves_every_thread():
    given = object()
    shared = SharedSession(given)  # type: ignore[arg-type]
    seen: list[object] = []
    thread = threading.Thread(target=lambda: seen.append(shared.get()))
    thread.start()
    thread.join()
    assert seen == [given] and shared.get() is given
