"""Cold start proxy: how long importing each handler module takes, against `import boto3`.

Each measurement is a fresh interpreter (this one's executable) that times one
import with time.perf_counter; the interpreter's own start-up is not included.
Two modes:

- `pyc`: byte-code caches as they are on this machine (every module compiled before);
- `no_pyc`: what a Lambda cold start does with this repository's asset. The
  asset is built with `pip install --no-compile` and without __pycache__
  (infra/bundling.py) and /var/task is read-only, so everything the asset
  bundles is compiled from source at every cold start, while the runtime's own
  boto3/botocore/s3transfer and the standard library have their caches. The
  child compiles from source every module outside the standard library and
  those three packages (an import hook; nothing is written).

The handler environment is a valid one (settings are read at import), with
placeholder resource names; nothing is called.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

from flightdeck import topology
from flightdeck.bench.stats import summary

RUNTIME_PROVIDED = ("boto3", "botocore", "s3transfer")

_CHILD = r"""
import importlib, importlib.machinery as machinery, os, sys, sysconfig, time
mode, module = sys.argv[1], sys.argv[2]
if mode == "no_pyc":
    stdlib = os.path.realpath(sysconfig.get_paths()["stdlib"])
    provided = tuple(sys.argv[3].split(","))

    class FromSource(machinery.SourceFileLoader):
        def get_code(self, fullname):
            return self.source_to_code(self.get_data(self.path), self.path)

    class Finder:
        @classmethod
        def find_spec(cls, name, path=None, target=None):
            spec = machinery.PathFinder.find_spec(name, path, target)
            if (spec is not None and type(spec.loader) is machinery.SourceFileLoader
                    and not os.path.realpath(spec.origin).startswith(stdlib)
                    and name.partition(".")[0] not in provided):
                spec.loader = FromSource(spec.loader.name, spec.loader.path)
            return spec

    sys.meta_path.insert(0, Finder)
prelude, _, module = module.rpartition("|")
for name in filter(None, prelude.split(",")):
    importlib.import_module(name)  # not timed: what is there already
started = time.perf_counter()
for name in module.split(","):
    importlib.import_module(name)
print(f"{time.perf_counter() - started:.6f}")
"""


# What the handlers import before any code of ours, by kind of handler: the floor under their ratios.
# Each is a set of libraries the stack prescribes (boto3, pydantic, Powertools' logger, metrics,
# event handler and batch utility), imported together in one fresh interpreter. The HTTP floor
# includes a validating resolver with one pydantic-bodied route (flightdeck.bench.validating_route):
# the event handler's import alone leaves out what its validation loads, which every body route pays.
# Likewise pydantic: `import pydantic` (v2) loads next to nothing until a model is defined, so the floor
# defines one (flightdeck.bench.pydantic_model). And with the collector off, as a function's init runs
# (flightdeck.bench.collector_off).
_EVERY_HANDLER = (
    "flightdeck.bench.collector_off",
    "boto3",
    "flightdeck.bench.pydantic_model",
    "aws_lambda_powertools.logging",
    "aws_lambda_powertools.metrics",
)
LIBRARY_FLOORS: dict[str, tuple[str, ...]] = {
    "every handler": _EVERY_HANDLER,
    "HTTP handlers": (*_EVERY_HANDLER, "aws_lambda_powertools.event_handler", "flightdeck.bench.validating_route"),
    "SQS handlers": (*_EVERY_HANDLER, "aws_lambda_powertools.utilities.batch"),
}


# The import goal (issue 31): our code adds at most this much, in `import boto3`s, above its kind's floor.
IMPORT_GOAL_EXCESS = 0.3

# The handlers that import Powertools' batch utility at init: the queue workers and the stream consumer
# (owed_thinks, which reports a stream batch's failed records with it). The turn worker is a queue's
# consumer too, but only for delayed retries: most of its events are asynchronous invokes, and it imports
# the batch utility at its first retry (flightdeck.handlers.turn_worker).
BATCH_AT_INIT = frozenset({q.handler for q in topology.QUEUES} - {"turn_worker"} | {topology.OWED_THINKS_HANDLER})


def floor_kind(handler: str) -> str:
    """The LIBRARY_FLOORS entry a handler's import is held to: HTTP for the event handler's (the routes'
    functions), SQS for the batch utility's, and "every handler" for the rest (the asynchronously invoked
    turn worker, the scheduled sweeper, the authorizer), which import neither at init."""
    if handler in {r.handler for r in topology.ROUTES}:
        return "HTTP handlers"
    if handler in BATCH_AT_INIT:
        return "SQS handlers"
    return "every handler"


def import_goal(
    handler_s: dict[str, float],
    floor_s: dict[str, float],
    boto3_s: float,
    kinds: dict[str, str],
    allowance: float = IMPORT_GOAL_EXCESS,
) -> dict[str, dict[str, Any]]:
    """Per handler: its import and its kind's floor (seconds, one statistic for all), the excess over the
    floor in `import boto3`s, and whether that is within `allowance`."""
    out: dict[str, dict[str, Any]] = {}
    for handler, seconds in handler_s.items():
        kind = kinds[handler]
        excess = (seconds - floor_s[kind]) / boto3_s
        out[handler] = {
            "floor": kind,
            "floor_ratio_to_boto3": round(floor_s[kind] / boto3_s, 2),
            "excess_over_floor": round(excess, 2),
            "within_goal": excess <= allowance,
        }
    return out


# The MCP path (flightdeck.api.mcp) lives in the a2a function, which loads it by the first /mcp request: what
# that adds is timed on top of everything else the a2a handler imports (the A2A routes, the resolver, the wiring).
MCP_PATH_PRELUDE = (
    "flightdeck.api.a2a_routes",
    "flightdeck.api.a2a_stream_routes",
    "flightdeck.api.resolver",
    "flightdeck.wiring",
)
MCP_PATH = ("flightdeck.api.mcp_routes", "flightdeck.api.mcp.server")


def handler_environment() -> dict[str, str]:
    # Without PYTHONDONTWRITEBYTECODE: the `pyc` mode's warm-up import must leave the caches it times.
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("AWS_", "POWERTOOLS_", "FLIGHTDECK_")) and k != "PYTHONDONTWRITEBYTECODE"
    }
    env.update(
        {
            "AGENT_NAME": "coldstart",
            "STATE_TABLE": "coldstart-state",
            "TURN_WORKER_FUNCTION": "coldstart-turn-worker",
            "TURNS_QUEUE_URL": "https://sqs.us-east-1.amazonaws.com/123456789012/coldstart-turns",
            "DISPATCH_QUEUE_URL": "https://sqs.us-east-1.amazonaws.com/123456789012/coldstart-dispatch",
            "DELIVERY_QUEUE_URL": "https://sqs.us-east-1.amazonaws.com/123456789012/coldstart-delivery",
            "TIMERS_QUEUE_URL": "https://sqs.us-east-1.amazonaws.com/123456789012/coldstart-timers",
            "TOOL_CALLBACK_SECRET_ARN": "arn:aws:secretsmanager:us-east-1:123456789012:secret:coldstart-AbCdEf",
            "AWS_DEFAULT_REGION": "us-east-1",
            "AWS_REGION": "us-east-1",
            "POWERTOOLS_SERVICE_NAME": "coldstart",
            "POWERTOOLS_TRACE_DISABLED": "true",
        }
    )
    return env


def time_import(
    module: str, mode: str = "pyc", env: dict[str, str] | None = None, python: str = sys.executable
) -> float:
    """Seconds one fresh interpreter takes to import `module` (or modules, comma-separated, in order);
    "a,b|c,d": a and b imported first, untimed, then c and d timed."""
    command = [python, "-c", _CHILD, mode, module, ",".join(RUNTIME_PROVIDED)]
    done = subprocess.run(command, env=env or handler_environment(), capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        raise RuntimeError(f"importing {module} failed: {done.stderr.strip()[-500:]}")
    return float(done.stdout.strip().splitlines()[-1])


def import_breakdown(
    module: str, env: dict[str, str] | None = None, top: int = 5, python: str = sys.executable
) -> list[tuple[str, float]]:
    """Self import time by top-level package (python -X importtime), largest first, in ms."""
    done = subprocess.run(
        [python, "-X", "importtime", "-c", f"import {module}"],
        env=env or handler_environment(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    per_package: Counter[str] = Counter()
    for line in done.stderr.splitlines():
        match = re.match(r"import time:\s+(\d+) \|\s+\d+ \|\s*(\S+)", line)
        if match:
            per_package[match.group(2).partition(".")[0]] += int(match.group(1)) / 1000  # type: ignore[assignment]  # a Counter of floats: typeshed types Counter values as int
    return [(name, round(ms, 1)) for name, ms in per_package.most_common(top)]


# Tracing on (docs/TRACING.md): the first span imports the SDK and exporter, on top of the handler.
TRACING_ON = "flightdeck.bench.tracing_on"


def _tracing_on(
    handlers: Sequence[str], no_pyc: Sequence[str], repeats: int, env: dict[str, str], python: str, boto3_s: float
) -> dict[str, Any]:
    """What the first span adds to each function's cold start with an OTLP endpoint set (none is reached): the
    SDK and exporter imported on top of the handler's own modules (some of which they share)."""
    traced = {**env, "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9"}
    out: dict[str, Any] = {"modules": [TRACING_ON], "handlers": {}}
    for handler in handlers:
        modules = f"flightdeck.handlers.{handler}|{TRACING_ON}"
        row: dict[str, Any] = {}
        for mode, key in (("pyc", "import_ms"), ("no_pyc", "no_pyc_import_ms")):
            if mode == "no_pyc" and handler not in no_pyc:
                continue
            best = summary(time_import(modules, mode, traced, python) for _ in range(repeats))["min"]
            row[key] = round(best * 1000, 1)
            row[key.replace("import_ms", "ratio_to_boto3")] = round(best / boto3_s, 2)
        out["handlers"][handler] = row
    figures = [row["import_ms"] for row in out["handlers"].values()]
    out["range_ms"] = [min(figures), max(figures)]
    return out


def measure(
    repeats: int,
    no_pyc_handlers: Sequence[str] | None,
    progress: Callable[[str], None],
    handlers: Sequence[str] = topology.HANDLERS,
    python: str = sys.executable,
) -> dict[str, Any]:
    """no_pyc_handlers: which handlers to also time without byte-code caches (None: all).
    python: the interpreter that imports (with the run-time dependencies installed)."""
    env = handler_environment()
    asked = subprocess.run(
        [python, "-c", "import platform; print(platform.python_version())"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    if asked.returncode != 0:
        raise RuntimeError(f"the cold start interpreter {python} does not run: {asked.stderr.strip()[-300:]}")
    version = asked.stdout.strip()
    no_pyc = list(handlers if no_pyc_handlers is None else no_pyc_handlers)
    progress(
        f"cold start proxy: importing boto3 and {len(handlers)} handler modules, {repeats} fresh interpreter(s) each"
        f" (Python {version})"
    )
    # Not counted: one interpreter imports everything, so every byte-code cache is up to date.
    subprocess.run(
        [python, "-c", "; ".join(f"import flightdeck.handlers.{h}" for h in handlers)],
        env=env,
        capture_output=True,
        timeout=120,
        check=False,
    )

    # Best of `repeats` (the least disturbed run: other work on the machine only ever adds time), and the
    # median. The repeats go in rounds, each timing boto3, every handler and every floor once, so a
    # disturbance that lasts a while spoils one sample of many imports rather than all samples of one.
    # boto3 is timed again beside every handler and floor, and its best of all those samples is the
    # baseline: one disturbed round would otherwise shift every ratio at once.
    def timed_import(module: str, mode: str = "pyc") -> float:
        return time_import(module, mode, env, python)

    boto3_samples: list[float] = []
    samples: dict[tuple[str, str], list[float]] = {}
    for _ in range(repeats):
        boto3_samples.append(timed_import("boto3"))
        for handler in handlers:
            module = f"flightdeck.handlers.{handler}"
            boto3_samples.append(timed_import("boto3"))
            samples.setdefault((handler, "pyc"), []).append(timed_import(module))
            if handler in no_pyc:
                samples.setdefault((handler, "no_pyc"), []).append(timed_import(module, "no_pyc"))
        for kind, modules in LIBRARY_FLOORS.items():
            boto3_samples.append(timed_import("boto3"))
            samples.setdefault((kind, "floor"), []).append(timed_import(",".join(modules)))
    timed: dict[str, dict[str, dict[str, float]]] = {}
    for handler in handlers:
        timed[handler] = {
            mode: summary(samples[handler, mode]) for mode in ("pyc", "no_pyc") if (handler, mode) in samples
        }
    floors = {kind: summary(samples[kind, "floor"]) for kind in LIBRARY_FLOORS}
    baseline = summary(boto3_samples)
    out: dict[str, Any] = {
        "python": version,
        "repeats": repeats,
        "statistic": "min",
        "boto3_import_ms": round(baseline["min"] * 1000, 1),
        "boto3_import_ms_p50": round(baseline["p50"] * 1000, 1),
        "boto3_samples": len(boto3_samples),
        "handlers": {},
    }
    for handler, modes in timed.items():
        warm = modes["pyc"]
        entry: dict[str, Any] = {
            "import_ms": round(warm["min"] * 1000, 1),
            "import_ms_p50": round(warm["p50"] * 1000, 1),
            "ratio_to_boto3": round(warm["min"] / baseline["min"], 2),
        }
        if "no_pyc" in modes:
            cold = modes["no_pyc"]
            entry["no_pyc_import_ms"] = round(cold["min"] * 1000, 1)
            entry["no_pyc_import_ms_p50"] = round(cold["p50"] * 1000, 1)
            entry["no_pyc_ratio_to_boto3"] = round(cold["min"] / baseline["min"], 2)
        out["handlers"][handler] = entry
    out["library_floor"] = {
        kind: {
            "modules": list(LIBRARY_FLOORS[kind]),
            "import_ms": round(floor["min"] * 1000, 1),
            "ratio_to_boto3": round(floor["min"] / baseline["min"], 2),
        }
        for kind, floor in floors.items()
    }
    goal = import_goal(
        {h: modes["pyc"]["min"] for h, modes in timed.items()},
        {kind: floor["min"] for kind, floor in floors.items()},
        baseline["min"],
        {h: floor_kind(h) for h in timed},
    )
    for handler, verdict in goal.items():
        out["handlers"][handler].update(verdict)
    out["goal"] = {
        "excess_over_floor_max": IMPORT_GOAL_EXCESS,
        "within": sum(v["within_goal"] for v in goal.values()),
        "missed": [h for h, v in goal.items() if not v["within_goal"]],
    }
    if "a2a" in handlers:
        mcp_path = summary(timed_import(f"{','.join(MCP_PATH_PRELUDE)}|{','.join(MCP_PATH)}") for _ in range(repeats))
        out["mcp_path"] = {
            "modules": list(MCP_PATH),
            "on_top_of": list(MCP_PATH_PRELUDE),
            "import_ms": round(mcp_path["min"] * 1000, 1),
            "ratio_to_boto3": round(mcp_path["min"] / baseline["min"], 3),
        }
    out["tracing_on"] = _tracing_on(handlers, no_pyc, repeats, env, python, baseline["min"])
    slowest = max(out["handlers"], key=lambda h: out["handlers"][h]["import_ms"])
    out["slowest"] = slowest
    out["slowest_breakdown_ms"] = import_breakdown(f"flightdeck.handlers.{slowest}", env, python=python)
    ratios = [h["ratio_to_boto3"] for h in out["handlers"].values()]
    out["ratio_range"] = [min(ratios), max(ratios)]
    no_pyc_ratios = [h["no_pyc_ratio_to_boto3"] for h in out["handlers"].values() if "no_pyc_ratio_to_boto3" in h]
    out["no_pyc_ratio_range"] = [min(no_pyc_ratios), max(no_pyc_ratios)] if no_pyc_ratios else None
    return out
