"""THINK_START = "stream": the owed think started by the table's stream (moto's), not by its writer.

The writer commits the mark out of the deadline index; moto's stream carries META's record through the
mapping's filter (flightdeck.local.streams) to the owed_thinks handler, which starts the think with an
asynchronous invoke; a start that fails puts the mark into the index for the sweep, and only a record whose
hand-over fails too is reported as a batch item failure.
"""

from __future__ import annotations

import importlib

import boto3
import pytest
from botocore.config import Config

from flightdeck import wiring
from flightdeck.local.invocation import LocalLambdaContext
from flightdeck.local.streams import StreamReader, enable_stream
from tests.support.harness import make_agent, new_session_id
from tests.support.invokes import RECORDER


@pytest.fixture
def streamed(aws, monkeypatch):
    agent = make_agent(monkeypatch, extra_env={"THINK_START": "stream"})
    arn = enable_stream(agent.dynamodb, agent.table)
    # botocore names an account-based endpoint for streams, which moto's in-process mock does not serve.
    streams = boto3.client(
        "dynamodbstreams", region_name="us-east-1", config=Config(account_id_endpoint_mode="disabled")
    )
    reader = StreamReader(streams, arn)
    RECORDER.clear()
    yield agent, reader
    RECORDER.clear()


def consume(reader):
    """One invocation of the stream consumer with the records the mapping's filter lets through."""
    records = reader.read()
    if not records:
        return records, None  # Lambda invokes no function for an empty batch
    module = importlib.import_module("flightdeck.handlers.owed_thinks")
    return records, module.handler({"Records": records}, LocalLambdaContext(function_name="owed-thinks"))


def run_thinks(agent):
    ran = 0
    for invocation in RECORDER.take(agent.turn_worker_function):
        agent.run_invocation(invocation)
        ran += 1
    return ran


def test_the_stream_starts_the_owed_think_and_the_mark_never_enters_the_index(streamed):
    agent, reader = streamed
    sid = new_session_id()
    assert agent.api("chat_post", body={"session_id": sid, "content": "just answer"})[0] == 202
    assert RECORDER.take(agent.turn_worker_function) == []  # the writer started nothing
    meta = agent.item(f"S#{sid}", "META")
    assert meta["owed_think"] == 1 and "due_at" not in meta and "due_shard" not in meta
    records, answer = consume(reader)
    assert [r["dynamodb"]["Keys"]["sk"]["S"] for r in records] == ["META"]  # the filter: META with a mark
    assert answer == {"batchItemFailures": []}
    assert run_thinks(agent) == 1
    assert agent.api("session_get", SESSION_ID=sid)[2]["status"] == "idle"
    # The think's clearing write carries no mark: the filter drops it, and nothing starts twice.
    records, _ = consume(reader)
    assert records == [] and RECORDER.take(agent.turn_worker_function) == []


def test_a_reader_given_other_filters_reads_what_they_let_through(streamed):
    agent, reader = streamed
    sid = new_session_id()
    agent.api("chat_post", body={"session_id": sid, "content": "just answer"})
    consume(reader)
    run_thinks(agent)
    # Every record (the bench's index accounting reads them all): the think's claim, its ITER and META writes.
    records = reader.read(filters=({},))
    assert sorted(r["dynamodb"]["Keys"]["sk"]["S"] for r in records) == ["ITER#000001", "META", "THINK"]


def test_a_write_while_a_mark_stands_does_not_start_it_again(streamed):
    agent, reader = streamed
    sid = new_session_id()
    agent.api("chat_post", body={"session_id": sid, "content": "just answer"})
    consume(reader)
    assert len(RECORDER.take(agent.turn_worker_function)) == 1
    # The sweep's kind of write: the mark moves on, the same turn owed. Its record passes the filter and
    # the consumer drops it (old and new images name the same think).
    assert wiring.deps().liveness.defer_owed_think(sid, 1)
    records, answer = consume(reader)
    assert len(records) == 1 and answer == {"batchItemFailures": []}
    assert RECORDER.take(agent.turn_worker_function) == []


def test_a_failed_start_hands_the_think_to_the_sweep_and_a_failed_hand_over_fails_the_record(streamed, monkeypatch):
    agent, reader = streamed
    sid, other = new_session_id(), new_session_id()
    agent.api("chat_post", body={"session_id": sid, "content": "just answer"})
    thinks = wiring.deps().thinks

    def refused(*args, **kwargs):
        raise RuntimeError("Lambda refused the invoke (injected)")

    monkeypatch.setattr(thinks, "resend", refused)
    records, answer = consume(reader)
    assert answer == {"batchItemFailures": []}  # handed to the sweep: the shard moves on
    meta = agent.item(f"S#{sid}", "META")
    assert meta["owed_think"] == 1 and "due_shard" in meta  # in the index now, due after the grace
    agent.api("chat_post", body={"session_id": other, "content": "just answer"})
    liveness = wiring.deps().liveness
    monkeypatch.setattr(liveness, "defer_owed_think", refused)
    records, answer = consume(reader)
    # The batch also holds the first session's hand-over (its mark unchanged: done); only the new one fails.
    [failed] = [r for r in records if r["dynamodb"]["Keys"]["pk"]["S"] == f"S#{other}"]
    assert len(records) == 2
    assert answer == {"batchItemFailures": [{"itemIdentifier": failed["dynamodb"]["SequenceNumber"]}]}
    assert "due_shard" not in agent.item(f"S#{other}", "META")
