"""SQS adapter: the queues of one agent that carry work other than thinks (dispatch, delivery, timers).

Thinks start through flightdeck.adapters.lambda_thinks (the turns queue is its delayed retry path).
"""

from __future__ import annotations

import json
from typing import Any

import boto3

# SQS's largest DelaySeconds; longer deadlines are chained.
MAX_DELAY_S = 900


class Queues:
    def __init__(
        self, *, dispatch_url: str, delivery_url: str, timers_url: str, delivery_dlq_url: str = "", client: Any = None
    ):
        self.dispatch_url = dispatch_url
        self.delivery_url = delivery_url
        self.timers_url = timers_url
        self.delivery_dlq_url = delivery_dlq_url
        self._client = client

    @property
    def client(self) -> Any:
        if self._client is None:
            self._client = boto3.client("sqs")
        return self._client

    def _send(self, url: str, body: dict[str, Any], delay_s: int = 0) -> None:
        self.client.send_message(QueueUrl=url, MessageBody=json.dumps(body), DelaySeconds=delay_s)

    def send_dispatch(self, body: dict[str, Any]) -> None:
        self._send(self.dispatch_url, body)

    def send_delivery(self, body: dict[str, Any]) -> None:
        self._send(self.delivery_url, body)

    def send_delivery_dead_letter(self, body: dict[str, Any]) -> None:
        self._send(self.delivery_dlq_url, body)

    def send_timer(self, body: dict[str, Any], delay_s: int) -> None:
        self._send(self.timers_url, body, max(0, min(MAX_DELAY_S, delay_s)))

    def delay_retry(self, queue_url: str, receipt_handle: str, delay_s: int) -> None:
        """Backoff without sleeping: hide the message until its next attempt."""
        self.client.change_message_visibility(
            QueueUrl=queue_url, ReceiptHandle=receipt_handle, VisibilityTimeout=max(0, min(43_200, delay_s))
        )

    def delay_retries(self, queue_url: str, receipt_handles: list[str], delay_s: int) -> None:
        """delay_retry for many records at once: one ChangeMessageVisibilityBatch per ten (a batch's hand-back
        must fit in the little time left of its invocation)."""
        for start in range(0, len(receipt_handles), 10):
            entries = [
                {"Id": str(i), "ReceiptHandle": handle, "VisibilityTimeout": max(0, min(43_200, delay_s))}
                for i, handle in enumerate(receipt_handles[start : start + 10])
            ]
            failed = self.client.change_message_visibility_batch(QueueUrl=queue_url, Entries=entries).get("Failed")
            if failed:
                raise RuntimeError(f"SQS kept {len(failed)} of {len(entries)} visibility changes: {failed[0]}")
