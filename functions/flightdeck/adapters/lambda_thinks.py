"""Starting thinks: an asynchronous Lambda invoke of the turn worker; a delayed retry through the turns queue.

One asynchronous Invoke is one Lambda request, billed as the invocation it starts: the SQS hop it
replaces cost three more requests (send, receive, delete) per think. Lambda's async retries own a
think that fails (flightdeck.topology.ASYNC_INVOKES). The turns queue stays for the one case an
invoke cannot do: a think that must not start before a delay (model throttling backoff), which
SQS DelaySeconds holds back without a function waiting.

THINK_GATHERING = "shared": a think that is not lone goes to the thinks queue instead, whose batches the
turn worker runs concurrently (flightdeck.handlers.think_batch), so thinks ready together share one
invocation's wait on the model. A lone think (the agent's first start in its window)
keeps the invoke: at low load nothing waits for a batching window that has nothing to gather
(which start is lone: flightdeck.adapters.think_starts).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, Protocol

import boto3

from flightdeck.adapters.sqs_queues import MAX_DELAY_S


class Lone(Protocol):
    def lone(self) -> bool:
        """Whether a think started now is lone (flightdeck.adapters.think_starts)."""
        ...


def think_event(
    session_id: str, turn: int, traceparent: str = "", attempt: int = 1, snapshot: str = "", first_start: bool = False
) -> dict[str, Any]:
    """The turn worker's event (an invoke payload, or a retry message body). first_start: the start the write
    that owed the think made (not a re-send, not a retry): its run may skip the think's claim (§6)."""
    event: dict[str, Any] = {"session_id": session_id, "turn": turn, "traceparent": traceparent}
    if attempt > 1:
        event["attempt"] = attempt
    if snapshot:
        event["snapshot"] = snapshot
    if first_start:
        event["first_start"] = True
    return event


class LambdaThinks:
    def __init__(
        self,
        *,
        function_name: str,
        retry_queue_url: str,
        client: Any = None,
        sqs_client: Callable[[], Any] | None = None,
        started_by_stream: bool = False,
        thinks_queue_url: str = "",
        lone: Lone | None = None,
    ):
        self.function_name = function_name
        # THINK_GATHERING = "shared": the thinks queue, for every think `lone` does not call lone.
        self.thinks_queue_url = thinks_queue_url
        self.lone = lone
        # THINK_START = "stream": the table's stream starts a think its write marked owed (ARCHITECTURE §3).
        self.started_by_stream = started_by_stream
        self.retry_queue_url = retry_queue_url
        self._client = client
        self._sqs_client = sqs_client or (lambda: boto3.client("sqs"))

    @property
    def client(self) -> Any:
        # Created on first use: most handlers never start a think, and a client costs import time.
        if self._client is None:
            self._client = boto3.client("lambda")
        return self._client

    def start(self, session_id: str, turn: int, traceparent: str = "", snapshot: str = "") -> None:
        """Start think iteration `turn` now: Lambda queues the event and answers 202. snapshot: the
        session as its ingest wrote it, so the think skips its read (bounded by the store's
        MAX_SNAPSHOT_CHARS, well inside the 256 KB of an asynchronous invoke's payload).
        With the stream as the starter, nothing: the owed mark's stream record starts it."""
        if self.started_by_stream:
            return
        event = think_event(session_id, turn, traceparent, snapshot=snapshot, first_start=True)
        if self.thinks_queue_url and self.lone is not None and not self.lone.lone():
            self._sqs_client().send_message(QueueUrl=self.thinks_queue_url, MessageBody=json.dumps(event))
        else:
            self._invoke(event)

    def resend(self, session_id: str, turn: int, traceparent: str = "") -> None:
        """Start a think owed since an earlier write, whoever starts fresh ones."""
        self._invoke(think_event(session_id, turn, traceparent))

    def _invoke(self, event: dict[str, Any]) -> None:
        self.client.invoke(
            FunctionName=self.function_name, InvocationType="Event", Payload=json.dumps(event).encode("utf-8")
        )

    def retry_later(self, session_id: str, turn: int, traceparent: str, attempt: int, delay_s: int) -> None:
        """Think again after delay_s: a message on the turns queue, delivered to the turn worker after the delay."""
        self._sqs_client().send_message(
            QueueUrl=self.retry_queue_url,
            MessageBody=json.dumps(think_event(session_id, turn, traceparent, attempt)),
            DelaySeconds=max(0, min(MAX_DELAY_S, delay_s)),
        )
