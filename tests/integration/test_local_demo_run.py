"""`flightdeck local demo` end to end on the three-agent example: every delegate is exercised, the
timeline is drawn from the sessions' event streams (the delegator's and its delegates'), and the
agents' log files are cleaned up or kept where asked."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import pytest

from flightdeck import cli

pytestmark = pytest.mark.slow

THREE = Path(__file__).resolve().parents[2] / "examples" / "three-agents.toml"


def test_the_demo_gives_every_delegate_a_task_and_leaves_no_log_files(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    assert cli.main(["local", "demo", "--config", str(THREE)]) == cli.EXIT_OK
    out = capsys.readouterr().out
    assert "sending to orchestrator: '@researcher task one @critic task two'" in out
    for step in (
        "orchestrator  delegating to researcher: task one",
        "orchestrator  delegating to critic: task two",
        "researcher    message: task one",
        "critic        answer: [critic]",
        "orchestrator  researcher answered",
        "orchestrator  critic answered",
        "orchestrator  idle",
    ):
        assert step in out, step
    assert "final answer from orchestrator (answered by critic, researcher):" in out
    assert not list(tmp_path.glob("flightdeck-demo-logs-*")), "the demo left its log files behind"


def test_the_demo_sends_your_message_and_keeps_logs_where_asked(tmp_path, capsys):
    logs = tmp_path / "logs"
    code = cli.main(
        ["local", "demo", "--config", str(THREE), "--message", "@critic is this clear?", "--log-dir", str(logs)]
    )
    assert code == cli.EXIT_OK
    captured = capsys.readouterr()
    assert "sending to orchestrator: '@critic is this clear?'" in captured.out
    assert "answered by critic)" in captured.out
    assert f"agent logs: {logs}" in captured.err
    assert {p.name for p in logs.iterdir()} == {"moto.log", "orchestrator.log", "researcher.log", "critic.log"}
    records = [json.loads(line) for line in (logs / "critic.log").read_text().splitlines() if line.startswith("{")]
    assert any(r.get("audit") and r.get("operation") == "chat" for r in records)
    assert not any("No application metrics" in line for line in (logs / "orchestrator.log").read_text().splitlines())


def test_the_ask_scenario_shows_the_delegates_question_answered_in_its_own_session(tmp_path, monkeypatch, capsys):
    """--scenario ask on the two-agent default: the worker asks, the orchestrator answers by delegating
    again in the worker's session (context_id), and the demo follows that session's stream again."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    assert cli.main(["local", "demo", "--scenario", "ask"]) == cli.EXIT_OK
    out = capsys.readouterr().out
    assert 'asked "which quarter?", told "the third quarter"' in out
    assert "final answer from orchestrator (answered by worker):" in out
    assert out.count("worker        idle") >= 2  # the question's end, then the answer's


def test_the_skills_scenario_shows_a_structured_call_a_response_schema_and_a_mismatch(tmp_path, monkeypatch, capsys):
    """--scenario skills on the two-agent default (issue 25): the orchestrator calls the worker's summarise
    skill through the tool its card gives, asks a free-text task for a structure it names, and hears the
    prose answer to a third one marked schema_mismatch."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    assert cli.main(["local", "demo", "--scenario", "skills"]) == cli.EXIT_OK
    out = capsys.readouterr().out
    assert "@worker via worker__summarise" in out and '"words": 9' in out
    assert '{"pages": 4, "issues": ["review the launch plan"]}' in out
    assert '"schema_mismatch": true' in out
