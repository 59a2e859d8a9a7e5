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
from pathlib import Path
from typing import Any, Sequence

from flightdeck import config_file

EXIT_OK, EXIT_FAILURE, EXIT_USAGE = 0, 1, 2


def _complain(message: str) -> None:
    print(f"flightdeck: {message}", file=sys.stderr, flush=True)


def _load(path: Path) -> config_file.DeploymentFile | None:
    try:
        return config_file.load(path)
    except config_file.ConfigFileError as exc:
        _complain(f"invalid deployment file: {exc}")
        return None


def _stack_failure(exc: Exception) -> int:
    """Report a failed start in one line (port clashes and bad input are usage errors)."""
    from flightdeck.local.stack import PortInUseError

    if isinstance(exc, PortInUseError):
        _complain(f"{exc}; choose another with --port")
        return EXIT_USAGE
    if isinstance(exc, ValueError):  # ConfigFileError included
        _complain(f"invalid deployment: {exc}")
        return EXIT_USAGE
    _complain(str(exc))
    return EXIT_FAILURE


class _Interrupted(Exception):
    """Ctrl-C or SIGTERM while the stack was still starting."""


def local_up(args: argparse.Namespace) -> int:
    from flightdeck.local.stack import LocalStack, StackError

    deployment = _load(args.config)
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
        stack = LocalStack(deployment, host=args.host, port=args.port, moto_port=args.moto_port, relay=sys.stderr)
        stack.start()
        ready = True
        print("READY " + json.dumps(stack.urls), flush=True)
        for name, url in stack.urls.items():
            print(f"flightdeck: {name} on {url}", file=sys.stderr)
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
    import tempfile

    from flightdeck.local import demo
    from flightdeck.local.stack import StackError

    deployment = _load(args.config)
    if deployment is None:
        return EXIT_USAGE
    log_file = None
    if args.show_logs:
        logs = sys.stderr
    else:
        log_file = tempfile.NamedTemporaryFile("w", prefix="flightdeck-demo-", suffix=".log", delete=False)
        logs = log_file
    try:
        demo.run(deployment, args.scenario, out=sys.stdout, logs=logs)
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
        if log_file is not None:
            log_file.close()
            print(f"\nagent logs: {log_file.name}", file=sys.stderr)


# --- flightdeck bench (flightdeck.bench) ---------------------------------------------------


def bench(args: argparse.Namespace) -> int:
    from flightdeck.bench import report, runner
    from flightdeck.local.stack import StackError

    try:
        opts = runner.options(args.quick, iterations=args.iterations, callbacks=args.callbacks,
                              timeout_turns=args.timeout_turns, open_turns=args.open_turns)
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
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=2, default=str) + "\n")
        print(f"flightdeck: results written to {args.json}", file=sys.stderr)
    return EXIT_OK


def add_bench_command(commands: Any) -> None:
    sub = commands.add_parser(
        "bench",
        help="measure cost per delegation, callback throughput, timeout precision, sweep cost, cold start",
        description="Run the agents on the local stack (moto), count what a delegation asks of AWS and price "
        "it, measure callback throughput, timeout lateness, sweep reads and handler import time; print one "
        "table (Markdown). Local seconds are moto-bound: read counts and ratios. See docs/PERFORMANCE.md.",
    )
    sub.add_argument("--quick", action="store_true",
                     help="few iterations, 1,000 open turns instead of 10,000 (what CI runs, ~1 min)")
    sub.add_argument("--json", type=Path, metavar="PATH", help="also write every figure as JSON to PATH")
    sub.add_argument("--iterations", type=int, metavar="N", help="one-delegation round trips to count")
    sub.add_argument("--callbacks", type=int, metavar="N", help="callbacks per mode (single, batch)")
    sub.add_argument("--timeout-turns", type=int, metavar="N", help="turns left to time out")
    sub.add_argument("--open-turns", type=int, metavar="N", help="open turns seeded for the sweep")
    sub.add_argument("--show-logs", action="store_true", help="relay the agents' logs to stderr")
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
            "  flightdeck local demo                       # two parallel delegations, as a timeline\n"
            "  flightdeck local demo --scenario timeout    # the delegator stops waiting, the answer arrives late\n"
            "  flightdeck bench --quick --json bench.json  # what a delegation costs; see docs/PERFORMANCE.md"
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
        sub.add_argument("--config", type=Path, default=config_file.DEFAULT_CONFIG, metavar="FILE",
                         help="deployment file (default: the bundled examples/two-agents.toml)")

    up = local_commands.add_parser(
        "up",
        help="start every agent and serve until Ctrl-C",
        description="Start moto and every agent of the deployment file. Prints one line to stdout, "
        'READY {"agent": "http://host:port", ...}, when all agents answer; logs go to stderr.',
    )
    add_config(up)
    up.add_argument("--host", default="127.0.0.1", help="address the agents listen on (default 127.0.0.1)")
    up.add_argument("--port", type=int, default=0, metavar="N",
                    help="port of the first agent, the next agents take N+1, N+2... (default: free ports)")
    up.add_argument("--moto-port", type=int, default=0, metavar="N", help="port of the moto server (default: a free port)")
    up.set_defaults(run=local_up)

    demo = local_commands.add_parser(
        "demo",
        help="send a task to the delegating agent and show the delegation as it happens",
        description="Start the stack, send a task to the first agent that has delegates, print a timeline "
        "of the delegation from the agents' logs, then the final answer.",
    )
    add_config(demo)
    demo.add_argument("--scenario", choices=SCENARIOS, default=DEFAULT_SCENARIO,
                      help="delegate: one task; parallel: two tasks at once (default); "
                      "timeout: the delegate answers after the delegator stopped waiting")
    demo.add_argument("--show-logs", action="store_true",
                      help="relay the agents' logs to stderr (default: written to a file)")
    demo.set_defaults(run=local_demo)
    add_bench_command(commands)  # flightdeck bench
    from flightdeck.peers_admin import add_peers_command

    add_peers_command(commands)  # flightdeck peers
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
