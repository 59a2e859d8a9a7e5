"""One agent's functions on in-process moto, run as Lambda, SQS and HTTP clients run them, on a clock
the explorer moves; with fake peers around it and a record of what the model was asked.

Each function runs "armed": its committed steps are counted (tests.support.explorer.steps, and the
fake peers below for outbound HTTP), and the one the explorer picked ends it (Crash). What follows a
crash is the platform's: an asynchronous invoke is retried by Lambda (twice, then its record goes to the
turns queue); an SQS batch comes back after its visibility timeout; with THINK_START = "stream", a stream
batch the owed-think starter failed is handed over again (the mapping's retries); an HTTP caller gets no answer and, by policy, sends the
same request again or gives up. The peers: `worker` (our delegate) takes tasks and answers them when
told (during recovery: at once); `caller` (whoever delegated to us) takes answers.

SQS delays run on this clock: an armed send's DelaySeconds and a ChangeMessageVisibility become 0 for
moto, and the message is held here until its due time.
"""

from __future__ import annotations

import importlib
import json
import random
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any, cast

from flightdeck import topology, wiring
from flightdeck.adapters.dynamo.table import OWED_THINK_GRACE_MS
from flightdeck.adapters.http_peers import PeerResponse
from flightdeck.api.sse import StreamReply
from flightdeck.domain.mcp_ports import McpExchange
from flightdeck.local.invocation import LocalLambdaContext
from flightdeck.local.streams import StreamReader
from tests.support.explorer.steps import Crash
from tests.support.harness import Agent, load_event
from tests.support.invokes import RECORDER, Invocation

LAMBDA_RETRY_MS = 60_000  # Lambda's asynchronous retries come a minute or two after a failure
STREAM_RETRY_MS = 1_000  # a stream's event source mapping hands a failed batch over again at once
WORKER_RETRY_MS = 2_000  # the worker's delivery queue retries a callback that got no answer
QUEUE_ORDER = ("thinks", "turns", "dispatch", "delivery", "timers")
# Past every bound: the longest deadline (ASYNC_TOOL_TIMEOUT_MS 300 s), the owed-think grace (35 s),
# visibility timeouts (180 s), Lambda's retries; the sweep runs after each jump.
BIG_JUMP_MS = 10 * 60_000
MAX_RECOVERY_ROUNDS = 80
CRASHED = object()


MCP_VERSION = "2026-07-28"
MCP_META = {
    "io.modelcontextprotocol/protocolVersion": MCP_VERSION,
    "io.modelcontextprotocol/clientInfo": {"name": "explorer", "version": "1"},
    "io.modelcontextprotocol/clientCapabilities": {"extensions": {"io.modelcontextprotocol/tasks": {}}},
}


@dataclass
class Subscription:
    """What a client read of one A2A v1.0 stream: its events (the JSON-RPC results) and the last event's id."""

    events: list[dict[str, Any]]
    last_id: str

    @classmethod
    def of(cls, raw: bytes) -> Subscription:
        events, last_id = [], ""
        for block in raw.decode().split("\n\n"):
            for line in block.splitlines():
                if line.startswith("id: "):
                    last_id = line[4:]
                elif line.startswith("data: "):
                    events.append(json.loads(line[6:]).get("result") or {})
        return cls(events, last_id)


@dataclass
class Delegation:
    """A task the worker took: answered once per callback token (a real peer answers a re-sent
    dispatch as `replayed`)."""

    token: str
    task: str
    session_id: str
    continues: bool
    answered: bool = False
    due_ms: int = 0


@dataclass
class Ask:
    session_id: str
    turn: int
    stored_already: bool  # the think's reply was stored when the model was asked
    from_snapshot: bool  # a new session's first think, run from its ingest's snapshot (§6)
    beside: bool = False  # asked while another run of the same think was asking (started_twice)


@dataclass
class Held:
    key: str
    message: dict[str, Any]
    due_ms: int


class Clock:
    def __init__(self, now_ms: int):
        self.now = now_ms

    def now_ms(self) -> int:
        return self.now


@dataclass
class World:
    agent: Agent
    clock: Clock
    crash_at: int | None = None
    rng: random.Random = field(default_factory=lambda: random.Random(0))
    client_retries: bool = True  # an HTTP caller that got no answer sends the same request again
    shuffle: float = 0.0  # nightly seeds: the share of picks that take any due work, not the first
    silent: set[str] = field(default_factory=set)  # tasks (by marker) the worker never answers
    steps: list[str] = field(default_factory=list)
    crashed: list[str] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    sessions: list[str] = field(default_factory=list)
    canceled: set[str] = field(default_factory=set)
    reply_tokens: dict[str, str] = field(default_factory=dict)  # token -> session given it
    deliveries: dict[str, list[tuple[str, str]]] = field(default_factory=lambda: defaultdict(list))
    delegations: dict[str, Delegation] = field(default_factory=dict)
    asks: list[Ask] = field(default_factory=list)
    mcp_calls: list[tuple[str, str, str]] = field(default_factory=list)  # (function, tool, arguments' JSON)
    auto_answer: bool = False
    mcp_key: str = ""  # an MCP client's key (the mcp channel)
    # Queues (by key) whose messages are each delivered twice at once, as a standard SQS queue may.
    delivered_twice: set[str] = field(default_factory=set)
    # Each think's start runs once more while that run asks the model (§6): a first start Lambda held past
    # the grace (the clock moves on) beside the sweep's re-send, or the stream's starter starting it again.
    started_twice: bool = False
    _twin: Invocation | None = None
    _twin_of: tuple[str, int] | None = None  # the think whose first run is asking while its twin runs
    _twice_seen: set[str] = field(default_factory=set)
    scanned: list[dict[str, Any]] | None = None  # the session items the invariants read (raw)
    running: str | None = None
    dead: bool = False
    _think: tuple[str, int, bool] | None = None
    _invocations: list[tuple[int, Invocation]] = field(default_factory=list)
    _held: list[Held] = field(default_factory=list)
    _send_due: dict[tuple[str, str], list[int]] = field(default_factory=lambda: defaultdict(list))
    _redeliver_at: dict[str, int] = field(default_factory=dict)
    _handle_ids: dict[str, str] = field(default_factory=dict)
    _sent_to: set[str] = field(default_factory=set)  # queues with messages not yet collected
    _touched: set[str] = field(default_factory=set)  # queues this run sent to
    # THINK_START = "stream": the table's stream (moto's), read as the event source mapping reads it, and
    # its records due to the owed-think starter (with how many times each was handed over already).
    stream: StreamReader | None = None
    _records: list[tuple[int, int, dict[str, Any]]] = field(default_factory=list)  # (due, attempts, record)

    # --- the observer of tests.support.explorer.steps -----------------------------------------
    def before_call(self, service: str, operation: str) -> None:
        if self.running is not None and self.dead:
            raise Crash(f"{self.running} is dead: {service}:{operation} not sent")

    def committed(self, service: str, operation: str) -> None:
        if self.running is not None:
            self._step(f"{service}:{operation}")

    def send_params(self, operation: str, params: dict[str, Any]) -> None:
        if self.running is None:
            return  # the explorer's own request (a redelivery it arranges)
        self._sent_to.add(params["QueueUrl"])
        self._touched.add(params["QueueUrl"])
        if operation == "SendMessage":
            delay_ms = int(params.pop("DelaySeconds", 0) or 0) * 1000
            self._send_due[(params["QueueUrl"], params["MessageBody"])].append(self.clock.now + delay_ms)
        elif operation == "ChangeMessageVisibility":
            message_id = self._handle_ids.get(params["ReceiptHandle"], "")
            self._redeliver_at[message_id] = self.clock.now + int(params["VisibilityTimeout"]) * 1000
            params["VisibilityTimeout"] = 0

    def _step(self, what: str) -> None:
        self.steps.append(f"{self.running} {what}")
        if len(self.steps) == self.crash_at:
            self.dead = True
            raise Crash(f"{self.running} died after step {len(self.steps)}: {what}")

    # --- running one function -------------------------------------------------------------------
    def run(self, function: str, call: Any) -> Any:
        """call() as one invocation of `function`: its result, or CRASHED. A function that raised
        (not a crash) failed as Lambda sees it: recorded, and handled as a crash by its caller."""
        self.running, self.dead = function, False
        try:
            return call()
        except Crash as exc:
            self.crashed.append(str(exc))
            return CRASHED
        except Exception as exc:  # noqa: BLE001 - Lambda's view: the invocation failed
            self.failures.append(f"{function}: {type(exc).__name__}: {exc}"[:300])
            return CRASHED
        finally:
            self.running, self.dead, self._think = None, False, None

    # --- HTTP into the agent (the API Gateway's functions) ----------------------------------------
    def http(self, name: str, body: Any = ..., headers: dict[str, str] | None = None, **repl: str) -> Any:
        """One request, as a client sends it: CRASHED is a 502 (the function died); a client that
        retries sends the same request once more."""
        handler = _route_handler(name)
        for _ in range(2 if self.client_retries else 1):
            answer = self.run(handler, lambda: self.agent.api(name, body, headers, **repl))
            if answer is not CRASHED:
                return answer
        return CRASHED

    def chat(self, sid: str, content: str, message_id: str, reply_token: str = "", **fields: Any) -> Any:
        """POST /api/chat; content "" for a structured call (fields: skill and its arguments)."""
        self._session(sid)
        body: dict[str, Any] = {"session_id": sid, "message_id": message_id, **fields}
        if content:
            body["content"] = content
        if reply_token:
            self.reply_tokens[reply_token] = sid
            body["reply"] = {"callbackService": "orchestrator", "bearerToken": reply_token}
        return self.http("chat_post", body)

    def cancel(self, sid: str) -> Any:
        self.canceled.add(sid)
        return self.http("session_cancel", SESSION_ID=sid)

    def a2a(self, method: str, params: dict[str, Any], version: str = "0.3") -> Any:
        """POST /a2a, in A2A v0.3 or (version "1.0", its A2A-Version header) v1.0."""
        context = (params.get("message") or {}).get("contextId")
        if context:
            self._session(context)
        body = {"jsonrpc": "2.0", "id": f"r-{len(self.steps)}", "method": method, "params": params}
        return self.http("a2a_message_send", body, {"A2A-Version": version} if version != "0.3" else None)

    def subscribe(self, task_id: str, last_event_id: str = "") -> Subscription | None:
        """A2A v1.0 SubscribeToTask, its stream read to its end (the stream's polls pass on this clock: one
        that sees no final event closes after STREAM_MAX_MS, and the client subscribes again). None: the
        function died (a client that retries subscribes once more, from the same event)."""
        body = {"jsonrpc": "2.0", "id": f"r-{len(self.steps)}", "method": "SubscribeToTask", "params": {"id": task_id}}
        headers = {"A2A-Version": "1.0", **({"Last-Event-ID": last_event_id} if last_event_id else {})}
        event = _post_event("/a2a", body, {**self.agent.auth_headers(), **headers})
        module = importlib.import_module("flightdeck.handlers.a2a")

        def read() -> Subscription:
            reply = module.handler(json.loads(json.dumps(event)), LocalLambdaContext(function_name="a2a"))
            return Subscription.of(b"".join(reply.chunks) if isinstance(reply, StreamReply) else b"")

        for _ in range(2 if self.client_retries else 1):
            got = self.run("a2a", read)
            if got is not CRASHED:
                return cast(Subscription, got)
        return None

    def pass_time(self, seconds: float) -> None:
        """A function waits (a stream between its polls): time passes on this clock, nothing else runs meanwhile."""
        # At least a millisecond: the stream's last wait is what is left of its time, a float that int() took to 0.
        self.clock.now += max(1, round(seconds * 1000))

    def mcp(self, method: str, params: dict[str, Any]) -> Any:
        """POST /mcp as an MCP client of 2026-07-28 that declares the tasks extension, with its own key (the
        mcp channel): a tools/call that starts work answers its task at once, and the client polls it."""
        body = {
            "jsonrpc": "2.0",
            "id": f"r-{len(self.steps)}",
            "method": method,
            "params": {**params, "_meta": MCP_META},
        }
        headers = {"MCP-Protocol-Version": MCP_VERSION, "Mcp-Method": method, "Authorization": f"Bearer {self.mcp_key}"}
        headers["Host"] = "127.0.0.1"  # an agent with no public URL serves /mcp on loopback only
        name = params.get("name", params.get("taskId"))
        if isinstance(name, str):
            headers["Mcp-Name"] = name
        event = _post_event("/mcp", body, headers)
        answer = CRASHED
        for _ in range(2 if self.client_retries else 1):
            answer = self.run("a2a", lambda: self.agent.call(json.loads(json.dumps(event)), "a2a"))
            if answer is not CRASHED:
                break
        result = answer[2].get("result") if answer is not CRASHED and isinstance(answer[2], dict) else None
        task_id = result.get("taskId") if isinstance(result, dict) else None
        if isinstance(task_id, str):
            self._session(task_id.split(":", 1)[0])  # <session>:<n>:<tool> (flightdeck.api.mcp.tasks)
        return answer

    def watch(self, sid: str) -> None:
        """A stream follows the session (its own function's mark; the relay holds no invariant)."""
        wiring.deps().live.watch(sid, self.clock.now + 120_000)

    def _session(self, sid: str) -> None:
        if sid not in self.sessions:
            self.sessions.append(sid)

    # --- the fake peers (flightdeck.adapters.http_peers.Peers.post_json) --------------------------
    def peer_post(self, url: str, body: Any, headers: dict[str, str] | None) -> PeerResponse:
        if self.running is not None and self.dead:
            raise Crash(f"{self.running} is dead: POST {url} not sent")
        path = "/" + url.split("/", 3)[-1]
        status, answer = self._peer_answer(path, body, headers or {})
        if self.running is not None:
            self._step(f"http:POST {path.split('/')[2]}")
        return PeerResponse(status, answer)

    def _peer_answer(self, path: str, body: Any, headers: dict[str, str]) -> tuple[int, Any]:
        if path == "/api/chat":  # the worker takes a task
            token = body["reply"]["bearerToken"]
            if token in self.delegations:
                return 202, {"status": "replayed", "session_id": body["session_id"]}
            self.delegations[token] = Delegation(
                token, body["content"], body["session_id"], bool(body.get("continue_session")), due_ms=self.clock.now
            )
            return 202, {"status": "accepted", "session_id": body["session_id"]}
        if path.endswith("/cancel"):
            return 200, {"status": "canceled"}
        if path == "/api/tools/response":  # the caller takes our answer (it deduplicates by token)
            token = headers.get("Authorization", "").removeprefix("Bearer ")
            seen = self.deliveries[token]
            seen.append((str(body.get("status", "success")), str(body.get("result"))))
            return (202, {"status": "accepted"}) if len(seen) == 1 else (200, {"status": "duplicate"})
        return 404, {"error": {"code": "not_found", "message": "no such route here"}}

    # --- the fake MCP server (flightdeck.adapters.mcp_http.McpHttp) ---------------------------------
    def mcp_list(self) -> McpExchange:
        """Its tools: a read, not a committed step (a warm container lists once per TTL)."""
        tools = [
            {"name": "search", "inputSchema": {"type": "object", "properties": {"query": {"type": "string"}}}},
            {"name": "slow", "inputSchema": {"type": "object", "properties": {"seconds": {"type": "number"}}}},
        ]
        return McpExchange("ok", {"tools": tools}, version="2026-07-28")

    def mcp_call(self, tool: str, arguments: dict[str, Any]) -> McpExchange:
        """A tool call: the server's effect is committed once it answers (a crash after it loses the answer)."""
        if self.running is not None and self.dead:
            raise Crash(f"{self.running} is dead: the MCP call {tool} not sent")
        self.mcp_calls.append((self.running or "", tool, json.dumps(arguments, sort_keys=True)))
        if self.running is not None:
            self._step(f"http:POST mcp {tool}")
        return McpExchange("ok", {"content": [{"type": "text", "text": f"{tool}: {json.dumps(arguments)}"}]})

    def answer_delegations(self) -> None:
        """The worker answers every task it holds (a callback to our /api/tools/response each)."""
        for d in list(self.delegations.values()):
            if d.answered or d.due_ms > self.clock.now or any(m in d.task for m in self.silent):
                continue
            if "[ask]" in d.task and not d.continues:  # it asks first; the continuation gets the answer
                body = {"result": "which year?", "status": "input_required", "context_id": d.session_id}
            else:
                body = {"result": f"[worker] done: {d.task}"}
            answer = self.http("tool_response", body, {"Authorization": f"Bearer {d.token}"})
            if answer is CRASHED or answer[0] >= 500:
                d.due_ms = self.clock.now + WORKER_RETRY_MS  # its delivery queue tries again
            else:
                d.answered = True  # accepted, a duplicate, or refused (late): the worker is done

    # --- the functions behind queues and invokes --------------------------------------------------
    def _collect(self) -> None:
        for invocation in RECORDER.take(self.agent.turn_worker_function):
            self._invocations.append((self.clock.now, invocation))
        if self.stream is not None:
            self._records += [(self.clock.now, 0, r) for r in self.stream.read()]
        for key in QUEUE_ORDER:
            url = self.agent.queue_urls[key]
            if url not in self._sent_to:
                continue
            self._sent_to.discard(url)
            while True:
                got = self.agent.sqs.receive_message(
                    QueueUrl=url, MaxNumberOfMessages=10, AttributeNames=["All"], WaitTimeSeconds=0
                )
                messages = got.get("Messages", [])
                if not messages:
                    break
                for m in messages:
                    self._handle_ids[m["ReceiptHandle"]] = m["MessageId"]
                    sent = self._send_due.get((url, m["Body"]))
                    due = self._redeliver_at.pop(m["MessageId"], None) or (sent.pop(0) if sent else self.clock.now)
                    self._held.append(Held(key, m, due))
                    if key in self.delivered_twice and m["MessageId"] not in self._twice_seen:
                        self._twice_seen.add(m["MessageId"])
                        # To another consumer, a moment later: its own invocation, while the first may be
                        # anywhere in its run (here: finished, or dead after any of its steps).
                        self._held.append(Held(key, dict(m), due + 1))

    def _due_work(self) -> list[Any]:
        now = self.clock.now
        work: list[Any] = [("invoke", i) for due, i in self._invocations if due <= now]
        records = [r for r in self._records if r[0] <= now]
        size = topology.STREAM_CONSUMER.batch_size
        work += [("stream", records[i : i + size]) for i in range(0, len(records), size)]
        for key in QUEUE_ORDER:
            batch = [h for h in self._held if h.key == key and h.due_ms <= now]
            size = topology.QUEUES_BY_KEY[key].batch_size
            work += [("sqs", batch[i : i + size]) for i in range(0, len(batch), size)]
        if self.auto_answer and any(
            not d.answered and d.due_ms <= now and not any(m in d.task for m in self.silent)
            for d in self.delegations.values()
        ):
            work.append(("worker", None))
        return work

    def settle(self, rounds: int = 60) -> bool:
        """Run what is due now, until nothing is. True if anything ran."""
        ran = False
        for _ in range(rounds):
            self._collect()
            work = self._due_work()
            if not work:
                return ran
            ran = True
            kind, item = work[self.rng.randrange(len(work))] if self.rng.random() < self.shuffle else work[0]
            if kind == "invoke":
                self._run_invocation(item)
            elif kind == "stream":
                self._run_stream(item)
            elif kind == "sqs":
                self._run_batch(item)
            else:
                self.answer_delegations()
        raise AssertionError("work kept coming: the system does not settle")

    def _run_invocation(self, invocation: Invocation) -> None:
        self._invocations = [(d, i) for d, i in self._invocations if i is not invocation]
        module = importlib.import_module(f"flightdeck.handlers.{topology.THINK_HANDLER}")
        if self.started_twice and invocation.attempts == 0 and self._twin_of is None:
            twin = dict(invocation.event)
            if twin.pop("first_start", False):
                # Held past its window (so it claims), while the mark came due and the sweep re-sent it.
                self.clock.now += OWED_THINK_GRACE_MS + 1_000
            self._twin = Invocation(invocation.function_name, twin)
        invocation.attempts += 1
        event = invocation.event
        self._think = (event["session_id"], int(event["turn"]), bool(event.get("snapshot")))
        context = LocalLambdaContext(function_name=self.agent.turn_worker_function)
        name = f"turn_worker[{event['session_id'][-6:]}#{event['turn']}]"
        if self.run(name, lambda: module.handler(event, context)) is not CRASHED:
            return
        spec = topology.ASYNC_INVOKES_BY_HANDLER[topology.THINK_HANDLER]
        if invocation.attempts <= spec.retry_attempts:
            self._invocations.append((self.clock.now + LAMBDA_RETRY_MS * invocation.attempts, invocation))
        else:
            # Lambda's record of the given-up think, to its on-failure destination: the turns queue.
            url = self.agent.queue_urls[spec.on_failure_queue]
            record = {"requestContext": {"condition": "RetriesExhausted"}, "requestPayload": event}
            self.agent.sqs.send_message(QueueUrl=url, MessageBody=json.dumps(record))
            self._sent_to.add(url)
            self._touched.add(url)

    def _run_stream(self, batch: list[tuple[int, int, dict[str, Any]]]) -> None:
        """One invocation of the owed-think starter by its event source mapping: records it fails (or the whole
        batch, when it dies) are handed over again, up to the mapping's retries; then given up on."""
        self._records = [r for r in self._records if r not in batch]
        module = importlib.import_module(f"flightdeck.handlers.{topology.OWED_THINKS_HANDLER}")
        event = {"Records": [r for _, _, r in batch]}
        context = LocalLambdaContext(function_name=f"{self.agent.name}-owed-thinks")
        resp = self.run(topology.OWED_THINKS_HANDLER, lambda: module.handler(event, context))
        failed = (
            {r["dynamodb"]["SequenceNumber"] for _, _, r in batch}
            if resp is CRASHED
            else {f["itemIdentifier"] for f in resp.get("batchItemFailures", [])}
        )
        for _, attempts, record in batch:
            if record["dynamodb"]["SequenceNumber"] not in failed:
                continue
            if attempts < topology.STREAM_CONSUMER.retry_attempts:
                self._records.append((self.clock.now + STREAM_RETRY_MS, attempts + 1, record))
            else:
                self.failures.append(f"stream record {record['dynamodb']['SequenceNumber']} given up (its DLQ)")

    def _run_batch(self, batch: list[Held]) -> None:
        key = batch[0].key
        self._held = [h for h in self._held if h not in batch]
        spec = topology.QUEUES_BY_KEY[key]
        module = importlib.import_module(f"flightdeck.handlers.{spec.handler}")
        messages = [h.message for h in batch]
        event = self.agent.sqs_event(key, messages)
        if key == "turns":
            body = json.loads(messages[0]["Body"])
            body = body.get("requestPayload", body)  # Lambda's record of a given-up think carries it
            self._think = (body["session_id"], int(body["turn"]), bool(body.get("snapshot")))
        context = LocalLambdaContext(function_name=f"{self.agent.name}-{key}")
        resp = self.run(spec.handler, lambda: module.handler(event, context))
        failed = (
            {m["MessageId"] for m in messages}
            if resp is CRASHED
            else {f["itemIdentifier"] for f in resp.get("batchItemFailures", [])}
        )
        url = self.agent.queue_urls[key]
        for m in messages:
            if m["MessageId"] not in failed:
                if any(h.message["MessageId"] == m["MessageId"] for h in self._held):
                    continue  # its other delivery is still to run: SQS deletes the message once
                self.agent.sqs.delete_message(QueueUrl=url, ReceiptHandle=m["ReceiptHandle"])
            elif m["MessageId"] not in self._redeliver_at:
                # Back after the visibility timeout, as SQS does; moto's copy becomes receivable now.
                self._redeliver_at[m["MessageId"]] = self.clock.now + spec.visibility_timeout_s * 1000
                self._sent_to.add(url)
                self.agent.sqs.change_message_visibility(
                    QueueUrl=url, ReceiptHandle=m["ReceiptHandle"], VisibilityTimeout=0
                )

    def sweep(self) -> None:
        module = importlib.import_module("flightdeck.handlers.sweeper")
        event = load_event("schedule/sweep.json")
        self.run("sweeper", lambda: module.handler(event, LocalLambdaContext(function_name="sweeper")))

    # --- recovery -------------------------------------------------------------------------------
    def recover(self) -> int:
        """Let the platform finish: retries, redeliveries, the worker's answers and timers, the clock moved
        on to each due time; once nothing is due, past every bound, and the sweep. Done when that changes
        nothing. Returns the rounds it took."""
        self.auto_answer = True
        for rounds in range(1, MAX_RECOVERY_ROUNDS + 1):
            self.settle()
            self._collect()
            upcoming = [d for d, _ in self._invocations] + [h.due_ms for h in self._held]
            upcoming += [d for d, _, _ in self._records]
            upcoming += [d.due_ms for d in self.delegations.values() if not d.answered and d.due_ms > self.clock.now]
            if upcoming:
                self.clock.now = max(self.clock.now, min(upcoming))
                if self.shuffle and self.rng.random() < 0.5:
                    self.sweep()  # nightly: the scheduled sweep also lands among retries and redeliveries
                continue
            before = len(self.steps)
            self.clock.now += BIG_JUMP_MS
            self.sweep()
            self.settle()
            self._collect()
            if len(self.steps) == before and not self._invocations and not self._held and not self._records:
                return rounds
        raise AssertionError(f"no quiescence after {MAX_RECOVERY_ROUNDS} recovery rounds")

    def clear(self) -> bool:
        """Leave the table and the queues as this run found them: False if it does not know its items."""
        if self.scanned is None:
            return False
        keys = [{"DeleteRequest": {"Key": {"pk": i["pk"], "sk": i["sk"]}}} for i in self.scanned]
        for n in range(0, len(keys), 25):
            self.agent.dynamodb.batch_write_item(RequestItems={self.agent.table: keys[n : n + 25]})
        self.empty_queues()
        return True

    def empty_queues(self) -> None:
        """What this run left in the queues goes (PurgeQueue takes a minute between calls)."""
        sqs, agent = self.agent.sqs, self.agent
        for h in self._held:
            sqs.delete_message(QueueUrl=agent.queue_urls[h.key], ReceiptHandle=h.message["ReceiptHandle"])
        self._held.clear()
        for url in self._touched:
            while got := sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10).get("Messages", []):
                for m in got:
                    sqs.delete_message(QueueUrl=url, ReceiptHandle=m["ReceiptHandle"])

    # --- the model, as the think sees it ---------------------------------------------------------
    def think_of(self, body: dict[str, Any]) -> None:
        """The think a batch's record runs from now on (its asks are counted against it)."""
        body = body.get("requestPayload", body)  # Lambda's record of a given-up think carries it
        self._think = (body["session_id"], int(body["turn"]), bool(body.get("snapshot")))

    def model_asked(self) -> None:
        if self.running is not None and self.dead:
            raise Crash(f"{self.running} is dead: the model is not asked")
        if self._think is None:
            return
        sid, turn, snapshot = self._think
        got = self.agent.dynamodb.get_item(
            TableName=self.agent.table,
            Key={"pk": {"S": f"S#{sid}"}, "sk": {"S": f"ITER#{turn:06d}"}},
            ConsistentRead=True,
        )
        self.asks.append(Ask(sid, turn, "Item" in got, snapshot, beside=self._twin_of == (sid, turn)))
        twin, self._twin = self._twin, None
        if twin is not None and twin.event["session_id"] == sid and int(twin.event["turn"]) == turn:
            self._run_twin(twin, (sid, turn))

    def _run_twin(self, twin: Invocation, think: tuple[str, int]) -> None:
        """The twin start runs to its end inside the first run's model call; then the first run goes on."""
        outer = (self.running, self.dead, self._think)
        self._twin_of = think
        try:
            self._run_invocation(twin)
        finally:
            self._twin_of = None
            self.running, self.dead, self._think = outer


def _post_event(resource: str, body: Any, headers: dict[str, str]) -> dict[str, Any]:
    """API Gateway's event of a POST to `resource` (one of the a2a function's): the sample's, re-addressed."""
    event = load_event("api/a2a_message_send.json")
    event["resource"] = event["path"] = event["requestContext"]["resourcePath"] = event["requestContext"]["path"] = (
        resource
    )
    event["body"] = json.dumps(body)
    for k, v in headers.items():
        event["headers"][k], event["multiValueHeaders"][k] = v, [v]
    return event


def _route_handler(event_name: str) -> str:
    event = load_event(f"api/{event_name}.json")
    return next((r.handler for r in topology.ROUTES if r.path == event["resource"]), "chat_ingest")
