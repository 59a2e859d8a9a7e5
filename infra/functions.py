"""Functions: one Lambda function per handler module of `flightdeck.topology.HANDLERS`.

All functions share one code asset (infra/bundling.py), one environment (the
agent's settings: every function validates the full Settings at cold start) and
differ in handler, timeout and, above all, permissions (infra/access.py).
Each has its own role, with no managed policy: the only built-in grant is writing
to its own log group (an explicit LogGroup with retention, not the implicit one).

The streaming functions (topology.STREAMING_HANDLERS: POST /a2a, GET /api/sessions/{id}/events)
stream their answers through API Gateway's STREAM integration (infra/api.py), which invokes
them with InvokeWithResponseStream. The managed Python runtime cannot write a streamed
response, so they run the AWS Lambda Web Adapter, an AWS-published layer, with no container
image: its /opt/bootstrap wraps the runtime (AWS_LAMBDA_EXEC_WRAPPER), starts the function's
web server (the handler is the script flightdeck/handlers/web.sh, flightdeck.handlers.web)
and relays its output as it is written (AWS_LWA_INVOKE_MODE=response_stream).
"""

from __future__ import annotations

from collections.abc import Mapping

from aws_cdk import Acknowledgment, Aws, Duration, RemovalPolicy, Validations
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_lambda_destinations as destinations
from aws_cdk import aws_lambda_event_sources as event_sources
from aws_cdk import aws_logs as logs
from constructs import Construct

from flightdeck import topology

from .bundling import ARCHITECTURE, RUNTIME
from .queues import Queues, construct_id

# Handlers behind API Gateway answer within its 29 s integration timeout; a shorter
# function timeout makes a hung call fail in the function's own logs first.
API_TIMEOUT_S = 25
LOG_RETENTION = logs.RetentionDays.ONE_MONTH

# The AWS Lambda Web Adapter layer (flightdeck.topology: `flightdeck deploy` checks it is in the region).
WEB_ADAPTER_VERSION = topology.WEB_ADAPTER_VERSION
# The streaming functions' handler: the script the adapter runs (in the asset, executable).
WEB_HANDLER = "flightdeck/handlers/web.sh"
WEB_PORT = 8080
WEB_ADAPTER_ENVIRONMENT = {
    "AWS_LAMBDA_EXEC_WRAPPER": "/opt/bootstrap",
    "AWS_LWA_INVOKE_MODE": "response_stream",
    "AWS_LWA_PORT": str(WEB_PORT),
    # The X-Ray SDK reads the invocation's trace from the runtime process's environment, which the web
    # server does not share: Lambda's own active tracing still records each invocation.
    "POWERTOOLS_TRACE_DISABLED": "true",
}


def worker_handlers() -> frozenset[str]:
    """Handlers fed by SQS or the schedule (not by API Gateway)."""
    return frozenset({q.handler for q in topology.QUEUES} | {topology.SWEEPER_HANDLER})


def timeout_s(handler: str) -> int:
    if handler in topology.STREAMING_HANDLERS:
        return topology.STREAM_TIMEOUT_S
    return topology.WORKER_TIMEOUT_S if handler in worker_handlers() else API_TIMEOUT_S


def handler_string(handler: str) -> str:
    """The function's handler: its module's entry point, or for a streaming function the adapter's start script."""
    return WEB_HANDLER if handler in topology.STREAMING_HANDLERS else f"flightdeck.handlers.{handler}.handler"


def explicit_name(prefix: str, handler: str) -> str | None:
    """The name of a function that is invoked by name (topology.ASYNC_INVOKES), else None (CloudFormation names it).

    Its callers find it through an environment variable every function shares, itself included: a name
    fixed before the function exists keeps that from being a reference cycle in the template.
    """
    if handler not in topology.ASYNC_INVOKES_BY_HANDLER:
        return None
    name = topology.function_name(prefix, handler)
    if len(name) > topology.MAX_FUNCTION_NAME:
        raise ValueError(
            f"function name {name!r} is longer than Lambda allows ({topology.MAX_FUNCTION_NAME}): "
            "use a shorter agent name"
        )
    return name


def web_adapter_layer_arn(architecture: lambda_.Architecture) -> str:
    return topology.web_adapter_layer_arn(Aws.REGION, architecture.name, Aws.PARTITION)


class Functions(Construct):
    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        agent: str,
        prefix: str,
        code: lambda_.Code,
        environment: Mapping[str, str],
        memory_mb: int,
        log_removal_policy: RemovalPolicy,
        think_memory_mb: int | None = None,
    ) -> None:
        super().__init__(scope, id)
        self.functions: dict[str, lambda_.Function] = {}
        self.roles: dict[str, iam.Role] = {}
        for handler in topology.HANDLERS:
            cid = construct_id(handler)
            log_group = logs.LogGroup(self, f"{cid}Logs", retention=LOG_RETENTION, removal_policy=log_removal_policy)
            role = iam.Role(
                self,
                f"{cid}Role",
                assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"),
                description=f"Flightdeck {agent}: {handler} (least privilege, see infra/access.py)",
            )
            log_group.grant_write(role)
            streams = handler in topology.STREAMING_HANDLERS
            layers = (
                [
                    lambda_.LayerVersion.from_layer_version_arn(
                        self, f"{cid}WebAdapter", web_adapter_layer_arn(ARCHITECTURE)
                    )
                ]
                if streams
                else None
            )
            function = lambda_.Function(
                self,
                cid,
                function_name=explicit_name(prefix, handler),
                description=f"Flightdeck {agent}: {handler}",
                runtime=RUNTIME,
                architecture=ARCHITECTURE,
                code=code,
                handler=handler_string(handler),
                # The think function waits on the model: its memory is its own choice (docs/PERFORMANCE.md).
                memory_size=(
                    (think_memory_mb or memory_mb)
                    if handler == topology.THINK_HANDLER
                    else topology.STREAM_CONSUMER.memory_mb
                    if handler == topology.STREAM_CONSUMER.handler
                    else memory_mb
                ),
                timeout=Duration.seconds(timeout_s(handler)),
                environment={**environment, **(WEB_ADAPTER_ENVIRONMENT if streams else {})},
                layers=layers,
                role=role,
                log_group=log_group,
                tracing=lambda_.Tracing.ACTIVE,
            )
            Validations.of(function).acknowledge(
                Acknowledgment(
                    id="AwsSolutions-L1",
                    reason=(
                        f"Pinned to {RUNTIME.name} on purpose: the asset bundles compiled wheels (pydantic-core) "
                        "built for exactly this runtime's Python ABI and CPU. Moving to a newer runtime is a "
                        "deliberate change of LAMBDA_PYTHON_VERSION and RUNTIME in infra/bundling.py (re-bundled "
                        "and re-checked by tests/infra), not something that should follow a CDK upgrade silently."
                    ),
                )
            )
            Validations.of(role).acknowledge(
                Acknowledgment(
                    id="AwsSolutions-IAM5[Resource::*]",
                    reason=(
                        "Only the X-Ray statements: the one Lambda adds for active tracing (xray:PutTraceSegments, "
                        "xray:PutTelemetryRecords) and, with context traces=xray, xray:PutSpans (infra/tracing.py), "
                        "which do not support resource-level permissions; "
                        "tests/infra checks that no other statement uses Resource '*'."
                    ),
                )
            )
            self.functions[handler] = function
            self.roles[handler] = role

    def __getitem__(self, handler: str) -> lambda_.Function:
        return self.functions[handler]

    def configure_async_invokes(self, queues: Queues) -> None:
        """Lambda's asynchronous retries own a failed think (topology.ASYNC_INVOKES); what they give up on
        goes to the queue named there, whose consumer hands it to the sweep."""
        for spec in topology.ASYNC_INVOKES:
            self.functions[spec.handler].configure_async_invoke(
                retry_attempts=spec.retry_attempts,
                max_event_age=Duration.seconds(spec.max_event_age_s),
                on_failure=destinations.SqsDestination(queues[spec.on_failure_queue].queue),
            )

    def consume_stream(self, table: dynamodb.ITable, queues: Queues) -> None:
        """THINK_START = "stream": the table's stream feeds the owed-think starter, filtered to the session items
        that carry a mark (topology.OWED_THINK_FILTERS: the other records never invoke it). A record it fails
        is retried, its batch halved, then given up to the dead-letter queue: the shard never waits on it."""
        spec = topology.STREAM_CONSUMER
        self.functions[spec.handler].add_event_source(
            event_sources.DynamoEventSource(
                table,
                starting_position=lambda_.StartingPosition.TRIM_HORIZON,
                batch_size=spec.batch_size,
                bisect_batch_on_error=True,
                retry_attempts=spec.retry_attempts,
                max_record_age=Duration.seconds(spec.max_record_age_s),
                report_batch_item_failures=True,
                on_failure=event_sources.SqsDlq(queues[spec.on_failure_queue].dlq),
                filters=[lambda_.FilterCriteria.filter(dict(p)) for p in topology.OWED_THINK_FILTERS],
            )
        )

    def consume(self, queues: Queues) -> None:
        """Each queue feeds its handler; failures are reported per message, not per batch."""
        for spec in topology.QUEUES:
            function = self.functions[spec.handler]
            if spec.visibility_timeout_s < 6 * timeout_s(spec.handler):
                raise ValueError(
                    f"queue {spec.key}: visibility timeout {spec.visibility_timeout_s}s is under 6x the "
                    f"{spec.handler} timeout ({timeout_s(spec.handler)}s)"
                )
            function.add_event_source(
                event_sources.SqsEventSource(
                    queues[spec.key].queue,
                    batch_size=spec.batch_size,
                    report_batch_item_failures=True,
                    **(
                        {"max_batching_window": Duration.seconds(spec.batching_window_s)}
                        if spec.batching_window_s
                        else {}
                    ),
                )
            )
