"""The operations dashboard of each agent and the alarm on overdue sessions.

The dashboard may show only numbers the system produces: each application metric on it
is one a production module emits with `count(...)` (found in the source, not listed by
hand), in the namespace and with the `service` dimension the functions' environment
gives Powertools; plus the queues' and functions' own AWS metrics. `SessionsOverdue` is
the one exception: the sweeper emits it (a busy session past its liveness bound).
"""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import pytest
from template_queries import function, function_ids, queue_ids, referenced_ids, resources

from flightdeck import topology

REPO = Path(__file__).resolve().parents[2]
TOOLS = ("local", "bench")
AGENTS = ["orchestrator", "worker"]


def emitted_metric_names() -> set[str]:
    """Every metric name passed to observability.count(...) by a production module."""
    names: set[str] = set()
    package = REPO / "functions" / "flightdeck"
    for path in package.rglob("*.py"):
        if path.relative_to(package).parts[0] in TOOLS:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "count" and node.args:
                names |= {
                    c.value
                    for c in ast.walk(node.args[0])
                    if isinstance(c, ast.Constant) and isinstance(c.value, str) and re.fullmatch(r"[A-Z]\w+", c.value)
                }
    return names


def dashboard(template) -> tuple[str, dict]:
    """(name, body) of the stack's one dashboard; tokens in the body become '<Ref X>' / '<X.Attr>'."""
    (props,) = [r["Properties"] for r in resources(template, "AWS::CloudWatch::Dashboard").values()]
    body = props["DashboardBody"]
    parts = body["Fn::Join"][1] if isinstance(body, dict) else [body]
    text = "".join(
        p if isinstance(p, str) else (f"<Ref {p['Ref']}>" if "Ref" in p else f"<{'.'.join(p['Fn::GetAtt'])}>")
        for p in parts
    )
    return props["DashboardName"], json.loads(text)


def metric_lines(body: dict) -> list[list]:
    return [line for w in body["widgets"] if w["type"] == "metric" for line in w["properties"]["metrics"]]


@pytest.mark.parametrize("agent", AGENTS)
def test_one_dashboard_per_agent_and_its_url_is_an_output(synth, agent: str) -> None:
    template = synth.templates[f"Flightdeck-{agent}"]
    name, _ = dashboard(template)
    assert name == f"flightdeck-{agent}"
    url = template["Outputs"]["DashboardUrl"]["Value"]["Fn::Join"][1]
    assert url[-1] == f"#dashboards:name={name}" and {"Ref": "AWS::Region"} in url


@pytest.mark.parametrize("agent", AGENTS)
def test_application_metrics_are_ones_the_functions_emit(synth, agent: str) -> None:
    template = synth.templates[f"Flightdeck-{agent}"]
    env = function(template, "callback")["Environment"]["Variables"]
    _, body = dashboard(template)
    shown = set()
    for line in metric_lines(body):
        namespace, name, *dims = [x for x in line if not isinstance(x, dict)]
        if namespace.startswith("AWS/"):
            continue
        assert namespace == env["POWERTOOLS_METRICS_NAMESPACE"]
        assert dims == ["service", env["POWERTOOLS_SERVICE_NAME"]]
        shown.add(name)
    emitted = emitted_metric_names()
    assert shown - emitted == set(), "on the dashboard, but no function emits it"
    # the list: delegations started/answered/timed out; callbacks accepted/duplicate/late/refused
    assert {
        "DelegationsDispatched",
        "CallbacksAccepted",
        "Timeouts",
        "CallbacksDuplicate",
        "CallbacksLate",
        "CallbacksRefused",
        "DispatchFailures",
        "SessionsOverdue",
    } <= shown


@pytest.mark.parametrize("agent", AGENTS)
def test_dlq_depth_and_every_function_s_errors_and_throttles(synth, agent: str) -> None:
    template = synth.templates[f"Flightdeck-{agent}"]
    _, body = dashboard(template)
    lines = metric_lines(body)

    def watched(namespace: str, metric: str) -> set[str]:
        return {x[3].strip("<>").split()[-1].split(".")[0] for x in lines if x[0] == namespace and x[1] == metric}

    dlqs = {lid for lid, (_, dlq) in queue_ids(template).items() if dlq}
    queues = {lid for lid, (_, dlq) in queue_ids(template).items() if not dlq}
    assert watched("AWS/SQS", "ApproximateNumberOfMessagesVisible") == dlqs | queues
    assert watched("AWS/SQS", "ApproximateAgeOfOldestMessage") == queues
    functions = set(function_ids(template).values())
    assert watched("AWS/Lambda", "Errors") == functions
    assert watched("AWS/Lambda", "Throttles") == functions
    (alarm_widget,) = [w for w in body["widgets"] if w["type"] == "alarm"]
    alarms = {a.strip("<>").split(".")[0] for a in alarm_widget["properties"]["alarms"]}
    assert alarms == set(resources(template, "AWS::CloudWatch::Alarm"))


@pytest.mark.parametrize("agent", AGENTS)
def test_sessions_overdue_alarm_notifies_the_alarm_topic(synth, agent: str) -> None:
    template = synth.templates[f"Flightdeck-{agent}"]
    (props,) = [
        a["Properties"]
        for a in resources(template, "AWS::CloudWatch::Alarm").values()
        if a["Properties"]["AlarmName"] == f"flightdeck-{agent}-sessions-overdue"
    ]
    env = function(template, topology.SWEEPER_HANDLER)["Environment"]["Variables"]
    assert (props["Namespace"], props["MetricName"]) == (env["POWERTOOLS_METRICS_NAMESPACE"], "SessionsOverdue")
    assert props["Dimensions"] == [{"Name": "service", "Value": env["POWERTOOLS_SERVICE_NAME"]}]
    assert props["ComparisonOperator"] == "GreaterThanThreshold" and props["Threshold"] == 0
    assert props["TreatMissingData"] == "notBreaching"
    (topic,) = resources(template, "AWS::SNS::Topic")
    assert props["AlarmActions"] == [{"Ref": topic}] and props["OKActions"] == [{"Ref": topic}]
    assert referenced_ids(props["AlarmActions"]) == {topic}
