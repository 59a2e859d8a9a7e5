"""One agent's DynamoDB table and SQS queues, created in moto from flightdeck.topology.

Names, keys, indexes, TTL, FIFO-ness, visibility and redrive all come from
topology (the same data the CDK constructs read), so a local run and an AWS
deployment cannot disagree about them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import boto3

from flightdeck import topology
from flightdeck.local.invocation import LOCAL_REGION
from flightdeck.settings import Settings

# moto accepts any credentials; these keep boto3 from looking for real ones.
LOCAL_CREDENTIALS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"}


def setting_variable(field_name: str) -> str:
    """The environment variable of a Settings field (settings.py is the one place names live)."""
    alias = Settings.model_fields[field_name].alias
    assert alias, f"Settings.{field_name} has no environment alias"
    return alias


# QueueSpec.key is the settings variable prefix of its queue (see topology).
def queue_url_variable(spec: topology.QueueSpec) -> str:
    return f"{spec.key.upper()}_QUEUE_URL"


def dlq_url_variable(spec: topology.QueueSpec) -> str:
    return f"{spec.key.upper()}_DLQ_URL"


def local_client(service: str, endpoint_url: str, region: str = LOCAL_REGION) -> Any:
    return boto3.client(  # type: ignore[call-overload]  # boto3-stubs overloads on literal service names
        service,
        endpoint_url=endpoint_url,
        region_name=region,
        aws_access_key_id=LOCAL_CREDENTIALS["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=LOCAL_CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
    )


@dataclass(frozen=True)
class AgentResources:
    prefix: str
    table_name: str
    # QueueSpec.key -> URL
    queue_urls: dict[str, str] = field(default_factory=dict)
    dlq_urls: dict[str, str] = field(default_factory=dict)

    def environment(self) -> dict[str, str]:
        """The handlers' environment variables that name these resources."""
        env = {
            setting_variable("state_table"): self.table_name,
            setting_variable("turn_worker_function"): topology.function_name(self.prefix, topology.THINK_HANDLER),
        }
        for spec in topology.QUEUES:
            env[queue_url_variable(spec)] = self.queue_urls[spec.key]
            env[dlq_url_variable(spec)] = self.dlq_urls[spec.key]
        return env


def create_table(dynamodb: Any, prefix: str) -> str:
    name = topology.table_name(prefix)
    try:
        attributes = {topology.PARTITION_KEY: "S", topology.SORT_KEY: "S"}
        for index in topology.INDEXES:
            attributes.update(dict([index.partition_key, index.sort_key]))
        dynamodb.create_table(
            TableName=name,
            BillingMode="PAY_PER_REQUEST",
            AttributeDefinitions=[{"AttributeName": n, "AttributeType": t} for n, t in attributes.items()],
            KeySchema=[
                {"AttributeName": topology.PARTITION_KEY, "KeyType": "HASH"},
                {"AttributeName": topology.SORT_KEY, "KeyType": "RANGE"},
            ],
            GlobalSecondaryIndexes=[
                {
                    "IndexName": index.name,
                    "KeySchema": [
                        {"AttributeName": index.partition_key[0], "KeyType": "HASH"},
                        {"AttributeName": index.sort_key[0], "KeyType": "RANGE"},
                    ],
                    "Projection": {"ProjectionType": index.projection},
                }
                for index in topology.INDEXES
            ],
        )
    except dynamodb.exceptions.ResourceInUseException:
        pass  # created by an earlier start against the same moto server
    dynamodb.get_waiter("table_exists").wait(TableName=name, WaiterConfig={"Delay": 0.1, "MaxAttempts": 100})
    # moto (like CloudFormation there) ignores TimeToLiveSpecification at creation.
    dynamodb.update_time_to_live(
        TableName=name,
        TimeToLiveSpecification={"Enabled": True, "AttributeName": topology.TTL_ATTRIBUTE},
    )
    return name


def _queue_arn(sqs: Any, url: str) -> str:
    arn: str = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    return arn


def create_queue(sqs: Any, prefix: str, spec: topology.QueueSpec) -> tuple[str, str]:
    """The queue and its dead-letter queue; returns (queue URL, DLQ URL)."""
    # Deduplication ids are explicit in every FIFO send, so content-based deduplication stays off.
    fifo = {"FifoQueue": "true", "ContentBasedDeduplication": "false"} if spec.fifo else {}
    dlq_url = sqs.create_queue(QueueName=spec.dlq_name(prefix), Attributes=fifo)["QueueUrl"]
    redrive = {"deadLetterTargetArn": _queue_arn(sqs, dlq_url), "maxReceiveCount": spec.max_receive_count}
    url = sqs.create_queue(
        QueueName=spec.name(prefix),
        Attributes={
            **fifo,
            "VisibilityTimeout": str(spec.visibility_timeout_s),
            "RedrivePolicy": json.dumps(redrive),
        },
    )["QueueUrl"]
    return url, dlq_url


def create_agent_resources(prefix: str, *, dynamodb: Any, sqs: Any) -> AgentResources:
    """Create (idempotently) the table and every queue of the agent whose resource prefix is `prefix`."""
    table = create_table(dynamodb, prefix)
    queue_urls: dict[str, str] = {}
    dlq_urls: dict[str, str] = {}
    for spec in topology.QUEUES:
        queue_urls[spec.key], dlq_urls[spec.key] = create_queue(sqs, prefix, spec)
    return AgentResources(prefix=prefix, table_name=table, queue_urls=queue_urls, dlq_urls=dlq_urls)
