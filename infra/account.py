"""API Gateway's account-wide CloudWatch Logs role, in a stack of its own: one per account and region.

API Gateway writes execution and access logs with the role named in its *account
settings* (AWS::ApiGateway::Account): one value per account and region, shared by
every REST API there. Created inside each agent's stack, every deploy would set it
again (the last one wins) and each stack would leave a retained role behind. So the
app creates it once, in `Flightdeck-ApiGatewayAccount`, which every agent stack of
that environment depends on (deploy ordering only: no reference, nothing exported).

Context `apigwCloudWatchRole=false` leaves the stack out, for an account whose
setting already names a role (another application set it, or you did by hand).

The role is retained when the stack is destroyed: the account setting keeps naming
it, and other APIs of the account may log through it.
"""

from __future__ import annotations

from typing import Any

from aws_cdk import Acknowledgment, RemovalPolicy, Stack, Validations
from aws_cdk import aws_apigateway as apigateway
from aws_cdk import aws_iam as iam
from constructs import Construct

ACCOUNT_STACK_NAME = "Flightdeck-ApiGatewayAccount"
PUSH_TO_CLOUDWATCH_POLICY = "service-role/AmazonAPIGatewayPushToCloudWatchLogs"


class ApiGatewayAccountStack(Stack):
    def __init__(self, scope: Construct, id: str, **kwargs: Any) -> None:
        kwargs.setdefault("description", "Flightdeck: API Gateway's CloudWatch Logs role (account-wide setting)")
        super().__init__(scope, id, **kwargs)
        self.role = iam.Role(
            self,
            "CloudWatchRole",
            assumed_by=iam.ServicePrincipal("apigateway.amazonaws.com"),
            description="API Gateway writes the execution and access logs of this account's REST APIs with it",
            managed_policies=[iam.ManagedPolicy.from_aws_managed_policy_name(PUSH_TO_CLOUDWATCH_POLICY)],
        )
        self.role.apply_removal_policy(RemovalPolicy.RETAIN)
        Validations.of(self.role).acknowledge(
            Acknowledgment(
                id=f"AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/{PUSH_TO_CLOUDWATCH_POLICY}]",
                reason=(
                    "The account-level role API Gateway assumes to write execution logs; AWS documents "
                    "this managed policy for it and it grants only CloudWatch Logs actions."
                ),
            )
        )
        self.setting = apigateway.CfnAccount(self, "Account", cloud_watch_role_arn=self.role.role_arn)
