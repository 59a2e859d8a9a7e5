"""The agents' timeline as the bench reads it: their JSON log lines (the routine steps' records and the bytes every
line costs), waits on them, and the hops of a round trip timed from them (flightdeck.observability's timeline)."""

from __future__ import annotations

import json
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from datetime import datetime
from typing import Any

from flightdeck.bench.roles import DELEGATOR, WORKER
from flightdeck.bench.stats import summary


class BenchError(RuntimeError):
    """A measurement could not be completed (an agent did not answer in time, a request failed)."""


def parse_timestamp(value: str) -> float:
    """Powertools' "2026-11-29 19:49:26,793+0000" -> epoch seconds."""
    return datetime.strptime(value, "%Y-%m-%d %H:%M:%S,%f%z").timestamp()


class Timeline:
    """Listener for the agents' JSON log lines: timeline records, and the bytes every line costs."""

    def __init__(self) -> None:
        self.records: list[tuple[str, dict[str, Any]]] = []
        self.log_lines: list[tuple[float, str, int]] = []  # (received at, agent, bytes)
        self._cond = threading.Condition()

    def __call__(self, agent: str, record: dict[str, Any]) -> None:
        # The agents log at DEBUG so the bench sees every step; on AWS they log at INFO, so only
        # what INFO writes is billed (metric blobs have no level: always written).
        billed = str(record.get("level", "")).upper() != "DEBUG"
        size = len(json.dumps(record, ensure_ascii=False).encode("utf-8")) + 1 if billed else 0
        with self._cond:
            self.log_lines.append((time.time(), agent, size))
            if "timeline" in record:
                self.records.append((agent, record))
                self._cond.notify_all()

    def all(self) -> list[tuple[str, dict[str, Any]]]:
        """Every timeline record so far, with its agent."""
        with self._cond:
            return list(self.records)

    def find(self, agent: str | None = None, **match: Any) -> list[dict[str, Any]]:
        with self._cond:
            return [
                r
                for a, r in self.records
                if (agent is None or a == agent) and all(r.get(k) == v for k, v in match.items())
            ]

    def wait(self, predicate: Callable[[], bool], timeout_s: float, what: str) -> None:
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while not predicate():
                left = deadline - time.monotonic()
                if left <= 0:
                    raise BenchError(f"timed out after {timeout_s:.0f} s waiting for {what}")
                self._cond.wait(min(left, 0.25))

    def wait_for(self, agent: str, event: str, session_id: str, timeout_s: float) -> dict[str, Any]:
        self.wait(
            lambda: bool(self._unlocked_find(agent, event, session_id)),
            timeout_s,
            f"{event} from {agent} for session {session_id}",
        )
        return self._unlocked_find(agent, event, session_id)[0]

    def _unlocked_find(self, agent: str, event: str, session_id: str) -> list[dict[str, Any]]:
        return [
            r
            for a, r in self.records
            if a == agent and r.get("timeline") == event and r.get("session_id") == session_id
        ]

    def log_bytes(self, agents: set[str], start: float, end: float) -> int:
        with self._cond:
            return sum(n for t, a, n in self.log_lines if a in agents and start <= t <= end)


HOPS = (
    ("ingest_and_think", (DELEGATOR, "chat_received"), (DELEGATOR, "tool_use")),
    ("dispatch_to_peer", (DELEGATOR, "tool_use"), (WORKER, "chat_received")),
    ("peer_turn", (WORKER, "chat_received"), (WORKER, "answer_ready")),
    ("delivery_and_callback", (WORKER, "answer_ready"), (DELEGATOR, "callback_accepted")),
    # Whatever order the worker logs answer_ready and sends its answer in: its turn and the delivery together.
    ("peer_turn_and_delivery", (WORKER, "chat_received"), (DELEGATOR, "callback_accepted")),
    ("resume_and_answer", (DELEGATOR, "callback_accepted"), (DELEGATOR, "final_answer")),
)


def hop_latencies(timeline: Timeline, sessions: list[str]) -> dict[str, Any]:
    """Per hop, from the agents' timeline timestamps (millisecond resolution, one clock)."""
    per_hop: dict[str, list[float]] = defaultdict(list)
    out_of_order: Counter[str] = Counter()
    for sid in sessions:
        dispatched = next(iter(timeline.find(DELEGATOR, timeline="dispatched", session_id=sid)), None)
        if dispatched is None:
            continue
        ids = {DELEGATOR: sid, WORKER: dispatched.get("peer_session_id")}

        def at(agent: str, event: str) -> float | None:
            found = timeline.find(agent, timeline=event, session_id=ids[agent])
            return parse_timestamp(found[0]["timestamp"]) if found else None

        for name, a, b in HOPS:
            ta, tb = at(*a), at(*b)
            # A negative span: the two events are not logged in this order (e.g. answer_ready after an inline
            # delivery): not a hop of this code base, counted apart.
            if ta is not None and tb is not None:
                if tb >= ta:
                    per_hop[name].append((tb - ta) * 1000)
                else:
                    out_of_order[name] += 1
        first, last = at(DELEGATOR, "chat_received"), at(DELEGATOR, "final_answer")
        if first is not None and last is not None:
            per_hop["total_logged"].append((last - first) * 1000)
        acked = parse_timestamp(dispatched["timestamp"])
        peer_in = at(WORKER, "chat_received")
        if peer_in is not None:
            per_hop["dispatch_ack_after_peer_accepted"].append((acked - peer_in) * 1000)
    out: dict[str, Any] = {
        name: {k: round(v, 1) for k, v in summary(values).items()} for name, values in per_hop.items()
    }
    if out_of_order:
        out["events_out_of_order"] = dict(out_of_order)
    return out
