"""Load: many sessions at once on the local stack of a deployment file, as a user of `flightdeck local up` would.

The stack is the file's own (its agents, models, think delays, ASYNC_TOOL_TIMEOUT_MS, log level
DEBUG as `local up` runs it), not the bench's. Its first agent that delegates to other agents of
the file (the demo's choice) gets `sessions` user messages at once, each naming two delegates
(the file's first two, or its only one twice), so each session delegates twice: the local model
delegates once per `@agent` mention. The bench waits until every session has its final answer (or
a bound passes), then reads each session back through the API: a delegation is answered, timed
out, or failed. One warm-up session first (the agents import their handlers on their first
invocations), not counted.

Every agent counts its AWS requests (flightdeck.bench.counter), so the figures also say how many
requests moto served: the local stack is bound by them.
"""

from __future__ import annotations

import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TextIO

from flightdeck import config_check, config_file
from flightdeck.bench.accounting import Tally, between, load_records
from flightdeck.bench.counter import ENV as COUNT_ENV
from flightdeck.bench.counting_host import MODULE as COUNTING_HOST
from flightdeck.bench.stats import summary
from flightdeck.bench.timeline import BenchError, Timeline, parse_timestamp
from flightdeck.local import demo

# The repository's example with one agent delegating to two others (`flightdeck local up --config ...`).
EXAMPLE_CONFIG = config_file.DEFAULT_CONFIG.with_name("three-agents.toml")
DELEGATIONS_PER_SESSION = 2
LOCAL_UP_LOG_LEVEL = "DEBUG"  # as `flightdeck local up` runs the agents (cli.LOCAL_LOG_LEVEL)
HTTP_TIMEOUT_S = 30.0


def task(delegates: tuple[str, ...], session: int) -> str:
    """A message that makes the local model delegate twice: two mentions."""
    first = delegates[0]
    second = delegates[1] if len(delegates) > 1 else delegates[0]
    return f"@{first} session {session}: find the sources @{second} session {session}: review the draft"


def outcome(session: dict[str, Any]) -> dict[str, int]:
    """How a session's delegations ended: answered, timed out, failed otherwise; and whether it has its answer."""
    results = demo.tool_results(session)
    texts = [" ".join(str(c.get("text", "")) for c in r.get("content", []) or []) for r in results]
    timed_out = sum(1 for r, t in zip(results, texts) if r.get("status") != "success" and '"timeout"' in t)
    answered = sum(1 for r in results if r.get("status") == "success")
    return {
        "answered": answered,
        "timed_out": timed_out,
        "failed": len(results) - answered - timed_out,
        "final": int(demo.final_answer(session) is not None),
    }


def measure(
    config: str | Path,
    sessions: int,
    progress: Callable[[str], None],
    logs: TextIO | None = None,
    bound_s: float | None = None,
) -> dict[str, Any]:
    from flightdeck.local.stack import LocalStack

    if sessions < 1:
        raise ValueError("load sessions must be at least 1")
    deployment = config_check.load_checked(config, "local", local_model=True)
    chosen = demo.plan(deployment, "parallel")
    timeout_ms = int(deployment.environment(chosen.delegator).get("ASYNC_TOOL_TIMEOUT_MS") or 0)
    # Every delegation has answered or timed out by its timeout; then the final thinks.
    bound = bound_s if bound_s is not None else timeout_ms / 1000 + 60 + 2 * sessions
    timeline = Timeline()
    with tempfile.TemporaryDirectory(prefix="flightdeck-bench-load-") as tmp:
        counts = Path(tmp) / "counts"
        progress(
            f"load: local stack of {config} ({', '.join(deployment.agents)}), {sessions} sessions at once on "
            f"{chosen.delegator}, each delegating twice (ASYNC_TOOL_TIMEOUT_MS={timeout_ms})"
        )
        started = time.monotonic()
        with LocalStack(
            deployment,
            host_module=COUNTING_HOST,
            relay=logs,
            log_level=LOCAL_UP_LOG_LEVEL,
            extra_env={COUNT_ENV: str(counts), "FLIGHTDECK_LOCAL_LOG_LEVEL": "WARNING"},
        ) as stack:
            startup_s = time.monotonic() - started
            stack.add_listener(timeline)
            base = stack.urls[chosen.delegator]

            def send(i: int) -> tuple[str | None, float, int]:
                sent = time.time()
                status, body = demo.http_json(
                    "POST",
                    base + "/api/chat",
                    {"content": task(chosen.delegates, i)},
                    timeout_s=HTTP_TIMEOUT_S,
                    token=chosen.token,
                )
                sid = str(body["session_id"]) if status == 202 and isinstance(body, dict) else None
                return sid, sent, status

            def answered(sid: str) -> bool:
                return bool(timeline.find(chosen.delegator, timeline="final_answer", session_id=sid))

            # Warm-up: each agent imports its handlers on its first invocations.
            warm, _, status = send(0)
            if warm is None:
                raise BenchError(f"load: POST /api/chat to {chosen.delegator} answered {status}")
            timeline.wait(lambda: answered(warm), bound, "the load warm-up session's answer")

            progress(f"load: {sessions} sessions sent at once")
            start = time.time()
            barrier = threading.Barrier(sessions)

            def send_together(i: int) -> tuple[str | None, float, int]:
                barrier.wait()
                return send(i)

            with ThreadPoolExecutor(max_workers=sessions) as pool:
                sent = list(pool.map(send_together, range(1, sessions + 1)))
            accepted = [(sid, at) for sid, at, _ in sent if sid is not None]
            rejected: dict[str, int] = {}
            for sid, _, status in sent:
                if sid is None:
                    rejected[str(status)] = rejected.get(str(status), 0) + 1
            try:
                timeline.wait(
                    lambda: all(answered(sid) for sid, _ in accepted),
                    bound,
                    f"the final answers of {len(accepted)} sessions",
                )
                waited_out = False
            except BenchError:
                waited_out = True  # reported: the sessions without an answer are not completed
            finals = {
                sid: parse_timestamp(found[0]["timestamp"])
                for sid, _ in accepted
                if (found := timeline.find(chosen.delegator, timeline="final_answer", session_id=sid))
            }
            end = max(finals.values(), default=time.time())
            outcomes = {
                sid: outcome(demo.http_json("GET", f"{base}/api/sessions/{sid}", token=chosen.token)[1] or {})
                for sid, _ in accepted
            }
            synthesized = len(
                [
                    r
                    for r in timeline.find(chosen.delegator, timeline="timeout_synthesized")
                    if r.get("session_id") in outcomes
                ]
            )
        records = between(load_records(counts), start, end)
    wall = end - start
    total = {k: sum(o[k] for o in outcomes.values()) for k in ("answered", "timed_out", "failed")}
    completed = sum(1 for o in outcomes.values() if o["final"])
    all_answered = sum(1 for o in outcomes.values() if o["final"] and o["answered"] == DELEGATIONS_PER_SESSION)
    tally = Tally.of(records)
    served = sum(1 for r in records if r.get("k") == "aws")
    latency = [(finals[sid] - at) * 1000 for sid, at in accepted if sid in finals]
    return {
        "config": str(config),
        "delegator": chosen.delegator,
        "delegates": list(dict.fromkeys(chosen.delegates[:DELEGATIONS_PER_SESSION])),
        "sessions": sessions,
        "delegations_per_session": DELEGATIONS_PER_SESSION,
        "async_tool_timeout_ms": timeout_ms,
        "stack_startup_s": round(startup_s, 2),
        "sessions_accepted": len(accepted),
        "rejected_by_status": rejected,
        "sessions_completed": completed,
        "sessions_with_every_answer": all_answered,
        "delegations_answered": total["answered"],
        "timed_out": total["timed_out"],
        "delegations_failed": total["failed"],
        "timeouts_synthesized_logged": synthesized,
        "waited_out_after_s": round(bound, 1) if waited_out else None,
        "wall_s": round(wall, 2),
        "delegations_per_s": round(total["answered"] / wall, 2) if wall > 0 else None,
        "session_latency_ms": {k: round(v, 1) for k, v in summary(latency).items()},
        # What the agents asked of moto while the sessions ran (the local stack is bound by it); deadline
        # timers that fire after the last answer are not in the window.
        "aws_requests_billed_per_delegation_in_window": round(
            tally.total_aws_requests / max(1, sessions * DELEGATIONS_PER_SESSION), 2
        ),
        "moto_requests_served": served,
        "moto_requests_per_s": round(served / wall, 1) if wall > 0 else None,
        "basis": "the file's own stack as `flightdeck local up` runs it (log level DEBUG), one warm-up session "
        "first (not counted); wall: from the sessions being sent to the last final answer; a "
        "delegation is timed out when its result is the synthesized timeout",
    }
