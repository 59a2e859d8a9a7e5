"""What every SQS-fed worker shares: Powertools batch processing and retry-by-visibility."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from aws_lambda_powertools.utilities.batch import BatchProcessor, EventType, process_partial_response
from aws_lambda_powertools.utilities.batch.types import PartialItemFailureResponse
from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord

from flightdeck import tracing
from flightdeck.domain.ports import QueuePort


class RetryLater(Exception):
    """Fail this record; its visibility was already set to the backoff delay."""


def attempt_of(record: SQSRecord) -> int:
    return int(record.attributes.approximate_receive_count or 1)


def first_sent_ms(record: SQSRecord) -> int:
    return int(record.attributes.sent_timestamp or 0)


def retry_later(queues: QueuePort, queue_url: str, record: SQSRecord, delay_s: int) -> None:
    queues.delay_retry(queue_url, record.receipt_handle, delay_s)
    raise RetryLater(f"retry in {delay_s}s")


def process_batch(
    event: dict[str, Any], context: Any, record_handler: Callable[[SQSRecord], Any]
) -> PartialItemFailureResponse:
    """Partial batch failures: only the records that raised are retried."""
    # Failed records are deliberate backoffs (visibility already set), even when all of them fail.
    processor = BatchProcessor(event_type=EventType.SQS, raise_on_entire_batch_failure=False)

    def traced(record: SQSRecord) -> Any:
        with tracing.sqs_process(record.event_source_arn, record.message_id, record.body):
            return record_handler(record)

    return process_partial_response(event=event, record_handler=traced, processor=processor, context=context)
