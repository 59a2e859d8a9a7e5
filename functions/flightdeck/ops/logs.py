"""`flightdeck logs [--follow] [--session ID]`: the deployed agents' timeline, drawn as `flightdeck local` draws it.

The functions log JSON through Powertools (flightdeck.observability) into one log group per function, each a
resource of the agent's stack. This reads them with FilterLogEvents, merges every agent's lines in time order,
and draws each as one line (flightdeck.local.log_view: the steps of a delegation, and what went wrong), at the
time CloudWatch took the line. --session ID keeps that session's lines and those of its delegations: the lines
sharing a trace_id with it (the delegates' sessions). --follow keeps polling; CloudWatch may take a few seconds
to show a line, so each poll reaches back OVERLAP_MS and skips the events it already drew.

At INFO, the deployed default, the routine steps are not logged (only problems and news such as a timeout);
POWERTOOLS_LOG_LEVEL = "DEBUG" in [agents.NAME.env] adds them (docs/DEPLOYMENT.md, Operate).
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from flightdeck import config_file
from flightdeck.domain.numerals import parse_nonneg_int
from flightdeck.local import log_view
from flightdeck.ops.aws import EXIT_OK, EXIT_USAGE, OpsError, Stack, add_aws_options, failure, say, session

# The functions' log groups: logical ids under the stack's Functions construct (infra/functions.py).
FUNCTIONS_PREFIX = "Functions"
OVERLAP_MS = 30_000
POLL_S = 2.0
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


@dataclass(frozen=True)
class Line:
    at_ms: int
    agent: str
    record: dict[str, Any]
    event_id: str


def log_groups(stack: Stack) -> list[str]:
    groups = stack.resources("AWS::Logs::LogGroup")
    functions = [g for g in groups if g.logical_id.startswith(FUNCTIONS_PREFIX)]
    return [g.physical_id for g in functions or groups]


def parse(agent: str, event: dict[str, Any]) -> Line | None:
    """A log event as a Line, if its message is a JSON object (Lambda's own START/END/REPORT lines are not)."""
    try:
        record = json.loads(event.get("message", ""))
    except ValueError:
        return None
    if not isinstance(record, dict):
        return None
    return Line(int(event.get("timestamp", 0)), agent, record, str(event.get("eventId", "")))


@dataclass
class SessionFilter:
    """One session's lines and its delegations' (the lines sharing a trace_id with it); everything without one."""

    session_id: str = ""
    traces: set[str] = field(default_factory=set)

    def keep(self, record: dict[str, Any]) -> bool:
        if not self.session_id:
            return True
        trace = str(record.get("trace_id") or "")
        if record.get("session_id") == self.session_id:
            if trace:
                self.traces.add(trace)
            return True
        return bool(trace) and trace in self.traces


class Reader:
    """Every agent's function log groups, read since a time; each event drawn once."""

    def __init__(self, logs: Any, groups: dict[str, list[str]], since_ms: int):
        self.logs = logs
        self.groups = groups  # agent -> its log groups
        self.since_ms = since_ms
        self.seen: set[str] = set()

    def poll(self) -> list[Line]:
        from botocore.exceptions import ClientError

        lines: list[Line] = []
        newest = self.since_ms
        for agent, names in self.groups.items():
            for name in names:
                pages = self.logs.get_paginator("filter_log_events").paginate(
                    logGroupName=name, startTime=max(0, self.since_ms - OVERLAP_MS)
                )
                try:
                    events = [e for page in pages for e in page.get("events", [])]
                except ClientError as exc:
                    if exc.response.get("Error", {}).get("Code") == "ResourceNotFoundException":
                        continue  # a function never invoked yet: its group may still be empty or absent
                    raise
                for event in events:
                    key = f"{name}/{event.get('eventId')}"
                    if key in self.seen:
                        continue
                    self.seen.add(key)
                    newest = max(newest, int(event.get("timestamp", 0)))
                    line = parse(agent, event)
                    if line is not None:
                        lines.append(line)
        self.since_ms = newest
        return sorted(lines, key=lambda line: (line.at_ms, line.event_id))


def draw(lines: Iterable[Line], keep: SessionFilter, out: TextIO, width: int) -> int:
    drawn = 0
    for line in lines:
        if not keep.keep(line.record):
            continue
        text = log_view.readable(line.agent, line.record, agent_width=width, now=line.at_ms / 1000)
        if text is not None:
            print(text, file=out, flush=True)
            drawn += 1
    return drawn


def follow(
    reader: Reader,
    keep: SessionFilter,
    out: TextIO,
    width: int,
    stop: threading.Event,
    interval_s: float = POLL_S,
    on_poll: Callable[[int], None] | None = None,
) -> None:
    """Draw what is there, then what comes, until stop is set."""
    while True:
        drawn = draw(reader.poll(), keep, out, width)
        if on_poll is not None:
            on_poll(drawn)
        if stop.wait(interval_s):
            return


def since(text: str, now_ms: int) -> int:
    """--since 10m / 2h / 1d / 30s: a start time in ms."""
    unit, amount = text[-1:], parse_nonneg_int(text[:-1], 9)
    if unit not in _UNITS or amount is None:
        raise OpsError(f"--since {text!r}: write a number and s, m, h or d (e.g. 10m)", EXIT_USAGE)
    return now_ms - amount * _UNITS[unit] * 1000


def run(args: argparse.Namespace) -> int:
    from botocore.exceptions import BotoCoreError, ClientError

    try:
        agents = (
            [a.strip() for a in args.agents.split(",") if a.strip()]
            if args.agents
            else list(config_file.load(args.config).agents)
        )
        start = since(args.since, int(time.time() * 1000))
        aws = session(args)
        groups = {agent: log_groups(Stack(agent, aws)) for agent in agents}
    except config_file.ConfigFileError as exc:
        say("invalid deployment file:\n" + "".join(f"  {line}\n" for line in str(exc).splitlines()).rstrip())
        return EXIT_USAGE
    except OpsError as exc:
        say(str(exc))
        return exc.code
    reader = Reader(aws.client("logs"), groups, start)
    keep = SessionFilter(args.session or "")
    width = max(len(a) for a in agents) if agents else 12
    try:
        if not args.follow:
            if not draw(reader.poll(), keep, sys.stdout, width):
                say(
                    f"nothing to draw since {args.since} ago" + (f" for session {args.session}" if args.session else "")
                )
            return EXIT_OK
        say("following; Ctrl-C stops")
        follow(reader, keep, sys.stdout, width, threading.Event())
    except KeyboardInterrupt:
        return EXIT_OK
    except (BotoCoreError, ClientError) as exc:
        problem = failure(exc)
        say(str(problem))
        return problem.code
    return EXIT_OK


def add_command(commands: Any) -> None:
    sub = commands.add_parser(
        "logs",
        help="draw the deployed agents' timeline from CloudWatch Logs (--follow, --session ID)",
        description="Read the functions' log groups of each agent of the deployment file and draw one line per "
        "step of a delegation and per problem, as `flightdeck local up` does. At INFO (the default) only "
        'problems and news are logged; POWERTOOLS_LOG_LEVEL = "DEBUG" in [agents.NAME.env] logs every step.',
    )
    sub.add_argument(
        "--config",
        type=Path,
        default=config_file.DEFAULT_CONFIG,
        metavar="FILE",
        help="the deployment file (default: the bundled examples/two-agents.toml)",
    )
    sub.add_argument("--agents", metavar="A,B", help="only these agents (default: every agent of the file)")
    sub.add_argument("--session", metavar="ID", help="only this session and its delegations (by trace_id)")
    sub.add_argument("--follow", "-f", action="store_true", help="keep drawing new lines until Ctrl-C")
    sub.add_argument(
        "--since", default="10m", metavar="AGE", help="start this long ago: 30s, 10m, 2h, 1d (default 10m)"
    )
    add_aws_options(sub)
    sub.set_defaults(run=run)
