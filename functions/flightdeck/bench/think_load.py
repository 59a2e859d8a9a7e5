"""Thinks under load: one function per think, or thinks sharing invocations (THINK_GATHERING), side by side.

For each mode a local stack of the example file (three agents), every agent's local model thinking
THINK_DELAY_MS per think, each agent's functions up to SANDBOXES invocations at once (a local stand-in for
the account's concurrency). Sessions started together on the delegator, each delegating twice
(flightdeck.bench.load): at 1 session, LONE_RUNS of them one after another (the low-load latency); at 10
and 100, all at once. From each phase's window of the counting host's records (every agent's turn worker):

- invocations_per_think: turn worker invocations / thinks run (an SQS batch of n runs n thinks);
- function_s_per_think: the turn worker's billed duration / thinks;
- peak_concurrency: the most turn worker invocations running at one moment, over the three agents;
- added_latency_ms_p50/p95: a think's wait from the write that started it (the writer's `chat_received` or
  `turn_complete` line, logged right after its start) to its first line (`turn_started` / `thinking`), at that
  percentile, less the same percentile of one_per_function in the same run.

The paper figure (delegations_per_s_per_1000_concurrency): 1,000 executions, each think holding its
share of one for the model's latency L; a delegation round trip is THINKS_PER_DELEGATION thinks (the
delegator's, the delegate's, the delegator's again). Per function, a think holds a whole execution:
1000 / (3 L). Shared, a batch of b thinks holds one: 1000 b / (3 L), with b the mean batch measured at
the largest phase. Assumptions in docs/PERFORMANCE.md.
"""

from __future__ import annotations

import tempfile
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TextIO

from flightdeck import config_check, config_models, topology
from flightdeck.bench import load
from flightdeck.bench.accounting import between, load_records
from flightdeck.bench.counter import ENV as COUNT_ENV
from flightdeck.bench.counting_host import MODULE as COUNTING_HOST
from flightdeck.bench.prices import PriceTable
from flightdeck.bench.prices import load as load_prices
from flightdeck.bench.stats import percentile
from flightdeck.bench.timeline import BenchError, Timeline, parse_timestamp
from flightdeck.local import demo
from flightdeck.local.invocation import DEFAULT_MEMORY_MB

MODES = topology.THINK_GATHERINGS  # ("one_per_function", "shared"): today's first, the baseline
SESSIONS = (1, 10, 100)
QUICK_SESSIONS = (1, 10)  # 100 sessions take minutes per mode on a laptop: the full bench only
THINK_DELAY_MS = 1000
LONE_RUNS = 8
SANDBOXES = 32
PEER_LIMIT = 1000
THINKS_PER_DELEGATION = 3
LATENCIES_S = (1, 5)
BOUND_S = 300.0
WRITER_LINES = {"chat_received": 0, "turn_complete": 1}  # the writer's line -> how far on the think's turn is
THINK_LINES = ("turn_started", "thinking")


def _deployment(config: str | Path) -> config_models.DeploymentFile:
    deployment = config_check.load_checked(config, "local", local_model=True)
    for spec in deployment.agents.values():
        spec.model.think_delay_ms = THINK_DELAY_MS
        # 100 sessions at once, and 100 tasks and answers at once between the agents: each peer's usage plan
        # (a burst of 40 by default) would refuse what this phase is about.
        spec.gateway.peer_rate_limit = spec.gateway.peer_burst_limit = PEER_LIMIT
    return deployment


def peak(intervals: Iterable[tuple[float, float]]) -> int:
    """The most intervals open at one moment (an end at the instant of a start does not overlap it)."""
    spans = list(intervals)
    edges = sorted([(start, 1) for start, _ in spans] + [(end, -1) for _, end in spans])
    most = running = 0
    for _, step in edges:
        running += step
        most = max(most, running)
    return most


def think_lags_ms(records: list[tuple[str, dict[str, Any]]], start: float, end: float) -> list[float]:
    """Each think's wait, in ms, from its writer's line to its own first line, for the thinks begun in the window."""
    started: dict[tuple[str, str, int], float] = {}
    ran: dict[tuple[str, str, int], float] = {}
    for agent, r in records:
        event, sid, turn = r.get("timeline"), r.get("session_id"), r.get("turn")
        if not isinstance(sid, str) or not isinstance(turn, int) or "timestamp" not in r:
            continue
        at = parse_timestamp(r["timestamp"])
        if event in WRITER_LINES:
            started.setdefault((agent, sid, turn + WRITER_LINES[event]), at)
        elif event in THINK_LINES and start <= at <= end:
            ran.setdefault((agent, sid, turn), at)
    return [(ran[k] - started[k]) * 1000 for k in ran if k in started]


def figures(inv: list[dict[str, Any]], prices: PriceTable) -> dict[str, Any]:
    """The turn workers' figures of one phase (their invocation records): the model's wait priced by the
    function-seconds it actually held, and the requests that started the invocations."""
    thinks = sum(int(r.get("n") or 1) for r in inv)
    seconds = sum(float(r["ms"]) for r in inv) / 1000
    per_million = (
        seconds * DEFAULT_MEMORY_MB / 1024 * prices.lambda_gb_second + len(inv) * prices.lambda_request
    ) * 1e6
    return {
        "turn_worker_usd_per_1m_thinks": round(per_million / thinks, 2) if thinks else None,
        "thinks": thinks,
        "invocations": len(inv),
        "invocations_per_think": round(len(inv) / thinks, 3) if thinks else None,
        "function_s_per_think": round(seconds / thinks, 3) if thinks else None,
        "peak_concurrency": peak((r["t"] - r["ms"] / 1000, r["t"]) for r in inv),
        "mean_batch": round(thinks / len(inv), 2) if inv else None,
    }


class _Run:
    """One mode's stack: sessions sent, answers awaited, each phase's records read back."""

    def __init__(self, stack: Any, timeline: Timeline, counts: Path, chosen: Any, prices: PriceTable):
        self.stack, self.timeline, self.counts, self.chosen = stack, timeline, counts, chosen
        self.prices = prices
        self.base = stack.urls[chosen.delegator]
        self.sent = 0
        self.refused = 0

    def send(self) -> tuple[str | None, int]:
        self.sent += 1
        status, body = demo.http_json(
            "POST",
            self.base + "/api/chat",
            {"content": load.task(self.chosen.delegates, self.sent)},
            timeout_s=load.HTTP_TIMEOUT_S,
            token=self.chosen.token,
        )
        return (str(body["session_id"]) if status == 202 and isinstance(body, dict) else None), status

    def answered(self, sid: str) -> bool:
        return bool(self.timeline.find(self.chosen.delegator, timeline="final_answer", session_id=sid))

    def wait(self, sids: list[str]) -> None:
        """Until every session has its answer, or the bound: a session still unanswered then is reported."""
        try:
            self.timeline.wait(lambda: all(self.answered(s) for s in sids), BOUND_S, "the answers")
        except BenchError:
            return  # reported: sessions_answered

    def together(self, sessions: int) -> list[str]:
        barrier = threading.Barrier(sessions)

        def one(_: int) -> tuple[str | None, int]:
            barrier.wait()
            try:
                return self.send()
            except OSError:  # no answer within the HTTP timeout: reported as not accepted
                return None, 0

        with ThreadPoolExecutor(max_workers=sessions) as pool:
            sent = list(pool.map(one, range(sessions)))
        sids = [sid for sid, _ in sent if sid is not None]
        self.refused += sessions - len(sids)
        self.wait(sids)
        return sids

    def one_by_one(self, runs: int) -> list[str]:
        sids = []
        for _ in range(runs):
            sid, status = self.send()
            if sid is None:
                raise BenchError(f"think load: POST /api/chat answered {status}")
            self.wait([sid])
            sids.append(sid)
        return sids

    def phase(self, sessions: int) -> dict[str, Any]:
        start, self.refused = time.time(), 0
        sids = self.one_by_one(LONE_RUNS) if sessions == 1 else self.together(sessions)
        end = time.time()
        records = between(load_records(self.counts), start, end)
        inv = [r for r in records if r.get("k") == "inv" and r.get("fn") == topology.THINK_HANDLER]
        outcomes = [
            load.outcome(demo.http_json("GET", f"{self.base}/api/sessions/{sid}", token=self.chosen.token)[1] or {})
            for sid in sids
        ]
        lags = think_lags_ms(self.timeline.all(), start, end)
        return {
            **figures(inv, self.prices),
            "sessions_run": len(sids),
            "sessions_not_accepted": self.refused,
            "sessions_answered": sum(1 for sid in sids if self.answered(sid)),
            "delegations_answered": sum(o["answered"] for o in outcomes),
            "delegations_timed_out": sum(o["timed_out"] for o in outcomes),
            "delegations_failed": sum(o["failed"] for o in outcomes),
            "delegations": len(sids) * load.DELEGATIONS_PER_SESSION,
            "think_wait_ms": {"n": len(lags), "p50": _round(percentile(lags, 50)), "p95": _round(percentile(lags, 95))},
            "wall_s": round(end - start, 2),
        }


def _round(value: float) -> float | None:
    return round(value, 1) if value == value else None  # NaN (no sample): None


def run_mode(
    config: str | Path,
    mode: str,
    sessions: tuple[int, ...],
    progress: Callable[[str], None],
    logs: TextIO | None,
    settings: dict[str, str] | None = None,
) -> dict[int, dict[str, Any]]:
    """One mode's phases; settings: more of the agents' settings (a variant of the mode's rule, e.g.
    THINK_LONE_WINDOW_MS)."""
    from flightdeck.local.stack import LocalStack

    deployment = _deployment(config)
    chosen = demo.plan(deployment, "parallel")
    timeline = Timeline()
    with tempfile.TemporaryDirectory(prefix="flightdeck-bench-thinks-") as tmp:
        counts = Path(tmp) / "counts"
        progress(f"thinks: {mode}: local stack of {config}, every model {THINK_DELAY_MS} ms a think")
        env = {COUNT_ENV: str(counts), "FLIGHTDECK_LOCAL_LOG_LEVEL": "WARNING", "THINK_GATHERING": mode}
        env.update(settings or {})
        with LocalStack(
            deployment,
            host_module=COUNTING_HOST,
            relay=logs,
            log_level=load.LOCAL_UP_LOG_LEVEL,
            extra_env=env,
            sandboxes=SANDBOXES,
        ) as stack:
            stack.add_listener(timeline)
            run = _Run(stack, timeline, counts, chosen, load_prices())
            run.one_by_one(1)  # warm-up: each agent imports its handlers on its first invocations
            out = {}
            for s in sessions:
                progress(f"thinks: {mode}: {s} session{'s' if s > 1 else ''}")
                out[s] = run.phase(s)
            return out


def paper(mean_batch: float) -> dict[str, dict[str, float]]:
    """Delegations a second that 1,000 concurrent executions sustain, at each model latency."""
    per_execution = {"one_per_function": 1.0, "shared": mean_batch}
    return {
        mode: {f"latency_{lat}s": round(1000 * b / (THINKS_PER_DELEGATION * lat), 1) for lat in LATENCIES_S}
        for mode, b in per_execution.items()
    }


def measure(
    config: str | Path,
    progress: Callable[[str], None],
    sessions: tuple[int, ...] = SESSIONS,
    logs: TextIO | None = None,
) -> dict[str, Any]:
    by_mode = {mode: run_mode(config, mode, sessions, progress, logs) for mode in MODES}
    result: dict[str, Any] = {}
    for s in sessions:
        base = by_mode[MODES[0]][s]["think_wait_ms"]
        row = {}
        for mode in MODES:
            got = by_mode[mode][s]
            wait = got["think_wait_ms"]
            row[mode] = {
                **got,
                "added_latency_ms_p50": _added(wait["p50"], base["p50"]),
                "added_latency_ms_p95": _added(wait["p95"], base["p95"]),
            }
        result[f"sessions_{s}"] = row
    largest = by_mode["shared"][max(sessions)]
    result["delegations_per_s_per_1000_concurrency"] = paper(largest["mean_batch"] or 1.0)
    result["basis"] = (
        f"local stacks of {config}, one per mode, every model {THINK_DELAY_MS} ms a think, up to {SANDBOXES} "
        f"invocations of a function at once, each peer's usage plan {PEER_LIMIT} a second; at 1 session {LONE_RUNS} sessions one after another, else all at "
        "once, each delegating twice; turn worker invocations of the three agents in each phase's window; "
        "added latency against one_per_function's same percentile; the paper figure from the mean batch of "
        f"the shared mode at {max(sessions)} sessions (docs/PERFORMANCE.md)"
    )
    return result


def _added(value: float | None, base: float | None) -> float | None:
    return round(value - base, 1) if value is not None and base is not None else None
