"""The `flightdeck` command: run a deployment of agents on this machine.

Exit codes: 0 success, 1 failure (an agent or moto did not start, the demo got
no answer), 2 usage or configuration error (bad file, port already in use).
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from flightdeck import config_check, config_file, config_models

EXIT_OK, EXIT_FAILURE, EXIT_USAGE = 0, 1, 2


def _complain(message: str) -> None:
    print(f"flightdeck: {message}", file=sys.stderr, flush=True)


def _aws_credentials() -> bool:
    """Whether this machine has AWS credentials (for an agent whose model is Bedrock)."""
    import boto3
    from botocore.exceptions import BotoCoreError

    try:
        return boto3.Session().get_credentials() is not None
    except BotoCoreError:
        return False


def _load(path: Path, local_model: bool = False) -> config_models.DeploymentFile | None:
    """The deployment file, checked whole for running on this machine (config_check.check), or None
    after saying what is wrong: every problem once, each with the file, the TOML key and the fix."""
    try:
        deployment = config_file.load(path)
        bedrock = [n for n, spec in deployment.agents.items() if spec.model.provider == "bedrock"]
        checked = config_check.check(
            deployment,
            path,
            "local",
            local_model=local_model,
            aws_credentials=bool(bedrock) and not local_model and _aws_credentials(),
        )
    except config_file.ConfigFileError as exc:
        _complain("invalid deployment file:\n" + "".join(f"  {line}\n" for line in str(exc).splitlines()).rstrip())
        return None
    if local_model:
        for name in bedrock:
            _complain(
                f'{config_file.toml_key(("agents", name, "model"))}.provider = "bedrock": {name} runs with '
                "the local model (--local-model)"
            )
    return checked


def _stack_failure(exc: Exception) -> int:
    """Report a failed start in one line (port clashes and bad input are usage errors)."""
    from flightdeck.local.stack import MOTO_OWNER, PortInUseError

    if isinstance(exc, PortInUseError):
        flag = "--moto-port" if exc.owner == MOTO_OWNER else "--port"
        _complain(f"{exc}; choose another with {flag} N (0: any free port)")
        return EXIT_USAGE
    if isinstance(exc, ValueError):  # ConfigFileError included
        _complain(f"invalid deployment: {exc}")
        return EXIT_USAGE
    _complain(str(exc))
    return EXIT_FAILURE


# Locally every step of a delegation is logged (observability.ROUTINE_STEPS are DEBUG): the readable
# view draws them. A file's own POWERTOOLS_LOG_LEVEL wins.
LOCAL_LOG_LEVEL = "DEBUG"


class _Interrupted(Exception):
    """Ctrl-C or SIGTERM while the stack was still starting."""


def local_up(args: argparse.Namespace) -> int:
    from flightdeck.local.stack import LocalStack, StackError

    deployment = _load(args.config, args.local_model)
    if deployment is None:
        return EXIT_USAGE
    stop = threading.Event()
    ready = False

    def on_signal(signum: int, frame: Any) -> None:
        # While starting, the first signal unwinds the start (which stops what it
        # started); later ones only ask to stop, so they never cut a stop short.
        already_stopping = stop.is_set()
        stop.set()
        if not ready and not already_stopping:
            raise _Interrupted

    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, on_signal)
    stack = None
    try:
        stack = LocalStack(
            deployment,
            host=args.host,
            port=args.port,
            moto_port=args.moto_port,
            relay=sys.stderr,
            relay_format="json" if args.json_logs else "readable",
            log_dir=args.log_dir,
            log_level=LOCAL_LOG_LEVEL,
        )
        stack.start()
        ready = True
        print("READY " + json.dumps(stack.urls), flush=True)
        # Its own line after READY, so READY stays one JSON object a script parses (docs/CONSOLE.md).
        print(f"CONSOLE {stack.console_url}", flush=True)
        print(f"flightdeck: the web console on {stack.console_url} (the user's token opens it)", file=sys.stderr)
        for name, url in stack.urls.items():
            print(f"flightdeck: {name} on {url}", file=sys.stderr)
        if args.log_dir is not None:
            print(f"flightdeck: every agent's JSON log in {args.log_dir}/<agent>.log", file=sys.stderr)
        for line in stack.mcp_warnings():
            print(f"flightdeck: warning: {args.config}: {line}", file=sys.stderr)
        print(f"flightdeck: moto on {stack.moto_endpoint}; Ctrl-C stops everything", file=sys.stderr, flush=True)
        while not stop.wait(0.5):
            pass
    except _Interrupted:
        _complain("interrupted while starting")
        return EXIT_FAILURE
    except (StackError, config_file.ConfigFileError, ValueError) as exc:
        return _stack_failure(exc)
    finally:
        if stack is not None:
            stack.stop()
    return EXIT_OK


def local_demo(args: argparse.Namespace) -> int:
    import shutil
    import tempfile

    from flightdeck.local import demo
    from flightdeck.local.stack import StackError

    if args.scenario == demo.SCENARIOS[-1] and args.config == config_file.DEFAULT_CONFIG:
        args.config = demo.TOOLS_SCENARIO_CONFIG  # the tools scenario's own file: an MCP server beside the agents
    deployment = _load(args.config, args.local_model)
    if deployment is None:
        return EXIT_USAGE
    try:
        demo.check_demo(deployment, args.config)
    except config_file.ConfigFileError as exc:
        _complain("invalid deployment file:\n" + "".join(f"  {line}\n" for line in str(exc).splitlines()).rstrip())
        return EXIT_USAGE
    # The agents' full logs: where asked (kept), else a scratch directory removed unless the demo fails.
    log_dir = args.log_dir or Path(tempfile.mkdtemp(prefix="flightdeck-demo-logs-"))
    succeeded = False
    try:
        demo.run(
            deployment,
            args.scenario,
            out=sys.stdout,
            logs=sys.stderr if args.show_logs else None,
            log_dir=log_dir,
            message=args.message,
        )
        succeeded = True
        return EXIT_OK
    except KeyboardInterrupt:
        _complain("interrupted")
        return EXIT_FAILURE
    except demo.DemoError as exc:
        _complain(str(exc))
        return EXIT_FAILURE
    except (StackError, config_file.ConfigFileError, ValueError) as exc:
        return _stack_failure(exc)
    finally:
        if args.log_dir is not None:
            print(f"\nagent logs: {log_dir}", file=sys.stderr)
        elif succeeded:
            shutil.rmtree(log_dir, ignore_errors=True)
        else:
            print(f"\nagent logs (kept, the demo failed): {log_dir}", file=sys.stderr)


# --- flightdeck bench (flightdeck.bench) ---------------------------------------------------


def bench(args: argparse.Namespace) -> int:
    from flightdeck.bench import compare, report, runner
    from flightdeck.local.stack import StackError

    before = None
    if args.compare is not None:
        try:
            before = json.loads(args.compare.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            _complain(f"bench: --compare {args.compare}: {exc}")
            return EXIT_USAGE
    roles = None
    if args.config is not None:
        deployment = _load(args.config, args.local_model)
        if deployment is None:
            return EXIT_USAGE
        try:
            roles = runner.roles_from(deployment, args.config)
        except ValueError as exc:
            _complain(f"bench: {exc}")
            return EXIT_USAGE
    try:
        opts = runner.options(
            args.quick,
            iterations=args.iterations,
            callbacks=args.callbacks,
            timeout_turns=args.timeout_turns,
            open_turns=args.open_turns,
            roles=roles,
            load_sessions=args.load_sessions,
            think_sessions=args.think_sessions,
            coldstart_python=str(args.coldstart_python) if args.coldstart_python else None,
        )
        runner.validate(opts)
    except ValueError as exc:
        _complain(f"bench: {exc}")
        return EXIT_USAGE
    try:
        result = runner.run(opts, progress=runner.progress_to(sys.stderr), logs=sys.stderr if args.show_logs else None)
    except KeyboardInterrupt:
        _complain("interrupted")
        return EXIT_FAILURE
    except (StackError, RuntimeError) as exc:
        _complain(f"bench failed: {exc}")
        return EXIT_FAILURE
    print(report.render(result), flush=True)
    if before is not None:
        print("\n" + compare.table(before, result), flush=True)
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=2, default=str) + "\n")
        print(f"flightdeck: results written to {args.json}", file=sys.stderr)
    return EXIT_OK


def _session_counts(text: str) -> tuple[int, ...]:
    try:
        counts = tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"{text!r} is not a list of session counts (1,10,100)") from exc
    return () if counts == (0,) else counts


def add_bench_command(commands: Any) -> None:
    sub = commands.add_parser(
        "bench",
        help="measure cost per delegation, per-think cost over a conversation, load, callback throughput, timeout "
        "precision, sweep cost, cold start",
        description="Run the agents on the local stack (moto), count what a delegation asks of AWS and price "
        "it (against Step Functions and Lambda durable functions models), count a think's requests and units "
        "over a 50-message conversation, run many sessions at once on the example deployment, measure callback "
        "throughput, timeout lateness, sweep reads and handler import time; print one table (Markdown). Local "
        "seconds are moto-bound: read counts and ratios. See docs/PERFORMANCE.md.",
    )
    sub.add_argument(
        "--quick", action="store_true", help="few iterations, 1,000 open turns instead of 10,000 (what CI runs, ~1 min)"
    )
    sub.add_argument("--json", type=Path, metavar="PATH", help="also write every figure as JSON to PATH")
    sub.add_argument("--iterations", type=int, metavar="N", help="one-delegation round trips to count")
    sub.add_argument("--callbacks", type=int, metavar="N", help="callbacks per mode (single, batch)")
    sub.add_argument("--timeout-turns", type=int, metavar="N", help="turns left to time out")
    sub.add_argument("--open-turns", type=int, metavar="N", help="open turns seeded for the sweep")
    sub.add_argument(
        "--think-sessions",
        type=_session_counts,
        metavar="S,S...",
        help="the thinks phase's session counts, each started together once per THINK_GATHERING mode "
        "(default 1,10,100; --quick 1,10; 0: no thinks phase)",
    )
    sub.add_argument(
        "--load-sessions",
        type=int,
        metavar="N",
        help="sessions sent at once in the load phase, each delegating twice (default 40, --quick 10; "
        "0: no load phase)",
    )
    sub.add_argument(
        "--coldstart-python",
        type=Path,
        metavar="PYTHON",
        help="time the handler imports with this interpreter, with the run-time dependencies installed "
        "(for example a venv of the Lambda runtime's Python; default: the one running the bench)",
    )
    sub.add_argument("--show-logs", action="store_true", help="relay the agents' logs to stderr")
    sub.add_argument(
        "--compare",
        type=Path,
        metavar="BEFORE.json",
        help="also print a before/after table of the headline figures against an earlier --json result",
    )
    sub.add_argument(
        "--config",
        type=Path,
        metavar="FILE",
        help="measure the round trips with this deployment file's agents: its first agent with "
        "delegates and its first delegate (their prompts, models, tools, settings, memory), checked "
        "whole first (default: the bench's own pair)",
    )
    sub.add_argument(
        "--local-model",
        action="store_true",
        help="run agents whose model is Bedrock with the local model (the bench runs on moto)",
    )
    sub.set_defaults(run=bench)


# --- end of flightdeck bench -----------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    from flightdeck.local.demo import DEFAULT_SCENARIO, SCENARIOS

    parser = argparse.ArgumentParser(
        prog="flightdeck",
        description="Flightdeck serverless: asynchronous agent-to-agent delegation on AWS Lambda.",
        epilog=(
            "examples:\n"
            "  flightdeck local up                         # the bundled two-agent example on loopback\n"
            "  flightdeck local up --config my.toml --port 8080\n"
            "  flightdeck local demo                       # a task for every delegate at once, as a timeline\n"
            '  flightdeck local demo --config examples/three-agents.toml --message "@critic is this clear?"\n'
            "  flightdeck local demo --scenario timeout    # the delegator stops waiting, the answer arrives late\n"
            "  flightdeck local demo --scenario ask        # the delegate asks, the delegator answers in its context\n"
            "  flightdeck local demo --scenario skills     # a structured call, a response schema, a mismatch marked\n"
            "  flightdeck local demo --scenario tools      # an MCP server's tool (examples/mcp-tools.toml)\n"
            "  flightdeck bench --quick --json bench.json  # what a delegation costs; see docs/PERFORMANCE.md\n"
            "  flightdeck chat http://127.0.0.1:PORT       # talk to an agent (--a2a CARD_URL: any A2A agent)\n"
            "  flightdeck deploy --config my.toml          # check Node, credentials, bootstrap...; then deploy\n"
            "  flightdeck status --config my.toml          # URLs, health, alarms, queue depths of each agent\n"
            "  flightdeck logs --follow --session ID       # the deployed agents' timeline from CloudWatch Logs"
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    commands = parser.add_subparsers(title="commands", metavar="COMMAND")
    local = commands.add_parser(
        "local",
        help="run agents on this machine (moto for DynamoDB and SQS, no AWS account needed)",
        description="Run every agent of a deployment file on loopback, with state in a local moto server. "
        "The same Lambda handlers run as on AWS.",
    )
    local.set_defaults(parser=local)
    local_commands = local.add_subparsers(title="commands", metavar="COMMAND")

    def add_config(sub: argparse.ArgumentParser) -> None:
        sub.add_argument(
            "--config",
            type=Path,
            default=config_file.DEFAULT_CONFIG,
            metavar="FILE",
            help="deployment file, checked whole before anything starts "
            "(default: the bundled examples/two-agents.toml)",
        )
        sub.add_argument(
            "--local-model",
            action="store_true",
            help='run agents whose model is "bedrock" with the local model instead (without it, '
            "such an agent needs AWS credentials)",
        )

    up = local_commands.add_parser(
        "up",
        help="start every agent and serve until Ctrl-C",
        description="Start moto and every agent of the deployment file. Prints to stdout "
        'READY {"agent": "http://host:port", ...} when all agents answer, then CONSOLE <the web console\'s URL>. '
        "On stderr, one line per step of "
        "each delegation and per problem; --json-logs for the agents' full JSON logs instead, --log-dir for "
        "them in a file per agent.",
    )
    add_config(up)
    up.add_argument("--host", default="127.0.0.1", help="address the agents listen on (default 127.0.0.1)")
    up.add_argument(
        "--port",
        type=int,
        default=0,
        metavar="N",
        help="port of the first agent, the next agents take N+1, N+2... (default: free ports)",
    )
    up.add_argument(
        "--moto-port", type=int, default=0, metavar="N", help="port of the moto server (default: a free port)"
    )
    up.add_argument(
        "--json-logs",
        action="store_true",
        help="relay every line the agents write (JSON) instead of one readable line per step",
    )
    up.add_argument(
        "--log-dir",
        type=Path,
        metavar="DIR",
        help="also write each agent's full JSON log to DIR/<agent>.log (and moto's to DIR/moto.log)",
    )
    up.set_defaults(run=local_up)

    demo = local_commands.add_parser(
        "demo",
        help="send a task to the delegating agent and show the delegation as it happens",
        description="Start the stack, send a task to the first agent that has delegates, print a timeline "
        "of the delegation from the agents' logs, then the final answer.",
    )
    add_config(demo)
    demo.add_argument(
        "--scenario",
        choices=SCENARIOS,
        default=DEFAULT_SCENARIO,
        help="parallel: one task for every delegate at once, two for a lone delegate (default); "
        "delegate: one task for the first delegate; timeout: the first delegate answers after "
        "the delegator stopped waiting; ask: the first delegate asks a question (input-required), "
        "the delegator answers it in the delegate's context, the delegate finishes",
    )
    demo.add_argument(
        "--message",
        metavar="TEXT",
        help='send this instead of the scenario\'s task (with the local model, "@name ..." delegates to agent name)',
    )
    demo.add_argument("--show-logs", action="store_true", help="also relay the agents' JSON logs to stderr")
    demo.add_argument(
        "--log-dir",
        type=Path,
        metavar="DIR",
        help="keep each agent's JSON log in DIR/<agent>.log (default: a scratch directory, removed "
        "after a successful demo)",
    )
    demo.set_defaults(run=local_demo)
    add_bench_command(commands)  # flightdeck bench
    from flightdeck.peers_admin import add_peers_command

    peers = add_peers_command(commands)  # flightdeck peers
    from flightdeck.peer_discovery import add_discover_command
    from flightdeck.peers_sync import add_sync_command

    add_discover_command(peers)  # flightdeck peers discover URL: read and check a card before adding its peer
    add_sync_command(peers)  # flightdeck peers sync --config FILE: every token the file implies
    from flightdeck.chat_client.command import add_chat_command

    add_chat_command(commands)  # flightdeck chat
    from flightdeck.chat_client.browse import add_sessions_command

    add_sessions_command(commands)  # flightdeck sessions
    from flightdeck.ops.commands import add_commands as add_ops_commands

    add_ops_commands(commands)  # flightdeck deploy, status, logs, check: a deployment on AWS
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not hasattr(args, "run"):
        getattr(args, "parser", parser).print_help(sys.stderr)
        return EXIT_USAGE
    try:
        return int(args.run(args))
    except KeyboardInterrupt:  # before a command installed its own handling
        _complain("interrupted")
        return 130


if __name__ == "__main__":
    sys.exit(main())
