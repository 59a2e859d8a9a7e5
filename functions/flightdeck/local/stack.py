"""Every agent of a deployment file on loopback, state in a local moto server.

    with LocalStack("examples/two-agents.toml") as stack:
        requests.post(stack.urls["orchestrator"] + "/api/chat", json={"content": "@worker say hello"})

The parent (this process) binds every port itself before starting anything, so
a clash is reported at once and a chosen port cannot be taken by someone else
before its server uses it; each child inherits its listening socket. moto and
each agent run in their own process and process group (an agent's functions in
worker processes of that group: flightdeck.local.sandbox); stopping the stack (or
the parent exiting, being interrupted or terminated) ends every one of them,
and each child also stops by itself when its parent disappears.
"""

from __future__ import annotations

import atexit
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Literal, TextIO

from flightdeck import config_file
from flightdeck.adapters.peer_registry import PeerRegistry
from flightdeck.adapters.prompt_cache_ledger import PROMPT_CACHE_FILE
from flightdeck.adapters.usage_plans import UsagePlans
from flightdeck.config_models import DeploymentFile
from flightdeck.local import log_view
from flightdeck.local.invocation import HANDLERS_PACKAGE, LOCAL_REGION
from flightdeck.local.mcp_servers import McpServers
from flightdeck.local.net import PortInUseError, StackError, answers_http, base_url, listen
from flightdeck.local.resources import (
    LOCAL_CREDENTIALS,
    AgentResources,
    create_agent_resources,
    local_client,
    setting_variable,
)
from flightdeck.local.stack_children import Child, bedrock_access, child_base_environment

__all__ = ["MOTO_OWNER", "LocalStack", "LogListener", "PortInUseError", "StackError"]

LogListener = Callable[[str, dict[str, Any]], None]
# How the relay shows the children's output: "json", every line as written; "readable", one line per
# step of a delegation and per problem (flightdeck.local.log_view).
RelayFormat = Literal["json", "readable"]

MOTO = "moto"
MOTO_OWNER = "the moto server"  # who wanted a port, in PortInUseError
CARD_PATH = "/.well-known/agent-card.json"
STOP_GRACE_S = 5.0
# One readiness probe waits this long for its answer: a process that exits ends it at once.
READY_PROBE_TIMEOUT_S = 15.0
POWERTOOLS_METRICS_NAMESPACE = "Flightdeck"


class LocalStack:
    """moto + one process per agent of a deployment file, all on loopback.

    config: a DeploymentFile or the path of its TOML (default: the bundled example).
    host: address the agents listen on. port: the first agent's port (0: free
    ports), the next agents take the following ports in file order.
    url_overrides: agent -> the base URL the *other* agents use to reach it
    (their ALLOWED_HOST_MAPPING), e.g. a fault-injecting proxy in front of it.
    relay: where children's output goes, each line prefixed with its process
    name (default: this process's stderr at construction; None: discarded).
    relay_format: "json" (every line) or "readable" (one line per delegation step or problem).
    log_dir: also write each child's whole output to <log_dir>/<name>.log (appended).
    log_level: the agents' POWERTOOLS_LOG_LEVEL unless the file sets one (None: inherited); "DEBUG"
    shows every step of a delegation (flightdeck.observability).
    extra_env: settings added to every agent's environment, over the file's.
    handlers_package: where the handler modules live (tests use stand-ins).
    sandboxes: how many invocations of one function may run at once, each in a worker process of
    its own (None: the agent host's default; flightdeck.local.sandbox).
    Every JSON line a child writes is also offered to the listeners (add_listener).
    """

    def __init__(
        self,
        config: DeploymentFile | str | os.PathLike[str] | None = None,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        moto_port: int = 0,
        url_overrides: Mapping[str, str] | None = None,
        relay: TextIO | None | Literal["stderr"] = "stderr",
        relay_format: RelayFormat = "json",
        log_dir: str | os.PathLike[str] | None = None,
        log_level: str | None = None,
        extra_env: Mapping[str, str] | None = None,
        handlers_package: str = HANDLERS_PACKAGE,
        startup_timeout_s: float = 60.0,
        host_module: str = "flightdeck.local.agent_host",
        sandboxes: int | None = None,
    ):
        if config is None:
            config = config_file.DEFAULT_CONFIG
        self.deployment = config if isinstance(config, DeploymentFile) else config_file.load(Path(config))
        if not self.deployment.agents:
            raise StackError("the deployment file defines no agents")
        unknown = set(url_overrides or {}) - set(self.deployment.agents)
        if unknown:
            raise ValueError(f"url_overrides name unknown agents: {', '.join(sorted(unknown))}")
        self.host = host
        self.first_port = port
        self.moto_port = moto_port
        self.url_overrides = dict(url_overrides or {})
        self.relay = sys.stderr if relay == "stderr" else relay
        self.relay_format = relay_format
        self.log_dir = Path(log_dir) if log_dir is not None else None
        self.log_level = log_level
        self.extra_env = dict(extra_env or {})
        # The account's prompt cache, as the local models bill it: one file every agent's sandboxes share.
        self._prompt_cache = tempfile.TemporaryDirectory(prefix="flightdeck-prompt-cache-")
        # [local.mcp_servers]: their processes, the tokens they take (in the agents' environment too), their URLs.
        self._mcp = McpServers()
        self._previous_secrets: dict[str, str] = {}
        self.handlers_package = handlers_package
        # The module each agent host process runs (python -m): a tool that wraps the host (the
        # bench's counting host) names its own; the runtime knows nothing of what it adds.
        self.host_module = host_module
        self.sandboxes = sandboxes
        self.startup_timeout_s = startup_timeout_s

        self._ports: dict[str, int] = {}
        # agent -> the loopback port of its Lambda Invoke API (flightdeck.local.lambda_api)
        self._lambda_ports: dict[str, int] = {}
        self._moto_endpoint = ""
        self._resources: dict[str, AgentResources] = {}
        self._secrets: dict[str, str] = {}
        self._children: dict[str, Child] = {}
        self._listeners: list[LogListener] = []
        self._relay_lock = threading.Lock()
        self._lifecycle_lock = threading.RLock()
        self._prefix_width = max(len(MOTO), *(len(n) for n in self.deployment.agents))
        self._started = False
        self._stopped = False
        self._previous_signal_handlers: dict[int, Any] = {}

    # --- public surface -----------------------------------------------------------------

    @property
    def agents(self) -> tuple[str, ...]:
        return tuple(self.deployment.agents)

    @property
    def urls(self) -> dict[str, str]:
        """agent -> the base URL it listens on."""
        return {name: base_url(self.host, port) for name, port in self._ports.items()}

    @property
    def mcp_server_urls(self) -> dict[str, str]:
        """[local.mcp_servers] name -> the base URL it is served at (once started)."""
        return dict(self._mcp.urls)

    def mcp_warnings(self) -> list[str]:
        """Each agent's MCP servers that are down or lack a tool its `tools` names (flightdeck.local.mcp_probe)."""
        from flightdeck.local.mcp_probe import warnings

        return warnings(self.deployment, {**os.environ, **self._mcp.env})

    @property
    def console_url(self) -> str:
        """The web console, served by the first agent of the file (each agent serves it under /console/)."""
        return self.urls[self.agents[0]] + "/console/"

    @property
    def moto_endpoint(self) -> str:
        return self._moto_endpoint

    @property
    def resources(self) -> dict[str, AgentResources]:
        return dict(self._resources)

    def peer_urls(self) -> dict[str, str]:
        """agent -> the base URL other agents reach it at (url_overrides applied)."""
        return {**self.urls, **self.url_overrides}

    def env(self, agent: str) -> dict[str, str]:
        """The agent's function environment, as its Lambda functions would have it (once started)."""
        spec = self.deployment.agents[agent]
        aws = {
            "AWS_ENDPOINT_URL": self._moto_endpoint,
            # Its functions start thinks with Lambda Invoke calls: served by its own agent host, not moto.
            "AWS_ENDPOINT_URL_LAMBDA": base_url("127.0.0.1", self._lambda_ports[agent]),
            "AWS_DEFAULT_REGION": LOCAL_REGION,
            "AWS_REGION": LOCAL_REGION,
            **LOCAL_CREDENTIALS,
        }
        return {
            **({"POWERTOOLS_LOG_LEVEL": self.log_level} if self.log_level else {}),
            # §4 settings from the file; everything after them is fixed by the stack.
            **self.deployment.environment(agent),
            **self._mcp.env,
            PROMPT_CACHE_FILE: str(Path(self._prompt_cache.name) / "entries.sqlite3"),
            **self.extra_env,
            setting_variable("agent_name"): agent,
            setting_variable("agent_description"): spec.description,
            setting_variable("public_base_url"): self.urls[agent],
            setting_variable("agent_config"): spec.agent_config_json(),
            **self._resources[agent].environment(),
            setting_variable("tool_callback_secret"): self._secrets[agent],
            **(
                {setting_variable("tool_callback_secret_previous"): self._previous_secrets[agent]}
                if agent in self._previous_secrets
                else {}
            ),
            setting_variable("allowed_host_mapping"): spec.host_mapping(self.peer_urls()),
            # LOCAL ONLY tokens for the peers it calls (on AWS: the secret PEER_TOKENS_SECRET_ARN names).
            setting_variable("peer_tokens"): json.dumps(self.deployment.outbound_tokens(agent)),
            # The gateway streams the streaming routes' answers (flightdeck.local.gateway).
            setting_variable("streaming"): "on",
            # Every agent's gateway serves the console (--console-agents below): its routes exist.
            setting_variable("console"): "on",
            "POWERTOOLS_SERVICE_NAME": agent,
            "POWERTOOLS_METRICS_NAMESPACE": POWERTOOLS_METRICS_NAMESPACE,
            "POWERTOOLS_TRACE_DISABLED": "true",
            **aws,
            **(bedrock_access() if spec.model.provider == "bedrock" else {}),
        }

    def add_listener(self, listener: LogListener) -> None:
        """Call listener(agent, record) for every JSON log line a child writes (from a relay thread)."""
        self._listeners.append(listener)

    def remove_listener(self, listener: LogListener) -> None:
        self._listeners.remove(listener)

    def is_running(self, agent: str) -> bool:
        child = self._children.get(agent)
        return child is not None and not child.exited()

    def pids(self) -> dict[str, int]:
        """Process ids of the running children (agents and moto)."""
        return {name: child.pid for name, child in self._children.items()}

    # --- lifecycle ------------------------------------------------------------------------

    def __enter__(self) -> LocalStack:
        return self.start()

    def __exit__(self, *exc_info: Any) -> None:
        self.stop()

    def start(self) -> LocalStack:
        with self._lifecycle_lock:
            if self._started:
                return self
            if self._stopped:
                raise StackError("a stopped LocalStack cannot be started again; make a new one")
            self._started = True
            self._install_exit_hooks()
            # Bound but not yet handed to a child (each spawn closes the parent's copy).
            unspawned: dict[str, tuple[socket.socket, socket.socket]] = {}
            try:
                unspawned.update(self._bind_agent_ports())
                self._start_moto(listen("127.0.0.1", self.moto_port, MOTO_OWNER))
                self._start_mcp_servers()
                self._create_resources()
                for name in self.agents:
                    self._spawn_agent(name, unspawned.pop(name))
                for name in self.agents:
                    self._wait_until_answering(name)
            except BaseException:
                for pair in unspawned.values():
                    for sock in pair:
                        sock.close()
                self.stop()
                raise
            return self

    def stop_agent(self, name: str) -> None:
        """Kill one agent (its port then refuses connections, like a function that is down)."""
        with self._lifecycle_lock:
            child = self._children.pop(name, None)
            if child is None:
                raise StackError(f"agent {name!r} is not running")
            self._terminate([child])

    def start_agent(self, name: str) -> None:
        """Start a stopped agent again, on its former port, with the same environment."""
        with self._lifecycle_lock:
            if name not in self.deployment.agents:
                raise StackError(f"no agent {name!r} in the deployment")
            previous = self._children.get(name)
            if previous is not None:
                if not previous.exited():
                    raise StackError(f"agent {name!r} is already running")
                self._terminate([self._children.pop(name)])  # it crashed: reap it first
            sock = listen(self.host, self._ports[name], f"agent {name!r}")
            try:
                lambda_sock = listen("127.0.0.1", self._lambda_ports[name], f"agent {name!r}'s Lambda API")
            except BaseException:
                sock.close()
                raise
            self._spawn_agent(name, (sock, lambda_sock))
            self._wait_until_answering(name)

    def rotate_secret(self, name: str, new_secret: str) -> None:
        """Rotate an agent's callback secret as on AWS: the new one signs, the old one still verifies.

        The agent is restarted with both (its functions read the secret at cold start).
        """
        with self._lifecycle_lock:
            self._previous_secrets[name] = self._secrets[name]
            self._secrets[name] = new_secret
        self.stop_agent(name)
        self.start_agent(name)

    def stop(self) -> None:
        """Stop every child and wait for them; safe to call more than once."""
        with self._lifecycle_lock:
            if self._stopped:
                return
            self._stopped = True
            agents = [c for n, c in self._children.items() if n != MOTO]
            self._terminate(agents)  # agents first: they talk to moto
            self._mcp.stop()
            if MOTO in self._children:
                self._terminate([self._children[MOTO]])
            self._children.clear()
            self._remove_exit_hooks()
            self._prompt_cache.cleanup()

    # --- start-up steps -------------------------------------------------------------------

    def _start_mcp_servers(self) -> None:
        """LOCAL ONLY: the example MCP servers of [local.mcp_servers], each on a free port, which the agents'
        URLs are then pointed at (flightdeck.local.mcp_servers)."""
        self._mcp.start(self.deployment, child_base_environment())
        self.deployment = self._mcp.with_served_urls(self.deployment)

    def _bind_agent_ports(self) -> dict[str, tuple[socket.socket, socket.socket]]:
        """agent -> (its gateway's socket, its Lambda Invoke API's loopback socket)."""
        sockets: dict[str, tuple[socket.socket, socket.socket]] = {}
        try:
            for index, name in enumerate(self.agents):
                wanted = self.first_port + index if self.first_port else 0
                sock = listen(self.host, wanted, f"agent {name!r}")
                try:
                    lambda_sock = listen("127.0.0.1", 0, f"agent {name!r}'s Lambda API")
                except BaseException:
                    sock.close()
                    raise
                sockets[name] = (sock, lambda_sock)
                self._ports[name] = sock.getsockname()[1]
                self._lambda_ports[name] = lambda_sock.getsockname()[1]
        except BaseException:
            for pair in sockets.values():
                for sock in pair:
                    sock.close()
            raise
        return sockets

    def _start_moto(self, sock: socket.socket) -> None:
        port = sock.getsockname()[1]
        self._moto_endpoint = base_url("127.0.0.1", port)
        self._spawn(MOTO, ["flightdeck.local.moto_host"], sock, child_base_environment())
        deadline = time.monotonic() + self.startup_timeout_s
        while not answers_http(self._moto_endpoint + "/moto-api/", timeout_s=1.0):
            self._check_starting(MOTO, deadline)

    def _create_resources(self) -> None:
        dynamodb = local_client("dynamodb", self._moto_endpoint)
        sqs = local_client("sqs", self._moto_endpoint)
        usage = UsagePlans(local_client("apigateway", self._moto_endpoint))
        for name, spec in self.deployment.agents.items():
            # The resource prefix of an agent is its name.
            self._resources[name] = create_agent_resources(name, dynamodb=dynamodb, sqs=sqs)
            # Who may call it: the hashes of the file's LOCAL ONLY peer and user tokens, in its peer registry.
            registry = PeerRegistry(self._resources[name].table_name, dynamodb)
            for peer_id, (token, channels) in spec.callers().items():
                registry.add(peer_id, token, replace=True, channels=channels)
            # Their usage plans and keys, as the stack creates them (infra/usage_plans.py).
            usage.create_for(name, spec.usage_plans())
            # LOCAL ONLY secret from the file; without one, a random secret for this run
            # (only the agent itself mints and verifies its tokens).
            self._secrets[name] = spec.callback_secret or secrets.token_urlsafe(48)

    def _spawn_agent(self, name: str, sockets: tuple[socket.socket, socket.socket]) -> None:
        spec = self.deployment.agents[name]
        sock, lambda_sock = sockets
        env = {**child_base_environment(), **self.env(name)}
        args = [
            self.host_module,
            "--memory-mb",
            str(spec.deploy.memory_mb),
            "--handlers-package",
            self.handlers_package,
            "--authorizer-cache-s",
            str(spec.gateway.authorizer_cache_s),
            "--lambda-listen-fd",
            str(lambda_sock.fileno()),
            "--front-door",
            spec.deploy.front_door,
            *(["--sandboxes", str(self.sandboxes)] if self.sandboxes is not None else []),
            # The web console under /console/, listing every agent of the file (docs/CONSOLE.md).
            "--console-agents",
            json.dumps(self.urls),
        ]
        self._spawn(name, args, sock, env, extra_sockets=(lambda_sock,))

    def _spawn(
        self,
        name: str,
        module_args: list[str],
        sock: socket.socket,
        env: dict[str, str],
        extra_sockets: tuple[socket.socket, ...] = (),
    ) -> None:
        fd = sock.fileno()
        command = [sys.executable, "-m", *module_args, "--listen-fd", str(fd), "--parent-pid", str(os.getpid())]
        try:
            process = subprocess.Popen(
                command,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                pass_fds=(fd, *(s.fileno() for s in extra_sockets)),
                start_new_session=True,  # its own process group, killed as a whole
            )
        finally:
            for held in (sock, *extra_sockets):
                held.close()  # the child holds the port now
        child = Child(name, process)
        if self.log_dir is not None:
            self.log_dir.mkdir(parents=True, exist_ok=True)
            child.log_file = open(self.log_dir / f"{name}.log", "a", encoding="utf-8", buffering=1)  # noqa: SIM115
        self._children[name] = child
        for stream, watches_exit in ((process.stdout, True), (process.stderr, False)):
            relay = threading.Thread(
                target=self._relay_output, args=(child, stream, watches_exit), name=f"relay-{name}", daemon=True
            )
            relay.start()
            child.relays.append(relay)

    def _check_starting(self, name: str, deadline: float) -> None:
        child = self._children[name]
        if child.exited():
            raise StackError(f"{name} failed to start: {child.describe_exit()}")
        if time.monotonic() > deadline:
            raise StackError(f"{name} did not answer within {self.startup_timeout_s:.0f} s")
        time.sleep(0.1)

    def _wait_until_answering(self, name: str) -> None:
        deadline = time.monotonic() + self.startup_timeout_s
        # The socket listens from the start, so this request simply waits for the server to accept it,
        # and then for the card's function to start (its first sandbox waits for the fork server).
        while not answers_http(self.urls[name] + CARD_PATH, timeout_s=READY_PROBE_TIMEOUT_S):
            self._check_starting(name, deadline)

    # --- output ---------------------------------------------------------------------------

    def _relay_output(self, child: Child, stream: Any, watches_exit: bool) -> None:
        prefix = f"{child.name:<{self._prefix_width}} | "
        for raw in iter(stream.readline, b""):
            line = raw.decode("utf-8", errors="replace").rstrip("\r\n")
            child.tail.append(line)
            if child.log_file is not None:
                with self._relay_lock:
                    self._write_to(child.log_file, line)
            record = self._parse(line)
            if self.relay_format == "json":
                self._write_relay(prefix + line)
            elif record is not None:
                text = log_view.readable(child.name, record, self._prefix_width)
                if text is not None:
                    self._write_relay(text)
            elif not log_view.routine_text(line):
                self._write_relay(prefix + line)
            if record is not None:
                self._offer(child.name, record)
        stream.close()
        if watches_exit and not child.stopping:
            # stdout closes when the process ends; say so unless we ended it.
            try:
                status = os.waitid(os.P_PID, child.pid, os.WEXITED | os.WNOWAIT)
                code = status.si_status if status else "?"
            except ChildProcessError:
                code = child.process.returncode
            if not child.stopping:
                self._write_relay(f"{prefix}exited unexpectedly (status {code})")

    def _write_relay(self, text: str) -> None:
        if self.relay is None:
            return
        with self._relay_lock:
            self._write_to(self.relay, text)

    @staticmethod
    def _write_to(target: TextIO, text: str) -> None:
        try:
            target.write(text + "\n")
            target.flush()
        except (OSError, ValueError):
            pass  # the target is gone (closed terminal, closed file): keep draining

    @staticmethod
    def _parse(line: str) -> dict[str, Any] | None:
        if not line.startswith("{"):
            return None
        try:
            record = json.loads(line)
        except ValueError:
            return None
        return record if isinstance(record, dict) else None

    def _offer(self, agent: str, record: dict[str, Any]) -> None:
        for listener in list(self._listeners):
            try:
                listener(agent, record)
            except Exception as exc:  # a broken listener must not stop the relay
                self._write_relay(f"(log listener {listener!r} failed: {exc!r})")

    # --- stopping -------------------------------------------------------------------------

    def _terminate(self, children: list[Child]) -> None:
        for child in children:
            child.stopping = True
            self._signal_group(child, signal.SIGTERM)
        deadline = time.monotonic() + STOP_GRACE_S
        for child in children:
            while not child.exited() and time.monotonic() < deadline:
                time.sleep(0.05)
            # The leader is a zombie or still running, so its pid (= the group id)
            # cannot have been reused: anything left in the group is ours.
            self._signal_group(child, signal.SIGKILL)
            child.process.wait()
        for child in children:
            for relay in child.relays:
                relay.join(timeout=2.0)
            if child.log_file is not None:
                child.log_file.close()

    @staticmethod
    def _signal_group(child: Child, signum: int) -> None:
        try:
            os.killpg(child.pid, signum)
        except (ProcessLookupError, PermissionError):
            pass  # the group is already empty

    # --- parent exit ----------------------------------------------------------------------

    def _install_exit_hooks(self) -> None:
        atexit.register(self.stop)
        if threading.current_thread() is not threading.main_thread():
            return
        # SIGINT already raises KeyboardInterrupt; SIGTERM and SIGHUP would end the parent
        # without unwinding, so (unless someone installed a handler) they raise SystemExit.
        for signum in (signal.SIGTERM, signal.SIGHUP):
            if signal.getsignal(signum) == signal.SIG_DFL:
                self._previous_signal_handlers[signum] = signal.signal(signum, _exit_on_signal)

    def _remove_exit_hooks(self) -> None:
        atexit.unregister(self.stop)
        if threading.current_thread() is not threading.main_thread():
            return
        for signum, previous in self._previous_signal_handlers.items():
            if signal.getsignal(signum) is _exit_on_signal:
                signal.signal(signum, previous)
        self._previous_signal_handlers.clear()


def _exit_on_signal(signum: int, frame: Any) -> None:
    raise SystemExit(128 + signum)
