"""The shape of one agent's AWS resources, as plain data.

Both the CDK constructs (infra/) and the local runtime (flightdeck.local) build
tables, queues and functions from these definitions, so names, keys, TTL attributes,
indexes, FIFO-ness, redrive and asynchronous invocation cannot drift between AWS and a laptop.
No AWS imports here.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

# --- DynamoDB: one table per agent, single-table layout -----------------------------
PARTITION_KEY = "pk"
SORT_KEY = "sk"
TTL_ATTRIBUTE = "expires_at"
# Sparse index over open turns: only a session with a waiting turn or an owed think (and an A2A task not yet
# handed over) carries these two attributes, so the sweep reads what is overdue, never the whole table. Keys
# only: an update that keeps an item listed (the round trip's, ARCHITECTURE §3) writes nothing to it.
DEADLINE_INDEX = "deadline-index"
DEADLINE_SHARD_ATTRIBUTE = "due_shard"
DEADLINE_AT_ATTRIBUTE = "due_at"
# Spreads open turns over a few index partitions so no single one runs hot.
DEADLINE_SHARDS = 4
# A peer's own sessions, newest first (GET /api/sessions): a session's META item carries its owner
# and creation time (flightdeck.adapters.dynamo writes them; an item without an owner, made
# while authentication was off, is not in it). Keys only: a session's later updates (status, turn,
# messages) never write to it, so it costs one index write per new session.
SESSIONS_INDEX = "owner-sessions-index"
SESSION_OWNER_ATTRIBUTE = "owner"
SESSION_CREATED_AT_ATTRIBUTE = "created_at"
# A peer's own A2A tasks, latest update first (A2A v1.0 ListTasks): keyed on what a task item carries
# anyway (flightdeck.adapters.a2a_task_index), so no write changes; one index write per task update.
TASKS_INDEX = "owner-tasks-index"
TASK_OWNER_ATTRIBUTE = "owner"
TASK_UPDATED_AT_ATTRIBUTE = "updated_ms"


@dataclass(frozen=True)
class IndexSpec:
    """A global secondary index of the agent's table: (attribute, "S" | "N") keys and its projection."""

    name: str
    partition_key: tuple[str, str]
    sort_key: tuple[str, str]
    projection: str  # "ALL" | "KEYS_ONLY"


INDEXES: tuple[IndexSpec, ...] = (
    IndexSpec(DEADLINE_INDEX, (DEADLINE_SHARD_ATTRIBUTE, "S"), (DEADLINE_AT_ATTRIBUTE, "N"), "KEYS_ONLY"),
    IndexSpec(SESSIONS_INDEX, (SESSION_OWNER_ATTRIBUTE, "S"), (SESSION_CREATED_AT_ATTRIBUTE, "N"), "KEYS_ONLY"),
    IndexSpec(TASKS_INDEX, (TASK_OWNER_ATTRIBUTE, "S"), (TASK_UPDATED_AT_ATTRIBUTE, "N"), "KEYS_ONLY"),
)


@dataclass(frozen=True)
class QueueSpec:
    key: str  # logical name: settings variable prefix and construct id
    fifo: bool
    # Lambda's event source mapping gives up after this many receives and SQS
    # moves the message to the dead-letter queue.
    max_receive_count: int
    visibility_timeout_s: int
    batch_size: int
    # the handler module that consumes it: flightdeck.handlers.<handler>.handler
    handler: str
    # Lambda's MaximumBatchingWindowInSeconds: how long the mapping gathers a batch before it invokes (0: at once).
    batching_window_s: int = 0
    # An alarm when its oldest message is this old (ApproximateAgeOfOldestMessage); 0: none.
    age_alarm_s: int = 0

    def name(self, prefix: str) -> str:
        return f"{prefix}-{self.key}" + (".fifo" if self.fifo else "")

    def dlq_name(self, prefix: str) -> str:
        return f"{prefix}-{self.key}-dlq" + (".fifo" if self.fifo else "")


# Visibility timeouts are six times the consuming function's timeout (AWS advice).
WORKER_TIMEOUT_S = 30
QUEUES: tuple[QueueSpec, ...] = (
    # A think starts with an asynchronous invoke of the turn worker (ASYNC_INVOKES below); this queue
    # is only its delayed retry path (a model throttled: DelaySeconds backoff), so it is a standard queue
    # (FIFO has no per-message delay). One think per invocation: each gets the whole invocation's time.
    QueueSpec(
        "turns",
        fifo=False,
        max_receive_count=5,
        visibility_timeout_s=6 * WORKER_TIMEOUT_S,
        batch_size=1,
        handler="turn_worker",
    ),
    # THINK_GATHERING = "shared": thinks that are not lone wait here up to the batching window, and the turn worker
    # runs a batch of them concurrently (flightdeck.handlers.think_batch), each think its own record: a failed
    # one alone comes back (ReportBatchItemFailures), a minute on (THINK_RETRY_S), as Lambda retries an
    # asynchronous invoke, and after max_receive_count it goes to the DLQ; its owed mark stays listed, so the
    # sweep re-sends it (ARCHITECTURE §3).
    QueueSpec(
        "thinks",
        fifo=False,
        max_receive_count=3,
        visibility_timeout_s=6 * WORKER_TIMEOUT_S,
        batch_size=10,
        handler="turn_worker",
        batching_window_s=4,
        age_alarm_s=30,
    ),
    # Dispatch retries through visibility; the worker gives up itself (and records
    # dispatch_failed) before SQS would dead-letter the message.
    QueueSpec(
        "dispatch",
        fifo=False,
        max_receive_count=12,
        visibility_timeout_s=6 * WORKER_TIMEOUT_S,
        batch_size=10,
        handler="dispatch_worker",
    ),
    QueueSpec(
        "delivery",
        fifo=False,
        max_receive_count=20,
        visibility_timeout_s=6 * WORKER_TIMEOUT_S,
        batch_size=10,
        handler="delivery_worker",
    ),
    QueueSpec(
        "timers",
        fifo=False,
        max_receive_count=5,
        visibility_timeout_s=6 * WORKER_TIMEOUT_S,
        batch_size=10,
        handler="deadline_timer",
    ),
)
QUEUES_BY_KEY = {q.key: q for q in QUEUES}


def table_name(prefix: str) -> str:
    return f"{prefix}-state"


# --- Lambda: function names and asynchronous invocations ---------------------------------
# Lambda's limit on a function name.
MAX_FUNCTION_NAME = 64
# The handler that thinks: started by an asynchronous Invoke (flightdeck.adapters.lambda_thinks).
THINK_HANDLER = "turn_worker"


def function_name(prefix: str, handler: str) -> str:
    """A function's explicit name (Lambda allows letters, digits, - and _): the thinks' invoke target is named
    before the function exists, so a function may start thinks in itself without a template cycle."""
    return f"{prefix}-{handler.replace('_', '-')}"


@dataclass(frozen=True)
class AsyncInvokeSpec:
    """How Lambda handles a function's asynchronous invocations (its EventInvokeConfig).

    A failed invocation (the function raised or timed out) is run again `retry_attempts` times, a
    minute or two apart; an event that failed them all, or waited longer than `max_event_age_s`,
    goes, as Lambda's invocation record, to the `on_failure_queue` queue itself: the turn worker takes it
    from there and hands the think to the sweep (the owed mark into the deadline index, whoever starts
    thinks: ARCHITECTURE §3); a record it cannot handle goes on to that queue's dead-letter queue (alarmed).
    """

    handler: str
    retry_attempts: int  # 0-2
    max_event_age_s: int  # 60-21600
    on_failure_queue: str  # a QUEUES key: Lambda's record of the given-up event goes to that queue


ASYNC_INVOKES: tuple[AsyncInvokeSpec, ...] = (
    # Lambda's retries own a think that crashed (its effects are idempotent); a think given up on goes to the
    # delayed-retry queue, whose consumer hands it to the sweep. An hour-old think is long past any deadline.
    AsyncInvokeSpec(THINK_HANDLER, retry_attempts=2, max_event_age_s=3600, on_failure_queue="turns"),
)
ASYNC_INVOKES_BY_HANDLER = {a.handler: a for a in ASYNC_INVOKES}


# --- DynamoDB Streams: the owed-think starter (deploy.think_start = "stream", ARCHITECTURE §3) -----------
# Who starts a think a write marked owed: "writer", the writer itself right after its commit, the mark in the
# deadline index for the sweep; "stream", the consumer of the table's stream, the mark out of the index.
THINK_STARTERS = ("writer", "stream")
# How thinks are gathered (settings THINK_GATHERING): one asynchronous invoke each, or batches on the thinks queue.
THINK_GATHERINGS = ("one_per_function", "shared")
THINKS_QUEUE = "thinks"
# A failed think of a batch is received again after this (Lambda retries a failed asynchronous invoke about as late).
THINK_RETRY_S = 60
OWED_THINKS_HANDLER = "owed_thinks"
# Old and new images: the consumer starts a think only where the mark appeared or changed (a filter cannot
# compare two images, so one of the patterns passes every META write while a mark stands; the consumer drops those).
STREAM_VIEW = "NEW_AND_OLD_IMAGES"
# Lambda's event filters (FilterCriteria), OR'ed: only META records carrying a mark invoke the consumer; the
# local runtime applies the same patterns (flightdeck.local.streams).
OWED_THINK_FILTERS: tuple[dict[str, object], ...] = (
    {
        "eventName": ["INSERT", "MODIFY"],
        "dynamodb": {
            "Keys": {SORT_KEY: {"S": ["META"]}},
            "NewImage": {"owed_think": {"N": [{"exists": True}]}},
        },
    },
)


@dataclass(frozen=True)
class StreamConsumerSpec:
    """The event source mapping of the owed-think starter on the table's stream.

    A record whose start failed is reported as a batch item failure (the batch bisects, and the shard moves
    on past it after retry_attempts or max_record_age_s); one that still fails goes, as the mapping's
    on-failure record, to the dead-letter queue of on_failure_queue (alarmed). Its think is the sweep's:
    the consumer indexes the mark before it gives a record up (flightdeck.domain.owed_thinks).
    """

    handler: str
    batch_size: int
    retry_attempts: int  # 0-10000
    max_record_age_s: int  # 60-604800
    on_failure_queue: str  # a QUEUES key: the mapping's failure records go to its dead-letter queue
    # Its own memory: one invoke per record and nothing held, so Lambda's least (a GB-s of it is a quarter of
    # the others' at 512 MB); it runs once per think, so its duration is a cost per think.
    memory_mb: int = 128


STREAM_CONSUMER = StreamConsumerSpec(
    OWED_THINKS_HANDLER, batch_size=100, retry_attempts=3, max_record_age_s=3600, on_failure_queue="turns"
)


# --- SSM: where each deployed agent publishes its API URL ------------------------------
# One String parameter per agent, named by deployment and agent; the agents of one
# deployment file find each other's URL there at run time (flightdeck.adapters.peer_directory),
# so no stack needs another's output and deploy order does not matter.
def peer_url_parameter_prefix(deployment: str) -> str:
    return f"/flightdeck/{deployment}"


def peer_url_parameter(prefix: str, agent: str) -> str:
    return f"{prefix}/{agent}/api-url"


# How a route's callers prove who they are (enforced by the functions: flightdeck.api.auth).
PEER_AUTH = "peer"  # a peer bearer token from the agent's peer registry (flightdeck.domain.peers)
CALLBACK_AUTH = "callback"  # the HMAC callback token this agent minted for one delegation
PUBLIC = "public"  # nobody needs to

# Who may call a route (docs/PEERS.md, "Roles"). A peer token's channels (its registry record,
# flightdeck.domain.peers.TOKEN_CHANNELS) name its holder's roles, so these three are channel names too.
USER = "user"  # the agent's own users: you with curl, `flightdeck chat`, the web console
PEER_AGENT = "a2a"  # another agent delegating to this one (native /api/chat, or A2A)
MCP_CLIENT = "mcp"  # an MCP client (POST /mcp)
DELEGATE = "delegate"  # a delegate answering one of this agent's delegations, with the callback token minted for it
ANYONE = "anyone"  # no credential
TOKEN_ROLES: tuple[str, ...] = (USER, PEER_AGENT, MCP_CLIENT)
ROLES: tuple[str, ...] = (*TOKEN_ROLES, DELEGATE, ANYONE)
# The roles each kind of authentication admits (a route names which of them it lets in).
_ROLES_OF_AUTH = {PEER_AUTH: frozenset(TOKEN_ROLES), CALLBACK_AUTH: frozenset({DELEGATE}), PUBLIC: frozenset({ANYONE})}


@dataclass(frozen=True)
class Route:
    method: str
    path: str  # API Gateway resource path, {param} for path parameters
    handler: str
    auth: str = PEER_AUTH
    # Who may call it (ROLES): the one route x role table, enforced by flightdeck.api.auth. PEER_AUTH: a token
    # must be issued for one of these channels; an A2A peer's token does not open /mcp, nor the console's routes.
    roles: tuple[str, ...] = (USER, PEER_AGENT)
    # The audit log's operation for a delegation call on this route ("": not a delegation call, not audited).
    audit: str = ""
    # CALLBACK_AUTH: the header that carries the token, checked before the body is read
    # ("": the tokens are in the body, one per item).
    token_header: str = ""
    # Its answer may be Server-Sent Events, written as they come: its handler's function streams
    # (STREAMING_HANDLERS: on AWS behind API Gateway's STREAM integration and the Lambda Web Adapter).
    stream: bool = False
    # PEER_AUTH: the write that commits the request checks the token against the registry in its own
    # transaction, instead of a read before it (flightdeck.api.auth); only for a route whose every
    # effect follows that write.
    checked_by_write: bool = False
    # The web console's: it exists only on an agent whose console is on (deploy.console; the CONSOLE setting).
    console: bool = False

    def __post_init__(self) -> None:
        if not self.roles or not set(self.roles) <= _ROLES_OF_AUTH[self.auth]:
            raise ValueError(f"route {self.method} {self.path}: roles {self.roles} do not fit auth {self.auth!r}")


_CONSOLE_ONLY = (USER,)
# Every HTTP route, and the Lambda handler module that serves it.
ROUTES: tuple[Route, ...] = (
    Route("POST", "/api/chat", "chat_ingest", PEER_AUTH, audit="chat", checked_by_write=True),
    Route("GET", "/api/sessions/{session_id}", "chat_ingest", PEER_AUTH),
    # The caller's own sessions, newest first, a page at a time.
    Route("GET", "/api/sessions", "chat_ingest", PEER_AUTH),
    # Its owner stops waiting (a delegating agent whose deadline passed): the session stops, delivers nothing.
    Route("POST", "/api/sessions/{session_id}/cancel", "chat_ingest", PEER_AUTH, audit="session_cancel"),
    # The session's timeline as Server-Sent Events: its own function, which reads and never writes.
    Route("GET", "/api/sessions/{session_id}/events", "session_events", PEER_AUTH, stream=True),
    # What the web console reads (flightdeck.api.console_routes), for its user only: a delegate's timeline of
    # the caller's delegation, and an allowlisted A2A agent's card and JSON-RPC endpoint relayed for the inspector.
    Route(
        "GET",
        "/api/sessions/{session_id}/delegations/{tool_use_id}/events",
        "chat_ingest",
        PEER_AUTH,
        roles=_CONSOLE_ONLY,
        console=True,
    ),
    Route("GET", "/api/inspector/card", "chat_ingest", PEER_AUTH, roles=_CONSOLE_ONLY, console=True),
    Route("POST", "/api/inspector/rpc", "chat_ingest", PEER_AUTH, roles=_CONSOLE_ONLY, audit="inspector", console=True),
    Route(
        "POST",
        "/api/tools/response",
        "callback",
        CALLBACK_AUTH,
        roles=(DELEGATE,),
        audit="tool_response",
        token_header="authorization",
    ),
    Route("POST", "/api/tools/responses", "callback", CALLBACK_AUTH, roles=(DELEGATE,), audit="tool_responses"),
    Route("GET", "/.well-known/agent-card.json", "agent_card", PUBLIC, roles=(ANYONE,)),
    # A2A v0.3 JSON-RPC (the agent card's url), and A2A peers' push notifications for our delegations
    # (served with the callbacks: same token check, same permissions).
    Route("POST", "/a2a", "a2a", PEER_AUTH, audit="a2a", stream=True),
    # A GET there (a browser, a probe of the card's URL) is a 405 in JSON-RPC, without a token.
    Route("GET", "/a2a", "a2a", PUBLIC, roles=(ANYONE,), stream=True),
    Route(
        "POST",
        "/api/a2a/push",
        "callback",
        CALLBACK_AUTH,
        roles=(DELEGATE,),
        audit="a2a_push",
        token_header="x-a2a-notification-token",
    ),
    # MCP (Streamable HTTP, protocol versions 2026-07-28 and 2025-11-25: flightdeck.api.mcp), served by the
    # a2a function: it streams (SSE progress), and it may ingest, read and cancel sessions as /a2a does.
    # GET and DELETE answer 405 (no standalone stream, no protocol sessions), without a token.
    Route("POST", "/mcp", "a2a", PEER_AUTH, roles=(MCP_CLIENT,), audit="mcp", stream=True),
    Route("GET", "/mcp", "a2a", PUBLIC, roles=(ANYONE,), stream=True),
    Route("DELETE", "/mcp", "a2a", PUBLIC, roles=(ANYONE,), stream=True),
    # Liveness (the agent's name and version) and the API's OpenAPI document: public, served with the card.
    Route("GET", "/health", "agent_card", PUBLIC, roles=(ANYONE,)),
    Route("GET", "/openapi.json", "agent_card", PUBLIC, roles=(ANYONE,)),
)
_ROUTES_BY_KEY = {(r.method, r.path): r for r in ROUTES}


def route_for(method: str | None, path: str | None) -> Route | None:
    """The route of an API Gateway event (its httpMethod and resource), or None."""
    return _ROUTES_BY_KEY.get((method or "", path or ""))


@functools.cache
def _route_patterns() -> tuple[tuple[re.Pattern[str], Route], ...]:
    # Compiled by the first route_at (a function URL's request), not when every function starts (cold start).
    # A trailing slash is the same path, as API Gateway routes /a2a/ to its /a2a resource (clients that join a
    # card's URL with "/" post there).
    return tuple((re.compile("^" + re.sub(r"\\\{[^/]+?\\\}", "[^/]+", re.escape(r.path)) + "/?$"), r) for r in ROUTES)


def route_at(method: str | None, path: str | None) -> Route | None:
    """The route of a request path as sent ("/api/sessions/s-1", "/a2a/"), or None: a function URL's event
    names no resource template (its routeKey is "$default")."""
    for pattern, route in _route_patterns():
        if route.method == (method or "") and pattern.match(path or ""):
            return route
    return None


def methods_at(path: str) -> list[str]:
    """The methods some route serves at this path (a 405's Allow)."""
    return sorted({route.method for pattern, route in _route_patterns() if pattern.match(path)})


# The handlers whose functions stream their answers. A stream lasts up to STREAM_MAX_MS
# (flightdeck.settings), so they get Lambda's longest timeout (API Gateway streams for up to
# 15 minutes); every other API function answers within API Gateway's 29 s.
STREAMING_HANDLERS = frozenset(r.handler for r in ROUTES if r.stream)
STREAM_TIMEOUT_S = 900
# They run the AWS Lambda Web Adapter, a layer AWS publishes in account 753240598075 of each commercial region
# (https://github.com/awslabs/aws-lambda-web-adapter, v1.0): infra/functions.py attaches it, and
# `flightdeck deploy` checks it is in the target region first.
WEB_ADAPTER_ACCOUNT = "753240598075"
WEB_ADAPTER_LAYER = {"arm64": "LambdaAdapterLayerArm64", "x86_64": "LambdaAdapterLayerX86"}
WEB_ADAPTER_VERSION = 26
# The functions' architecture (infra/bundling.py ARCHITECTURE builds the asset for it).
LAMBDA_ARCHITECTURE = "arm64"


def web_adapter_layer_arn(region: str, architecture: str = LAMBDA_ARCHITECTURE, partition: str = "aws") -> str:
    return (
        f"arn:{partition}:lambda:{region}:{WEB_ADAPTER_ACCOUNT}:layer:"
        f"{WEB_ADAPTER_LAYER[architecture]}:{WEB_ADAPTER_VERSION}"
    )


# The lean front door (deploy.front_door = "lean", docs/FRONT_DOORS.md): these handlers' functions each have
# a Lambda function URL (AuthType NONE: the in-function token check is the only gate), which serves the
# peer routes that carry a round trip; every other route, and these functions' buffered ones for the user,
# goes through an HTTP API. A function URL passes any path to its function.
URL_HANDLERS = ("chat_ingest", "callback", "a2a", "session_events")


# The EventBridge-scheduled backstop sweep.
SWEEPER_HANDLER = "sweeper"
# API Gateway's REQUEST authorizer in front of every PEER_AUTH route: it names the caller's
# usage-plan API key (flightdeck.domain.peer_usage).
PEER_AUTHORIZER_HANDLER = "peer_authorizer"

HANDLERS = tuple(
    sorted(
        {r.handler for r in ROUTES}
        | {q.handler for q in QUEUES}
        | {SWEEPER_HANDLER, PEER_AUTHORIZER_HANDLER, OWED_THINKS_HANDLER}
    )
)
