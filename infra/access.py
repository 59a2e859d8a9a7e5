"""Least privilege: what each function may touch, as one table, applied with grant_* methods.

Consuming a queue is granted by its event source (topology.QUEUES names the
consumer), so it is not repeated here. A new handler module in topology needs an
entry here before the stack synthesizes: permissions are a decision, not a default.
"""

from __future__ import annotations

from dataclasses import dataclass

from aws_cdk import Acknowledgment, ArnFormat, Aws, Stack, Validations
from aws_cdk import aws_iam as iam
from constructs import Construct

from flightdeck import topology
from flightdeck.domain.agent import ModelConfig

from .functions import Functions
from .queues import Queues
from .secret import CallbackSecret, PeerTokensSecret
from .state import StateTable

# The functions that call an agent's MCP servers: the think lists and calls them, the dispatch worker makes the
# deferred calls (flightdeck.domain.mcp_tools).
MCP_CALLERS = frozenset({"turn_worker", "dispatch_worker"})


@dataclass(frozen=True)
class Access:
    table: bool = False  # read/write the state table (and its deadline index)
    read_table: bool = False  # read the state table alone (GetItem, Query...): no write of any kind
    read_peers: bool = False  # dynamodb:GetItem on the state table alone: look up one peer registry entry
    # dynamodb:UpdateItem on the state table alone, of the live relay's watch mark's attributes alone (keys,
    # `until`, the TTL), returning nothing: mark a session watched (flightdeck.adapters.live_state).
    watch_sessions: bool = False
    send: tuple[str, ...] = ()  # queue keys it sends to
    send_to_dlq: tuple[str, ...] = ()  # queue keys whose dead-letter queue it sends to
    # lambda:InvokeFunction on the turn worker: a think starts as an async invoke (with THINK_GATHERING = "shared",
    # a think that is not lone goes to the thinks queue instead: "thinks" in `send`)
    start_thinks: bool = False
    secret: bool = False  # read the callback HMAC key
    peer_tokens: bool = False  # read the bearer tokens presented to the peers it calls
    model: bool = False  # invoke the agent's Bedrock model (only if its provider is "bedrock")
    # dynamodb:UpdateItem on the state table alone, of the owed-think mark's attributes alone (keys, owed_think,
    # due_at, due_shard), returning nothing: hand a think whose start failed to the sweep.
    defer_owed: bool = False
    # ssm:GetParameter on exactly the URL parameters of the agent's DISCOVERED_PEERS: resolve an allowed
    # service name to its URL at run time (flightdeck.adapters.peer_directory).
    peer_urls: bool = False


ACCESS: dict[str, Access] = {
    # POST /api/chat, GET /api/sessions/{id}, GET /api/sessions (the sessions index): store the session
    # (+ reply route), start a turn, read sessions. A task's reply.callbackService must resolve
    # before anything is stored (peer_urls). POST /api/sessions/{id}/cancel: a canceled session's own
    # delegations are canceled at their peers (our bearer token for each: peer_tokens; a retry on dispatch).
    "chat_ingest": Access(table=True, send=("dispatch", "thinks"), start_thinks=True, peer_tokens=True, peer_urls=True),
    # POST /api/tools/response(s): verify the token, record the result, complete the turn once.
    "callback": Access(table=True, send=("thinks",), start_thinks=True, secret=True),
    # GET /.well-known/agent-card.json, GET /health, GET /openapi.json: its environment and the package alone.
    "agent_card": Access(),
    # One think step, and its outbound calls inline (flightdeck.domain.outbox): it mints the tokens
    # (secret) and POSTs each delegation with our bearer token for the peer (peer_tokens), POSTs the
    # final answer back, hands retryable failures to dispatch/delivery and refused answers to the
    # delivery DLQ; a deadline timer. Local tools run inline and record their results like any other:
    # when the last one completes the turn, the turn worker itself starts the next think. A throttled
    # model's think is retried after a delay through the turns queue.
    "turn_worker": Access(
        table=True,
        send=("dispatch", "delivery", "timers", "turns", "thinks"),
        model=True,
        secret=True,
        peer_tokens=True,
        peer_urls=True,
        send_to_dlq=("delivery",),
        start_thinks=True,
    ),
    # Mints the token (secret) and POSTs the task to the peer with our bearer token for it (peer_tokens);
    # a failed dispatch resumes the turn. An A2A peer that does not push is polled through the timers
    # queue (kind "a2a_poll").
    "dispatch_worker": Access(
        table=True, send=("timers", "thinks"), start_thinks=True, secret=True, peer_tokens=True, peer_urls=True
    ),
    # POSTs the answer back (the message carries route and token); gives up into its DLQ.
    "delivery_worker": Access(send_to_dlq=("delivery",), peer_urls=True),
    # Fires a turn's deadline: re-chains itself past SQS's 15-minute delay, completes the turn.
    # Also polls A2A peers that do not push (tasks/get over HTTP with our bearer token for the peer,
    # the next poll on timers). The delegations it times out are canceled at their peers (a retry
    # on dispatch).
    "deadline_timer": Access(
        table=True, send=("timers", "dispatch", "thinks"), start_thinks=True, peer_tokens=True, peer_urls=True
    ),
    # EventBridge backstop over the deadline index; the delegations it times out are canceled at
    # their peers, as the timer does.
    "sweeper": Access(table=True, send=("dispatch", "thinks"), start_thinks=True, peer_tokens=True, peer_urls=True),
    # The A2A JSON-RPC endpoint (POST /a2a): tasks are session turns (it starts their thinks); a task that ends
    # by tasks/cancel sends its push notifications through the delivery queue. No secret: A2A peers'
    # push notifications to us (token check) are served by the callback function.
    # Push notification URLs must lie under an allowed service's URL (peer_urls).
    # message/stream and tasks/resubscribe are this function too: they read what the others write.
    # A canceled task's own delegations are canceled at their peers (peer_tokens; a retry on dispatch).
    "a2a": Access(
        table=True, send=("delivery", "dispatch", "thinks"), start_thinks=True, peer_tokens=True, peer_urls=True
    ),
    # GET /api/sessions/{id}/events: the peer registry entry and the session's items, read once per poll;
    # the session's watch mark (the live relay), its one kind of write.
    "session_events": Access(read_table=True, watch_sessions=True),
    # The owed-think starter (THINK_START = "stream"): the table's stream (read by its event source mapping, which
    # CDK grants), an asynchronous invoke of the turn worker per think, and the owed mark into the deadline index
    # when that start fails. Nothing else of the table.
    "owed_thinks": Access(start_thinks=True, defer_owed=True),
    # API Gateway's REQUEST authorizer of the peer routes: looks the bearer token's peer up in the
    # registry (one GetItem) and names the peer's usage-plan API key. No queue, no secret, no writes.
    "peer_authorizer": Access(read_peers=True),
}

# The attributes of the live relay's watch mark (flightdeck.adapters.live_state.LiveStore.watch).
WATCH_ATTRIBUTES = (topology.PARTITION_KEY, topology.SORT_KEY, "until", topology.TTL_ATTRIBUTE)
# The owed-think mark's attributes (flightdeck.adapters.dynamo.liveness.LivenessStore.defer_owed_think).
OWED_ATTRIBUTES = (
    topology.PARTITION_KEY,
    topology.SORT_KEY,
    "owed_think",
    topology.DEADLINE_AT_ATTRIBUTE,
    topology.DEADLINE_SHARD_ATTRIBUTE,
)
# A think that a stream watches calls ConverseStream (flightdeck.domain.live), the others Converse.
BEDROCK_ACTIONS = ["bedrock:InvokeModel", "bedrock:InvokeModelWithResponseStream"]

# Cross-region inference profile ids start with a geography ("us.anthropic.claude-...").
_PROFILE_PREFIXES = ("us", "us-gov", "eu", "apac", "jp", "au", "ca", "global")


def bedrock_resources(model_id: str) -> list[str]:
    """The ARNs `bedrock:InvokeModel` (and its streaming twin) needs for a model id, inference profile id or ARN."""
    if not model_id:
        raise ValueError("model.provider is 'bedrock' but model.model_id is empty")
    if model_id.startswith("arn:"):
        return [model_id]
    geography, _, base_model = model_id.partition(".")
    if geography in _PROFILE_PREFIXES and "." in base_model:
        # The profile routes the call to the base model in any region of its geography.
        return [
            f"arn:{Aws.PARTITION}:bedrock:{Aws.REGION}:{Aws.ACCOUNT_ID}:inference-profile/{model_id}",
            f"arn:{Aws.PARTITION}:bedrock:*::foundation-model/{base_model}",
        ]
    return [f"arn:{Aws.PARTITION}:bedrock:{Aws.REGION}::foundation-model/{model_id}"]


class Permissions(Construct):
    """Applies ACCESS to the functions; creates no resources of its own."""

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        functions: Functions,
        state: StateTable,
        queues: Queues,
        secret: CallbackSecret,
        peer_tokens: PeerTokensSecret,
        model: ModelConfig,
        peer_url_parameters: list[str] = (),
        turn_worker_name: str,
        mcp_secrets: list[str] = (),
    ) -> None:
        super().__init__(scope, id)
        stack = Stack.of(self)
        # Exactly these parameters, no path wildcard: a name added to DISCOVERED_PEERS is a redeploy anyway.
        parameter_arns = [
            stack.format_arn(service="ssm", resource="parameter", resource_name=name.lstrip("/"))
            for name in peer_url_parameters
        ]
        # Built from the fixed name, not the function's attribute: the turn worker's own policy names it
        # too, and a reference would make the function depend on itself. Unqualified only: no versions.
        turn_worker_arn = stack.format_arn(
            service="lambda",
            resource="function",
            resource_name=turn_worker_name,
            arn_format=ArnFormat.COLON_RESOURCE_NAME,
        )
        table_id = stack.get_logical_id(state.table.node.default_child)
        for handler, function in functions.functions.items():
            access = ACCESS.get(handler)
            if access is None:
                raise ValueError(f"handler {handler!r} has no entry in infra/access.py ACCESS: decide its permissions")
            role = functions.roles[handler]
            if access.table:
                state.table.grant_read_write_data(function)
                Validations.of(role).acknowledge(
                    Acknowledgment(
                        id=f"AwsSolutions-IAM5[Resource::<{table_id}.Arn>/index/*]",
                        reason=(
                            "Table.grantReadWriteData also covers the table's indexes: this table has exactly "
                            "those of topology.INDEXES, the sparse deadline index the sweep queries and the "
                            "sessions index of GET /api/sessions; no other table is reachable."
                        ),
                    )
                )
            if access.read_table:
                state.table.grant_read_data(function)
                Validations.of(role).acknowledge(
                    Acknowledgment(
                        id=f"AwsSolutions-IAM5[Resource::<{table_id}.Arn>/index/*]",
                        reason=(
                            "Table.grantReadData also covers the table's indexes (those of topology.INDEXES); "
                            "this function reads (and writes nothing but a watch mark, on the table alone); "
                            "no other table is reachable."
                        ),
                    )
                )
            if access.read_peers:
                # Table.grant would add the index ARN (<table>/index/*) too; GetItem never reads an
                # index, so the statement names the table alone (and needs no IAM5 acknowledgement).
                function.add_to_role_policy(
                    iam.PolicyStatement(actions=["dynamodb:GetItem"], resources=[state.table.table_arn])
                )
            if access.watch_sessions:
                # IAM cannot name a sort key: the statement allows updating no attribute but the watch
                # mark's (an item it makes holds nothing else), and returns none.
                function.add_to_role_policy(
                    iam.PolicyStatement(
                        actions=["dynamodb:UpdateItem"],
                        resources=[state.table.table_arn],
                        conditions={
                            "ForAllValues:StringEquals": {"dynamodb:Attributes": list(WATCH_ATTRIBUTES)},
                            "StringEqualsIfExists": {"dynamodb:ReturnValues": "NONE"},
                        },
                    )
                )
            if access.defer_owed:
                function.add_to_role_policy(
                    iam.PolicyStatement(
                        actions=["dynamodb:UpdateItem"],
                        resources=[state.table.table_arn],
                        conditions={
                            "ForAllValues:StringEquals": {"dynamodb:Attributes": list(OWED_ATTRIBUTES)},
                            "StringEqualsIfExists": {"dynamodb:ReturnValues": "NONE"},
                        },
                    )
                )
            for key in access.send:
                queues[key].queue.grant_send_messages(function)
            for key in access.send_to_dlq:
                queues[key].dlq.grant_send_messages(function)
            if access.start_thinks:
                function.add_to_role_policy(
                    iam.PolicyStatement(actions=["lambda:InvokeFunction"], resources=[turn_worker_arn])
                )
            if access.secret:
                secret.secret.grant_read(function)
            if access.peer_tokens:
                peer_tokens.secret.grant_read(function)
            if mcp_secrets and handler in MCP_CALLERS:
                # The agent's MCP servers' tokens (credential "secret:NAME"): exactly those secrets. A name
                # matches its ARN's random suffix ("-??????"); an ARN is taken as written.
                function.add_to_role_policy(
                    iam.PolicyStatement(
                        actions=["secretsmanager:GetSecretValue"],
                        resources=[
                            name
                            if name.startswith("arn:")
                            else stack.format_arn(
                                service="secretsmanager",
                                resource="secret",
                                resource_name=f"{name}-??????",
                                arn_format=ArnFormat.COLON_RESOURCE_NAME,
                            )
                            for name in mcp_secrets
                        ],
                    )
                )
                Validations.of(role).acknowledge(
                    Acknowledgment(
                        id="AwsSolutions-IAM5[Resource::arn:<AWS::Partition>:secretsmanager:<AWS::Region>:<AWS::AccountId>:secret:*-??????]",
                        reason="A secret named in the deployment file (an MCP server's credential) matches its ARN's "
                        "random 6-character suffix: the statement names each secret, no other.",
                    )
                )
            if access.peer_urls and parameter_arns:
                function.add_to_role_policy(iam.PolicyStatement(actions=["ssm:GetParameter"], resources=parameter_arns))
            if access.model and model.provider == "bedrock":
                resources = bedrock_resources(model.model_id)
                function.add_to_role_policy(iam.PolicyStatement(actions=BEDROCK_ACTIONS, resources=resources))
                for arn in resources:
                    if "bedrock:*::foundation-model/" in arn:
                        Validations.of(role).acknowledge(
                            Acknowledgment(
                                id=f"AwsSolutions-IAM5[Resource::{_nag_arn(arn)}]",
                                reason=(
                                    "A cross-region inference profile routes each call to the same base model in "
                                    "any region of its geography; the region is the only wildcard, the model is fixed."
                                ),
                            )
                        )


def _nag_arn(arn: str) -> str:
    """How cdk-nag spells an ARN that contains the partition pseudo parameter."""
    return arn.replace(Aws.PARTITION, "<AWS::Partition>")
