"""The measurements that need agents running: one local stack, four agents, one stub peer.

    delegator  --@worker-->  worker        counted round trips (1 and 5 delegations per turn),
                                           local latency by hop
    collector  --@blackhole-->             callback throughput: the bench posts the answers
    timekeeper --@blackhole-->             timeout lateness (the blackhole never answers)

`blackhole` is a stub peer served by this process: it accepts every task (202)
and keeps the callback token it carries, so the bench can answer real turns
itself (collector) or never (timekeeper). Every agent counts its AWS requests
and invocations (flightdeck.bench.counter) into one directory; the bench reads
them per time window and per agent. The delegating agents read their callback
key from Secrets Manager (moto), as deployed functions do, so its calls are
counted too.
"""

from __future__ import annotations

import base64
import http.server
import json
import math
import os
import tempfile
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO

import requests

from flightdeck.bench import a2a_bench, index_units, mcp_bench, moto_recorder, round_trip_cost
from flightdeck.bench.accounting import Tally, between, category, update_keys
from flightdeck.bench.counter import ENV as COUNT_ENV
from flightdeck.bench.counting_host import MODULE as COUNTING_HOST
from flightdeck.bench.dynamo_units import item_size
from flightdeck.bench.prices import PriceTable
from flightdeck.bench.roles import (
    BLACKHOLE,
    COLLECTOR,
    DELEGATOR,
    MEMORY_MB,
    TIMEKEEPER,
    WORKER,
    StackOptions,
    memory_mb,
)
from flightdeck.bench.stats import ratio, summary
from flightdeck.bench.timeline import BenchError, Timeline, hop_latencies
from flightdeck.config_models import DeploymentFile
from flightdeck.local.streams import StreamReader, enable_stream

RESULT_TEXT = "[blackhole] Task answered: the figures add up; nothing else to report."
HTTP_TIMEOUT_S = 30.0
BATCH_TIMEOUT_S = 300.0
SETTLE_QUIET_S = 0.8
EVERY_RECORD: tuple[dict[str, Any], ...] = ({},)  # a stream filter that lets every record through


# --- the stub peer ------------------------------------------------------------------------


class Blackhole:
    """An HTTP peer that accepts every task and never answers; keeps the callback tokens."""

    def __init__(self) -> None:
        self.tokens: dict[str, list[str]] = defaultdict(list)
        self._cond = threading.Condition()
        owner = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:  # noqa: N802 - stdlib name
                length = int(self.headers.get("Content-Length") or 0)
                try:
                    body = json.loads(self.rfile.read(length) or b"{}")
                except ValueError:
                    body = {}
                reply = body.get("reply") or {}
                with owner._cond:
                    owner.tokens[str(reply.get("callbackService", ""))].append(str(reply.get("bearerToken", "")))
                    owner._cond.notify_all()
                data = json.dumps({"session_id": body.get("session_id", ""), "status": "accepted"}).encode()
                self.send_response(202)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, name="blackhole", daemon=True)

    def start(self) -> Blackhole:
        self._thread.start()
        return self

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def take(self, service: str, n: int, timeout_s: float) -> list[str]:
        """Wait for n tokens from `service` and hand them out (oldest first)."""
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while len(self.tokens[service]) < n:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise BenchError(
                        f"{service} dispatched {len(self.tokens[service])} of {n} tasks in {timeout_s:.0f} s"
                    )
                self._cond.wait(min(left, 0.5))
            taken, self.tokens[service] = self.tokens[service][:n], self.tokens[service][n:]
            return taken


def token_session(token: str) -> str:
    """The session a callback token belongs to (its payload, read without verifying)."""
    payload = token.split(".", 1)[0]
    return str(json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4))).get("session_id", ""))


# --- what the agents log ------------------------------------------------------------------


# --- the deployment -----------------------------------------------------------------------


def secret_name(agent: str) -> str:
    return f"flightdeck-bench/{agent}-callback-key"


def peer_tokens_secret_name(agent: str) -> str:
    return f"flightdeck-bench/{agent}-peer-tokens"


BENCH_PEER = "bench"  # this process, calling the delegating agents' /api/chat


def new_peer_tokens() -> dict[str, str]:
    """Bearer tokens for inbound peer authentication (peer id -> token); empty if this code base has none."""
    try:
        from flightdeck.domain.peers import new_token
    except ImportError:
        return {}
    return {BENCH_PEER: new_token(BENCH_PEER), DELEGATOR: new_token(DELEGATOR)}


STRUCTURED_SKILL: dict[str, Any] = {
    "id": "summarise",
    "description": "A short summary of a text",
    "input_schema": {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]},
    "output_schema": {
        "type": "object",
        "properties": {"summary": {"type": "string"}, "words": {"type": "integer"}},
        "required": ["summary", "words"],
    },
    # The MCP rows call it on the worker's /mcp too (answered by its model).
    "expose": ["a2a", "mcp"],
}
# A skill answered by a deterministic handler (no model): the MCP server row's cheapest tools/call.
HANDLER_SKILL: dict[str, Any] = {"id": "count_words", "handler": "word_count", "expose": ["mcp"]}


def build_deployment(blackhole_url: str, opts: StackOptions, mcp_url: str = "") -> DeploymentFile:
    """mcp_url: a loopback MCP server (mcp_bench.LoopbackMcp) whose tool the delegator's model may call."""

    def delegating(timeout_ms: int, **extra: Any) -> dict[str, Any]:
        return {
            "model": {"provider": "local", "think_delay_ms": 0},
            "env": {"ASYNC_TOOL_TIMEOUT_MS": str(timeout_ms)},
            **extra,
        }

    agents: dict[str, dict[str, Any]] = {
        DELEGATOR: delegating(opts.delegator_timeout_ms, allow=[WORKER], delegates=[{"agent": WORKER}]),
        WORKER: {"model": {"provider": "local", "think_delay_ms": 0}, "allow": [DELEGATOR]},
        COLLECTOR: delegating(3_600_000, allowed_hosts={BLACKHOLE: blackhole_url}, delegates=[{"agent": BLACKHOLE}]),
        TIMEKEEPER: delegating(
            opts.timekeeper_timeout_ms, allowed_hosts={BLACKHOLE: blackhole_url}, delegates=[{"agent": BLACKHOLE}]
        ),
    }
    if opts.roles is not None:
        for bench_name, role in ((DELEGATOR, opts.roles.delegator), (WORKER, opts.roles.worker)):
            spec = agents[bench_name]
            spec.update(
                description=role.description,
                system_prompt=role.system_prompt,
                model=dict(role.model),
                builtin_tools=list(role.builtin_tools),
                skills=list(role.skills),
                deploy={"memory_mb": role.memory_mb},
            )
            spec["env"] = {**role.env, **spec.get("env", {})}  # the bench's own timing wins
        agents[DELEGATOR]["delegates"] = [{"agent": WORKER, "description": opts.roles.delegator.tool_description}]
    # The worker's skill with a contract: the delegator's model gets a tool for it from the worker's card
    # (flightdeck.domain.skills.peers), and the structured round trips call it.
    agents[WORKER]["skills"] = [*agents[WORKER].get("skills", []), STRUCTURED_SKILL, HANDLER_SKILL]
    if mcp_url:
        # Listed on its first think per warm function and TTL (an HTTP request, no AWS request).
        base = mcp_url.rsplit("/mcp", 1)[0]
        agents[DELEGATOR]["allowed_hosts"] = {**agents[DELEGATOR].get("allowed_hosts", {}), mcp_bench.SERVER: base}
        agents[DELEGATOR]["mcp_servers"] = [{"name": mcp_bench.SERVER, "url": mcp_url, "tools": [mcp_bench.TOOL]}]
    for name, spec in agents.items():
        spec["name"] = name
        # The bench measures the system, not its throttles: each peer's usage plan is far above the load.
        spec["gateway"] = {"peer_rate_limit": 10_000, "peer_burst_limit": 5_000}
        spec["callback_secret"] = f"bench-only-{name}-callback-secret-0123456789abcdef"
        if name != WORKER:
            # Read from Secrets Manager (moto) like a deployed function; counted.
            spec["env"]["TOOL_CALLBACK_SECRET_ARN"] = secret_name(name)
    # The delegator presents its peer token to the worker, read from Secrets Manager like on AWS.
    agents[DELEGATOR]["env"]["PEER_TOKENS_SECRET_ARN"] = peer_tokens_secret_name(DELEGATOR)
    return DeploymentFile.model_validate(
        {
            "defaults": {
                "TOOL_AGG_PUNCTUATE_INTERVAL_MS": str(opts.sweep_interval_ms),
                "TOOL_AGG_TOMBSTONE_TTL_MS": "60000",
                "REPLY_RETRY_MAX_MS": "60000",
            },
            "agents": agents,
        }
    )


# --- the run ------------------------------------------------------------------------------


class StackRun:
    def __init__(
        self,
        opts: StackOptions,
        prices: PriceTable,
        progress: Callable[[str], None],
        workdir: Path,
        logs: TextIO | None,
    ):
        from flightdeck.local.stack import LocalStack

        self.opts = opts
        self.prices = prices
        self.say = progress
        self.counts_dir = workdir / "counts"
        self.counts_dir.mkdir(parents=True, exist_ok=True)
        self.blackhole = Blackhole().start()
        self.mcp_server = mcp_bench.LoopbackMcp().start()
        self.timeline = Timeline()
        self.stack = LocalStack(
            build_deployment(self.blackhole.url, opts, self.mcp_server.url),
            host_module=COUNTING_HOST,
            relay=logs,
            # DEBUG: the timeline's routine steps (flightdeck.observability) time the hops and end the waits.
            extra_env={
                COUNT_ENV: str(self.counts_dir),
                "POWERTOOLS_LOG_LEVEL": "DEBUG",
                "FLIGHTDECK_LOCAL_LOG_LEVEL": "WARNING",
            },
        )
        self.stack.add_listener(self.timeline)
        self.http = requests.Session()
        self.http.trust_env = False  # loopback: never through a proxy
        self.size_cache: dict[tuple[str, str, str], int] = {}
        self.peer_tokens = new_peer_tokens()
        self._records: list[dict[str, Any]] = []
        self.index_streams: dict[str, StreamReader] = {}
        self._offsets: dict[Path, int] = {}

    # --- plumbing ---------------------------------------------------------------------

    def __enter__(self) -> StackRun:
        started = time.monotonic()
        # moto's recorder writes here (read by moto_recorder.Recording): its process inherits this environment.
        previous = os.environ.get(moto_recorder.FILE_VARIABLE)
        os.environ[moto_recorder.FILE_VARIABLE] = str(self.counts_dir.parent / "moto-recording.jsonl")
        try:
            self.stack.start()
        finally:
            if previous is None:
                os.environ.pop(moto_recorder.FILE_VARIABLE, None)
            else:
                os.environ[moto_recorder.FILE_VARIABLE] = previous
        from flightdeck.local.resources import local_client

        self.dynamodb = moto_recorder.mark(local_client("dynamodb", self.stack.moto_endpoint))
        # Index write units are read off each table's stream (flightdeck.bench.index_units).
        streams = moto_recorder.mark(local_client("dynamodbstreams", self.stack.moto_endpoint))
        self.index_streams = {
            agent: StreamReader(streams, enable_stream(self.dynamodb, f"{agent}-state"))
            for agent in self.stack.deployment.agents
        }
        secrets = local_client("secretsmanager", self.stack.moto_endpoint)
        for name, spec in self.stack.deployment.agents.items():
            if "TOOL_CALLBACK_SECRET_ARN" in spec.env:
                secrets.create_secret(Name=secret_name(name), SecretString=spec.callback_secret)
        secrets.create_secret(
            Name=peer_tokens_secret_name(DELEGATOR),
            SecretString=json.dumps({WORKER: self.peer_tokens[DELEGATOR]} if self.peer_tokens else {}),
        )
        self._register_peers()
        self.startup_s = time.monotonic() - started
        return self

    def _register_peers(self) -> None:
        """Inbound peer authentication: the worker knows the delegator, the delegating agents know the bench."""
        if not self.peer_tokens:
            return
        from flightdeck.adapters.peer_registry import PeerRegistry
        from flightdeck.adapters.usage_plans import UsagePlans
        from flightdeck.domain.peer_usage import default_plan_name
        from flightdeck.local.resources import local_client

        usage = UsagePlans(local_client("apigateway", self.stack.moto_endpoint))
        callers = [(WORKER, DELEGATOR), (WORKER, BENCH_PEER)] + [
            (agent, BENCH_PEER) for agent in (DELEGATOR, COLLECTOR, TIMEKEEPER)
        ]
        for agent, peer in callers:
            # As `flightdeck peers add` does: the token's hash, and a key in the agent's default usage plan.
            # The bench is also the worker's MCP client (its /mcp rows): one key for both channels there.
            channels = ("a2a", "mcp") if (agent, peer) == (WORKER, BENCH_PEER) else ("a2a",)
            PeerRegistry(f"{agent}-state", client=self.dynamodb).add(
                peer, self.peer_tokens[peer], replace=True, channels=channels
            )
            usage.ensure_peer_key(agent, peer, usage.plan_id(default_plan_name(agent)))

    def __exit__(self, *exc: Any) -> None:
        try:
            self.stack.stop()
        finally:
            self.blackhole.close()
            self.mcp_server.close()
            self.http.close()

    def _auth(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.peer_tokens[BENCH_PEER]}"} if self.peer_tokens else {}

    def chat(self, agent: str, content: str, session_id: str | None = None, busy_wait_s: float = 0.0) -> str:
        """POST /api/chat (a new session, or the next message of session_id); a busy session is retried for busy_wait_s."""
        body: dict[str, Any] = {"content": content, **({"session_id": session_id} if session_id else {})}
        deadline = time.monotonic() + busy_wait_s
        while True:
            resp = self.post(f"{self.stack.urls[agent]}/api/chat", json=body, headers=self._auth())
            if resp.status_code == 409 and time.monotonic() < deadline:
                time.sleep(0.05)  # the final answer is logged a moment before the session is idle again
                continue
            if resp.status_code != 202:
                raise BenchError(f"POST /api/chat to {agent} answered {resp.status_code}: {resp.text[:300]}")
            return str(resp.json()["session_id"])

    def session(self, agent: str, session_id: str) -> dict[str, Any]:
        try:
            resp = self.http.get(
                f"{self.stack.urls[agent]}/api/sessions/{session_id}", headers=self._auth(), timeout=HTTP_TIMEOUT_S
            )
        except requests.RequestException as exc:
            raise BenchError(f"GET session {session_id} failed: {exc}") from exc
        if resp.status_code != 200:
            raise BenchError(
                f"GET /api/sessions/{session_id} on {agent} answered {resp.status_code}: {resp.text[:300]}"
            )
        session: dict[str, Any] = resp.json()
        return session

    def records(self) -> list[dict[str, Any]]:
        """Every record the agents wrote so far (read incrementally: the files only grow)."""
        for path in sorted(self.counts_dir.glob("*.jsonl")):
            with open(path, "rb") as handle:
                handle.seek(self._offsets.get(path, 0))
                data = handle.read()
            complete = data.rfind(b"\n") + 1  # a line being written is read next time
            self._offsets[path] = self._offsets.get(path, 0) + complete
            for line in data[:complete].splitlines():
                try:
                    self._records.append(json.loads(line))
                except ValueError:
                    pass
        for agent, stream in self.index_streams.items():
            self._records.extend(index_units.records_of(stream.read(filters=EVERY_RECORD), agent))
        self._records.sort(key=lambda r: r.get("t", 0.0))
        return self._records

    def settle(
        self, agents: set[str], start: float, timers: int, not_before: float, timeout_s: float = 60.0, thinks: int = 0
    ) -> float:
        """Wait until `timers` deadline-timer messages and `thinks` thinks of the window ran and the agents went
        quiet; returns now."""
        deadline = time.monotonic() + timeout_s
        while True:
            now = time.time()
            window = [r for r in between(self.records(), start, now) if r.get("agent") in agents]
            ended = Counter(r.get("fn") for r in window if r.get("k") == "inv" for _ in range(int(r.get("n") or 1)))
            fired = ended["deadline_timer"]
            busy = [r["t"] for r in window if category(r) in ("handler", "event_source_mapping")]
            if (
                fired >= timers
                and ended["turn_worker"] >= thinks
                and now >= not_before
                and (not busy or now - max(busy) >= SETTLE_QUIET_S)
            ):
                return now
            if time.monotonic() > deadline:
                raise BenchError(f"{sorted(agents)} did not settle: {fired} of {timers} deadline timers ran")
            time.sleep(0.3)

    def item_sizes(self, keys: set[tuple[str, str, str]], fresh: bool = False) -> dict[tuple[str, str, str], int]:
        """Sizes of updated items, read back from moto (as they are now: after their last update).

        fresh: read them again even if read before (an item that grows, like a conversation's session).
        """
        wanted: dict[str, list[tuple[str, str]]] = defaultdict(list)
        for table, pk, sk in keys - (set() if fresh else set(self.size_cache)):
            wanted[table].append((pk, sk))
        for table, pairs in wanted.items():
            for start in range(0, len(pairs), 100):
                request = {
                    table: {"Keys": [{"pk": {"S": pk}, "sk": {"S": sk}} for pk, sk in pairs[start : start + 100]]}
                }
                while request:
                    resp = self.dynamodb.batch_get_item(RequestItems=request)
                    for item in resp.get("Responses", {}).get(table, []):
                        self.size_cache[(table, item["pk"]["S"], item["sk"]["S"])] = item_size(item)
                    request = resp.get("UnprocessedKeys") or {}
        return self.size_cache

    def table_item(self, agent: str, pk: str, sk: str) -> dict[str, Any]:
        item = (
            self.dynamodb.get_item(
                TableName=f"{agent}-state", Key={"pk": {"S": pk}, "sk": {"S": sk}}, ConsistentRead=True
            ).get("Item")
            or {}
        )
        return {k: next(iter(v.values())) for k, v in item.items()}

    def table_query(self, agent: str, pk: str, prefix: str) -> list[dict[str, Any]]:
        resp = self.dynamodb.query(
            TableName=f"{agent}-state",
            KeyConditionExpression="pk = :pk AND begins_with(sk, :p)",
            ExpressionAttributeValues={":pk": {"S": pk}, ":p": {"S": prefix}},
            ConsistentRead=True,
        )
        return [{k: next(iter(v.values())) for k, v in item.items()} for item in resp.get("Items", [])]

    # --- phases -----------------------------------------------------------------------

    def round_trip(self, content: str, timeout_s: float = 60.0) -> tuple[str, float, float]:
        """One turn on the delegator, to its final answer; returns (session id, sent at, answer seen at)."""
        sent = time.time()
        sid = self.chat(DELEGATOR, content)
        self.timeline.wait_for(DELEGATOR, "final_answer", sid, timeout_s)
        return sid, sent, time.time()

    def fan_out_task(self, i: int) -> str:
        return " ".join(f"@{WORKER} part {j + 1} of task {i}: check the figures" for j in range(self.opts.fan_out))

    def warm_up(self) -> None:
        """Import every handler once (cold starts are measured separately) and learn the queue ARNs."""
        self.say("warming up (first invocations import the handlers)")
        start = time.time()
        for i in range(self.opts.warmup):
            self.round_trip(f"@{WORKER} warm-up task {i}")
        # The other agents warm up while the delegator's deadline timers are pending.
        keeper = self.chat(TIMEKEEPER, f"@{BLACKHOLE} warm-up task that nobody answers")
        [[one, two]] = self.collector_turns(1, 2, "warm-up task")
        self.post_single(one)
        self.post_batch([two])
        self.timeline.wait_for(COLLECTOR, "final_answer", token_session(one), 60)
        self.timeline.wait_for(TIMEKEEPER, "final_answer", keeper, 60)
        self.settle({DELEGATOR, WORKER}, start, self.opts.warmup, not_before=time.time())

    def counted_round_trips(
        self, n: int, content: Callable[[int], str], label: str, meanwhile: Callable[[], None] | None = None
    ) -> dict[str, Any]:
        """n turns on the delegator, one after the other; then (meanwhile: other agents' work) wait for their timers."""
        self.say(f"counting {n} round trip(s) with {label}")
        recording = moto_recorder.Recording(self.stack.moto_endpoint, self.http)
        recording.start()
        start = time.time()
        trips = [self.round_trip(content(i)) for i in range(n)]
        if meanwhile is not None:
            meanwhile()  # other agents: their records are not in this window's count
        last_deadline = trips[-1][1] + self.opts.delegator_timeout_ms / 1000
        end = self.settle({DELEGATOR, WORKER}, start, n, not_before=last_deadline + 0.5)
        recorded = recording.stop()
        # Every agent's DynamoDB requests in the window, whatever their category, as moto saw them all.
        counted = Counter(
            str(r["op"])
            for r in between(self.records(), start, time.time())
            if r.get("k") == "aws" and r.get("svc") == "dynamodb"
        )
        window = [r for r in between(self.records(), start, end) if r.get("agent") in (DELEGATOR, WORKER)]
        sizes = self.item_sizes(update_keys(window))
        total = Tally.of(window, sizes=sizes, memory_mb=memory_mb(self.opts, DELEGATOR), agents=[DELEGATOR]).plus(
            Tally.of(window, sizes=sizes, memory_mb=memory_mb(self.opts, WORKER), agents=[WORKER])
        )
        total.log_bytes = self.timeline.log_bytes({DELEGATOR, WORKER}, start, end)
        # A counted turn must not time out (its deadline is short so that its timer fires within the window).
        timed_out = [
            sid for sid, _, _ in trips if self.timeline.find(DELEGATOR, timeline="timeout_synthesized", session_id=sid)
        ]
        # What a durable execution would checkpoint per turn: the turn's conversation, read back after the window.
        conversation_bytes = [
            len(json.dumps(self.session(DELEGATOR, sid).get("messages", []), separators=(",", ":"), ensure_ascii=False))
            for sid, _, _ in trips
        ]
        return {
            "round_trips": n,
            "conversation_bytes": sum(conversation_bytes) / n,
            "window": (start, end),
            "records": window,
            "sizes": sizes,
            "tally": total,
            "timed_out": len(timed_out),
            "sessions": [t[0] for t in trips],
            "client_ms": [(t[2] - t[1]) * 1000 for t in trips],
            "log_bytes_by_agent": {a: self.timeline.log_bytes({a}, start, end) for a in (DELEGATOR, WORKER)},
            "moto_recorder_check": moto_recorder.compare(counted, recorded),
        }

    def post(self, url: str, timeout_s: float = HTTP_TIMEOUT_S, **kwargs: Any) -> requests.Response:
        try:
            return self.http.post(url, timeout=timeout_s, **kwargs)
        except requests.RequestException as exc:
            raise BenchError(f"POST {url} failed: {exc}") from exc

    def post_single(self, token: str) -> int:
        resp = self.post(
            f"{self.stack.urls[COLLECTOR]}/api/tools/response",
            json={"result": RESULT_TEXT},
            headers={"Authorization": f"Bearer {token}"},
        )
        return resp.status_code

    def post_batch(self, tokens: list[str]) -> list[str]:
        # moto serves a batch's transactions one at a time, slower as tables grow: a generous timeout.
        resp = self.post(
            f"{self.stack.urls[COLLECTOR]}/api/tools/responses",
            timeout_s=BATCH_TIMEOUT_S,
            json={"items": [{"token": t, "result": RESULT_TEXT} for t in tokens]},
        )
        if resp.status_code != 200:
            raise BenchError(f"batch callback answered {resp.status_code}: {resp.text[:300]}")
        return [str(r.get("status")) for r in resp.json().get("results", [])]

    def start_collector_turns(self, turns: int, per_turn: int, label: str) -> None:
        for i in range(turns):
            self.chat(COLLECTOR, " ".join(f"@{BLACKHOLE} {label} {i}.{j}: check the figures" for j in range(per_turn)))

    def collector_turns(self, turns: int, per_turn: int, label: str, started: bool = False) -> list[list[str]]:
        """Start (unless started) `turns` collector turns of `per_turn` delegations; their tokens, grouped by turn."""
        if not started:
            self.start_collector_turns(turns, per_turn, label)
        tokens = self.blackhole.take(COLLECTOR, turns * per_turn, timeout_s=60 + 2 * turns)
        by_turn: dict[str, list[str]] = defaultdict(list)
        for token in tokens:
            by_turn[token_session(token)].append(token)
        return list(by_turn.values())

    @property
    def throughput_turns(self) -> int:
        """Turns per mode: whole turns of fan_out delegations, at least `callbacks` answers."""
        return max(1, math.ceil(self.opts.callbacks / self.opts.fan_out))

    def prepare_throughput(self) -> None:
        """Start the collector's turns (they wait on the blackhole until the bench answers them)."""
        self.say(
            f"callback throughput: starting {2 * self.throughput_turns} real turns of {self.opts.fan_out} "
            "delegations that wait on the blackhole"
        )
        self.start_collector_turns(2 * self.throughput_turns, self.opts.fan_out, "throughput task")

    def throughput_ready(self) -> None:
        """Wait until every throughput turn has dispatched (its tokens are in), so the stack is idle again."""
        self._throughput_tokens = self.collector_turns(
            2 * self.throughput_turns, self.opts.fan_out, "throughput task", started=True
        )

    def callback_throughput(self) -> dict[str, Any]:
        """The same real turns answered one result per request and in batches, in alternating rounds.

        moto copies a whole table for every item of a transaction, so it slows down as the
        collector's table grows: rounds of `batch_size` answers alternate between the modes
        (and which goes first), so both see the same table sizes. Between chunks the bench waits
        (untimed) for the turns a chunk completed to think again, so each chunk starts on a quiet stack.
        """
        size, k = self.opts.batch_size, self.opts.fan_out
        turns = self._throughput_tokens
        per_mode_turns = self.throughput_turns
        turns_per_round = max(1, size // k)
        self.say(
            f"callback throughput: {per_mode_turns * k} answers posted one per request, {per_mode_turns * k} "
            f"in batches of up to {size}, alternating rounds"
        )
        single_turns, batch_turns = turns[:per_mode_turns], turns[per_mode_turns : 2 * per_mode_turns]
        stats: dict[str, dict[str, Any]] = {
            mode: {
                "callbacks": 0,
                "turns": 0,
                "http_requests": 0,
                "wall_s": 0.0,
                "function_ms": 0.0,
                "outcomes": Counter(),
                "records": [],
            }
            for mode in ("single", "batch")
        }
        finals = len(self.timeline.find(COLLECTOR, timeline="final_answer"))
        for index, at in enumerate(range(0, per_mode_turns, turns_per_round)):
            order = ("single", "batch") if index % 2 == 0 else ("batch", "single")
            for mode in order:
                group = (single_turns if mode == "single" else batch_turns)[at : at + turns_per_round]
                chunk = [token for turn in group for token in turn]
                st = stats[mode]
                start, began = time.time(), time.perf_counter()
                if mode == "single":
                    for token in chunk:
                        st["outcomes"][str(self.post_single(token))] += 1
                        st["http_requests"] += 1
                else:
                    st["outcomes"].update(self.post_batch(chunk))
                    st["http_requests"] += 1
                st["wall_s"] += time.perf_counter() - began
                end = time.time()
                st["callbacks"] += len(chunk)
                st["turns"] += len(group)
                st["records"] += [
                    r
                    for r in between(self.records(), start, end)
                    if r.get("agent") == COLLECTOR and r.get("fn") == "callback"
                ]
                finals += len(group)
                self.timeline.wait(
                    lambda: len(self.timeline.find(COLLECTOR, timeline="final_answer")) >= finals,
                    60 + 5 * len(group),
                    "the collector's final answers",
                )
        modes: dict[str, Any] = {}
        for mode, st in stats.items():
            window = st.pop("records")
            tally = Tally.of(window, sizes=self.item_sizes(update_keys(window)), memory_mb=MEMORY_MB)
            function_ms = sum(float(r.get("ms") or 0) for r in window if r.get("k") == "inv")
            wall = st["wall_s"]
            modes[mode] = {
                "callbacks": st["callbacks"],
                "turns": st["turns"],
                "http_requests": st["http_requests"],
                "wall_s": round(wall, 3),
                "results_per_s": round(st["callbacks"] / wall, 2) if wall else math.inf,
                "callback_function_ms_per_result": round(function_ms / st["callbacks"], 2),
                "outcomes": dict(st["outcomes"]),
                "per_callback": tally.divided(st["callbacks"]).to_dict(self.prices),
            }
        modes["ratio_batch_to_single_results_per_s"] = round(
            ratio(modes["batch"]["results_per_s"], modes["single"]["results_per_s"]), 2
        )
        modes["ratio_requests_single_to_batch"] = round(
            ratio(modes["single"]["http_requests"], modes["batch"]["http_requests"]), 2
        )
        return modes

    def _warmed(self, agent: str, since: float, thinks: int) -> float:
        """When the warm-up calls made since `since` have ended on `agent`, their thinks included: the start of a
        counted window. A call's answer can go back before its think has finished (an A2A task is answered once
        it completes; the think then marks it notified): a window started at once counted that write too."""
        return self.settle({agent}, since, 0, not_before=time.time(), thinks=thinks)

    def _counted_window(self, agent: str, start: float, n: int) -> dict[str, Any]:
        """What `agent` used since `start` (no deadline timers to wait for), per call of n, priced."""
        end = self.settle({agent}, start, 0, not_before=time.time())
        window = [r for r in between(self.records(), start, end) if r.get("agent") == agent]
        sizes = self.item_sizes(update_keys(window))
        tally = Tally.of(window, sizes=sizes, memory_mb=memory_mb(self.opts, agent), agents=[agent])
        tally.log_bytes = self.timeline.log_bytes({agent}, start, end)
        per = tally.divided(n)
        return {
            "calls": n,
            "per_call": per.to_dict(self.prices),
            "cost_per_million_calls_usd": {k: round(v * 1e6, 2) for k, v in per.cost(self.prices).items()},
        }

    def mcp_server_calls(self, n: int) -> dict[str, Any]:
        """tools/call on the worker's /mcp (an MCP client's request, answered within it): a skill answered
        by its handler, and `ask` (the model). Counted on the worker alone: it is the whole path."""
        url = f"{self.stack.urls[WORKER]}/mcp"
        token = self.peer_tokens.get(BENCH_PEER)
        calls: dict[str, tuple[str, Callable[[int], dict[str, Any]]]] = {
            "handler_skill": (HANDLER_SKILL["id"], lambda i: {"text": f"check the figures of report {i}"}),
            "ask": ("ask", lambda i: {"message": f"check the figures of report {i}"}),
        }
        warm = time.time()
        for tool, arguments in calls.values():
            mcp_bench.call(self.http, url, token, tool, arguments(-1), 0)  # warm: the a2a function's first request
        start = self._warmed(WORKER, warm, thinks=len(calls))
        out: dict[str, Any] = {}
        for label, (tool, arguments) in calls.items():
            self.say(f"counting {n} MCP tools/call of {tool} on the worker's /mcp")
            start = max(start, time.time())
            client_ms = []
            for i in range(n):
                sent = time.monotonic()
                mcp_bench.call(self.http, url, token, tool, arguments(i), i + 1)
                client_ms.append((time.monotonic() - sent) * 1000)
            out[label] = {
                "tool": tool,
                **self._counted_window(WORKER, start, n),
                "client_ms": {k: round(v, 1) for k, v in summary(client_ms).items()},
            }
        return out

    def a2a_round_trips(self, n: int) -> dict[str, Any]:
        """Blocking sends to the worker's /a2a, n in v0.3 and n in v1.0 (flightdeck.bench.a2a_bench), each answered
        by its model; counted on the worker alone: it is the whole path."""
        url = f"{self.stack.urls[WORKER]}/a2a"
        token = self.peer_tokens.get(BENCH_PEER)
        out: dict[str, Any] = {}
        for version in a2a_bench.VERSIONS:
            warm = time.time()
            a2a_bench.send(self.http, url, token, version, "say hello", f"bench-warm-{version}", 0)  # warm
            self.say(f"counting {n} A2A v{version} round trips on the worker's /a2a")
            start = self._warmed(WORKER, warm, thinks=1)
            client_ms = []
            for i in range(n):
                sent = time.monotonic()
                a2a_bench.send(
                    self.http, url, token, version, f"say that report {i} is fine", f"bench-{version}-{i}", i + 1
                )
                client_ms.append((time.monotonic() - sent) * 1000)
            out[version] = {
                **self._counted_window(WORKER, start, n),
                "client_ms": {k: round(v, 1) for k, v in summary(client_ms).items()},
            }
        return out

    def mcp_client_turns(self, n: int) -> dict[str, Any]:
        """Turns on the delegator whose model calls one tool of an MCP server on loopback, beside turns with no
        tool at all: the requests the call adds, and its time (the call itself, and the whole turn's)."""
        tool = f"{mcp_bench.SERVER}__{mcp_bench.TOOL}"

        def turns(content: Callable[[int], str]) -> tuple[dict[str, Any], list[float], list[str]]:
            start = time.time()
            trips = [self.round_trip(content(i)) for i in range(n)]
            return (
                self._counted_window(DELEGATOR, start, n),
                [(t[2] - t[1]) * 1000 for t in trips],
                [t[0] for t in trips],
            )

        self.say(f"counting {n} turns with no tool, then {n} with one MCP tool call ({tool})")
        before = self.mcp_server.calls
        plain, plain_ms, _ = turns(lambda i: f"say that report {i} is fine")
        with_call, call_ms, sessions = turns(lambda i: f"!{tool} report {i}")
        if self.mcp_server.calls - before != n:
            raise BenchError(f"{n} turns made {self.mcp_server.calls - before} MCP calls")
        # The client's own time for each call, as the agent logs it ("benchmcp__lookup answered in N ms").
        tool_ms = [
            float(str(r.get("message", "")).rsplit(" in ", 1)[-1].split()[0])
            for sid in sessions
            for r in self.timeline.find(DELEGATOR, timeline="mcp_tool_result", session_id=sid)
            if " answered in " in str(r.get("message", ""))
        ]
        return {
            "tool": tool,
            "plain": plain,
            "with_call": with_call,
            "added_aws_requests": round(
                with_call["per_call"]["aws_requests_total"] - plain["per_call"]["aws_requests_total"], 3
            ),
            "call_ms": {k: round(v, 1) for k, v in summary(tool_ms).items()} if tool_ms else None,
            "client_round_trip_ms": {
                "plain": {k: round(v, 1) for k, v in summary(plain_ms).items()},
                "with_call": {k: round(v, 1) for k, v in summary(call_ms).items()},
            },
        }

    def conversation(self) -> dict[str, Any]:
        """One session on the delegator, one user message at a time (each sent once the session is idle again).

        The messages in `conversation_at` are counted: the stack is let go quiet before and after each, and
        the delegator's records in between are that message's. A think is one turn-worker invocation; its
        requests and units are the turn worker's own calls (what a think costs as the conversation grows);
        the whole message (ingest, queue, think) is given too. No message delegates: one think each.
        """
        at = sorted(set(self.opts.conversation_at))
        self.say(
            f"conversation: one session on the delegator, {at[-1]} user messages one at a time; "
            f"counting the thinks of messages {', '.join(map(str, at))}"
        )
        began = time.monotonic()
        sid: str | None = None
        previous = time.time() - 5.0  # when the previous message was sent
        out: dict[str, dict[str, Any]] = {
            name: {}
            for name in (
                "requests_per_think",
                "read_units_per_think",
                "write_units_per_think",
                "requests_per_message",
                "thinks",
                "history_bytes",
                "think_requests_by_operation",
                "tokens_per_think",
            )
        }
        peak_rss_kb = 0  # the think sandboxes' peak resident memory (issue 37: the think's memory)
        for n in range(1, at[-1] + 1):
            content = f"message {n}: how do the figures of report {n} compare with the previous ones?"
            counted = n in at
            if counted:  # the previous message's think and its trailing writes are over
                self.settle({DELEGATOR}, previous, 0, not_before=time.time())
            start = previous = time.time()
            sid = self.chat(DELEGATOR, content, sid, busy_wait_s=30.0)
            answered = lambda: len(self.timeline.find(DELEGATOR, timeline="final_answer", session_id=sid)) >= n  # noqa: E731
            self.timeline.wait(answered, 60, f"the answer to message {n} of the conversation")
            if not counted:
                continue
            end = self.settle({DELEGATOR}, start, 0, not_before=time.time())
            window = [r for r in between(self.records(), start, end) if r.get("agent") == DELEGATOR]
            # The session grows with every message: its size now, not as first read.
            sizes = self.item_sizes(update_keys(window), fresh=True)
            think_records = [r for r in window if r.get("fn") == "turn_worker"]
            thinks = sum(1 for r in think_records if r.get("k") == "inv")
            think = Tally.of(think_records, sizes=sizes, memory_mb=memory_mb(self.opts, DELEGATOR)).divided(
                max(1, thinks)
            )
            whole = Tally.of(window, sizes=sizes, memory_mb=memory_mb(self.opts, DELEGATOR))
            messages = self.session(DELEGATOR, sid).get("messages", [])
            key = str(n)
            out["thinks"][key] = thinks
            out["requests_per_think"][key] = round(think.total_aws_requests, 2)
            out["read_units_per_think"][key] = round(think.dynamodb["rru"], 2)
            out["write_units_per_think"][key] = round(think.dynamodb["wru"] + think.dynamodb["gsi_wru"], 2)
            out["requests_per_message"][key] = round(whole.total_aws_requests, 2)
            out["think_requests_by_operation"][key] = {k: round(v, 2) for k, v in sorted(think.aws_requests.items())}
            # What the model was given at this think: the conversation before its reply (compact JSON).
            out["history_bytes"][key] = len(json.dumps(messages[:-1], separators=(",", ":"), ensure_ascii=False))
            peak_rss_kb = max([peak_rss_kb, *(int(r.get("rss_kb") or 0) for r in think_records)])
        # What the local model billed each counted think, by Bedrock's rules (issue 37): the session API's sums.
        by_turn = self.session(DELEGATOR, sid).get("tokens_by_turn", []) if sid else []
        out["tokens_per_think"] = {str(n): by_turn[n - 1] for n in at if n <= len(by_turn)}
        first, last = str(at[0]), str(at[-1])
        # Growth with length, from the first think that reads the session (message 1's reads nothing).
        second = str(at[1]) if len(at) > 1 else first
        return {
            "agent": DELEGATOR,
            "session_id": sid,
            "messages": at[-1],
            "measured_at": at,
            **out,
            "requests_growth_last_to_first": round(
                ratio(out["requests_per_think"][last], out["requests_per_think"][first]), 2
            ),
            "requests_growth_last_to_second": round(
                ratio(out["requests_per_think"][last], out["requests_per_think"][second]), 2
            ),
            "read_units_growth_last_to_second": round(
                ratio(out["read_units_per_think"][last], out["read_units_per_think"][second]), 2
            ),
            "wall_s": round(time.monotonic() - began, 1),
            "think_peak_rss_mb": round(peak_rss_kb / 1024, 1),
            "basis": "requests and units of the turn worker's own calls per think (one think per message: no "
            "message delegates); message 1 creates the session, and its think starts from what its ingest wrote "
            "(no read); requests_per_message adds the ingest and the queue; history_bytes: the messages the "
            "model was given, compact JSON",
        }

    def inbox(self) -> dict[str, Any]:
        """A follow-up sent while the delegator's session waits on its delegate (it waits in the session's
        inbox), next to the same follow-up sent once the session is idle again.

        Counted from the delegator's records: the follow-up's own POST /api/chat (accepting it: the ingest
        function's requests), and the think that ends the delegated turn (with a message waiting, that
        think's turn-ending write also starts the follow-up's turn: consuming it)."""
        self.say(
            "inbox: a follow-up queued while the delegator's turn waits on its delegate, and the same follow-up "
            "sent once the session is idle"
        )
        out: dict[str, Any] = {}
        for mode, expected in (("idle", "accepted"), ("queued", "queued")):
            start = time.time()
            sid = self.chat(DELEGATOR, f"@{WORKER} inbox probe ({mode}): check the figures")
            if mode == "idle":
                self.timeline.wait_for(DELEGATOR, "final_answer", sid, 60)
            sent = time.time()
            resp = self.post(
                f"{self.stack.urls[DELEGATOR]}/api/chat",
                headers=self._auth(),
                json={"session_id": sid, "content": f"and the follow-up ({mode}): any change?"},
            )
            taken = time.time()
            status = resp.json().get("status") if resp.status_code == 202 else None
            if status != expected:
                raise BenchError(
                    f"the inbox probe's follow-up ({mode}) was answered {resp.status_code} {resp.text[:200]}, "
                    f"not {expected!r}"
                )
            answers = lambda: len(self.timeline.find(DELEGATOR, timeline="final_answer", session_id=sid)) >= 2  # noqa: E731
            self.timeline.wait(answers, 60, f"the inbox probe's two answers ({mode})")
            end = self.settle({DELEGATOR}, start, 0, not_before=time.time())
            window = [r for r in between(self.records(), start, end) if r.get("agent") == DELEGATOR]
            sizes = self.item_sizes(update_keys(window), fresh=True)
            accept = [r for r in window if r.get("fn") == "chat_ingest" and sent <= r.get("t", 0.0) <= taken]
            ending, items = _invocation_writing(window, f"S#{sid}", "ITER#000002")
            out[mode] = {
                "accept": self._usage(accept, sizes),
                "ending_think": self._usage(ending, sizes),
                "ending_transaction_items": items,
            }
        queued, idle = out["queued"], out["idle"]
        out["accept_requests"] = queued["accept"]["requests"]
        out["consume_requests"] = round(queued["ending_think"]["requests"] - idle["ending_think"]["requests"], 2)
        out["consume_dynamodb_requests"] = round(
            queued["ending_think"]["dynamodb_requests"] - idle["ending_think"]["dynamodb_requests"], 2
        )
        out["consume_wru"] = round(queued["ending_think"]["wru"] - idle["ending_think"]["wru"], 2)
        out["basis"] = (
            "accept: the queued follow-up's POST /api/chat (the ingest function's own requests); consume: "
            "what the think that ends the turn before it costs more than the same think with nothing waiting"
        )
        self.say(
            f"inbox: a queued follow-up costs {num_text(out['accept_requests'])} requests to accept, "
            f"{num_text(out['consume_requests'])} to consume"
        )
        return out

    def _usage(self, records: list[dict[str, Any]], sizes: dict[tuple[str, str, str], int]) -> dict[str, Any]:
        tally = Tally.of(records, sizes=sizes, memory_mb=memory_mb(self.opts, DELEGATOR), agents=[DELEGATOR])
        return {
            "requests": tally.total_aws_requests,
            "dynamodb_requests": sum(v for k, v in tally.aws_requests.items() if k.startswith("dynamodb.")),
            "by_operation": {k: v for k, v in sorted(tally.aws_requests.items())},
            "wru": round(tally.dynamodb["wru"] + tally.dynamodb["gsi_wru"], 2),
            "rru": round(tally.dynamodb["rru"], 2),
        }

    def timeout_lateness(self) -> dict[str, Any]:
        m = self.opts.timeout_turns
        self.say(
            f"timeout lateness: {m} turns whose delegate never answers "
            f"(ASYNC_TOOL_TIMEOUT_MS={self.opts.timekeeper_timeout_ms}, started {self.opts.stagger_s}s apart)"
        )
        sids = []
        for i in range(m):
            sids.append(self.chat(TIMEKEEPER, f"@{BLACKHOLE} task {i} that is never answered"))
            time.sleep(self.opts.stagger_s)
        self.timeline.wait(
            lambda: all(self.timeline.find(TIMEKEEPER, timeline="final_answer", session_id=s) for s in sids),
            # Generous: on a loaded machine a timer message may need a redelivery (its visibility timeout).
            self.opts.timekeeper_timeout_ms / 1000 + 90 + m,
            "the timekeeper's timeouts",
        )
        # When each turn's timer message was received (the last receive, if it was chained or redelivered).
        received: dict[str, int] = {}
        for r in self.records():
            for timer in r.get("timers", ()) if r.get("agent") == TIMEKEEPER else ():
                received[str(timer.get("session_id"))] = int(timer.get("first_received_ms") or 0)
        lateness: list[float] = []
        fired: list[float] = []
        expired: list[float] = []
        by: Counter[str] = Counter()
        for sid in sids:
            meta = self.table_item(TIMEKEEPER, f"S#{sid}", "META")  # turn 1's aggregation (ARCHITECTURE §2)
            turn = {"completed_by": meta.get("agg_by", "?"), "deadline_ms": meta.get("agg_deadline", 0)}
            by[str(turn.get("completed_by", "?"))] += 1
            for result in self.table_query(TIMEKEEPER, f"S#{sid}", "RESULT#000001#"):
                if result.get("source") == "timeout":
                    deadline, recorded = int(turn["deadline_ms"]), int(result["recorded_at"])
                    lateness.append(recorded - deadline)
                    if received.get(sid) and turn.get("completed_by") == "timer":
                        fired.append(received[sid] - deadline)
                        expired.append(recorded - received[sid])
        return {
            "turns": m,
            "timeout_ms": self.opts.timekeeper_timeout_ms,
            "sweep_interval_ms": self.opts.sweep_interval_ms,
            "lateness_ms": {k: round(v, 1) for k, v in summary(lateness).items()},
            "completed_by": dict(by),
            # deadline -> the timer message is received (SQS delay + pickup) and -> the result is written
            "timer_received_after_deadline_ms": {k: round(v, 1) for k, v in summary(fired).items()},
            "received_to_result_ms": {k: round(v, 1) for k, v in summary(expired).items()},
            "samples_ms": lateness,
        }


# --- latency by hop -----------------------------------------------------------------------


def num_text(value: float) -> str:
    return f"{value:g}"


def _invocation_writing(records: list[dict[str, Any]], pk: str, sk: str) -> tuple[list[dict[str, Any]], int]:
    """The records of the turn-worker invocation whose transaction wrote item (pk, sk), and how many items
    that transaction held."""
    call = next(
        (
            r
            for r in records
            if r.get("k") == "aws"
            and r.get("fn") == "turn_worker"
            and r.get("op") == "TransactWriteItems"
            and r.get("status") == 200
            and any(w.get("pk") == pk and w.get("sk") == sk for w in r.get("writes", ()))
        ),
        None,
    )
    if call is None:
        raise BenchError(f"no turn-worker transaction wrote {pk} {sk}")
    inv = next(
        (
            r
            for r in records
            if r.get("k") == "inv"
            and r.get("fn") == "turn_worker"
            and r["t"] >= call["t"]
            and r["t"] - float(r.get("ms") or 0) / 1000 <= call["t"]
        ),
        None,
    )
    if inv is None:
        raise BenchError(f"no turn-worker invocation around the transaction that wrote {pk} {sk}")
    began = inv["t"] - float(inv.get("ms") or 0) / 1000
    mine = [r for r in records if r.get("fn") == "turn_worker" and r.get("k") == "aws" and began <= r["t"] <= inv["t"]]
    return [inv, *mine], len(call.get("writes", ()))


def run(
    opts: StackOptions, prices: PriceTable, progress: Callable[[str], None], logs: TextIO | None = None
) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="flightdeck-bench-") as tmp:
        progress("starting the local stack (moto + 4 agents)")
        with StackRun(opts, prices, progress, Path(tmp), logs) as bench:
            bench.warm_up()
            one = bench.counted_round_trips(
                opts.iterations,
                lambda i: f"@{WORKER} check the figures of report {i}",
                "1 delegation",
                meanwhile=bench.prepare_throughput,
            )
            bench.throughput_ready()
            throughput = bench.callback_throughput()
            # The same round trip as a structured call through the tool the worker's card gives (issue 25):
            # it must cost no more requests than the free-text delegation.
            structured = bench.counted_round_trips(
                max(2, opts.iterations // 3),
                lambda i: f'@{WORKER}:{STRUCTURED_SKILL["id"]} {{"text": "check the figures of report {i}"}}',
                "1 structured call",
            )
            # MCP (issues 26 and 28): a client's tools/call on an agent's /mcp, and a turn calling an MCP server's tool.
            mcp_n = max(2, opts.iterations // 3)
            mcp_server = bench.mcp_server_calls(mcp_n)
            mcp_client = bench.mcp_client_turns(mcp_n)
            # The timeout turns run after the fan-out's, not while its deadline timers are pending: moto serves one
            # request at a time, and their 30 turns beside the fan-out's 50 delegations doubled the local durations
            # the fan-out's Lambda duration is priced from.
            fan = bench.counted_round_trips(
                opts.parallel_iterations, bench.fan_out_task, f"{opts.fan_out} parallel delegations"
            )
            timeouts = bench.timeout_lateness()
            conversation = bench.conversation()
            inbox = bench.inbox()
            # A2A round trips (issue 27), last: v0.3 and v1.0 beside each other, nothing above perturbed.
            a2a = bench.a2a_round_trips(max(2, opts.iterations // 3))
            startup_s = bench.startup_s
            latency = hop_latencies(bench.timeline, one["sessions"])
            latency["client_round_trip"] = {k: round(v, 1) for k, v in summary(one["client_ms"]).items()}
            fan_latency = hop_latencies(bench.timeline, fan["sessions"])
            fan_latency["client_round_trip"] = {k: round(v, 1) for k, v in summary(fan["client_ms"]).items()}
        return {
            "stack_startup_s": round(startup_s, 2),
            "round_trip_one": round_trip_cost.round_trip_report(one, prices, 1, opts),
            "round_trip_fan_out": round_trip_cost.round_trip_report(fan, prices, opts.fan_out, opts),
            "round_trip_structured": round_trip_cost.round_trip_report(structured, prices, 1, opts),
            "mcp_server_calls": mcp_server,
            "mcp_client_turn": mcp_client,
            "a2a_round_trips": a2a,
            "latency_one_delegation_ms": latency,
            "latency_fan_out_ms": {
                "total_logged": fan_latency.get("total_logged"),
                "client_round_trip": fan_latency["client_round_trip"],
            },
            "callback_throughput": throughput,
            "timeouts": timeouts,
            "conversation": conversation,
            "inbox": inbox,
        }
