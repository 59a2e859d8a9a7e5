"""The benchmark's pieces that need no local stack: sweep counting, import timing, options, CLI, table."""

from __future__ import annotations

import json
import math
import platform
import sys
from pathlib import Path

import pytest

from flightdeck import cli
from flightdeck.bench import coldstart, prices, report, runner, sweep
from flightdeck.bench.scenario import BLACKHOLE, DELEGATOR, WORKER, build_deployment, token_session
from flightdeck.bench.timeline import parse_timestamp


def test_one_sweep_reads_only_the_overdue_turns_from_the_index():
    out = sweep.measure(60, 3, prices.load(), lambda message: None)
    listed = out["list_overdue"]
    assert listed["overdue_found"] == 3
    assert listed["items_returned"] == listed["items_scanned"] == 3
    assert listed["queries"] == 4  # one per deadline shard
    assert out["sweep"]["expired"] == 3
    assert out["scan_comparison"]["items_scanned"] >= 60
    assert out["items_read_ratio_scan_to_index"] >= 20


def test_import_timing_runs_a_fresh_interpreter():
    seconds = coldstart.time_import("json")
    assert 0 < seconds < 30
    assert coldstart.time_import("json", "no_pyc") > 0
    breakdown = coldstart.import_breakdown("json")
    assert breakdown and breakdown[0][1] >= 0


def test_quick_options_are_small_and_overrides_apply():
    quick = runner.options(True)
    assert quick.quick and quick.open_turns == 1_000 and quick.stack.iterations <= 5
    full = runner.options(False, iterations=7, open_turns=500)
    assert full.stack.iterations == 7 and full.open_turns == 500 and full.stack.callbacks == 150
    with pytest.raises(ValueError):
        runner.validate(runner.options(True, iterations=0))
    with pytest.raises(ValueError):
        runner.validate(runner.options(True, open_turns=5))  # fewer open turns than overdue ones


def test_the_bench_deployment_reads_callback_keys_from_secrets_manager():
    deployment = build_deployment("http://127.0.0.1:9", runner.options(True).stack)
    assert deployment.agents[DELEGATOR].delegates[0].agent == WORKER
    assert deployment.agents["collector"].allowed_hosts == {BLACKHOLE: "http://127.0.0.1:9"}
    assert "TOOL_CALLBACK_SECRET_ARN" in deployment.agents[DELEGATOR].env
    assert "TOOL_CALLBACK_SECRET_ARN" not in deployment.agents[WORKER].env
    assert deployment.agents["timekeeper"].env["ASYNC_TOOL_TIMEOUT_MS"] == "2000"


def test_helpers_read_tokens_and_timestamps():
    from flightdeck.domain.tokens import CallbackClaims, SigningKey, mint

    claims = CallbackClaims(
        session_id="s-1", turn=1, tool_use_id="t", tool_id="ask_x", name="x", total_tools=1, agent="a", iat=1, exp=2
    )
    assert token_session(mint(claims, SigningKey(b"k" * 32))) == "s-1"
    assert parse_timestamp("2026-11-29 19:49:26,793+0000") == pytest.approx(1795981766.793)


def test_the_bench_command_is_added_and_the_local_commands_are_intact(capsys):
    parser = cli.build_parser()
    args = parser.parse_args(["bench", "--quick", "--json", "out.json"])
    assert args.run is cli.bench and args.quick and str(args.json) == "out.json"
    assert parser.parse_args(["local", "up"]).run is cli.local_up
    assert parser.parse_args(["local", "demo"]).run is cli.local_demo
    assert cli.main(["bench", "--iterations", "0"]) == cli.EXIT_USAGE  # refused before anything starts
    assert "at least 1" in capsys.readouterr().err


def test_markdown_table_escapes_cells_and_numbers_read_well():
    text = report.markdown([["a", "b"], ["x | y", "1"]])
    assert text.splitlines() == ["| a | b |", "|---|---|", "| x \\| y | 1 |"]
    assert report.num(3.0) == "3" and report.num(2.345, 2) == "2.35" and report.num(math.nan) == "n/a"
    assert report.money(73.836) == "$73.84"


def test_bench_config_gives_the_files_pair_the_counted_round_trips():
    from pathlib import Path

    from flightdeck import config_check

    three = Path(__file__).resolve().parents[2] / "examples" / "three-agents.toml"
    roles = runner.roles_from(config_check.load_checked(three, "local"), str(three))
    assert (roles.delegator.name, roles.worker.name) == ("orchestrator", "researcher")
    opts = runner.options(True, roles=roles)
    deployment = build_deployment("http://127.0.0.1:9", opts.stack)
    delegator, worker = deployment.agents[DELEGATOR], deployment.agents[WORKER]
    assert delegator.system_prompt.startswith("You coordinate.") and worker.system_prompt == "You research and cite."
    assert worker.model.think_delay_ms == 200 and [s.name for s in delegator.skills] == [
        "delegation",
        "summarising results",
    ]
    assert delegator.delegates[0].agent == WORKER
    # The bench's timing wins over the file's (its counted turns must time their timers out within the run).
    assert delegator.env["ASYNC_TOOL_TIMEOUT_MS"] == str(opts.stack.delegator_timeout_ms)
    assert "TOOL_AGG_PUNCTUATE_INTERVAL_MS" not in worker.env  # the file's 1000 ms: the bench's default applies
    assert deployment.defaults["TOOL_AGG_PUNCTUATE_INTERVAL_MS"] == str(opts.stack.sweep_interval_ms)


def test_bench_config_needs_a_pair_and_the_local_model(tmp_path):
    from flightdeck import config_file

    lonely = tmp_path / "one.toml"
    lonely.write_text("[agents.solo]\n")
    with pytest.raises(ValueError, match="no agent delegates"):
        runner.roles_from(config_file.load(lonely), str(lonely))
    assert cli.main(["bench", "--quick", "--config", str(lonely)]) == cli.EXIT_USAGE


def test_a_load_session_delegates_twice_with_two_delegates_or_one():
    from flightdeck.bench import load
    from flightdeck.domain.agent import AgentDefinition, DelegateTool, ModelConfig
    from flightdeck.domain.scripted_model import ScriptedModel
    from flightdeck.domain.toolbox import tool_specs

    agent = AgentDefinition(
        name="orchestrator",
        model=ModelConfig(),
        delegates=[DelegateTool(agent="researcher"), DelegateTool(agent="critic")],
    )
    model = ScriptedModel(agent.model, agent, sleep=lambda s: None)
    for delegates, tools in (
        (("researcher", "critic"), ["ask_researcher", "ask_critic"]),
        (("researcher",), ["ask_researcher", "ask_researcher"]),
    ):
        message = {"role": "user", "content": [{"text": load.task(delegates, 7)}]}
        reply = model.converse(system="", messages=[message], tools=tool_specs(agent))
        assert [use["name"] for use in reply.tool_uses] == tools
        assert all("session 7" in use["input"]["task"] for use in reply.tool_uses)


def test_a_load_session_is_answered_timed_out_or_failed_per_delegation():
    from flightdeck.bench import load

    def result(status, text):
        return {"toolResult": {"toolUseId": text, "status": status, "content": [{"text": text}]}}

    session = {
        "status": "idle",
        "messages": [
            {"role": "user", "content": [{"text": "@a x @b y"}]},
            {"role": "assistant", "content": [{"toolUse": {"toolUseId": "1", "name": "ask_a", "input": {}}}]},
            {
                "role": "user",
                "content": [
                    result("success", "fine"),
                    result("error", '{"status":"error","reason":"timeout"}'),
                    result("error", '{"status":"error","reason":"dispatch_failed"}'),
                ],
            },
            {"role": "assistant", "content": [{"text": "1 of 3 delegations answered."}]},
        ],
    }
    assert load.outcome(session) == {"answered": 1, "timed_out": 1, "failed": 1, "final": 1}
    assert load.outcome({"status": "busy", "messages": session["messages"][:2]})["final"] == 0
    assert load.EXAMPLE_CONFIG.is_file()


def test_quick_and_full_runs_size_the_load_and_the_conversation():
    full, quick = runner.options(False), runner.options(True)
    assert full.load_sessions == 40 and 1 <= quick.load_sessions < 40
    assert full.stack.conversation_at == quick.stack.conversation_at == (1, 2, 10, 50)
    assert runner.options(True, load_sessions=0).load_sessions == 0  # no load phase
    with pytest.raises(ValueError, match="load sessions"):
        runner.validate(runner.options(True, load_sessions=-1))
    with pytest.raises(ValueError, match="conversation"):
        runner.validate(runner.options(True, conversation_at=(0, 10)))
    args = cli.build_parser().parse_args(["bench", "--quick", "--load-sessions", "4"])
    assert args.load_sessions == 4


def test_the_thinks_phase_runs_100_sessions_in_the_full_bench_only():
    assert runner.options(False).think_sessions == (1, 10, 100)
    assert runner.options(True).think_sessions == (1, 10)
    parse = cli.build_parser().parse_args
    assert parse(["bench", "--think-sessions", "1,100"]).think_sessions == (1, 100)
    assert (
        runner.options(True, think_sessions=parse(["bench", "--think-sessions", "0"]).think_sessions).think_sessions
        == ()
    )
    with pytest.raises(ValueError, match="thinks phase"):
        runner.validate(runner.options(True, think_sessions=(0, 10)))
    with pytest.raises(SystemExit):
        parse(["bench", "--think-sessions", "ten"])


def test_the_cold_start_can_be_timed_with_another_interpreter_and_says_which(tmp_path):
    # Lambda runs the stack's runtime (infra/bundling.py), not necessarily the bench's own Python.
    args = cli.build_parser().parse_args(["bench", "--coldstart-python", sys.executable])
    assert args.coldstart_python == Path(sys.executable)
    with pytest.raises(ValueError, match="not an executable file"):
        runner.validate(runner.options(True, coldstart_python=str(tmp_path / "python9")))
    not_python = tmp_path / "not-python"
    not_python.write_text("#!/bin/sh\nexit 3\n")
    not_python.chmod(0o755)
    with pytest.raises(RuntimeError, match="does not run"):
        coldstart.measure(1, [], lambda _: None, handlers=("agent_card",), python=str(not_python))
    out = coldstart.measure(1, [], lambda _: None, handlers=("agent_card",), python=sys.executable)
    assert out["python"] == platform.python_version()
    assert set(out["handlers"]) == {"agent_card"} and out["handlers"]["agent_card"]["ratio_to_boto3"] > 0


def test_the_table_has_conversation_load_and_comparison_rows():
    conversation = {
        "messages": 50,
        "requests_per_think": {"1": 4, "10": 4, "50": 4},
        "requests_per_message": {"1": 9, "10": 11, "50": 11},
        "read_units_per_think": {"1": 1.0, "10": 3.0, "50": 12.0},
        "write_units_per_think": {"1": 6, "10": 6, "50": 6},
        "history_bytes": {"1": 114, "10": 3365, "50": 18045},
    }
    rows = report._conversation_rows(conversation)
    assert rows[0][0] == "Conversation: AWS requests per think at messages 1 / 10 / 50" and rows[0][1] == "4 / 4 / 4"
    assert rows[1][1] == "1 / 3 / 12 RRU" and "at least 1 / 1 / 5 RRU" in rows[1][2]
    load = {
        "sessions": 40,
        "delegations_per_session": 2,
        "delegator": "orchestrator",
        "config": "x/three-agents.toml",
        "delegates": ["researcher", "critic"],
        "wall_s": 20.0,
        "delegations_per_s": 4.0,
        "moto_requests_per_s": 120.0,
        "session_latency_ms": {"p50": 1000.0, "max": 2000.0},
        "sessions_completed": 40,
        "sessions_with_every_answer": 39,
        "timed_out": 1,
        "delegations_failed": 0,
        "async_tool_timeout_ms": 30000,
        "rejected_by_status": {"429": 2},
    }
    rows = report._load_rows(load)
    assert rows[0][1] == "4 delegations/s" and rows[1][1] == "40 of 40 completed, 1 of 80 timed out"
    assert "rejected: 429 2" in rows[1][2]
    assert report._conversation_rows(None) == [] and report._load_rows(None) == []


def test_the_before_after_table_compares_data_plane_requests_and_marks_what_one_side_lacks(tmp_path, capsys):
    from flightdeck.bench import compare

    def result(services, conversation=None):
        per = {
            "aws_requests_by_service": services,
            "aws_requests_by_operation": {"dynamodb.GetItem": services["dynamodb"]},
            "dynamodb_request_units": {"wru": 4, "gsi_wru": 1, "rru": 2},
            "lambda_invocations_total": 8,
            "api_gateway_requests_total": 3,
        }
        out = {
            "command": "flightdeck bench --quick",
            "date": "d",
            "machine": {},
            "round_trip_one": {"per_turn": per, "cost_per_million_delegations_usd": {"total": 62.13}},
        }
        if conversation:
            out["conversation"] = conversation
        return out

    before = result({"dynamodb": 52, "sqs": 17.3, "apigateway": 1.3})  # control plane counted per round trip then
    after = result({"dynamodb": 4, "sqs": 2}, {"requests_per_think": {"1": 3, "10": 3, "50": 3}})
    after["round_trip_one"]["cost_per_million_delegations_usd"].update(api_gateway=10.5, dynamodb_writes=15.0)
    after["round_trip_one"]["cost_by_front_door"] = {"lean": {"total": 21.62}}
    after["round_trip_one"]["cost_at_model_latency"] = {"total_usd_per_million_delegations": {"1s": 51.1, "5s": 131.1}}
    rows = {
        line.split(" | ")[0].lstrip("| "): line
        for line in compare.table(before, after).splitlines()
        if line.startswith("|")
    }
    assert "| 69.3 | 6 |" in rows["1 delegation: data-plane requests per round trip (both agents, timer included)"]
    assert "| not measured | 3 / 3 / 3 |" in rows["Conversation: requests per think at messages 1 / 10 / 50"]
    assert "| $62.13 | $62.13 |" in rows["Cost per 1M delegations, 1 per turn (REST front door)"]
    one = compare.table(before, after).split("5 delegations/turn")[0]  # the one-per-turn rows
    assert "| not measured | API GW $10.50, writes $15.00 |" in one
    assert "| ... lean front door | not measured | $21.62 |" in one
    assert "| not measured | $51.10 / $131.10 |" in one
    paths = []
    for name, data in (("before.json", before), ("after.json", after)):
        paths.append(tmp_path / name)
        paths[-1].write_text(json.dumps(data))
    assert compare.main([str(p) for p in paths]) == 0 and "| Measure | Before | After |" in capsys.readouterr().out
    assert compare.main([]) == 2
    assert cli.main(["bench", "--quick", "--compare", str(tmp_path / "missing.json")]) == cli.EXIT_USAGE
