"""What the ops commands share: the AWS session, a check's outcome, and an agent's deployed stack.

An agent's stack is `Flightdeck-<agent>` (infra/stack.py stack_name), described once: its outputs (ApiUrl,
StateTableName, ...) and its resources (queues, log groups) by type. Alarms have no stack resource moto or a
reader needs: they are named `flightdeck-<agent>-...` (infra/queues.py, infra/alarms.py), found by that prefix.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from typing import Any

from flightdeck.peers_admin import CREDENTIALS_HELP, REGION_HELP, STACK_NAME, credentials_problem

EXIT_OK, EXIT_FAILURE, EXIT_USAGE = 0, 1, 2
# infra/stack.py resource_prefix(): the explicit names of an agent's queues and alarms.
RESOURCE_PREFIX = "flightdeck-{agent}"


# peers_admin's advice, without its --endpoint-url (these commands read AWS only).
OPS_CREDENTIALS_HELP = CREDENTIALS_HELP.split("; for the local stack", 1)[0]


def _advice(message: str) -> str:
    return message.replace(CREDENTIALS_HELP, OPS_CREDENTIALS_HELP)


class OpsError(Exception):
    """A command cannot go on: the message says what is missing and how to fix it."""

    def __init__(self, message: str, code: int = EXIT_FAILURE):
        super().__init__(message)
        self.code = code


def say(message: str) -> None:
    print(f"flightdeck: {message}", file=sys.stderr, flush=True)


def add_aws_options(sub: argparse.ArgumentParser) -> None:
    sub.add_argument("--region", help="AWS region (default: AWS_DEFAULT_REGION or the profile's)")
    sub.add_argument("--profile", help="AWS profile (default: AWS_PROFILE or the default profile)")


def session(args: argparse.Namespace) -> Any:
    """A boto3 session with a region and credentials, or OpsError (exit 2) saying how to provide them."""
    import boto3
    from botocore.exceptions import BotoCoreError

    try:
        found = boto3.Session(profile_name=getattr(args, "profile", None) or None, region_name=args.region or None)
        credentials = found.get_credentials()
    except BotoCoreError as exc:  # an unknown profile, an SSO token to refresh...
        raise OpsError(
            _advice(credentials_problem(exc) or f"cannot read the AWS configuration: {exc}"), EXIT_USAGE
        ) from None
    if credentials is None:
        raise OpsError(f"no AWS credentials: {OPS_CREDENTIALS_HELP}", EXIT_USAGE)
    if found.region_name is None:
        raise OpsError(f"no AWS region: {REGION_HELP}", EXIT_USAGE)
    return found


def failure(exc: BaseException) -> OpsError:
    """An AWS call's error as OpsError: refused credentials are a usage error with the fix."""
    about_credentials = credentials_problem(exc)
    if about_credentials:
        return OpsError(_advice(about_credentials), EXIT_USAGE)
    return OpsError(f"AWS call failed: {exc}")


@dataclass(frozen=True)
class Resource:
    logical_id: str
    physical_id: str
    type: str


class Stack:
    """An agent's CloudFormation stack: its outputs and resources, described once."""

    def __init__(self, agent: str, session: Any):
        self.agent = agent
        self.name = STACK_NAME.format(agent=agent)
        self.session = session
        self._outputs: dict[str, str] | None = None
        self._resources: list[Resource] | None = None

    def _missing(self, exc: BaseException) -> OpsError:
        from botocore.exceptions import ClientError

        if isinstance(exc, ClientError) and "does not exist" in str(exc):
            return OpsError(
                f"stack {self.name} does not exist in {self.session.region_name}: deploy it first "
                f"(`flightdeck deploy --config FILE`), or pass the region it is in (--region)"
            )
        return failure(exc)

    @property
    def outputs(self) -> dict[str, str]:
        if self._outputs is None:
            from botocore.exceptions import BotoCoreError, ClientError

            try:
                described = self.session.client("cloudformation").describe_stacks(StackName=self.name)["Stacks"][0]
            except (BotoCoreError, ClientError) as exc:
                raise self._missing(exc) from None
            self._outputs = {str(o["OutputKey"]): str(o["OutputValue"]) for o in described.get("Outputs", [])}
        return self._outputs

    def resources(self, kind: str) -> list[Resource]:
        """The stack's resources of one type (AWS::SQS::Queue, AWS::Logs::LogGroup...), in logical id order."""
        if self._resources is None:
            from botocore.exceptions import BotoCoreError, ClientError

            found: list[Resource] = []
            try:
                pages = self.session.client("cloudformation").get_paginator("list_stack_resources")
                for page in pages.paginate(StackName=self.name):
                    found.extend(
                        Resource(r["LogicalResourceId"], r.get("PhysicalResourceId", ""), r["ResourceType"])
                        for r in page["StackResourceSummaries"]
                    )
            except (BotoCoreError, ClientError) as exc:
                raise self._missing(exc) from None
            self._resources = sorted(found, key=lambda r: r.logical_id)
        return [r for r in self._resources if r.type == kind and r.physical_id]
