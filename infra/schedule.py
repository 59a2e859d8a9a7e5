"""Schedule: the EventBridge rule that runs the backstop sweep over overdue turns."""

from __future__ import annotations

import math

from aws_cdk import Duration
from aws_cdk import aws_events as events
from aws_cdk import aws_events_targets as targets
from aws_cdk import aws_lambda as lambda_
from constructs import Construct

# EventBridge schedules have a granularity of one minute.
MIN_RATE_MINUTES = 1


def sweep_rate_minutes(punctuate_interval_ms: int) -> int:
    """TOOL_AGG_PUNCTUATE_INTERVAL_MS rounded up to whole minutes, at least one.

    EventBridge cannot fire more often than once a minute, so a sub-minute interval
    (the default is 15 s) sweeps every minute on AWS. The sweep is the backstop:
    each waiting turn also has its own deadline timer (an SQS message delayed to
    its deadline), which is what fires on time; the sweep only catches timers
    that were lost, at most a minute (plus the interval) late.
    """
    if punctuate_interval_ms <= 0:
        raise ValueError("TOOL_AGG_PUNCTUATE_INTERVAL_MS must be positive")
    return max(MIN_RATE_MINUTES, math.ceil(punctuate_interval_ms / 60_000))


class SweepSchedule(Construct):
    def __init__(self, scope: Construct, id: str, *, sweeper: lambda_.IFunction, punctuate_interval_ms: int) -> None:
        super().__init__(scope, id)
        self.rate_minutes = sweep_rate_minutes(punctuate_interval_ms)
        self.rule = events.Rule(
            self,
            "Rule",
            description=(
                f"Flightdeck backstop sweep of overdue turns every {self.rate_minutes} min "
                f"(TOOL_AGG_PUNCTUATE_INTERVAL_MS={punctuate_interval_ms}, EventBridge minimum is 1 min)"
            ),
            schedule=events.Schedule.rate(Duration.minutes(self.rate_minutes)),
        )
        # A missed sweep is repaired by the next one: do not pile up retries.
        self.rule.add_target(
            targets.LambdaFunction(sweeper, retry_attempts=2, max_event_age=Duration.minutes(self.rate_minutes * 2))
        )
