"""Local stand-ins for Lambda's SQS event source mappings and the sweep schedule.

moto must never run event source mappings itself (with its non-Docker Lambda
backend they silently delete messages), so each queue gets a poller thread that
does what the mapping does: receive a batch (gathered for up to the queue's batching
window, MaximumBatchingWindowInSeconds), hand it to the handler as a Lambda SQS event,
and delete what the handler did not report as failed (ReportBatchItemFailures). A poller
may run several batches at once (`concurrency`), as a mapping scales out its invocations. moto never fires schedule rules either, so a timer
thread sends the sweeper the EventBridge Scheduled Event.
"""

from __future__ import annotations

import base64
import logging
import threading
import time
import uuid
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any

from flightdeck import topology
from flightdeck.local.invocation import LOCAL_ACCOUNT_ID, LOCAL_REGION, Function, log_failure

log = logging.getLogger("flightdeck.local")

# Short long-polls keep a stop request answered within about a second.
RECEIVE_WAIT_S = 1
# After a failed ReceiveMessage (moto restarting, shutting down), wait before the next.
RECEIVE_ERROR_BACKOFF_S = 1.0
# Within a batching window, how often the poller looks for more messages (short polls).
GATHER_INTERVAL_S = 0.1


def _lambda_message_attributes(attributes: dict[str, Any]) -> dict[str, Any]:
    """SQS API message attributes in the casing Lambda's SQS event uses."""
    converted = {}
    for name, value in attributes.items():
        record: dict[str, Any] = {
            "stringListValues": list(value.get("StringListValues", [])),
            "binaryListValues": [base64.b64encode(v).decode() for v in value.get("BinaryListValues", [])],
            "dataType": value["DataType"],
        }
        if "StringValue" in value:
            record["stringValue"] = value["StringValue"]
        if "BinaryValue" in value:
            record["binaryValue"] = base64.b64encode(value["BinaryValue"]).decode()
        converted[name] = record
    return converted


def lambda_sqs_record(message: dict[str, Any], *, queue_arn: str, region: str) -> dict[str, Any]:
    return {
        "messageId": message["MessageId"],
        "receiptHandle": message["ReceiptHandle"],
        "body": message["Body"],
        # ApproximateReceiveCount, SentTimestamp, SenderId, ApproximateFirstReceiveTimestamp,
        # and on FIFO queues SequenceNumber, MessageGroupId, MessageDeduplicationId.
        "attributes": dict(message.get("Attributes", {})),
        "messageAttributes": _lambda_message_attributes(message.get("MessageAttributes", {})),
        "md5OfBody": message["MD5OfBody"],
        **(
            {"md5OfMessageAttributes": message["MD5OfMessageAttributes"]} if "MD5OfMessageAttributes" in message else {}
        ),
        "eventSource": "aws:sqs",
        "eventSourceARN": queue_arn,
        "awsRegion": region,
    }


def build_sqs_event(messages: Iterable[dict[str, Any]], *, queue_arn: str, region: str) -> dict[str, Any]:
    return {"Records": [lambda_sqs_record(m, queue_arn=queue_arn, region=region) for m in messages]}


class InvalidBatchResponse(ValueError):
    """Lambda then treats the whole batch as failed."""


def failed_message_ids(result: Any, batch_ids: Iterable[str]) -> set[str]:
    """The message ids a handler reported as failed, read as Lambda's ReportBatchItemFailures reads them.

    A null or empty response, or no/empty/null batchItemFailures, means every
    message succeeded. An entry without a usable itemIdentifier, or naming a
    message not in the batch, makes the whole response invalid.
    """
    batch = set(batch_ids)
    if result is None or result == {} or result == "":
        return set()
    if not isinstance(result, dict):
        raise InvalidBatchResponse(f"response is a {type(result).__name__}, not an object")
    failures = result.get("batchItemFailures")
    if not failures:
        return set()
    if not isinstance(failures, list):
        raise InvalidBatchResponse("batchItemFailures is not a list")
    failed: set[str] = set()
    for entry in failures:
        identifier = entry.get("itemIdentifier") if isinstance(entry, dict) else None
        if not isinstance(identifier, str) or not identifier:
            raise InvalidBatchResponse(f"batchItemFailures entry {entry!r} has no itemIdentifier")
        if identifier not in batch:
            raise InvalidBatchResponse(f"itemIdentifier {identifier!r} is not a message of this batch")
        failed.add(identifier)
    return failed


class SqsPoller(threading.Thread):
    """One queue's event source mapping (ReportBatchItemFailures on)."""

    def __init__(
        self,
        *,
        sqs: Any,
        queue_url: str,
        spec: topology.QueueSpec,
        function: Function,
        stop: threading.Event,
        region: str = LOCAL_REGION,
        wait_time_s: int = RECEIVE_WAIT_S,
        concurrency: int = 1,
    ):
        super().__init__(name=f"poller-{spec.key}", daemon=True)
        if concurrency < 1:
            raise ValueError("a poller runs at least one batch at a time")
        # Batches in flight at once: a received batch waits for none of them (the function's own
        # sandboxes bound how many run).
        self._slots = threading.BoundedSemaphore(concurrency)
        self.concurrency = concurrency
        self.sqs = sqs
        self.queue_url = queue_url
        self.spec = spec
        self.function = function
        self.stop_event = stop
        self.region = region
        self.wait_time_s = wait_time_s
        self._queue_arn: str | None = None

    @property
    def queue_arn(self) -> str:
        if self._queue_arn is None:
            attributes = self.sqs.get_queue_attributes(QueueUrl=self.queue_url, AttributeNames=["QueueArn"])
            self._queue_arn = attributes["Attributes"]["QueueArn"]
        return self._queue_arn

    def run(self) -> None:
        while not self.stop_event.is_set():
            try:
                self.poll_once()
            except Exception:
                log.exception("poller %s: receive failed", self.spec.key)
                self.stop_event.wait(RECEIVE_ERROR_BACKOFF_S)

    def poll_once(self) -> int:
        """Receive one batch (gathered over the batching window) and process it; returns how many messages
        it held. With concurrency above 1 the batch runs on a thread of its own, this one polls on."""
        self._slots.acquire()
        try:
            messages = self._receive(self.spec.batch_size, self.wait_time_s)
            if messages and self.spec.batching_window_s > 0:
                messages += self._gather(len(messages))
        except BaseException:
            self._slots.release()
            raise
        if not messages:
            self._slots.release()
        elif self.concurrency == 1:
            # A received batch is always processed, even when a stop was requested
            # meanwhile: abandoning it would hide it for a whole visibility timeout.
            try:
                self.process(messages)
            finally:
                self._slots.release()
        else:
            threading.Thread(
                target=self._process_in_slot, args=(messages,), name=f"{self.name}-batch", daemon=True
            ).start()
        return len(messages)

    def _process_in_slot(self, messages: list[dict[str, Any]]) -> None:
        try:
            self.process(messages)
        except Exception:
            log.exception("poller %s: a batch failed", self.spec.key)
        finally:
            self._slots.release()

    def _receive(self, most: int, wait_s: int) -> list[dict[str, Any]]:
        messages: list[dict[str, Any]] = self.sqs.receive_message(
            QueueUrl=self.queue_url,
            MaxNumberOfMessages=most,
            WaitTimeSeconds=wait_s,
            MessageSystemAttributeNames=["All"],
            MessageAttributeNames=["All"],
        ).get("Messages", [])
        return messages

    def _gather(self, have: int) -> list[dict[str, Any]]:
        """More messages, until the batch is full or the window has passed since the first (as the mapping does)."""
        more: list[dict[str, Any]] = []
        window_ends = time.monotonic() + self.spec.batching_window_s
        while have + len(more) < self.spec.batch_size and not self.stop_event.is_set():
            left = window_ends - time.monotonic()
            if left <= 0:
                break
            got = self._receive(self.spec.batch_size - have - len(more), 0)
            more += got
            if not got:
                self.stop_event.wait(min(GATHER_INTERVAL_S, left))
        return more

    def process(self, messages: list[dict[str, Any]]) -> None:
        event = build_sqs_event(messages, queue_arn=self.queue_arn, region=self.region)
        ids = [m["MessageId"] for m in messages]
        try:
            result = self.function.invoke(event)
        except Exception as exc:
            # A failed invocation: nothing is deleted, SQS redelivers after the
            # visibility timeout and dead-letters after max_receive_count.
            log_failure(
                log, exc, "poller %s: %s failed on a batch of %d", self.spec.key, self.function.module_name, len(ids)
            )
            return
        try:
            failed = failed_message_ids(result, ids)
        except InvalidBatchResponse as exc:
            log.error(
                "poller %s: invalid batch response from %s (%s): the whole batch is retried",
                self.spec.key,
                self.function.module_name,
                exc,
            )
            return
        done = [m for m in messages if m["MessageId"] not in failed]
        self._delete_messages(done)

    def _delete_messages(self, messages: list[dict[str, Any]]) -> None:
        for start in range(0, len(messages), 10):  # DeleteMessageBatch takes at most 10 entries
            chunk = messages[start : start + 10]
            response = self.sqs.delete_message_batch(
                QueueUrl=self.queue_url,
                Entries=[{"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(chunk)],
            )
            for failure in response.get("Failed", []):
                log.warning("poller %s: could not delete a message: %s", self.spec.key, failure.get("Message"))


def scheduled_event(rule_arn: str, *, region: str = LOCAL_REGION, now: float | None = None) -> dict[str, Any]:
    """An EventBridge Scheduled Event, as a schedule rule delivers it to Lambda."""
    now = time.time() if now is None else now
    return {
        "version": "0",
        "id": str(uuid.uuid4()),
        "detail-type": "Scheduled Event",
        "source": "aws.events",
        "account": LOCAL_ACCOUNT_ID,
        "time": datetime.fromtimestamp(now, UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "region": region,
        "resources": [rule_arn],
        "detail": {},
    }


class ScheduleTimer(threading.Thread):
    """Fires a function at a fixed rate, like an EventBridge `rate(...)` rule."""

    def __init__(
        self,
        *,
        function: Function,
        interval_s: float,
        rule_name: str,
        stop: threading.Event,
        region: str = LOCAL_REGION,
    ):
        super().__init__(name=f"schedule-{rule_name}", daemon=True)
        if interval_s <= 0:
            raise ValueError("interval must be positive")
        self.function = function
        self.interval_s = interval_s
        self.rule_arn = f"arn:aws:events:{region}:{LOCAL_ACCOUNT_ID}:rule/{rule_name}"
        self.stop_event = stop
        self.region = region

    def run(self) -> None:
        next_fire = time.monotonic() + self.interval_s
        while not self.stop_event.wait(max(0.0, next_fire - time.monotonic())):
            try:
                self.function.invoke(scheduled_event(self.rule_arn, region=self.region))
            except Exception as exc:
                log_failure(log, exc, "schedule %s: %s failed", self.rule_arn, self.function.module_name)
            # A fixed rate; a run longer than the interval skips the missed firings, as EventBridge does.
            next_fire += self.interval_s
            now = time.monotonic()
            if next_fire < now:
                next_fire = now + self.interval_s - ((now - next_fire) % self.interval_s)
