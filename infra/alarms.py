"""Alarm notifications: one SNS topic per agent that every Flightdeck alarm notifies."""

from __future__ import annotations

from collections.abc import Sequence

from aws_cdk import ArnFormat, Duration, RemovalPolicy, Stack
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_cloudwatch_actions as cloudwatch_actions
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_sns as sns
from aws_cdk import aws_sns_subscriptions as subscriptions
from constructs import Construct

CLOUDWATCH = "cloudwatch.amazonaws.com"


class AlarmTopic(Construct):
    """The topic the agent's alarms notify, and its e-mail subscriptions (`deploy.alarm_emails`).

    - Encrypted with a customer managed KMS key (rotated yearly), not the AWS managed
      `alias/aws/sns`: CloudWatch must be allowed kms:GenerateDataKey*/kms:Decrypt on the
      key to publish to an encrypted topic, and the AWS managed key's policy cannot be
      changed, so alarms would deploy cleanly and deliver nothing.
    - The key policy and the topic policy let CloudWatch in only for this account's
      alarms named `<alarm_prefix>-*` (aws:SourceAccount + aws:SourceArn: no confused deputy).
    - The topic policy refuses requests without TLS (`enforce_ssl`).
    - The key encrypts only notifications in transit through SNS (no data at rest),
      so it is scheduled for deletion with the stack.
    - `notify(alarm)` sends both the ALARM and the OK transition to the topic.
    """

    def __init__(self, scope: Construct, id: str, *, agent: str, alarm_prefix: str, emails: Sequence[str] = ()) -> None:
        super().__init__(scope, id)
        stack = Stack.of(self)
        alarm_arns = stack.format_arn(
            service="cloudwatch",
            resource="alarm",
            resource_name=f"{alarm_prefix}-*",
            arn_format=ArnFormat.COLON_RESOURCE_NAME,
        )
        from_our_alarms = {
            "StringEquals": {"aws:SourceAccount": stack.account},
            "ArnLike": {"aws:SourceArn": alarm_arns},
        }
        self.key = kms.Key(
            self,
            "Key",
            description=f"Flightdeck {agent}: encrypts the alarm notifications topic",
            enable_key_rotation=True,
            pending_window=Duration.days(7),
            removal_policy=RemovalPolicy.DESTROY,
        )
        self.key.add_to_resource_policy(
            iam.PolicyStatement(
                sid="CloudWatchAlarmsPublish",
                principals=[iam.ServicePrincipal(CLOUDWATCH)],
                actions=["kms:Decrypt", "kms:GenerateDataKey*"],
                resources=["*"],  # in a key policy, "*" is this key
                conditions=from_our_alarms,
            )
        )
        self.topic = sns.Topic(
            self,
            "Topic",
            topic_name=f"{alarm_prefix}-alarms",
            display_name=f"Flightdeck {agent} alarms",
            master_key=self.key,
            enforce_ssl=True,
        )
        self.topic.add_to_resource_policy(
            iam.PolicyStatement(
                sid="CloudWatchAlarmsPublish",
                principals=[iam.ServicePrincipal(CLOUDWATCH)],
                actions=["sns:Publish"],
                resources=[self.topic.topic_arn],
                conditions=from_our_alarms,
            )
        )
        for email in emails:
            self.topic.add_subscription(subscriptions.EmailSubscription(email))
        self._action = cloudwatch_actions.SnsAction(self.topic)

    def notify(self, alarm: cloudwatch.Alarm) -> None:
        """ALARM and OK both go to the topic: the OK says the DLQ is empty again (redriven or purged)."""
        alarm.add_alarm_action(self._action)
        alarm.add_ok_action(self._action)
