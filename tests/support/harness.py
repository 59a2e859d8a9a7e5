"""In-process harness: one agent's handlers on moto, driven with the sample events in events/."""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import time
import uuid
import weakref
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import boto3

from flightdeck import topology, wiring
from flightdeck.adapters.peer_registry import PeerRegistry
from flightdeck.domain.peers import new_token
from flightdeck.domain.tokens import CallbackClaims, SigningKey, mint
from flightdeck.local.invocation import LocalLambdaContext
from flightdeck.local.resources import create_agent_resources
from tests.support.invokes import RECORDER, Invocation

EVENTS = Path(__file__).resolve().parents[2] / "events"
SECRET = "test-secret-orchestrator-0123456789abcdef"
PREVIOUS_SECRET = "test-secret-orchestrator-previous-0123456789"
# The peer every test calls as, unless it says otherwise (Agent.api(token=...)).
TEST_PEER = "tester"
_DEFAULT = object()
# Several agents in one test: the agents each test (its monkeypatch) made, and the one whose
# environment, and so wiring, the process has now. See Agent.acting().
_cohorts: weakref.WeakKeyDictionary[Any, list[Agent]] = weakref.WeakKeyDictionary()
_active: list[Agent] = []


def load_event(relative: str, **replacements: str) -> dict[str, Any]:
    text = (EVENTS / relative).read_text()
    for key, value in replacements.items():
        text = text.replace("{{" + key + "}}", json.dumps(value)[1:-1])
    return json.loads(text)


def agent_config(name: str, delegates: list[str] = (), builtin_tools: list[str] = (), think_delay_ms: int = 0) -> str:
    return json.dumps(
        {
            "name": name,
            "description": f"{name} under test",
            "model": {"provider": "local", "think_delay_ms": think_delay_ms},
            "builtin_tools": list(builtin_tools),
            "delegates": [{"agent": d, "service": d, "callback_service": name} for d in delegates],
        }
    )


@dataclass
class Agent:
    name: str
    env: dict[str, str]
    queue_urls: dict[str, str]
    dlq_urls: dict[str, str]
    table: str
    sqs: Any = field(repr=False)
    dynamodb: Any = field(repr=False)
    # The bearer token of TEST_PEER, registered in the agent's peer registry by make_agent.
    peer_token: str = field(default="", repr=False)
    # The agents made in the same test (this one included).
    cohort: list[Agent] = field(default_factory=list, repr=False)

    # --- several agents in one process -------------------------------------------------
    def activate(self) -> None:
        """Give the process this agent's environment (settings, wiring): handlers run as it now."""
        for key in set().union(*(a.env.keys() for a in self.cohort)) - self.env.keys():
            os.environ.pop(key, None)  # the test's monkeypatch restores every variable at teardown
        os.environ.update(self.env)
        wiring.reset()
        _active[:] = [self]

    @contextlib.contextmanager
    def acting(self):
        """Run a block as this agent, then give the process back to the agent that had it.

        Blocks nest (the relay's thread runs one while the test's thread waits for its HTTP
        answer inside another), and only one of them runs at a time: no lock, which would
        deadlock the nesting. The waiting agent keeps the Deps it already holds.
        """
        previous = _active[0] if _active else None
        self.activate()
        try:
            yield self
        finally:
            if previous is not None and previous is not self:
                previous.activate()

    # --- peers (flightdeck.domain.peers) --------------------------------------------------
    @property
    def registry(self) -> PeerRegistry:
        return PeerRegistry(self.table, self.dynamodb)

    def add_peer(self, peer_id: str, channels: tuple[str, ...] = ("a2a",)) -> str:
        """Register another calling peer, its token opening `channels` (its roles); returns its token."""
        token = new_token(peer_id)
        self.registry.add(peer_id, token, replace=True, channels=channels)
        return token

    def auth_headers(self, token: Any = _DEFAULT) -> dict[str, str]:
        token = self.peer_token if token is _DEFAULT else token
        return {"Authorization": f"Bearer {token}"} if token else {}

    # --- HTTP through the real handlers ------------------------------------------------
    def call(self, event: dict[str, Any], handler: str | None = None) -> tuple[int, dict[str, str], Any]:
        if handler is None:
            # A path no route serves still reaches a resolver here, to check its 404.
            handler = next((r.handler for r in topology.ROUTES if r.path == event["resource"]), "chat_ingest")
        module = importlib.import_module(f"flightdeck.handlers.{handler}")
        resp = module.handler(event, LocalLambdaContext(function_name=f"{self.name}-test"))
        body = resp.get("body")
        try:
            parsed = json.loads(body) if body else None
        except ValueError:
            parsed = body
        headers = {k.lower(): v for k, v in (resp.get("headers") or {}).items()}
        for k, v in (resp.get("multiValueHeaders") or {}).items():
            headers.setdefault(k.lower(), v[0] if isinstance(v, list) and v else v)
        return resp["statusCode"], headers, parsed

    def api(
        self,
        name: str,
        body: Any = ...,
        headers: dict[str, str] | None = None,
        *,
        token: Any = _DEFAULT,
        **replacements: str,
    ):
        """Send a sample event. On a route that needs a peer token, the test peer's goes along as
        `Authorization: Bearer ...` unless headers carry one; token=None sends none, token="..." that one."""
        event = load_event(f"api/{name}.json", **replacements)
        if body is not ...:
            event["body"] = body if isinstance(body, str) else json.dumps(body)
        route = topology.route_for(event.get("httpMethod"), event.get("resource"))
        if route is not None and route.auth == topology.PEER_AUTH:
            given = {k.lower() for k in (headers or {})}
            if "authorization" not in given:
                headers = {**self.auth_headers(token), **(headers or {})}
        for k, v in (headers or {}).items():
            event["headers"][k] = v
            event["multiValueHeaders"][k] = [v]
        return self.call(event)

    def token(
        self,
        session_id: str,
        turn: int,
        tool_use_id: str,
        *,
        total: int = 1,
        exp_in_s: int = 300,
        secret: str = SECRET,
        agent: str | None = None,
        iat: int | None = None,
    ) -> str:
        now = int(time.time())
        claims = CallbackClaims(
            session_id=session_id,
            turn=turn,
            tool_use_id=tool_use_id,
            tool_id="ask_worker",
            name="worker",
            total_tools=total,
            agent=agent or self.name,
            iat=now if iat is None else iat,
            exp=now + exp_in_s,
        )
        return mint(claims, SigningKey(secret.encode()))

    # --- SQS, and the thinks' asynchronous invokes ----------------------------------------------
    @property
    def turn_worker_function(self) -> str:
        return self.env["TURN_WORKER_FUNCTION"]

    def receive(self, key: str, max_messages: int = 10, dlq: bool = False) -> list[dict[str, Any]]:
        """What is waiting for the queue's handler now. For "turns", the thinks started by an asynchronous
        invoke come first (as message-shaped dicts whose "Invocation" is the event), then the queue's own
        messages (the delayed retries): each think a test takes this way is taken, as a receive would."""
        url = (self.dlq_urls if dlq else self.queue_urls)[key]
        out: list[dict[str, Any]] = []
        if key == "turns" and not dlq:
            out.extend(
                {"MessageId": f"invoke-{uuid.uuid4()}", "Body": json.dumps(i.event), "Invocation": i}
                for i in RECORDER.take(self.turn_worker_function)
            )
        while True:
            resp = self.sqs.receive_message(
                QueueUrl=url,
                MaxNumberOfMessages=max_messages,
                AttributeNames=["All"],
                MessageAttributeNames=["All"],
                WaitTimeSeconds=0,
            )
            msgs = resp.get("Messages", [])
            if not msgs:
                return out
            out.extend(msgs)

    def sqs_event(self, key: str, messages: list[dict[str, Any]]) -> dict[str, Any]:
        arn = f"arn:aws:sqs:us-east-1:123456789012:{topology.QUEUES_BY_KEY[key].name(self.name)}"
        return {
            "Records": [
                {
                    "messageId": m["MessageId"],
                    "receiptHandle": m["ReceiptHandle"],
                    "body": m["Body"],
                    "attributes": m.get("Attributes", {}),
                    "messageAttributes": {},
                    "md5OfBody": m.get("MD5OfBody", ""),
                    "eventSource": "aws:sqs",
                    "eventSourceARN": arn,
                    "awsRegion": "us-east-1",
                }
                for m in messages
            ]
        }

    def run_queue(self, key: str, messages: list[dict[str, Any]] | None = None, delete: bool = True) -> dict[str, Any]:
        """Feed messages (default: everything waiting now) to the queue's handler, as Lambda's ESM does;
        for "turns", each asynchronous invoke first, as Lambda runs them (tests.support.invokes)."""
        spec = topology.QUEUES_BY_KEY[key]
        messages = self.receive(key) if messages is None else messages
        module = importlib.import_module(f"flightdeck.handlers.{spec.handler}")
        for m in [m for m in messages if "Invocation" in m]:
            self.run_invocation(m["Invocation"])
        messages = [m for m in messages if "Invocation" not in m]
        if not messages:
            return {"batchItemFailures": []}
        resp = module.handler(self.sqs_event(key, messages), LocalLambdaContext(function_name=f"{self.name}-{key}"))
        failed = {f["itemIdentifier"] for f in resp.get("batchItemFailures", [])}
        if delete:
            for m in messages:
                if m["MessageId"] not in failed:
                    self.sqs.delete_message(QueueUrl=self.queue_urls[key], ReceiptHandle=m["ReceiptHandle"])
        return resp

    def run_invocation(self, invocation: Invocation) -> Any:
        """Run one asynchronous invocation of the turn worker as Lambda does: a failed run raises here and
        is queued again (RECORDER), twice; after the third failure its record goes to the turns queue."""
        module = importlib.import_module(f"flightdeck.handlers.{topology.THINK_HANDLER}")
        invocation.attempts += 1
        try:
            return module.handler(invocation.event, LocalLambdaContext(function_name=self.turn_worker_function))
        except Exception as exc:
            spec = topology.ASYNC_INVOKES_BY_HANDLER[topology.THINK_HANDLER]
            if invocation.attempts <= spec.retry_attempts:
                RECORDER.put_back(invocation)
            else:
                self.sqs.send_message(
                    QueueUrl=self.queue_urls[spec.on_failure_queue],
                    MessageBody=json.dumps(
                        {
                            "requestContext": {
                                "condition": "RetriesExhausted",
                                "approximateInvokeCount": invocation.attempts,
                            },
                            "requestPayload": invocation.event,
                            "responsePayload": {"errorMessage": str(exc)},
                        }
                    ),
                )
            raise

    def bodies(self, key: str) -> list[dict[str, Any]]:
        return [json.loads(m["Body"]) for m in self.receive(key)]

    def item(self, pk: str, sk: str) -> dict[str, Any] | None:
        from boto3.dynamodb.types import TypeDeserializer

        got = self.dynamodb.get_item(TableName=self.table, Key={"pk": {"S": pk}, "sk": {"S": sk}}, ConsistentRead=True)
        return {k: TypeDeserializer().deserialize(v) for k, v in got["Item"].items()} if "Item" in got else None

    def turn_item(self, sid: str, turn: int) -> dict[str, Any] | None:
        """Turn `turn`'s aggregation as its session's META holds it (ARCHITECTURE §2), under the names the
        tests read (status, received, total_tools, expected, deadline_ms, deadlines, completed_by, and
        due_at while it waits); None when META holds another turn's."""
        return aggregation_fields(self.item(f"S#{sid}", "META"), turn)

    def table_items(self) -> list[dict[str, Any]]:
        return self.dynamodb.scan(TableName=self.table, ConsistentRead=True)["Items"]


def make_agent(
    monkeypatch,
    name: str = "orchestrator",
    *,
    delegates: list[str] = ("worker",),
    builtin_tools: list[str] = (),
    allow: str = "worker:http://127.0.0.1:9,orchestrator:http://127.0.0.1:9",
    extra_env: dict[str, str] | None = None,
) -> Agent:
    """Create an agent's resources in the active moto mock and point the settings at them."""
    dynamodb = boto3.client("dynamodb", region_name="us-east-1")
    sqs = boto3.client("sqs", region_name="us-east-1")
    res = create_agent_resources(name, dynamodb=dynamodb, sqs=sqs)
    env = {
        "AGENT_NAME": name,
        "AGENT_CONFIG": agent_config(name, list(delegates), list(builtin_tools)),
        "TOOL_CALLBACK_SECRET": SECRET,
        "TOOL_CALLBACK_SECRET_PREVIOUS": PREVIOUS_SECRET,
        "ALLOWED_HOST_MAPPING": allow,
        "ASYNC_TOOL_TIMEOUT_MS": "300000",
        "CONSOLE": "on",  # as `flightdeck local` runs every agent
        **res.environment(),
        **(extra_env or {}),
    }
    cohort = _cohorts.setdefault(monkeypatch, [])
    for key in set().union(*(a.env.keys() for a in cohort)) - env.keys():
        monkeypatch.delenv(key, raising=False)  # what only another agent of this test set
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    wiring.reset()
    agent = Agent(name, env, res.queue_urls, res.dlq_urls, res.table_name, sqs, dynamodb, cohort=cohort)
    cohort.append(agent)
    _active[:] = [agent]
    # The tests' caller is both a peer agent and a user (every route that takes a token but /mcp, every skill).
    agent.peer_token = agent.add_peer(TEST_PEER, channels=("a2a", "user"))
    return agent


def new_session_id() -> str:
    return f"s-{uuid.uuid4()}"


def hand_outbound_to_queues(monkeypatch) -> None:
    """The turn worker's inline dispatch and delivery do not happen (as when it has no time left):
    every delegation and answer goes to its queue, for tests that drive those workers themselves."""
    from flightdeck.domain import turn_loop

    monkeypatch.setattr(
        turn_loop, "dispatch_now", lambda deps, bodies, budget: [deps.queues.send_dispatch(b) for b in bodies]
    )
    monkeypatch.setattr(turn_loop, "deliver_now", lambda deps, body, budget: deps.queues.send_delivery(body))


def aggregation_fields(meta: dict[str, Any] | None, turn: int) -> dict[str, Any] | None:
    """A session META's aggregation of `turn` (agg_* attributes) under the names the tests read."""
    if not meta or int(meta.get("agg_turn", -1)) != turn:
        return None
    waiting = meta["agg_status"] == "waiting"
    total = int(meta["agg_total"])
    out = {
        "status": meta["agg_status"],
        "expected": set(meta.get("agg_expected", ())),
        "total_tools": total,
        "received": total - len(meta.get("agg_open", ())) if waiting else total,
        "deadline_ms": int(meta["agg_deadline"]),
        "completed_by": meta.get("agg_by", ""),
        "created_at": int(meta.get("agg_at", 0)),
    }
    if meta.get("agg_deadlines"):
        out["deadlines"] = meta["agg_deadlines"]
    if waiting and "due_at" in meta and "owed_think" not in meta:
        out["due_at"] = meta["due_at"]
    return out
