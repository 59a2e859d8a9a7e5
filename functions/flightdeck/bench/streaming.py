"""Streaming cost: what a streamed second and a streamed task cost in requests.

One task is scripted on moto, in this process, through the real domain code (send_message, the
turn loop with the local model, a delegation answered by record_and_advance): it thinks at 1 s,
waits `wait_s` for its delegate, thinks again and completes. The real stream generators follow
it (flightdeck.domain.a2a.stream for message/stream, flightdeck.domain.session_events for GET
/api/sessions/{id}/events) on a scripted clock, one poll per STREAM_POLL_INTERVAL_MS, and only
their own requests are counted (their store has its own counted client; the script's is not).

Per stream, besides those reads: one API Gateway request (each 10 MB of the response one more)
and one Lambda invocation whose duration is the whole stream: GB-s = streamed seconds x memory.
The stream's writes are its watch marks (flightdeck.domain.live): one at the start, one more
per WATCH_MS / 2 of a task that runs longer.

The live relay (flightdeck.domain.live): one think of the local model, `think_s` long on a
scripted clock, answering directly, run by the real turn loop twice: once with the session
watched, once not. Only the turn worker's own requests are counted: what the watched think
asks more is the relay's cost (its writes of the text so far, and the delete at the end); the
unwatched one must ask nothing more than a think ever did.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

from flightdeck.bench.counter import ListSink, attach
from flightdeck.bench.dynamo_units import read_units, write_units
from flightdeck.bench.prices import PriceTable

AGENT = "bench-stream"
SECRET = "bench-only-stream-secret-0123456789abcdef"


class _ScriptedClock:
    """Fake time for the stream (no sleeping); at given times the script moves the task on."""

    def __init__(self, script: list[tuple[float, Callable[[], None]]], mark: Callable[[], int]):
        self.now = 0.0
        self.script = sorted(script, key=lambda s: s[0])
        self.mark = mark
        self.marks: list[tuple[float, int]] = []  # (time, records counted so far) at the end of each poll

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.marks.append((self.now, self.mark()))
        self.now += seconds
        while self.script and self.script[0][0] <= self.now + 1e-9:
            self.script.pop(0)[1]()


def _reads(records: list[dict[str, Any]]) -> dict[str, Any]:
    ops = Counter(f"{r['svc']}.{r['op']}" for r in records)
    rru = sum(
        read_units(int(r.get("bytes") or 0), consistent=bool(r.get("consistent")) and not r.get("index"))
        for r in records
        if r.get("svc") == "dynamodb" and r.get("op") in ("GetItem", "Query")
    )
    return {"requests": len(records), "requests_by_operation": dict(sorted(ops.items())), "rru": rru}


def _environment(tables: dict[str, str], poll_ms: int) -> dict[str, str]:
    config = {
        "name": AGENT,
        "model": {"provider": "local"},
        "delegates": [{"agent": "worker", "service": "worker", "callback_service": AGENT}],
    }
    return {
        "AGENT_NAME": AGENT,
        "AGENT_CONFIG": json.dumps(config),
        "TOOL_CALLBACK_SECRET": SECRET,
        "ALLOWED_HOST_MAPPING": "worker:http://127.0.0.1:9",
        "INBOUND_AUTH": "off",
        "STREAMING": "on",
        "STREAM_POLL_INTERVAL_MS": str(poll_ms),
        "STREAM_MAX_MS": "840000",
        **tables,
    }


class _ScriptedThinks:
    """The script runs each think itself, at its scripted time: a think started by the domain is not run again."""

    def start(self, session_id: str, turn: int, traceparent: str = "", snapshot: str = "") -> None:
        pass

    def resend(self, session_id: str, turn: int, traceparent: str = "") -> None:
        pass

    def retry_later(self, session_id: str, turn: int, traceparent: str, attempt: int, delay_s: int) -> None:
        raise AssertionError("the local model is never throttled")


def measure(
    prices: PriceTable,
    progress: Callable[[str], None],
    *,
    wait_s: int = 10,
    poll_ms: int = 1000,
    memory_mb: int = 512,
    think_s: int = 10,
) -> dict[str, Any]:
    import boto3
    from moto import mock_aws

    from flightdeck.adapters.a2a_state import A2AStore
    from flightdeck.adapters.dynamo.store import StateStore
    from flightdeck.adapters.http_peers import Peers
    from flightdeck.adapters.live_state import LiveStore
    from flightdeck.adapters.model_choice import build_model
    from flightdeck.adapters.secrets import signing_keys
    from flightdeck.adapters.sqs_queues import Queues
    from flightdeck.domain import session_events, turn_loop
    from flightdeck.domain.a2a import stream as a2a_stream
    from flightdeck.domain.a2a.from_v03 import send_request
    from flightdeck.domain.a2a.ports import A2APorts, parse_task_id
    from flightdeck.domain.a2a.tasks import send_message
    from flightdeck.domain.a2a.turn_hooks import A2ATurnHooks
    from flightdeck.domain.a2a.wire import MessageSendParams
    from flightdeck.domain.aggregation import record_and_advance
    from flightdeck.domain.ports import Deps, state_ports
    from flightdeck.domain.records import ResultSource, ToolResult
    from flightdeck.domain.streaming import Note, Pace
    from flightdeck.local.resources import create_agent_resources
    from flightdeck.observability import logger
    from flightdeck.settings import Settings

    progress(
        f"streaming cost: a task that waits {wait_s} s for its delegate, followed by message/stream "
        "and by GET /api/sessions/{id}/events"
    )
    saved_endpoint = os.environ.pop("AWS_ENDPOINT_URL", None)  # the in-process moto, never a server
    saved_level = logger.log_level
    logger.setLevel("ERROR")  # the script's timeline lines are not this command's output
    results: dict[str, Any] = {}
    try:
        with mock_aws():

            def client(service: str) -> Any:
                return boto3.client(  # type: ignore[call-overload]  # boto3-stubs overloads on literal service names
                    service, region_name="us-east-1", aws_access_key_id="bench", aws_secret_access_key="bench"
                )

            ddb, sqs = client("dynamodb"), client("sqs")
            res = create_agent_resources(AGENT, dynamodb=ddb, sqs=sqs)
            settings = Settings.from_env(_environment(res.environment(), poll_ms))

            def deps_with(dynamodb: Any, clock: Callable[[], int] | None = None, model: Any = None) -> Deps:
                store = StateStore(res.table_name, client=dynamodb, clock=clock)
                queues = Queues(
                    dispatch_url=res.queue_urls["dispatch"],
                    delivery_url=res.queue_urls["delivery"],
                    timers_url=res.queue_urls["timers"],
                    client=sqs,
                )
                # The think delegates (the dispatch mints a callback token): the secret's key signs it.
                return Deps(
                    settings=settings.for_domain(),
                    **state_ports(store),
                    queues=queues,
                    thinks=_ScriptedThinks(),
                    peers=Peers(timeout_s=0.5),
                    keys=lambda: signing_keys(settings),
                    model=(lambda: model) if model is not None else (lambda: build_model(settings.agent)),
                    # No agent cards are fetched here: the bench calls no A2A peer.
                    a2a=A2APorts(A2AStore(store), http=None),  # type: ignore[arg-type]
                    live=LiveStore(store),
                    turn_hooks=A2ATurnHooks(),
                )

            script_deps = deps_with(ddb)
            counted_client = client("dynamodb")
            sink = ListSink(AGENT)
            attach(counted_client, sink)
            stream_deps = deps_with(counted_client)

            for kind in ("message_stream", "session_events"):
                sink.records.clear()
                message = {
                    "kind": "message",
                    "role": "user",
                    "messageId": f"bench-{kind}",
                    "parts": [{"kind": "text", "text": "@worker summarise the report"}],
                }
                task = send_message(script_deps, send_request(MessageSendParams.model_validate({"message": message})))
                session_id, _ = parse_task_id(task["id"]) or ("", "")

                def think(turn: int, sid: str = session_id) -> None:
                    turn_loop.run_turn(script_deps, sid, turn)

                def answer(sid: str = session_id) -> None:
                    session = script_deps.sessions.get_session(sid)
                    assert session is not None
                    use = next(b["toolUse"] for b in session.messages[-1]["content"] if "toolUse" in b)
                    record_and_advance(
                        script_deps,
                        sid,
                        1,
                        ToolResult(use["toolUseId"], "success", "the summary", ResultSource.CALLBACK),
                        by="callback",
                    )

                clock = _ScriptedClock(
                    [(1.0, lambda: think(1)), (1.0 + wait_s, answer), (2.0 + wait_s, lambda: think(2))],
                    mark=lambda: len(sink.records),
                )
                pace = Pace.of(settings.for_domain(), monotonic=clock.monotonic, sleep=clock.sleep)
                events: Iterator[Any]
                if kind == "message_stream":
                    key = parse_task_id(task["id"])[1]  # type: ignore[index]
                    events = a2a_stream.follow(
                        stream_deps, session_id, key, pace, task["status"]["state"], since_task_message=True
                    )
                else:
                    opened = session_events.open_session(stream_deps, session_id, None)
                    events = session_events.session_events(stream_deps, opened, pace)
                sent = [e for e in events if not isinstance(e, Note)]
                ends = [count for _, count in clock.marks] + [len(sink.records)]
                polls = [sink.records[a:b] for a, b in zip([0] + ends[:-1], ends)]
                # A poll while the task waits on its delegate (the longest phase), half-way through.
                middle = next(i for i, (t, _) in enumerate(clock.marks) if t >= 1.0 + wait_s / 2)
                results[kind] = {
                    "streamed_s": clock.now,
                    "events": len(sent),
                    "polls": len(polls),
                    **_reads(sink.records),
                    "per_waiting_poll": _reads(polls[middle]),
                    "watch_marks": sum(1 for r in sink.records if r.get("op") == "UpdateItem"),
                }

            progress(f"live relay: a {think_s} s think of the local model, watched and not; the turn worker's requests")
            results["live_relay"] = _live_relay(deps_with, client, think_s)
    finally:
        logger.setLevel(saved_level)
        if saved_endpoint is not None:
            os.environ["AWS_ENDPOINT_URL"] = saved_endpoint
    return _costs(results, prices, poll_ms / 1000, memory_mb, wait_s)


# The live relay's think: a direct answer of about 100 words (the local model repeats its task).
LIVE_TASK = "describe in plain words how the tides of the northern sea rise and fall twice a day " * 3


class _ThinkClock:
    """The think's time (epoch ms, as the store's clock): the local model's sleeps move it on."""

    def __init__(self) -> None:
        import time

        self.ms = int(time.time() * 1000)

    def now_ms(self) -> int:
        return self.ms

    def sleep(self, seconds: float) -> None:
        self.ms += round(seconds * 1000)


def _live_relay(deps_with: Callable[..., Any], client: Callable[[str], Any], think_s: int) -> dict[str, Any]:
    """The turn worker's requests for one think, unwatched and watched (deps_with: the bench's Deps on moto)."""
    from flightdeck.domain import turn_loop
    from flightdeck.domain.a2a.from_v03 import send_request
    from flightdeck.domain.a2a.ports import parse_task_id
    from flightdeck.domain.a2a.tasks import send_message
    from flightdeck.domain.a2a.wire import MessageSendParams
    from flightdeck.domain.agent import ModelConfig
    from flightdeck.domain.live import WATCH_MS
    from flightdeck.domain.scripted_model import ScriptedModel

    out: dict[str, Any] = {"think_s": think_s}
    for watched in (False, True):
        clock = _ThinkClock()
        script = deps_with(client("dynamodb"), clock.now_ms)
        message = {
            "kind": "message",
            "role": "user",
            "messageId": f"bench-live-{watched}",
            "parts": [{"kind": "text", "text": LIVE_TASK}],
        }
        task = send_message(script, send_request(MessageSendParams.model_validate({"message": message})))
        ids = parse_task_id(task["id"])
        assert ids is not None  # send_message answers a task id it made
        session_id = ids[0]
        if watched:
            assert script.live is not None  # deps_with wires the live relay
            script.live.watch(session_id, clock.now_ms() + WATCH_MS)
        counted, sink = client("dynamodb"), ListSink(AGENT)
        attach(counted, sink)
        model = ScriptedModel(ModelConfig(think_delay_ms=think_s * 1000), script.settings.agent, sleep=clock.sleep)
        worker = deps_with(counted, clock.now_ms, model)
        turn_loop.run_turn(worker, session_id, 1)
        out["watched" if watched else "unwatched"] = sink.records[:]
    alone, followed = out.pop("unwatched"), out.pop("watched")
    relay = [w for r in followed for w in r.get("writes", []) if w.get("sk") == "LIVE"]
    puts = [w for w in relay if w["op"] == "Put"]
    sizes = [w.get("size", 0) for w in puts]
    wru = sum(write_units(size) for size in sizes) + (write_units(sizes[-1]) if sizes else 0)  # a delete: its item
    ops = Counter(f"{r['svc']}.{r['op']}" for r in followed) - Counter(f"{r['svc']}.{r['op']}" for r in alone)
    out.update(
        {
            "requests_unwatched": len(alone),
            "requests_watched": len(followed),
            "extra_requests_unwatched": sum(
                1 for r in alone for w in r.get("writes", []) if w.get("sk") in ("LIVE", "WATCH")
            ),
            "relay_requests": len(followed) - len(alone),
            "relay_requests_by_operation": dict(sorted(ops.items())),
            "text_writes": len(puts),
            "deletes": len(relay) - len(puts),
            "wru": wru,
            "last_text_bytes": sizes[-1] if sizes else 0,
        }
    )
    return out


def _costs(results: dict[str, Any], prices: PriceTable, poll_s: float, memory_mb: int, wait_s: int) -> dict[str, Any]:
    gb = memory_mb / 1024
    out: dict[str, Any] = {"poll_interval_s": poll_s, "lambda_memory_mb": memory_mb, "delegate_wait_s": wait_s}
    relay = results.pop("live_relay", None)
    if relay is not None:
        seconds = relay["think_s"]
        out["live_relay"] = {
            **relay,
            "per_streamed_second": {
                "writes": round(relay["text_writes"] / seconds, 3),
                "wru": round(relay["wru"] / seconds, 3),
                "usd": round(relay["wru"] / seconds * prices.dynamodb_wru, 9),
            },
            "per_think_usd": round(relay["wru"] * prices.dynamodb_wru, 9),
        }
    for kind, r in results.items():
        seconds = r["streamed_s"]
        per_second = r["per_waiting_poll"]["requests"] / poll_s
        task_usd = {
            "api_gateway": prices.apigateway_request,
            "lambda_requests": prices.lambda_request,
            "lambda_duration": seconds * gb * prices.lambda_gb_second,
            "dynamodb_reads": r["rru"] * prices.dynamodb_rru,
        }
        out[kind] = {
            **r,
            "per_streamed_second": {
                "dynamodb_requests": per_second,
                "rru": r["per_waiting_poll"]["rru"] / poll_s,
                "lambda_gb_s": gb,
                "usd": round(
                    r["per_waiting_poll"]["rru"] / poll_s * prices.dynamodb_rru + gb * prices.lambda_gb_second, 9
                ),
            },
            "per_streamed_task": {
                "api_gateway_requests": 1,
                "lambda_invocations": 1,
                "dynamodb_requests": r["requests"],
                "rru": r["rru"],
                "lambda_gb_s": round(seconds * gb, 3),
                "usd": {k: round(v, 9) for k, v in task_usd.items()},
                "usd_total": round(sum(task_usd.values()), 9),
                "usd_per_million": round(sum(task_usd.values()) * 1e6, 2),
            },
        }
    return out
