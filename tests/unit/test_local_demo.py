"""The pieces of `flightdeck local demo` and the CLI's argument handling that need no running stack."""

from __future__ import annotations

import io

import pytest

from flightdeck import cli, config_file, config_models
from flightdeck.local import demo


@pytest.fixture
def deployment() -> config_models.DeploymentFile:
    return config_file.load(config_file.DEFAULT_CONFIG)


def test_plan_picks_the_first_agent_with_delegates(deployment):
    token = deployment.agents["orchestrator"].users["user"]
    assert demo.plan(deployment, "parallel") == demo.Plan(
        "orchestrator", ("worker",), "@worker task one @worker task two", token
    )
    assert token.startswith("fdp_user_")  # the demo calls as the `user` peer of the example
    assert demo.plan(deployment, "delegate").task.startswith("@worker ")
    assert demo.plan(deployment, "delegate").task.count("@worker") == 1


def test_plan_refuses_a_deployment_without_delegates(deployment):
    lonely = deployment.model_copy(deep=True)
    for spec in lonely.agents.values():
        spec.delegates = []
    with pytest.raises(demo.DemoError):
        demo.plan(lonely, "delegate")


def test_timeout_variant_is_written_and_read_back_exactly(deployment, tmp_path):
    variant = demo.timeout_variant(deployment, demo.plan(deployment, "timeout"))
    assert variant.agents["orchestrator"].env["ASYNC_TOOL_TIMEOUT_MS"] == "3000"
    assert variant.agents["worker"].model.think_delay_ms == 8000
    assert deployment.agents["worker"].model.think_delay_ms == 200  # the original is untouched
    path = demo.write_deployment(variant, tmp_path)
    assert config_file.load(path) == variant


def test_toml_writer_escapes_strings(deployment, tmp_path):
    odd = deployment.model_copy(deep=True)
    odd.agents["worker"].system_prompt = 'quotes " and \\ back\nslash\ttab \x7f del é 😀'
    odd.defaults["AGENT_VERSION"] = "a=b, c"
    odd.agents["worker"].description = "a = b, [c]"
    assert config_file.load(demo.write_deployment(odd, tmp_path)) == odd


def test_timeline_prints_one_line_per_session_event_after_start():
    out = io.StringIO()
    timeline = demo.Timeline(out)
    timeline.on_event("worker", {"id": "input.1", "kind": "message", "text": "too early"})
    timeline.start()
    timeline.on_event(
        "orchestrator",
        {
            "id": "tool.t1",
            "kind": "delegating",
            "agent": "worker",
            "task": "list owls",
            "tool_use_id": "t1",
            "tool": "ask_worker",
        },
    )
    timeline.on_event("worker", {"id": "text.1.1.6", "kind": "text_delta", "text": "[worker", "offset": 0})
    timeline.on_event("orchestrator", {"id": "result.t1", "kind": "timeout", "agent": "worker", "status": "error"})
    timeline.on_event("orchestrator", {"id": "answer.2", "kind": "answer", "text": "line one\nline two " + "x" * 200})
    timeline.on_event("orchestrator", {"id": "idle.1", "kind": "idle"})
    lines = out.getvalue().splitlines()
    assert len(lines) == 5
    assert lines[0].startswith("  +0.") and lines[0].endswith("s  orchestrator  delegating to worker: list owls")
    assert lines[1].endswith("worker        writing: …[worker")
    assert lines[2].endswith("orchestrator  no answer from worker in time: timed out")
    assert "answer: line one line two xxx" in lines[3] and lines[3].endswith("…")
    assert timeline.agents_with("idle") == {"orchestrator"}
    assert timeline.wait_for("orchestrator", "idle", 0) and not timeline.wait_for("worker", "idle", 0.01)


def test_sse_events_are_read_as_they_come_comments_skipped():
    raw = [
        b": keep-alive\n",
        b"\n",
        b"id: input.1\n",
        b"event: message\n",
        b'data: {"kind": "message"}\n',
        b"\n",
        b'data: {"kind": "idle"}\r\n',
        b"\r\n",
    ]
    assert list(demo.sse_events(iter(raw))) == [{"kind": "message"}, {"kind": "idle"}]


@pytest.mark.parametrize(
    "session, answer",
    [
        (
            {
                "status": "idle",
                "messages": [
                    {"role": "user", "content": [{"text": "q"}]},
                    {"role": "assistant", "content": [{"text": "done"}]},
                ],
            },
            "done",
        ),
        ({"status": "running", "messages": [{"role": "assistant", "content": [{"text": "x"}]}]}, None),
        ({"status": "idle", "messages": [{"role": "user", "content": [{"text": "q"}]}]}, None),
        (
            {
                "status": "idle",
                "messages": [
                    {
                        "role": "assistant",
                        "content": [{"toolUse": {"toolUseId": "t", "name": "ask_worker", "input": {}}}],
                    }
                ],
            },
            None,
        ),
        ({"status": "idle", "messages": []}, None),
        ("not a session", None),
    ],
)
def test_final_answer_needs_an_idle_session_ending_with_assistant_text(session, answer):
    assert demo.final_answer(session) == answer


def test_help_describes_the_commands(capsys):
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["--help"])
    assert exit_info.value.code == 0
    text = capsys.readouterr().out
    assert "local" in text and "flightdeck local up" in text
    with pytest.raises(SystemExit):
        cli.main(["local", "demo", "--help"])
    text = capsys.readouterr().out
    assert "--scenario {delegate,parallel,timeout,ask,skills,tools}" in text and "(default)" in text


def test_no_command_prints_help_and_exits_2(capsys):
    assert cli.main([]) == 2
    assert "local" in capsys.readouterr().err
    assert cli.main(["local"]) == 2
    assert "up" in capsys.readouterr().err


def test_a_bad_config_file_is_a_usage_error(tmp_path, capsys):
    bad = tmp_path / "bad.toml"
    bad.write_text("[agents.x]\nunknown_key = 1\n")
    assert cli.main(["local", "up", "--config", str(bad)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("flightdeck: invalid deployment file:") and "Traceback" not in err


def _session(*results):
    return {
        "status": "idle",
        "messages": [
            {
                "role": "user",
                "content": [
                    {"toolResult": {"toolUseId": f"t{i}", "status": st, "content": [{"text": text}]}}
                    for i, (st, text) in enumerate(results)
                ],
            }
        ],
    }


def test_demo_outcome_fails_when_a_delegation_failed():
    import pytest

    from flightdeck.local.demo import DemoError, check_outcome

    check_outcome("parallel", _session(("success", "a"), ("success", "b")))
    with pytest.raises(DemoError, match="a delegation failed"):
        check_outcome("parallel", _session(("success", "a"), ("error", '{"status": "error", "reason": "timeout"}')))
    with pytest.raises(DemoError):
        check_outcome("delegate", {"status": "idle", "messages": []})
    check_outcome("timeout", _session(("error", '{"status": "error", "reason": "timeout"}')))
    with pytest.raises(DemoError, match="timeout"):
        check_outcome("timeout", _session(("success", "a")))


def test_the_ask_scenario_needs_the_delegate_to_have_asked_first(deployment):
    from flightdeck.domain.asking import input_required_result
    from flightdeck.local.demo import DemoError, check_outcome

    task = demo.plan(deployment, "ask").task
    assert task.startswith("@worker ?ask ") and " ?answer " in task
    check_outcome("ask", _session(("success", input_required_result("which quarter?", "ctx")), ("success", "done")))
    with pytest.raises(DemoError, match="ask a question first"):
        check_outcome("ask", _session(("success", "done")))
