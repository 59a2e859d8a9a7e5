"""The crash-point explorer (issue 24): each scenario once to count its committed steps, then once per
step with the function that took it dying right after it; after each run, recovery, then the invariants.

Modes (FLIGHTDECK_EXPLORER): `ci` (default) one seed, HTTP callers that retry; `nightly` several seeds,
each picking the order of due work at random and whether an HTTP caller that got no answer retries.
"""

from __future__ import annotations

import importlib
import json
import os
import random
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import boto3
from botocore.config import Config

from flightdeck import topology, wiring
from flightdeck.adapters import model_choice
from flightdeck.adapters.http_peers import Peers
from flightdeck.adapters.mcp_http import McpHttp
from flightdeck.domain.peers import new_token
from flightdeck.domain.streaming import Pace
from flightdeck.local.resources import create_table
from flightdeck.local.streams import StreamReader, enable_stream
from tests.support.explorer.catalogue import Scenario
from tests.support.explorer.invariants import INVARIANTS, check
from tests.support.explorer.steps import WATCH
from tests.support.explorer.world import Clock, World
from tests.support.harness import TEST_PEER, make_agent
from tests.support.invokes import RECORDER

PEERS = "http://127.0.0.1:9"  # never reached: the world answers for the peers
AGENT_CONFIG = {
    "name": "orchestrator",
    "description": "orchestrator under the crash-point explorer",
    "model": {"provider": "local", "think_delay_ms": 0},
    "delegates": [
        {"agent": "worker", "service": "worker", "callback_service": "orchestrator"},
        {"agent": "sleeper", "service": "worker", "callback_service": "orchestrator", "timeout_ms": 4000},
    ],
    # An MCP server (the world answers for it): search runs inline, slow is deferred to the dispatch worker.
    "mcp_servers": [
        {"name": "notes", "url": f"{PEERS}/mcp", "tools": ["search", {"name": "slow", "timeout_ms": 15000}]}
    ],
    # Skills its callers call (POST /api/chat, /mcp): one answered by its handler, one by the model.
    "skills": [
        {"id": "count_words", "handler": "word_count", "expose": ["a2a", "mcp"]},
        {
            "id": "get_quote",
            "description": "Price a product",
            "input_schema": {
                "type": "object",
                "properties": {"product": {"type": "string"}, "quantity": {"type": "integer"}},
                "required": ["product"],
            },
            "output_schema": {
                "type": "object",
                "properties": {"product": {"type": "string"}, "price": {"type": "number"}},
                "required": ["product", "price"],
            },
            "expose": ["a2a", "mcp"],
        },
    ],
}
MCP_CLIENT = "mcp-client"
STREAM_CHUNK_MS = 60  # the model's time per streamed piece: the relay writes every other one
MODES = {"ci": {"seeds": (0,)}, "nightly": {"seeds": (0, 1, 2, 3, 4)}}


def _streams() -> Any:
    # botocore names an account-based endpoint for streams, which moto's in-process mock does not serve.
    return boto3.client("dynamodbstreams", region_name="us-east-1", config=Config(account_id_endpoint_mode="disabled"))


def mode() -> str:
    chosen = os.environ.get("FLIGHTDECK_EXPLORER", "ci")
    if chosen not in MODES:
        raise ValueError(f"FLIGHTDECK_EXPLORER={chosen!r}: one of {sorted(MODES)}")
    return chosen


_current: list[World] = []


def _world() -> World:
    return _current[0]


def _post_json(self: Peers, url: str, body: Any, headers: dict[str, str] | None = None, timeout_s: Any = None) -> Any:
    return _world().peer_post(url, json.loads(json.dumps(body)), headers)


def _mcp_list(self: McpHttp, url: str, token: str | None, timeout_s: float) -> Any:
    return _world().mcp_list()


def _mcp_call(
    self: McpHttp, url: str, token: str | None, tool: str, arguments: dict[str, Any], timeout_s: float
) -> Any:
    return _world().mcp_call(tool, arguments)


def _paced_on_the_world(real: Any) -> Any:
    """Pace.of with the world's clock: a stream's polls pass on it (no real sleep), nothing else running."""

    def of(cls: type[Pace], settings: Any, remaining_ms: int | None = None, **clock: Any) -> Pace:
        world = _world()
        return real(cls, settings, remaining_ms, monotonic=lambda: world.clock.now / 1000, sleep=world.pass_time)

    return of


class RecordedModel:
    """The agent's own model (the scripted one), with each ask recorded against the think that made it."""

    def __init__(self, real: Any):
        self.real = real

    def converse(self, **ask: Any) -> Any:
        _world().model_asked()
        return self.real.converse(**ask)

    def converse_stream(self, **ask: Any) -> Iterator[Any]:
        world = _world()
        world.model_asked()
        for item in self.real.converse_stream(**ask):
            world.clock.now += STREAM_CHUNK_MS
            yield item


@dataclass
class Run:
    crash_at: int  # 0: the counting run
    seed: int
    steps: list[str]
    findings: list[tuple[str, str]]
    crashed: list[str]
    failures: list[str]

    def where(self) -> str:
        return self.steps[self.crash_at - 1] if self.crash_at else "no crash"


@dataclass
class Report:
    scenario: str
    steps: list[str] = field(default_factory=list)
    runs: list[Run] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def failed(self) -> list[Run]:
        return [r for r in self.runs if r.findings]

    def summary(self) -> str:
        lines = [f"{self.scenario}: {len(self.steps)} steps, {len(self.runs)} runs, {len(self.failed)} failing"]
        for r in self.failed[:12]:
            for name, detail in r.findings[:3]:
                lines.append(f"  crash at {r.crash_at} (seed {r.seed}) [{r.where()}]: {name}: {detail}")
        return "\n".join(lines)


class Explorer:
    """One agent's queues and environment, made once; each run gets a fresh table, empty queues and a world."""

    def __init__(self, monkeypatch: Any, think_start: str = "writer", think_gathering: str = "one_per_function"):
        self.monkeypatch = monkeypatch
        self.think_start = think_start
        # "shared": every think through the thinks queue (no lone one), a batch's thinks one after another, so
        # that each crash point is the same in every run.
        gathered = (
            {"THINK_GATHERING": "shared", "THINK_LONE_WINDOW_MS": "0", "THINK_BATCH_THREADS": "1"}
            if think_gathering == "shared"
            else {}
        )
        self.agent = make_agent(
            monkeypatch,
            delegates=[],
            allow=f"worker:{PEERS},orchestrator:{PEERS}",
            extra_env={
                "AGENT_CONFIG": json.dumps(AGENT_CONFIG),
                "STREAM_POLL_INTERVAL_MS": "100",
                # A2A streams (SubscribeToTask): each polls on the world's clock, and one that sees no final
                # event closes after a second of it (the client subscribes again).
                "STREAMING": "on",
                "STREAM_MAX_MS": "1000",
                "THINK_START": think_start,
                **gathered,
            },
        )
        self.mcp_key = new_token(MCP_CLIENT)
        self._add_mcp_client()
        real_pace = Pace.of.__func__  # type: ignore[attr-defined]
        monkeypatch.setattr(Pace, "of", classmethod(_paced_on_the_world(real_pace)))
        if gathered:
            turn_worker = importlib.import_module(f"flightdeck.handlers.{topology.THINK_HANDLER}")
            real_record = turn_worker.think_record

            def think_record(record: Any, budget: Any) -> Any:
                _world().think_of(json.loads(record.body))
                return real_record(record, budget)

            monkeypatch.setattr(turn_worker, "think_record", think_record)
        monkeypatch.setattr(Peers, "post_json", _post_json)
        monkeypatch.setattr(McpHttp, "list_tools", _mcp_list)
        monkeypatch.setattr(McpHttp, "call_tool", _mcp_call)
        real_build = model_choice.build_model
        monkeypatch.setattr(model_choice, "build_model", lambda agent: RecordedModel(real_build(agent)))
        self.runs = 0
        self.last: World | None = None

    def _add_mcp_client(self) -> None:
        self.agent.registry.add(MCP_CLIENT, self.mcp_key, replace=True, channels=("mcp",))

    def _fresh(self, crash_at: int | None, seed: int) -> World:
        # The same table and queues, emptied: the functions' clients and settings stay.
        agent = self.agent
        self.runs += 1
        # A run that broke off starts from a new table; so does every run with the stream: moto keeps each record
        # of a stream, copying them with the table in every transaction (one stream for all runs would make each
        # run slower than the last), and a stream it disabled cannot be enabled again.
        streamed = self.think_start == "stream"
        if self.last is not None and (streamed or not self.last.clear()):
            self.last.empty_queues()
            agent.dynamodb.delete_table(TableName=agent.table)
            create_table(agent.dynamodb, agent.name)
            agent.registry.add(TEST_PEER, agent.peer_token, replace=True)
            self._add_mcp_client()
        RECORDER.clear()
        world = World(agent, Clock(int(time.time() * 1000)), crash_at=crash_at, rng=random.Random(seed))
        world.mcp_key = self.mcp_key
        if streamed:
            world.stream = StreamReader(_streams(), enable_stream(agent.dynamodb, agent.table))
        if seed:  # nightly: the order of due work, and whether a client retries, vary by seed
            world.shuffle, world.client_retries = 0.5, seed % 2 == 1
        wiring.state_store()._clock = world.clock.now_ms
        random.seed(seed)  # backoff jitter
        self.last = world
        return world

    @contextmanager
    def _watching(self, world: World) -> Iterator[World]:
        _current[:] = [world]
        WATCH.observer = world
        try:
            yield world
        finally:
            WATCH.observer = None
            _current.clear()

    def run(self, scenario: Scenario, crash_at: int | None, seed: int = 0) -> tuple[World, list[tuple[str, str]]]:
        world = self._fresh(crash_at, seed)
        world.silent = set(scenario.silent)
        with self._watching(world):
            scenario.script(world)
            world.recover()
        findings = check(world)
        findings += [("the functions ran", f) for f in world.failures if "DLQ" in f]
        return world, findings

    def explore(self, scenario: Scenario, seeds: tuple[int, ...] = (0,)) -> Report:
        started = time.perf_counter()
        report = Report(scenario.id)
        for seed in seeds:
            world, findings = self.run(scenario, None, seed)
            steps = list(world.steps)
            if seed == seeds[0]:
                report.steps = steps
            report.runs.append(Run(0, seed, steps, findings, world.crashed, world.failures))
            for n in range(1, len(steps) + 1):
                crashed, findings = self.run(scenario, n, seed)
                report.runs.append(Run(n, seed, crashed.steps, findings, crashed.crashed, crashed.failures))
        report.seconds = time.perf_counter() - started
        return report


def figures(reports: list[Report]) -> str:
    """The CI line: scenarios x crash points x invariants checked."""
    points = sum(len(r.runs) for r in reports)
    failing = sum(len(r.failed) for r in reports)
    return (
        f"crash-point explorer ({mode()}): {len(reports)} scenarios x {points} crash points "
        f"(counting runs included) x {len(INVARIANTS)} invariants checked; {failing} runs broke one"
    )
