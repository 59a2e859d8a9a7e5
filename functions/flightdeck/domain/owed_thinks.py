"""The owed-think starter on the table's stream (THINK_START = "stream", ARCHITECTURE §3).

A write that marks a think owed (a new message, a completed turn, a queued message's turn, a cancel)
puts a stream record of the session's META; the consumer starts that think with an asynchronous invoke
of the turn worker, so no writer starts it and the mark needs no deadline index. Nothing here waits on a
think: a start is one request, and the shard moves on.

A start that fails hands the think to the sweep: the mark goes into the deadline index, due after the
grace (LivenessPort.defer_owed_think). Only when that write fails too does the record fail, for the event
source mapping to retry (bisecting the batch) and, past its retries, to give up to its on-failure queue.
"""

from __future__ import annotations

from dataclasses import dataclass

from flightdeck.domain.ports import Deps
from flightdeck.observability import count, logger


@dataclass(frozen=True)
class OwedMark:
    """What a stream record of a session's META says of its owed think: the mark after the write and before."""

    session_id: str
    owed: int | None
    before: int | None


def start_owed(deps: Deps, mark: OwedMark) -> str:
    """Returns unchanged (no new mark: a defer, a write while a mark stands), started, or to_sweep / stale
    (the start failed: the sweep owns it, or the session moved on and its own mark was started)."""
    if mark.owed is None or mark.owed == mark.before:
        return "unchanged"
    try:
        deps.thinks.resend(mark.session_id, mark.owed)
        return "started"
    except Exception:  # noqa: BLE001 - any failed start: the sweep's, unless that write fails too (raised)
        logger.warning("starting an owed think failed; the sweep owns it", extra={"session_id": mark.session_id})
    if deps.liveness.defer_owed_think(mark.session_id, mark.owed):
        count("OwedThinksToSweep")
        return "to_sweep"
    return "stale"
