"""State: the agent's one DynamoDB table (single-table layout of flightdeck.topology)."""

from __future__ import annotations

from aws_cdk import RemovalPolicy
from aws_cdk import aws_dynamodb as dynamodb
from constructs import Construct

from flightdeck import topology


class StateTable(Construct):
    """Sessions, reply routes, turn aggregations and tool results.

    - pk/sk strings, on-demand billing, point-in-time recovery;
    - TTL on `topology.TTL_ATTRIBUTE` (AWS deletes lazily: code filters on it too);
    - the global secondary indexes of `topology.INDEXES`: the sparse deadline index the sweep
      queries (only waiting turns carry its keys) and the sessions index of GET /api/sessions.

    The table name is left to CloudFormation: with RETAIN, a fixed name would make
    a redeploy after a teardown fail on the retained table.
    """

    def __init__(
        self, scope: Construct, id: str, *, retain: bool, stream: bool = False, deadline_projection: str = ""
    ) -> None:
        """stream: the table's DynamoDB stream, which feeds the owed-think starter (THINK_START = "stream").
        deadline_projection: the deadline index's, when not topology's (deploy.deadline_index_projection: a stack
        created with ALL keeps it, as CloudFormation cannot change it in place)."""
        super().__init__(scope, id)
        self.table = dynamodb.Table(
            self,
            "Table",
            partition_key=dynamodb.Attribute(name=topology.PARTITION_KEY, type=dynamodb.AttributeType.STRING),
            sort_key=dynamodb.Attribute(name=topology.SORT_KEY, type=dynamodb.AttributeType.STRING),
            billing_mode=dynamodb.BillingMode.PAY_PER_REQUEST,
            time_to_live_attribute=topology.TTL_ATTRIBUTE,
            point_in_time_recovery_specification=dynamodb.PointInTimeRecoverySpecification(
                point_in_time_recovery_enabled=True
            ),
            removal_policy=RemovalPolicy.RETAIN if retain else RemovalPolicy.DESTROY,
            stream=dynamodb.StreamViewType(topology.STREAM_VIEW) if stream else None,
        )
        types = {"S": dynamodb.AttributeType.STRING, "N": dynamodb.AttributeType.NUMBER}
        for index in topology.INDEXES:
            self.table.add_global_secondary_index(
                index_name=index.name,
                partition_key=dynamodb.Attribute(name=index.partition_key[0], type=types[index.partition_key[1]]),
                sort_key=dynamodb.Attribute(name=index.sort_key[0], type=types[index.sort_key[1]]),
                projection_type=dynamodb.ProjectionType(
                    deadline_projection
                    if deadline_projection and index.name == topology.DEADLINE_INDEX
                    else index.projection
                ),
            )
