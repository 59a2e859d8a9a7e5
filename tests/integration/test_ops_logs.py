"""`flightdeck logs`: the functions' real Powertools lines (flightdeck.observability), put in the log groups of
each agent's stack (CloudFormation and CloudWatch Logs on moto), drawn as the local timeline: merged in time
order, one session and its delegations with --session, each line once while following."""

from __future__ import annotations

import io
import json
import threading
import time
import uuid

import boto3
import pytest

from flightdeck import cli, observability
from flightdeck.ops import logs as ops_logs
from flightdeck.ops.aws import Stack

REGION = "us-east-1"


def deploy_stack(agent: str) -> dict[str, str]:
    """Flightdeck-<agent> with two functions' log groups and the API's access log group: handler -> group name."""
    template = {
        "Resources": {
            "FunctionsChatIngestLogs1A2B3C": {"Type": "AWS::Logs::LogGroup", "Properties": {"RetentionInDays": 30}},
            "FunctionsTurnWorkerLogs4D5E6F": {"Type": "AWS::Logs::LogGroup", "Properties": {"RetentionInDays": 30}},
            "ApiAccessLogs7A8B9C": {"Type": "AWS::Logs::LogGroup", "Properties": {"RetentionInDays": 30}},
        }
    }
    boto3.client("cloudformation", region_name=REGION).create_stack(
        StackName=f"Flightdeck-{agent}", TemplateBody=json.dumps(template)
    )
    resources = boto3.client("cloudformation", region_name=REGION).list_stack_resources(StackName=f"Flightdeck-{agent}")
    return {r["LogicalResourceId"][:-6]: r["PhysicalResourceId"] for r in resources["StackResourceSummaries"]}


def logged(steps) -> list[str]:
    """The JSON lines the functions' logger writes for these steps: (event, message, keys bound)."""
    out = io.StringIO()
    # From a logger with no keys left by an earlier test of this process (a Lambda entry point clears them per
    # invocation; these lines are written without one).
    for each in (observability.logger, observability.audit_logger):
        each.remove_keys(["session_id", "trace_id", "tool_use_id", "turn"])
        each.thread_safe_clear_keys()
    previous = observability.logger.registered_handler.setStream(out)
    level = observability.logger.log_level
    observability.logger.setLevel("DEBUG")
    try:
        for event, message, keys in steps:
            observability.bind(**keys)
            observability.timeline(event, message)
            observability.bind(**{k: None for k in keys})
    finally:
        observability.logger.registered_handler.setStream(previous)
        observability.logger.setLevel(level)
    return out.getvalue().splitlines()


def put(group: str, lines: list[str], at_ms: int) -> None:
    client = boto3.client("logs", region_name=REGION)
    stream = uuid.uuid4().hex
    client.create_log_stream(logGroupName=group, logStreamName=stream)
    client.put_log_events(
        logGroupName=group,
        logStreamName=stream,
        logEvents=[{"timestamp": at_ms + i, "message": line} for i, line in enumerate(lines)],
    )


@pytest.fixture
def deployed(aws, monkeypatch):
    monkeypatch.setenv("AWS_DEFAULT_REGION", REGION)
    return {agent: deploy_stack(agent) for agent in ("orchestrator", "worker")}


def test_one_session_and_its_delegation_drawn_across_agents_in_time_order(deployed, capsys):
    now = int(time.time() * 1000)
    trace, other_trace = uuid.uuid4().hex, uuid.uuid4().hex
    mine = {"session_id": "sess-mine-0001", "trace_id": trace}
    put(
        deployed["orchestrator"]["FunctionsChatIngestLogs"],
        ["START RequestId: 1 Version: $LATEST"]
        + logged([("chat_received", "task received: list three owls", mine)])
        + logged(
            [("chat_received", "task received: unrelated", {"session_id": "sess-other-02", "trace_id": other_trace})]
        ),
        now - 5000,
    )
    put(
        deployed["orchestrator"]["FunctionsTurnWorkerLogs"],
        logged(
            [("tool_use", "delegating to worker: list three owls", {**mine, "tool_use_id": "tooluse_0000abcd1234"})]
        ),
        now - 4000,
    )
    put(
        deployed["worker"]["FunctionsChatIngestLogs"],
        logged(
            [("chat_received", "task received from orchestrator", {"session_id": "sess-delegate-3", "trace_id": trace})]
        ),
        now - 3000,
    )
    put(
        deployed["orchestrator"]["FunctionsTurnWorkerLogs"],
        logged([("final_answer", "final answer: 1 of 1 delegations answered.", mine)]),
        now - 1000,
    )
    put(deployed["orchestrator"]["ApiAccessLogs"], [json.dumps({"requestId": "r", "status": 202})], now - 900)

    capsys.readouterr()
    code = cli.main(["logs", "--agents", "orchestrator,worker", "--session", "sess-mine-0001", "--region", REGION])
    out, err = capsys.readouterr()
    assert code == 0, err
    lines = out.splitlines()
    assert [line.split("  ", 1)[1].strip() for line in lines] == [
        "orchestrator  sess-min  task received: list three owls",
        "orchestrator  sess-min  delegating to worker: list three owls  [abcd1234]",
        "worker        sess-del  task received from orchestrator",
        "orchestrator  sess-min  final answer: 1 of 1 delegations answered.",
    ]
    assert "unrelated" not in out and "requestId" not in out

    code = cli.main(["logs", "--agents", "orchestrator,worker", "--region", REGION])
    out, _ = capsys.readouterr()
    assert code == 0 and "task received: unrelated" in out and len(out.splitlines()) == 5


def test_follow_draws_what_comes_once_each(deployed):
    group = deployed["worker"]["FunctionsTurnWorkerLogs"]
    keys = {"session_id": "sess-follow-1"}
    now = int(time.time() * 1000)
    put(group, logged([("thinking", "thinking (iteration 1)", keys)]), now - 2000)
    aws = boto3.Session(region_name=REGION)
    reader = ops_logs.Reader(aws.client("logs"), {"worker": ops_logs.log_groups(Stack("worker", aws))}, now - 60_000)
    out, stop, polls = io.StringIO(), threading.Event(), []
    follower = threading.Thread(
        target=ops_logs.follow,
        args=(reader, ops_logs.SessionFilter(), out, 6, stop),
        kwargs={"interval_s": 0.05, "on_poll": polls.append},
        daemon=True,
    )
    follower.start()
    try:
        _wait_for(lambda: "thinking (iteration 1)" in out.getvalue())
        put(group, logged([("answer_ready", "answer ready for orchestrator", keys)]), now - 1000)
        _wait_for(lambda: "answer ready for orchestrator" in out.getvalue())
        seen = len(polls)
        _wait_for(lambda: len(polls) >= seen + 3)  # later polls reach back over both lines again
    finally:
        stop.set()
        follower.join(10)
    drawn = out.getvalue().splitlines()
    assert len(drawn) == 2 and drawn[0].endswith("thinking (iteration 1)")
    assert drawn[1].endswith("answer ready for orchestrator")


def _wait_for(condition, within_s: float = 20.0) -> None:
    deadline = time.monotonic() + within_s
    while not condition():
        assert time.monotonic() < deadline, "not drawn"
        time.sleep(0.02)


def test_a_bad_since_and_a_missing_stack_are_said(deployed, capsys):
    code = cli.main(["logs", "--agents", "worker", "--since", "ten minutes", "--region", REGION])
    _, err = capsys.readouterr()
    assert code == 2 and "--since 'ten minutes': write a number and s, m, h or d" in err
    code = cli.main(["logs", "--agents", "critic", "--region", REGION])
    _, err = capsys.readouterr()
    assert code == 1 and "stack Flightdeck-critic does not exist in us-east-1: deploy it first" in err


def test_nothing_to_draw_is_said(deployed, capsys):
    code = cli.main(["logs", "--agents", "worker", "--session", "nobody", "--region", REGION])
    out, err = capsys.readouterr()
    assert code == 0 and out == "" and "nothing to draw since 10m ago for session nobody" in err
