"""Small statistics helpers (no numpy)."""

from __future__ import annotations

import math
from collections.abc import Iterable


def percentile(values: Iterable[float], p: float) -> float:
    """Linear interpolation between closest ranks (numpy's default); nan for no values."""
    data = sorted(values)
    if not data:
        return math.nan
    if len(data) == 1:
        return float(data[0])
    rank = (len(data) - 1) * p / 100
    low = math.floor(rank)
    high = min(low + 1, len(data) - 1)
    return float(data[low] + (data[high] - data[low]) * (rank - low))


def summary(values: Iterable[float]) -> dict[str, float]:
    data = list(values)
    if not data:
        return {"n": 0, "p50": math.nan, "p95": math.nan, "max": math.nan, "min": math.nan}
    return {
        "n": len(data),
        "p50": percentile(data, 50),
        "p95": percentile(data, 95),
        "max": max(data),
        "min": min(data),
    }


def ratio(a: float, b: float) -> float:
    return a / b if b else math.inf
