"""What is left of a function invocation for outbound calls.

A worker that makes an HTTP call per record (dispatch, delivery) stops starting calls
while there is still time to report on the rest: Lambda ends an invocation at its
timeout and hands the whole batch back, with nothing recorded for the records never
tried. Each call's timeout is also cut to what is left.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

# Kept back after the last call: recording its outcome, hiding each record not tried for its
# retry, answering the batch (a few dozen AWS requests at most).
RESERVE_MS = 2_000
# A call is started only with at least this long to run; a peer slower than this is tried later.
MIN_CALL_MS = 1_000
# A record put back for want of time is received again this soon (not after a backoff).
OUT_OF_TIME_RETRY_S = 1


@dataclass(frozen=True)
class TimeBudget:
    remaining_ms: Callable[[], int]  # Lambda: context.get_remaining_time_in_millis
    reserve_ms: int = RESERVE_MS
    min_call_ms: int = MIN_CALL_MS

    @classmethod
    def of(cls, context: Any) -> TimeBudget | None:
        """The budget of a Lambda context; None (no limit) for a caller without one."""
        remaining = getattr(context, "get_remaining_time_in_millis", None)
        return cls(remaining) if callable(remaining) else None

    def allows_a_call(self) -> bool:
        return self.remaining_ms() - self.reserve_ms >= self.min_call_ms

    def call_timeout_s(self, limit_s: float) -> float:
        """A call's timeout: `limit_s`, or less so that it ends before the reserve. 0: no time for one."""
        return max(0.0, min(limit_s, (self.remaining_ms() - self.reserve_ms) / 1000))
