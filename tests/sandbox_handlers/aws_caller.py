"""Makes one SQS request to the endpoint the event names (a stand-in server that answers `{}`)."""

from __future__ import annotations

from typing import Any

import boto3


def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    sqs = boto3.client(
        "sqs",
        endpoint_url=event["endpoint"],
        region_name="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )
    sqs.list_queues()
    return {"ok": True}
