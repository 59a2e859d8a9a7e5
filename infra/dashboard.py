"""Operations: one CloudWatch dashboard per agent, and the alarm on overdue sessions.

Every number on the dashboard is one the system already produces:
- the functions' own metrics (Powertools EMF, flightdeck.observability.count): namespace
  METRICS_NAMESPACE, dimension `service` = the agent's name (POWERTOOLS_SERVICE_NAME);
- the queues' metrics (AWS/SQS: backlog, age of the oldest message, dead-letter depth);
- the functions' metrics (AWS/Lambda: errors, throttles, duration).

Round-trip latency of a delegation (p50/p95) is not on it: no function emits it (a
callback's token carries its mint time, iat, but nothing turns it into a metric yet).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from aws_cdk import Aws, Duration
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_lambda as lambda_
from constructs import Construct

from .environment import METRICS_NAMESPACE
from .queues import Queues

PERIOD = Duration.minutes(5)
WIDTH = 24  # a dashboard row is 24 units wide

# The functions' own metrics shown, by widget: (title, [(metric name, label)]).
DELEGATIONS = (
    "Delegations: started, answered, failed, turns timed out",
    [
        ("DelegationsDispatched", "started (dispatched to the peer)"),
        ("CallbacksAccepted", "answered (callback accepted)"),
        ("DispatchFailures", "dispatch failed"),
        ("DispatchRetries", "dispatch retried"),
        ("Timeouts", "turns timed out (timeout results synthesized)"),
    ],
)
CALLBACKS = (
    "Callbacks received: accepted, duplicate, late, refused",
    [
        ("CallbacksAccepted", "accepted"),
        ("CallbacksDuplicate", "duplicate (already recorded)"),
        ("CallbacksLate", "late (turn already complete)"),
        ("CallbacksRefused", "refused (bad token, too large)"),
    ],
)
ANSWERS = (
    "Answers sent back to callers",
    [
        ("AnswersDelivered", "delivered"),
        ("DeliveryRetries", "retried"),
        ("DeliveryFailures", "failed"),
        ("DeliveriesRefused", "refused by the caller"),
    ],
)
TURNS = (
    "Turns and sessions",
    [
        ("TurnsCompleted", "turns completed"),
        ("LocalToolRuns", "local tool runs"),
        ("InboundAuthRefused", "callers refused (peer token)"),
        ("SessionsOverdue", "sessions overdue (busy past their liveness bound)"),
        ("OwedThinksResent", "owed thinks re-sent by the sweep (their start was lost)"),
        ("ThinkSendsDeferred", "think starts left to the sweep (the send failed)"),
        ("ThinksGivenUp", "thinks given up after their retries"),
    ],
)
A2A = (
    "A2A",
    [
        ("A2ATasksStarted", "tasks started"),
        ("A2ATasksCompleted", "tasks completed"),
        ("A2ATasksCanceled", "tasks canceled"),
        ("A2APushesQueued", "pushes queued"),
        ("A2APushesDelivered", "pushes delivered"),
        ("A2APushesRefused", "pushes refused"),
        ("A2AStreamsOpened", "streams opened (message/stream, tasks/resubscribe)"),
        ("SessionStreamsOpened", "session event streams opened"),
    ],
)
APPLICATION_WIDGETS = (DELEGATIONS, CALLBACKS, ANSWERS, TURNS, A2A)
# Emitted by the sweeper: a busy session past its liveness bound (see sessions_overdue_alarm).
SESSIONS_OVERDUE = "SessionsOverdue"


def app_metric(
    agent: str, name: str, label: str | None = None, statistic: str = "Sum", period: Duration = PERIOD
) -> cloudwatch.Metric:
    """One of the functions' own metrics (Powertools: namespace, dimension service=<agent>)."""
    return cloudwatch.Metric(
        namespace=METRICS_NAMESPACE,
        metric_name=name,
        dimensions_map={"service": agent},
        statistic=statistic,
        period=period,
        label=label,
    )


def sessions_overdue_alarm(scope: Construct, id: str, *, agent: str, alarm_prefix: str) -> cloudwatch.Alarm:
    """Fires as soon as a sweep finds a busy session past its liveness bound (the metric the sweeper emits)."""
    return cloudwatch.Alarm(
        scope,
        id,
        alarm_name=f"{alarm_prefix}-sessions-overdue",
        alarm_description=(
            f"The sweeper of {agent} found sessions still busy past their liveness bound: a turn that neither "
            "completed nor timed out. Check the turn worker's and the timers' logs and DLQs for the session ids."
        ),
        metric=app_metric(agent, SESSIONS_OVERDUE, statistic=cloudwatch.Stats.MAXIMUM, period=Duration.minutes(1)),
        threshold=0,
        comparison_operator=cloudwatch.ComparisonOperator.GREATER_THAN_THRESHOLD,
        evaluation_periods=1,
        # No data: no sweep reported any (the sweeper emits the metric when it finds some).
        treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING,
    )


class OperationsDashboard(Construct):
    """`flightdeck-<agent>`: what the agent is doing and whether anything is stuck."""

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        agent: str,
        dashboard_name: str,
        functions: Mapping[str, lambda_.IFunction],
        queues: Queues,
        alarms: Sequence[cloudwatch.IAlarm],
    ) -> None:
        super().__init__(scope, id)
        self.dashboard = cloudwatch.Dashboard(
            self,
            "Dashboard",
            dashboard_name=dashboard_name,
            default_interval=Duration.hours(3),
        )
        self.dashboard.add_widgets(
            cloudwatch.TextWidget(
                markdown=(
                    f"# Flightdeck agent {agent}\n"
                    f"Metrics: namespace `{METRICS_NAMESPACE}`, dimension `service={agent}` (sums per "
                    f"{PERIOD.to_minutes()} min); queues and functions: AWS/SQS, AWS/Lambda. "
                    "Round-trip latency is not emitted, so it is not shown."
                ),
                width=WIDTH,
                height=2,
            ),
            cloudwatch.AlarmStatusWidget(title="Alarms", alarms=list(alarms), width=WIDTH, height=3),
        )
        graphs = [
            cloudwatch.GraphWidget(
                title=title,
                left=[app_metric(agent, name, label) for name, label in metrics],
                width=WIDTH // 2,
                height=6,
            )
            for title, metrics in APPLICATION_WIDGETS
        ]
        graphs.append(self._dead_letters(queues))
        self.dashboard.add_widgets(*graphs)
        self.dashboard.add_widgets(
            cloudwatch.GraphWidget(
                title="Queue backlog (messages visible)",
                left=[
                    pair.queue.metric_approximate_number_of_messages_visible(
                        period=PERIOD, statistic=cloudwatch.Stats.MAXIMUM, label=key
                    )
                    for key, pair in queues.pairs.items()
                ],
                width=WIDTH // 2,
                height=6,
            ),
            cloudwatch.GraphWidget(
                title="Age of the oldest message (s)",
                left=[
                    pair.queue.metric_approximate_age_of_oldest_message(
                        period=PERIOD, statistic=cloudwatch.Stats.MAXIMUM, label=key
                    )
                    for key, pair in queues.pairs.items()
                ],
                width=WIDTH // 2,
                height=6,
            ),
        )
        handlers = sorted(functions)
        self.dashboard.add_widgets(
            cloudwatch.GraphWidget(
                title="Function errors",
                left=[functions[h].metric_errors(period=PERIOD, label=h) for h in handlers],
                width=WIDTH // 3,
                height=6,
            ),
            cloudwatch.GraphWidget(
                title="Function throttles",
                left=[functions[h].metric_throttles(period=PERIOD, label=h) for h in handlers],
                width=WIDTH // 3,
                height=6,
            ),
            cloudwatch.GraphWidget(
                title="Function duration p95 (ms)",
                left=[functions[h].metric_duration(period=PERIOD, statistic="p95", label=h) for h in handlers],
                width=WIDTH // 3,
                height=6,
            ),
        )
        self.url = (
            f"https://{Aws.REGION}.console.aws.amazon.com/cloudwatch/home?region={Aws.REGION}"
            f"#dashboards:name={dashboard_name}"
        )

    @staticmethod
    def _dead_letters(queues: Queues) -> cloudwatch.GraphWidget:
        return cloudwatch.GraphWidget(
            title="Dead-letter queue depth (messages visible)",
            left=[
                pair.dlq.metric_approximate_number_of_messages_visible(
                    period=PERIOD, statistic=cloudwatch.Stats.MAXIMUM, label=f"{key} DLQ"
                )
                for key, pair in queues.pairs.items()
            ],
            width=WIDTH // 2,
            height=6,
        )
