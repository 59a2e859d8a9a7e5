"""`flightdeck status [--config FILE]`: each deployed agent's URLs, health, alarms in ALARM and queue depths.

Per agent of the file, from its stack Flightdeck-<agent>:

- URLs: the stack's outputs ApiUrl, AgentCardUrl and DashboardUrl;
- health: GET <ApiUrl>health (no token; every agent answers its status, name and version);
- alarms: CloudWatch alarms named flightdeck-<agent>-... whose state is ALARM;
- queues: ApproximateNumberOfMessages (waiting) and ...NotVisible (in flight) of each of the stack's queues, the
  dead-letter queues included (a DLQ holding a message is also an alarm).

Exit 0 when every agent is deployed, healthy, with no alarm in ALARM and empty DLQs; 1 otherwise; 2 on a usage
problem (no credentials, a bad file).
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from flightdeck import config_file
from flightdeck.ops.aws import (
    EXIT_FAILURE,
    EXIT_OK,
    EXIT_USAGE,
    RESOURCE_PREFIX,
    OpsError,
    Stack,
    add_aws_options,
    failure,
    say,
    session,
)

URL_OUTPUTS = ("ApiUrl", "AgentCardUrl", "DashboardUrl")
HEALTH_TIMEOUT_S = 5
DLQ_SUFFIX = "-dlq"


@dataclass
class Queue:
    name: str
    waiting: int
    in_flight: int

    @property
    def dead_letters(self) -> bool:
        return self.name.endswith(DLQ_SUFFIX)


@dataclass
class AgentStatus:
    agent: str
    urls: dict[str, str] = field(default_factory=dict)
    health: str = ""
    healthy: bool = False
    alarms: list[str] = field(default_factory=list)
    queues: list[Queue] = field(default_factory=list)
    problem: str = ""  # the stack could not be read

    @property
    def ok(self) -> bool:
        return (
            not self.problem
            and self.healthy
            and not self.alarms
            and not any(q.waiting for q in self.queues if q.dead_letters)
        )


def health(api_url: str, timeout_s: float = HEALTH_TIMEOUT_S) -> tuple[bool, str]:
    """(healthy, what it answered) of GET <api_url>health."""
    import requests

    url = api_url.rstrip("/") + "/health"
    try:
        answer = requests.get(url, timeout=timeout_s)
    except requests.RequestException as exc:
        return False, f"unreachable ({type(exc).__name__})"
    try:
        body = answer.json()
    except ValueError:
        body = None
    if answer.status_code == 200 and isinstance(body, dict) and body.get("status") == "ok" and body.get("agent"):
        return True, f"ok: {body['agent']} {body.get('version', '')}".rstrip()
    return False, f"HTTP {answer.status_code}, not an agent's health answer"


def alarms_in_alarm(cloudwatch: Any, agent: str) -> list[str]:
    # The state is filtered here, not by StateValue: moto drops that filter beside a name prefix.
    pages = cloudwatch.get_paginator("describe_alarms").paginate(
        AlarmNamePrefix=RESOURCE_PREFIX.format(agent=agent) + "-"
    )
    return sorted(
        a["AlarmName"] for page in pages for a in page.get("MetricAlarms", []) if a.get("StateValue") == "ALARM"
    )


def queue_depths(sqs: Any, urls: list[str]) -> list[Queue]:
    found = []
    for url in urls:
        attributes = sqs.get_queue_attributes(
            QueueUrl=url, AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"]
        )["Attributes"]
        found.append(
            Queue(
                url.rstrip("/").rsplit("/", 1)[-1],
                int(attributes.get("ApproximateNumberOfMessages", 0)),
                int(attributes.get("ApproximateNumberOfMessagesNotVisible", 0)),
            )
        )
    return sorted(found, key=lambda q: q.name)


def status_of(agent: str, aws: Any) -> AgentStatus:
    from botocore.exceptions import BotoCoreError, ClientError

    found = AgentStatus(agent)
    stack = Stack(agent, aws)
    try:
        outputs = stack.outputs
    except OpsError as exc:
        if exc.code == EXIT_USAGE:
            raise
        found.problem = str(exc)
        return found
    found.urls = {key: outputs[key] for key in URL_OUTPUTS if key in outputs}
    if "ApiUrl" in outputs:
        found.healthy, found.health = health(outputs["ApiUrl"])
    else:
        found.health = "no ApiUrl output"
    try:
        found.alarms = alarms_in_alarm(aws.client("cloudwatch"), agent)
        found.queues = queue_depths(aws.client("sqs"), [r.physical_id for r in stack.resources("AWS::SQS::Queue")])
    except (BotoCoreError, ClientError) as exc:
        raise failure(exc) from None
    return found


def render(statuses: list[AgentStatus]) -> str:
    lines = []
    for s in statuses:
        lines.append(f"{s.agent}: {'ok' if s.ok else 'NEEDS ATTENTION'}")
        if s.problem:
            lines.append(f"  {s.problem}")
            continue
        lines.extend(f"  {key:<13} {url}" for key, url in s.urls.items())
        lines.append(f"  {'health':<13} {s.health}")
        lines.append(f"  {'alarms':<13} " + (", ".join(s.alarms) + " in ALARM" if s.alarms else "none in ALARM"))
        for q in s.queues:
            mark = "  <- dead letters" if q.dead_letters and q.waiting else ""
            lines.append(f"  {'queue':<13} {q.name}: {q.waiting} waiting, {q.in_flight} in flight{mark}")
    return "\n".join(lines)


def as_json(statuses: list[AgentStatus]) -> str:
    return json.dumps(
        [
            {
                "agent": s.agent,
                "ok": s.ok,
                "problem": s.problem or None,
                "urls": s.urls,
                "healthy": s.healthy,
                "health": s.health,
                "alarms": s.alarms,
                "queues": [{"name": q.name, "waiting": q.waiting, "in_flight": q.in_flight} for q in s.queues],
            }
            for s in statuses
        ],
        indent=2,
    )


def agents_of(args: argparse.Namespace) -> list[str]:
    """The agents to look at: --agents, else every agent of --config (the bundled example by default)."""
    if args.agents:
        return [a.strip() for a in args.agents.split(",") if a.strip()]
    return list(config_file.load(args.config).agents)


def run(args: argparse.Namespace) -> int:
    try:
        agents = agents_of(args)
        aws = session(args)
        statuses = [status_of(agent, aws) for agent in agents]
    except config_file.ConfigFileError as exc:
        say("invalid deployment file:\n" + "".join(f"  {line}\n" for line in str(exc).splitlines()).rstrip())
        return EXIT_USAGE
    except OpsError as exc:
        say(str(exc))
        return exc.code
    print(as_json(statuses) if args.json else render(statuses), flush=True)
    return EXIT_OK if all(s.ok for s in statuses) else EXIT_FAILURE


def add_command(commands: Any) -> None:
    sub = commands.add_parser(
        "status",
        help="each deployed agent's URLs, health, alarms in ALARM and queue depths",
        description="For each agent of the deployment file: its stack's URLs, GET /health, its CloudWatch alarms "
        "in ALARM and the depth of each queue and dead-letter queue. Exit 1 when anything needs attention.",
    )
    sub.add_argument(
        "--config",
        type=Path,
        default=config_file.DEFAULT_CONFIG,
        metavar="FILE",
        help="the deployment file (default: the bundled examples/two-agents.toml)",
    )
    sub.add_argument("--agents", metavar="A,B", help="only these agents (default: every agent of the file)")
    sub.add_argument("--json", action="store_true", help="print JSON instead of text")
    add_aws_options(sub)
    sub.set_defaults(run=run)
