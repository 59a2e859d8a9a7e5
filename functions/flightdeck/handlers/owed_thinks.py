"""Lambda: the table's DynamoDB stream, filtered to session items that carry an owed-think mark
(topology.OWED_THINK_FILTERS): each record whose mark is new starts its think (flightdeck.domain.owed_thinks).

Powertools' batch utility reports the records that failed (the mapping bisects and retries them); the
others are done, so a failing record never holds its shard past the mapping's retries.
"""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools.utilities.batch import BatchProcessor, EventType, process_partial_response
from aws_lambda_powertools.utilities.batch.types import PartialItemFailureResponse
from aws_lambda_powertools.utilities.data_classes.dynamo_db_stream_event import DynamoDBRecord

from flightdeck import topology
from flightdeck.domain.owed_thinks import OwedMark, start_owed
from flightdeck.observability import lambda_entry
from flightdeck.settings import get_settings
from flightdeck.wiring import deps

get_settings()


def _mark(image: dict[str, Any] | None) -> int | None:
    value = (image or {}).get("owed_think")
    return None if value is None else int(value)


def _record(record: DynamoDBRecord) -> str:
    stream = record.dynamodb
    assert stream is not None  # a DynamoDB stream record always has its dynamodb part
    session_id = str((stream.keys or {})[topology.PARTITION_KEY]).removeprefix("S#")
    return start_owed(deps(), OwedMark(session_id, _mark(stream.new_image), _mark(stream.old_image)))


@lambda_entry
def handler(event: dict[str, Any], context: Any) -> PartialItemFailureResponse:
    processor = BatchProcessor(event_type=EventType.DynamoDBStreams, raise_on_entire_batch_failure=False)
    return process_partial_response(event=event, record_handler=_record, processor=processor, context=context)
