"""`flightdeck bench`: every measurement, in order, into one result (a dict, written as JSON)."""

from __future__ import annotations

import os
import platform
import shutil
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, datetime
from importlib import metadata
from typing import Any, TextIO

from flightdeck import topology
from flightdeck.bench import bill, coldstart, scenario, streaming, sweep, think_load
from flightdeck.bench import load as load_test
from flightdeck.bench.prices import PriceTable, load
from flightdeck.bench.roles import DELEGATOR, Roles, StackOptions, memory_mb, roles_from

__all__ = ["BenchOptions", "Roles", "options", "roles_from", "run", "validate"]

SCHEMA_VERSION = 1


@dataclass(frozen=True)
class BenchOptions:
    quick: bool = False
    stack: StackOptions = field(default_factory=StackOptions)
    open_turns: int = 10_000
    overdue_turns: int = 10
    coldstart_repeats: int = 5
    # Handlers also imported without byte-code caches (None: all of them).
    coldstart_no_pyc: tuple[str, ...] | None = None
    # Handlers whose import is timed (None: every handler of flightdeck.topology).
    coldstart_handlers: tuple[str, ...] | None = None
    # The interpreter that times the imports (None: this one). Lambda runs the stack's runtime
    # (infra/bundling.py RUNTIME), which may not be the Python the bench runs on.
    coldstart_python: str | None = None
    # The load: sessions at once on the delegating agent of this deployment file (None: the bundled
    # examples/three-agents.toml; `bench --config`: that file); 0 sessions: no load phase.
    load_sessions: int = 40
    load_config: str | None = None
    # Thinks under load (flightdeck.bench.think_load): sessions started together, one stack per THINK_GATHERING
    # mode; () : no such phase. 100 sessions take minutes per mode: the full bench only.
    think_sessions: tuple[int, ...] = think_load.SESSIONS


def options(quick: bool = False, **overrides: Any) -> BenchOptions:
    """The full benchmark, or the quick one CI runs; overrides: iterations, callbacks, open_turns, ..."""
    if quick:
        base = BenchOptions(
            quick=True,
            stack=StackOptions(
                iterations=3,
                parallel_iterations=1,
                callbacks=10,
                timeout_turns=5,
                warmup=1,
                stagger_s=0.1,
                delegator_timeout_ms=5000,
            ),
            open_turns=1_000,
            coldstart_repeats=3,  # best of 3: one disturbed interpreter must not decide the goal
            coldstart_no_pyc=("turn_worker",),
            load_sessions=10,
            think_sessions=think_load.QUICK_SESSIONS,
        )
    else:
        base = BenchOptions()
    stack_fields = {k: v for k, v in overrides.items() if k in StackOptions.__dataclass_fields__ and v is not None}
    top_fields = {k: v for k, v in overrides.items() if k in BenchOptions.__dataclass_fields__ and v is not None}
    return replace(base, stack=replace(base.stack, **stack_fields), **top_fields)


def validate(opts: BenchOptions) -> None:
    s = opts.stack
    if min(s.iterations, s.parallel_iterations, s.callbacks, s.timeout_turns, s.fan_out, s.batch_size) < 1:
        raise ValueError("iterations, callbacks, timeout turns, fan-out and batch size must be at least 1")
    if s.batch_size > 100:
        raise ValueError("the batch endpoint takes at most 100 results a request")
    if not 1 <= opts.overdue_turns <= opts.open_turns:
        raise ValueError("overdue turns must be between 1 and the number of open turns")
    if opts.coldstart_repeats < 1:
        raise ValueError("cold start repeats must be at least 1")
    if opts.load_sessions < 0:
        raise ValueError("load sessions must be 0 (no load phase) or more")
    if any(s < 1 for s in opts.think_sessions):
        raise ValueError("the thinks phase's sessions must each be 1 or more")
    if not s.conversation_at or min(s.conversation_at) < 1:
        raise ValueError("the conversation's counted messages must be 1 or more")
    if opts.coldstart_python is not None and shutil.which(opts.coldstart_python) is None:
        raise ValueError(f"the cold start interpreter {opts.coldstart_python} is not an executable file")


def machine() -> dict[str, Any]:
    model = ""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as handle:
            model = next((line.split(":", 1)[1].strip() for line in handle if line.startswith("model name")), "")
    except OSError:
        pass

    def version(dist: str) -> str:
        try:
            return metadata.version(dist)
        except metadata.PackageNotFoundError:
            return "?"

    return {
        "platform": platform.platform(),
        "cpu": model or platform.processor() or platform.machine(),
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "moto": version("moto"),
        "boto3": version("boto3"),
        "aws_lambda_powertools": version("aws-lambda-powertools"),
    }


def _load_average() -> list[float] | None:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


ASSUMPTIONS = {
    "lambda": "512 MB arm64 (infra/functions.py); GB-s use the handlers' local durations on moto as a rough "
    "proxy (moto is slower than DynamoDB for some calls and faster for others; the dispatch and delivery "
    "functions wait for the peer's HTTP answer in both); the local model thinks in 0 ms, a real model's "
    "latency is billed as Lambda duration on top (each second of model time per think = "
    "0.5 GB-s = $6.67 per million thinks at the recorded price)",
    "dynamodb": "request units computed from the sizes of the items each request wrote or read (1 KB per WRU, "
    "2x in a transaction; 4 KB per RRU, half when eventually consistent); an update is sized by "
    "the item as read back after the run; a write whose condition fails is billed; the deadline "
    "index (projection ALL) costs one more write whenever a write puts a turn in it, changes it "
    "there or takes it out; the sessions index (keys only) one write per new session",
    "sqs": "one request per API call and 64 KB chunk; batches count once; empty ReceiveMessage calls by the "
    "local pollers are excluded (on AWS the event source mapping long-polls around the clock and SQS "
    "bills those polls too, but that cost grows with time and queue count, not with delegations)",
    "secrets_manager": "counted: calls made after Powertools' cache (300 s) on the delegating agents; a "
    "never-rotated secret has no AWSPREVIOUS version, and that failed lookup is not cached, "
    "so every signing_keys() call makes one (assumed billed like any API call)",
    "cloudwatch_logs": "bytes of the JSON log lines the handlers write at INFO (the deployed default; the agents run at "
    "DEBUG for the timeline, DEBUG lines are not counted), re-serialized; "
    "Lambda's own START/END/REPORT lines are not included",
    "control_plane": "calls outside the data plane (the local gateway's apigateway.GetApiKeys / GetUsagePlans, "
    "its stand-in for API Gateway's own key and usage-plan checks; any other control-plane "
    "operation) are counted apart, under the excluded line, never per delegation",
    "comparisons": "the Step Functions and Lambda durable functions rows are models priced from the measured "
    "counts (flightdeck.bench.stepfunctions, flightdeck.bench.durable); the durable functions' "
    "data prices are assumptions (prices-us-east-1.json 'assumed'), its operation price a "
    "third-party transcription of the AWS pricing page",
    "conversation": "one session on the delegator, user messages one at a time, each sent once the session is "
    "idle; the counted messages' windows are bounded by a quiet stack",
    "inbox": "one delegated turn on the delegator with a follow-up sent while it waits on its delegate (queued), "
    "and one with the follow-up sent once the session is idle; the accepting POST and the think ending the "
    "delegated turn counted from the delegator's records",
    "load": "the deployment file's own stack (default examples/three-agents.toml) as `flightdeck local up` runs "
    "it, all sessions sent at once after one warm-up session; moto-bound, 2 cores shared with the bench",
    "not_included": "the model (Bedrock tokens), data transfer, storage, CloudWatch metrics and alarms, the "
    "EventBridge schedule (one sweep a minute whatever the load), free tiers",
}


def run(
    opts: BenchOptions,
    progress: Callable[[str], None] | None = None,
    logs: TextIO | None = None,
    prices: PriceTable | None = None,
) -> dict[str, Any]:
    validate(opts)
    say = progress or (lambda message: None)
    prices = prices or load()
    began = time.monotonic()
    load_at_start = _load_average()
    result: dict[str, Any] = {
        "schema": SCHEMA_VERSION,
        "mode": "quick" if opts.quick else "full",
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": machine(),
        "command": "flightdeck bench"
        + (" --quick" if opts.quick else "")
        + (f" --config {opts.stack.roles.config}" if opts.stack.roles else ""),
        "options": asdict(opts),
        "prices": {"region": prices.region, "recorded": prices.recorded, "prices": prices.prices},
        "assumptions": ASSUMPTIONS,
    }
    if opts.stack.roles is not None:
        roles = opts.stack.roles
        result["config"] = {
            "file": roles.config,
            "delegator": roles.delegator.name,
            "worker": roles.worker.name,
            "note": "the file's agents play the delegator and the worker of the counted round trips "
            "(prompts, models, tools, settings but the bench's timing, memory); the "
            "throughput and timeout measures use the bench's own agents",
        }
    phases: dict[str, float] = {}
    mark = time.monotonic()
    result.update(scenario.run(opts.stack, prices, say, logs))
    phases["local_stack"], mark = round(time.monotonic() - mark, 1), time.monotonic()
    say("the whole bill: infra, the model's wait and tokens, baseline and default (issue 37)")
    result["bill"] = bill.measure(
        result["round_trip_one"], prices, think_rss_mb=result["conversation"]["think_peak_rss_mb"]
    )
    phases["bill"], mark = round(time.monotonic() - mark, 1), time.monotonic()
    if opts.load_sessions:
        config = opts.load_config or (opts.stack.roles.config if opts.stack.roles else str(load_test.EXAMPLE_CONFIG))
        result["load"] = load_test.measure(config, opts.load_sessions, say, logs)
        phases["load"], mark = round(time.monotonic() - mark, 1), time.monotonic()
    if opts.think_sessions:
        config = opts.load_config or str(load_test.EXAMPLE_CONFIG)
        result["thinks"] = think_load.measure(config, say, opts.think_sessions, logs)
        phases["thinks"], mark = round(time.monotonic() - mark, 1), time.monotonic()
    result["sweep"] = sweep.measure(opts.open_turns, opts.overdue_turns, prices, say)
    phases["sweep"], mark = round(time.monotonic() - mark, 1), time.monotonic()
    result["streaming"] = streaming.measure(prices, say, memory_mb=memory_mb(opts.stack, DELEGATOR))
    phases["streaming"], mark = round(time.monotonic() - mark, 1), time.monotonic()
    result["cold_start"] = coldstart.measure(
        opts.coldstart_repeats,
        opts.coldstart_no_pyc,
        say,
        handlers=opts.coldstart_handlers or topology.HANDLERS,
        python=opts.coldstart_python or sys.executable,
    )
    phases["cold_start"] = round(time.monotonic() - mark, 1)
    result["phase_s"] = phases
    result["duration_s"] = round(time.monotonic() - began, 1)
    # Other work on the machine slows moto and the agents: say how busy it was.
    result["machine"]["load_average_at_start"] = load_at_start
    result["machine"]["load_average_at_end"] = _load_average()
    from flightdeck.bench.report import table_rows

    result["table"] = table_rows(result)
    return result


def progress_to(stream: TextIO) -> Callable[[str], None]:
    started = time.monotonic()

    def say(message: str) -> None:
        print(f"bench [{time.monotonic() - started:5.1f} s]: {message}", file=stream, flush=True)

    return say
