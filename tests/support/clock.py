"""A clock a test moves by assignment: the state store's (epoch milliseconds), injected where a test is
about deadlines, so that how long the machine takes between two steps changes nothing it checks."""

from __future__ import annotations

import time


class Clock:
    def __init__(self, now_ms: int | None = None):
        self.now = int(time.time() * 1000) if now_ms is None else now_ms

    def __call__(self) -> int:
        return self.now

    def now_ms(self) -> int:
        return self.now
