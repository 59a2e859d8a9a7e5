"""One agent on a laptop: its HTTP gateway, Lambda Invoke API, queue pollers and sweep schedule in one
process, its functions in sandboxes of their own (worker processes, flightdeck.local.sandbox).

    python -m flightdeck.local.agent_host --port 8080
    python -m flightdeck.local.agent_host --listen-fd 5 --lambda-listen-fd 6 --parent-pid 1234   (from flightdeck.local.stack)

The environment is the agent's Lambda environment (flightdeck.local.stack
composes it), AWS_ENDPOINT_URL pointing at moto and AWS_ENDPOINT_URL_LAMBDA at
this host's Invoke API (flightdeck.local.lambda_api). Handlers' Powertools logs go
to stdout as JSON lines; this host's own messages go to stderr.

A tool that wraps this host (the bench's counting host) names its sandbox initializer
with --sandbox-initializer; this host knows nothing of what it does.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Sequence

import boto3

from flightdeck import topology
from flightdeck.adapters.usage_plans import CachedKeyLookup, UsagePlans
from flightdeck.local.console_files import ConsoleFiles
from flightdeck.local.gateway import ApiGateway, GatewayIdentity, GatewayServer
from flightdeck.local.invocation import DEFAULT_MEMORY_MB, HANDLERS_PACKAGE, LOCAL_REGION, FunctionRegistry
from flightdeck.local.lambda_api import ASYNC_WORKERS, AsyncInvoker, LambdaApi, LambdaApiServer, async_configs
from flightdeck.local.net import base_url, listen
from flightdeck.local.peer_gate import PeerGate
from flightdeck.local.pollers import ScheduleTimer, SqsPoller
from flightdeck.local.resources import dlq_url_variable, queue_url_variable
from flightdeck.local.sandbox import DEFAULT_PER_FUNCTION, DEFAULT_PER_STREAMING_FUNCTION, Sandboxes, SandboxPolicy
from flightdeck.local.streams import StreamPoller, StreamReader, enable_stream
from flightdeck.settings import Settings, SettingsError

log = logging.getLogger("flightdeck.local")

# How long in-flight invocations get to finish after a stop request.
SHUTDOWN_GRACE_S = 3.0
PARENT_CHECK_INTERVAL_S = 0.5


def configure_logging() -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
    log.addHandler(handler)
    log.setLevel(os.environ.get("FLIGHTDECK_LOCAL_LOG_LEVEL", "INFO").upper())
    # Handler logs are Powertools' business (JSON on stdout); keep this logger out of the root's.
    log.propagate = False


def watch_parent(parent_pid: int, stop: threading.Event) -> None:
    """Stop when the parent is gone (even SIGKILLed), so no agent outlives its stack."""

    def watch() -> None:
        while not stop.wait(PARENT_CHECK_INTERVAL_S):
            if os.getppid() != parent_pid:
                log.warning("parent process %d is gone; stopping", parent_pid)
                stop.set()

    threading.Thread(target=watch, name="parent-watch", daemon=True).start()


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m flightdeck.local.agent_host",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--port", type=int, help="listen on this port (0: any free port)")
    where.add_argument(
        "--listen-fd", type=int, help="serve on this already listening socket, inherited from the parent"
    )
    parser.add_argument("--host", default="127.0.0.1", help="address to bind with --port (default 127.0.0.1)")
    parser.add_argument(
        "--lambda-listen-fd",
        type=int,
        help="serve the Lambda Invoke API on this already listening loopback socket (default: a free "
        "loopback port, named in AWS_ENDPOINT_URL_LAMBDA for the functions of this process)",
    )
    parser.add_argument("--parent-pid", type=int, help="exit when this process is no longer the parent")
    parser.add_argument("--memory-mb", type=int, default=DEFAULT_MEMORY_MB, help="the functions' memory_limit_in_mb")
    parser.add_argument(
        "--handlers-package",
        default=HANDLERS_PACKAGE,
        help=f"package holding the handler modules (default {HANDLERS_PACKAGE})",
    )
    parser.add_argument(
        "--authorizer-cache-s",
        type=float,
        default=300.0,
        help="how long the peer authorizer's answer is reused per Authorization header (default 300)",
    )
    parser.add_argument(
        "--sandboxes",
        type=int,
        default=DEFAULT_PER_FUNCTION,
        help=f"how many invocations of one function may run at once, each in a worker process of its own "
        f"(default {DEFAULT_PER_FUNCTION})",
    )
    parser.add_argument(
        "--stream-sandboxes",
        type=int,
        default=DEFAULT_PER_STREAMING_FUNCTION,
        help=f"the same for a streaming function, whose streams hold theirs while they last "
        f"(default {DEFAULT_PER_STREAMING_FUNCTION})",
    )
    parser.add_argument(
        "--sandbox-initializer",
        metavar="MODULE:FUNCTION",
        help="called in each sandbox as FUNCTION(function_name, handler_module) before the handler is imported; "
        "it may return a wrapper, called as wrapper(event, invoke) around each invocation",
    )
    parser.add_argument(
        "--no-peer-gate",
        action="store_true",
        help="no authorizer or usage plans in front of the peer routes (the functions still "
        "check tokens); on by default unless INBOUND_AUTH is off",
    )
    parser.add_argument(
        "--front-door",
        choices=("rest", "lean"),
        default="rest",
        help="the deployment file's deploy.front_door: lean delivers function URL events (payload 2.0) to the "
        "functions that have a URL on AWS, with no authorizer or usage plans in front (docs/FRONT_DOORS.md)",
    )
    parser.add_argument(
        "--console-agents",
        metavar="JSON",
        help="serve the web console under /console/, listing these agents ({name: base URL}) in its agents.json",
    )
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    configure_logging()
    try:
        settings = Settings.from_env()
    except SettingsError as exc:
        print(f"agent_host: {exc}", file=sys.stderr)
        return 2
    agent = settings.agent_name
    region = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or LOCAL_REGION
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    if args.parent_pid:
        watch_parent(args.parent_pid, stop)

    try:
        policy = SandboxPolicy(args.sandboxes, args.stream_sandboxes, args.sandbox_initializer)
    except ValueError as exc:
        print(f"agent_host: {exc}", file=sys.stderr)
        return 2
    sandboxes = Sandboxes(policy)
    functions = FunctionRegistry(
        agent, package=args.handlers_package, memory_mb=args.memory_mb, region=region, make=sandboxes.function
    )
    # A stable, API Gateway-looking id per agent.
    identity = GatewayIdentity(api_id=hashlib.sha256(agent.encode()).hexdigest()[:10])
    peer_gate = None
    if settings.inbound_auth == "required" and not args.no_peer_gate and args.front_door == "rest":
        # API Gateway's authorizer and per-peer usage plans (keys and plans in moto's API Gateway).
        peer_gate = PeerGate(
            functions.function(topology.PEER_AUTHORIZER_HANDLER),
            CachedKeyLookup(UsagePlans(boto3.client("apigateway", region_name=region))),
            cache_ttl_s=args.authorizer_cache_s,
            region=region,
        )
    console = ConsoleFiles(agents=json.loads(args.console_agents)) if args.console_agents is not None else None
    gateway = ApiGateway(
        functions,
        identity=identity,
        peer_gate=peer_gate,
        console=console,
        url_handlers=topology.URL_HANDLERS if args.front_door == "lean" else (),
    )
    # Lambda's Invoke API: the functions start thinks with asynchronous invokes (AWS_ENDPOINT_URL_LAMBDA).
    if args.lambda_listen_fd is not None:
        lambda_socket = socket.socket(fileno=args.lambda_listen_fd)
    else:
        lambda_socket = listen("127.0.0.1", 0, "the Lambda Invoke API")
        os.environ["AWS_ENDPOINT_URL_LAMBDA"] = base_url("127.0.0.1", lambda_socket.getsockname()[1])
    sqs = boto3.client("sqs", region_name=region)
    # As many asynchronous invocations at once as a function has sandboxes to run them.
    invoker = AsyncInvoker(
        lambda url, body: sqs.send_message(QueueUrl=url, MessageBody=body), workers=max(ASYNC_WORKERS, args.sandboxes)
    )
    lambda_server = LambdaApiServer(
        LambdaApi(functions, invoker, async_configs(functions, lambda spec: os.environ[queue_url_variable(spec)])),
        lambda_socket,
    )
    if args.listen_fd is not None:
        server = GatewayServer(gateway, listening_socket=socket.socket(fileno=args.listen_fd))
    else:
        server = GatewayServer(gateway, address=(args.host, args.port))

    workers: list[threading.Thread] = [
        SqsPoller(
            sqs=boto3.client("sqs", region_name=region),
            queue_url=os.environ[queue_url_variable(spec)],
            spec=spec,
            function=functions.function(spec.handler),
            stop=stop,
            region=region,
            # The thinks queue's batches run side by side, up to the turn worker's sandboxes (a mapping scales out).
            concurrency=args.sandboxes if spec.key == topology.THINKS_QUEUE else 1,
        )
        for spec in topology.QUEUES
    ]
    workers.append(
        ScheduleTimer(
            function=functions.function(topology.SWEEPER_HANDLER),
            interval_s=settings.tool_agg_punctuate_interval_ms / 1000,
            rule_name=f"{agent}-sweep",
            stop=stop,
            region=region,
        )
    )
    if settings.think_start == "stream":
        # The table's stream feeds the owed-think starter, as the event source mapping does on AWS.
        dynamodb = boto3.client("dynamodb", region_name=region)
        streams = boto3.client("dynamodbstreams", region_name=region)
        dlq = os.environ[dlq_url_variable(topology.QUEUES_BY_KEY[topology.STREAM_CONSUMER.on_failure_queue])]
        workers.append(
            StreamPoller(
                reader=StreamReader(streams, enable_stream(dynamodb, settings.state_table)),
                function=functions.function(topology.OWED_THINKS_HANDLER),
                stop=stop,
                on_failure=lambda record: sqs.send_message(QueueUrl=dlq, MessageBody=json.dumps(record)),
            )
        )
    sandboxes.warm_up()  # the fork server imports its libraries while the rest starts
    for worker in workers:
        worker.start()
    lambda_server.start_background()
    server.start_background()
    log.info("agent %s serving on http://%s:%d", agent, server.server_address[0], server.port)

    while not stop.wait(0.5):
        pass
    log.info("agent %s stopping", agent)
    server.shutdown()
    server.server_close()
    lambda_server.shutdown()
    lambda_server.server_close()
    deadline = time.monotonic() + SHUTDOWN_GRACE_S
    never_run = invoker.stop(SHUTDOWN_GRACE_S)
    if never_run:
        log.warning("%d asynchronous invocation(s) never ran; the sweep re-sends a think that is owed", never_run)
    for worker in workers:
        worker.join(max(0.0, deadline - time.monotonic()))
    busy = [w.name for w in workers if w.is_alive()]
    if busy:
        log.warning("left in-flight work in %s; SQS redelivers it after the visibility timeout", ", ".join(busy))
    functions.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
