"""The benchmark's pieces that need no local stack: sweep counting, import timing, options, CLI, table."""

from __future__ import annotations

import math

import pytest

from flightdeck import cli
from flightdeck.bench import coldstart, prices, report, runner, sweep
from flightdeck.bench.scenario import BLACKHOLE, DELEGATOR, WORKER, build_deployment, parse_timestamp, token_session


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

    claims = CallbackClaims(session_id="s-1", turn=1, tool_use_id="t", tool_id="ask_x", name="x", total_tools=1,
                            agent="a", iat=1, exp=2)
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

    from flightdeck import config_file

    three = Path(__file__).resolve().parents[2] / "examples" / "three-agents.toml"
    roles = runner.roles_from(config_file.load_checked(three, "local"), str(three))
    assert (roles.delegator.name, roles.worker.name) == ("orchestrator", "researcher")
    opts = runner.options(True, roles=roles)
    deployment = build_deployment("http://127.0.0.1:9", opts.stack)
    delegator, worker = deployment.agents[DELEGATOR], deployment.agents[WORKER]
    assert delegator.system_prompt.startswith("You coordinate.") and worker.system_prompt == "You research and cite."
    assert worker.model.think_delay_ms == 200 and delegator.skills == ["delegation", "summarising results"]
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
