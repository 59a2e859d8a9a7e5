"""Queues: every `flightdeck.topology.QUEUES` entry, each with a dead-letter queue and an alarm."""

from __future__ import annotations

from dataclasses import dataclass

from aws_cdk import Duration
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from flightdeck import topology

# SQS's limit on a queue name (".fifo" included).
MAX_QUEUE_NAME = 80


def construct_id(key: str) -> str:
    return "".join(part.capitalize() for part in key.replace("-", "_").split("_"))


@dataclass(frozen=True)
class QueuePair:
    spec: topology.QueueSpec
    queue: sqs.Queue
    dlq: sqs.Queue
    dlq_alarm: cloudwatch.Alarm
    age_alarm: cloudwatch.Alarm | None = None


class Queues(Construct):
    """One SQS queue per topology entry.

    - FIFO where the spec says so (FIFO names must end in .fifo); every queue gets the
      explicit name `QueueSpec.name(prefix)` the local runtime uses too;
    - a dead-letter queue (FIFO for a FIFO queue, as SQS requires) after
      `max_receive_count` receives; the DLQ keeps messages 14 days;
    - visibility timeout from the spec (6x the consuming function's timeout);
    - SSE with SQS-managed keys and a queue policy refusing non-TLS requests;
    - an alarm as soon as a DLQ holds a message (also the on-failure destination of a function's
      asynchronous invocations, where topology.ASYNC_INVOKES says so).
    """

    def __init__(self, scope: Construct, id: str, *, prefix: str, alarm_prefix: str) -> None:
        super().__init__(scope, id)
        self.pairs: dict[str, QueuePair] = {}
        for spec in topology.QUEUES:
            for name in (spec.name(prefix), spec.dlq_name(prefix)):
                if len(name) > MAX_QUEUE_NAME:
                    raise ValueError(
                        f"queue name {name!r} is longer than SQS allows ({MAX_QUEUE_NAME}): use a shorter agent name"
                    )
            cid = construct_id(spec.key)
            fifo = {"fifo": True} if spec.fifo else {}
            dlq = sqs.Queue(
                self,
                f"{cid}Dlq",
                queue_name=spec.dlq_name(prefix),
                retention_period=Duration.days(14),
                encryption=sqs.QueueEncryption.SQS_MANAGED,
                enforce_ssl=True,
                **fifo,
            )
            queue = sqs.Queue(
                self,
                cid,
                queue_name=spec.name(prefix),
                visibility_timeout=Duration.seconds(spec.visibility_timeout_s),
                dead_letter_queue=sqs.DeadLetterQueue(queue=dlq, max_receive_count=spec.max_receive_count),
                encryption=sqs.QueueEncryption.SQS_MANAGED,
                enforce_ssl=True,
                # Senders may pass an explicit MessageDeduplicationId (it wins);
                # without one, identical bodies within 5 minutes are one message.
                **({"fifo": True, "content_based_deduplication": True} if spec.fifo else {}),
            )
            invoked = [a for a in topology.ASYNC_INVOKES if a.on_failure_queue == spec.key]
            also = "".join(
                f" Lambda's records of the asynchronous invocations of {a.handler} that failed "
                f"{1 + a.retry_attempts} times or waited over {a.max_event_age_s} s go to the queue, whose "
                "consumer hands each to the sweep; one it cannot handle ends here (the event is its requestPayload)."
                for a in invoked
            )
            if topology.STREAM_CONSUMER.on_failure_queue == spec.key:
                also += (
                    " With THINK_START = stream, the owed-think starter's event source mapping puts here the "
                    "stream records it gave up on (their batch info: shard and sequence numbers)."
                )
            alarm = cloudwatch.Alarm(
                self,
                f"{cid}DlqAlarm",
                alarm_name=f"{alarm_prefix}-{spec.key}-dlq-not-empty",
                alarm_description=(
                    f"Messages in the {spec.key} dead-letter queue {spec.dlq_name(prefix)}: "
                    f"{spec.handler} gave up on them after {spec.max_receive_count} receives.{also} "
                    "Inspect, fix, then redrive them from the SQS console."
                ),
                metric=dlq.metric_approximate_number_of_messages_visible(
                    period=Duration.minutes(1), statistic=cloudwatch.Stats.MAXIMUM
                ),
                threshold=0,
                comparison_operator=cloudwatch.ComparisonOperator.GREATER_THAN_THRESHOLD,
                evaluation_periods=1,
                treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING,
            )
            age_alarm = None
            if spec.age_alarm_s:
                # Work waiting on its consumer (the mapping throttled, the function failing): the thinks queue's
                # waits are the agent's latency.
                age_alarm = cloudwatch.Alarm(
                    self,
                    f"{cid}AgeAlarm",
                    alarm_name=f"{alarm_prefix}-{spec.key}-oldest-message-age",
                    alarm_description=(
                        f"The oldest message of {spec.name(prefix)} has waited over {spec.age_alarm_s} s for "
                        f"{spec.handler}: its concurrency, throttles or errors."
                    ),
                    metric=queue.metric_approximate_age_of_oldest_message(
                        period=Duration.minutes(1), statistic=cloudwatch.Stats.MAXIMUM
                    ),
                    threshold=spec.age_alarm_s,
                    comparison_operator=cloudwatch.ComparisonOperator.GREATER_THAN_THRESHOLD,
                    evaluation_periods=3,
                    treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING,
                )
            self.pairs[spec.key] = QueuePair(spec=spec, queue=queue, dlq=dlq, dlq_alarm=alarm, age_alarm=age_alarm)

    def __getitem__(self, key: str) -> QueuePair:
        return self.pairs[key]
