"""`flightdeck status`: an agent's stack outputs (CloudFormation on moto), its health (GET /health of the agent's
real API on loopback), its alarms in ALARM (CloudWatch) and its queues' depths (SQS), and what it says when a
stack, an agent or the credentials are missing."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import boto3
import pytest

from flightdeck import cli
from tests.support.inprocess import gateway

REGION = "us-east-1"
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "two-agents.toml"


def deploy_stack(agent: str, api_url: str) -> dict[str, str]:
    """A stack shaped as Flightdeck-<agent> is, for what status reads: URL outputs and a queue with its DLQ.
    Returns queue name -> URL."""
    template = {
        "Resources": {
            "QueuesDispatchDlq": {
                "Type": "AWS::SQS::Queue",
                "Properties": {"QueueName": f"flightdeck-{agent}-dispatch-dlq"},
            },
            "QueuesDispatch": {"Type": "AWS::SQS::Queue", "Properties": {"QueueName": f"flightdeck-{agent}-dispatch"}},
        },
        "Outputs": {
            "ApiUrl": {"Value": api_url},
            "AgentCardUrl": {"Value": f"{api_url}.well-known/agent-card.json"},
            "DashboardUrl": {
                "Value": f"https://console.aws.amazon.com/cloudwatch/home#dashboards:name=flightdeck-{agent}"
            },
            "StateTableName": {"Value": f"{agent}-state"},
        },
    }
    boto3.client("cloudformation", region_name=REGION).create_stack(
        StackName=f"Flightdeck-{agent}", TemplateBody=json.dumps(template)
    )
    sqs = boto3.client("sqs", region_name=REGION)
    return {
        name: sqs.get_queue_url(QueueName=name)["QueueUrl"]
        for name in (f"flightdeck-{agent}-dispatch", f"flightdeck-{agent}-dispatch-dlq")
    }


def alarm(name: str, state: str) -> None:
    cloudwatch = boto3.client("cloudwatch", region_name=REGION)
    cloudwatch.put_metric_alarm(
        AlarmName=name,
        MetricName="ApproximateNumberOfMessagesVisible",
        Namespace="AWS/SQS",
        Statistic="Maximum",
        Period=60,
        EvaluationPeriods=1,
        Threshold=0,
        ComparisonOperator="GreaterThanThreshold",
    )
    cloudwatch.set_alarm_state(AlarmName=name, StateValue=state, StateReason="test")


def status(capsys, *args: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = cli.main(["status", "--region", REGION, *args])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def served(orchestrator):
    """The orchestrator's real API (its handlers, on moto) on a loopback port."""
    with gateway("orchestrator") as url:
        yield url + "/"


def test_a_healthy_agent_with_empty_queues_and_quiet_alarms(served, capsys):
    deploy_stack("orchestrator", served)
    alarm("flightdeck-orchestrator-dispatch-dlq-not-empty", "OK")
    code, out, err = status(capsys, "--agents", "orchestrator")
    assert code == 0, out + err
    assert out.startswith("orchestrator: ok\n")
    assert f"ApiUrl        {served}" in out and "AgentCardUrl" in out and "DashboardUrl" in out
    assert "health        ok: orchestrator" in out
    assert "alarms        none in ALARM" in out
    assert "flightdeck-orchestrator-dispatch: 0 waiting, 0 in flight" in out
    assert "flightdeck-orchestrator-dispatch-dlq: 0 waiting" in out


def test_dead_letters_and_an_alarm_need_attention_and_other_agents_alarms_are_not_shown(served, capsys):
    queues = deploy_stack("orchestrator", served)
    sqs = boto3.client("sqs", region_name=REGION)
    for n in range(2):
        sqs.send_message(QueueUrl=queues["flightdeck-orchestrator-dispatch-dlq"], MessageBody=f"lost {n}")
    sqs.send_message(QueueUrl=queues["flightdeck-orchestrator-dispatch"], MessageBody="waiting")
    alarm("flightdeck-orchestrator-dispatch-dlq-not-empty", "ALARM")
    alarm("flightdeck-orchestrator-sessions-overdue", "OK")
    alarm("flightdeck-worker-sessions-overdue", "ALARM")
    code, out, _ = status(capsys, "--agents", "orchestrator", "--json")
    assert code == 1
    (shown,) = json.loads(out)
    assert shown["ok"] is False and shown["healthy"] is True
    assert shown["alarms"] == ["flightdeck-orchestrator-dispatch-dlq-not-empty"]
    depths = {q["name"]: q["waiting"] for q in shown["queues"]}
    assert depths == {"flightdeck-orchestrator-dispatch": 1, "flightdeck-orchestrator-dispatch-dlq": 2}
    code, out, _ = status(capsys, "--agents", "orchestrator")
    assert "orchestrator: NEEDS ATTENTION" in out and "2 waiting, 0 in flight  <- dead letters" in out


def test_an_agent_not_answering_and_one_not_deployed(aws, capsys):
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{s.getsockname()[1]}/prod/"
    deploy_stack("orchestrator", closed)
    code, out, _ = status(capsys, "--agents", "orchestrator,worker")
    assert code == 1
    assert "health        unreachable (ConnectionError)" in out
    assert "worker: NEEDS ATTENTION\n  stack Flightdeck-worker does not exist in us-east-1: deploy it first" in out


def test_every_agent_of_the_file_by_default(served, capsys, tmp_path):
    deploy_stack("orchestrator", served)
    code, out, _ = status(capsys, "--config", str(EXAMPLE))
    assert code == 1 and "orchestrator: ok" in out and "worker: NEEDS ATTENTION" in out


def test_without_credentials_it_says_how_to_provide_them(capsys, monkeypatch, tmp_path):
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    code, out, err = status(capsys, "--agents", "orchestrator")
    assert code == 2 and out == ""
    assert "no AWS credentials" in err and "aws configure" in err
