"""Run the deployed functions' handlers as Lambda would, against what CloudFormation created in moto.

- Each function runs with the environment CloudFormation gave it (read back with
  lambda:GetFunctionConfiguration), plus what the Lambda runtime adds (region, function
  name, credentials) and POWERTOOLS_TRACE_DISABLED (there is no X-Ray daemon here).
- Each function gets its own copy of the `flightdeck` modules, imported fresh under its
  environment on its first invocation and kept for the next ones, as a Lambda execution
  environment keeps its process: settings, clients, caches and the metrics object are per
  function, never shared with another function or another agent.
- IAM: every AWS call a function makes is checked against the policies of its role as
  CloudFormation created them in moto's IAM, with moto's own policy engine
  (moto.iam.access_control.IAMPolicy) and the call's real resource ARN. moto enforces IAM
  itself only with resource "*" for most services, which no least-privilege policy allows, so
  the check is made here, before the call; a refusal is the AccessDenied ClientError AWS gives.
  A call this harness cannot map to an action and a resource is refused too.
- SQS: the event source mappings CloudFormation created feed their functions (receive, invoke
  with an SQS event, delete what the function did not report as failed).
- Asynchronous invokes: an Invoke with InvocationType Event that moto accepted (202; it runs
  nothing without Docker) is recorded (tests.support.invokes) and run here, with the function's
  EventInvokeConfig as deployed: a failed run is run again up to MaximumRetryAttempts times, then
  Lambda's invocation record goes to the on-failure destination queue.
- HTTP: requests to a deployed REST API (https://<id>.execute-api...) are served like API
  Gateway's Lambda proxy integration, from the REST API moto holds: resource and method
  lookup, the REQUEST authorizer for CUSTOM methods (its answer not cached) and the API key it
  names (must exist, be enabled and be in a usage plan of the stage), then the integration's
  function. Not emulated: throttling and quotas, request validation, gateway responses. The lean front door's
  function URLs (https://<url-id>.lambda-url...: the function, a payload 2.0 event) and HTTP API (route key, its
  integration's function, payload 1.0) are served as e2e_lean says.
"""

from __future__ import annotations

import contextlib
import contextvars
import fnmatch
import io
import json
import os
import re
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import boto3
import botocore.handlers
import e2e_lean
import responses
from botocore.exceptions import ClientError
from e2e_cloud import ACCOUNT, REGION

from tests.support.invokes import RECORDER

_current_role: contextvars.ContextVar[FunctionRole | None] = contextvars.ContextVar("role", default=None)


# --- IAM ------------------------------------------------------------------------------------


@dataclass
class FunctionRole:
    function: str
    role_name: str
    policies: list[str]  # JSON policy documents
    checked: list[tuple[str, str, bool]] = field(default_factory=list)  # (action, resource, allowed)
    failed_calls: list[tuple[str, str, str]] = field(default_factory=list)  # (operation, error code, message)

    @property
    def denied(self) -> list[tuple[str, str]]:
        return [(action, resource) for action, resource, allowed in self.checked if not allowed]

    def allows(self, action: str, resource: str) -> bool:
        from moto.iam.access_control import IAMPolicy, PermissionResult

        results = [IAMPolicy(p).is_action_permitted(action, resource) for p in self.policies]
        allowed = PermissionResult.PERMITTED in results and PermissionResult.DENIED not in results
        self.checked.append((action, resource, allowed))
        return allowed


def _arn(service: str, resource: str) -> str:
    return f"arn:aws:{service}:{REGION}:{ACCOUNT}:{resource}"


# IAM action of an operation, where it is not "<service>:<operation>".
_ACTIONS = {
    ("sqs", "SendMessageBatch"): "sqs:SendMessage",
    ("sqs", "DeleteMessageBatch"): "sqs:DeleteMessage",
    ("sqs", "ChangeMessageVisibilityBatch"): "sqs:ChangeMessageVisibility",
    ("ssm", "GetParameters"): "ssm:GetParameters",
}


def requested(service: str, operation: str, params: dict[str, Any]) -> list[tuple[str, str]]:
    """(IAM action, resource ARN) pairs one API call needs; [] if this harness cannot tell."""
    action = _ACTIONS.get((service, operation), f"{service}:{operation}")
    if service == "dynamodb":
        if operation == "TransactWriteItems":
            pairs = []
            for item in params["TransactItems"]:
                ((kind, body),) = item.items()
                verb = {
                    "Put": "PutItem",
                    "Update": "UpdateItem",
                    "Delete": "DeleteItem",
                    "ConditionCheck": "ConditionCheckItem",
                }[kind]
                pairs.append((f"dynamodb:{verb}", _arn("dynamodb", f"table/{body['TableName']}")))
            return pairs
        if operation == "TransactGetItems":
            return [
                ("dynamodb:GetItem", _arn("dynamodb", f"table/{i['Get']['TableName']}"))
                for i in params["TransactItems"]
            ]
        if operation in ("BatchGetItem", "BatchWriteItem"):
            return [(action, _arn("dynamodb", f"table/{t}")) for t in params["RequestItems"]]
        table = f"table/{params['TableName']}"
        if params.get("IndexName"):
            table += f"/index/{params['IndexName']}"
        return [(action, _arn("dynamodb", table))]
    if service == "sqs" and "QueueUrl" in params:
        return [(action, _arn("sqs", params["QueueUrl"].rsplit("/", 1)[-1]))]
    if service == "secretsmanager" and "SecretId" in params:
        secret = params["SecretId"]
        return [(action, secret if secret.startswith("arn:") else _arn("secretsmanager", f"secret:{secret}"))]
    if service == "lambda" and operation == "Invoke":
        name = str(params["FunctionName"]).rsplit(":function:", 1)[-1]
        return [("lambda:InvokeFunction", _arn("lambda", f"function:{name}"))]
    if service == "ssm":
        names = params.get("Names") or [params.get("Name")]
        return [(action, _arn("ssm", f"parameter{n}" if n.startswith("/") else f"parameter/{n}")) for n in names if n]
    return []


def _check_iam(params: dict[str, Any], model: Any = None, event_name: str = "", **_: Any) -> None:
    """botocore `before-parameter-build`: refuse, as AWS would, a call the running function's role does not allow."""
    role = _current_role.get()
    if role is None or model is None:
        return  # the test itself, not a function
    service = model.service_model.signing_name or model.service_model.endpoint_prefix
    operation = model.name
    pairs = requested(service, operation, params)
    if not pairs:
        pairs = [(f"{service}:{operation}", "<unmapped>")]
    for action, resource in pairs:
        if resource == "<unmapped>" or not role.allows(action, resource):
            raise ClientError(
                {
                    "Error": {
                        "Code": "AccessDeniedException",
                        "Message": (
                            f"User: arn:aws:sts::{ACCOUNT}:assumed-role/{role.role_name}/{role.function} is not authorized "
                            f"to perform: {action} on resource: {resource} (e2e IAM check: the role's policies as deployed)"
                        ),
                    },
                    "ResponseMetadata": {"HTTPStatusCode": 400},
                },
                operation,
            )


def _record_failed_call(http_response: Any = None, parsed: Any = None, model: Any = None, **_: Any) -> None:
    """botocore `after-call`: note the AWS errors a function got (a table or queue that does not exist...)."""
    role = _current_role.get()
    if role is not None and isinstance(parsed, dict) and "Error" in parsed:
        error = parsed["Error"]
        role.failed_calls.append(
            (model.name if model else "?", str(error.get("Code")), str(error.get("Message"))[:300])
        )


@contextlib.contextmanager
def iam_enforced() -> Iterator[None]:
    """Every botocore session created inside checks calls against the running function's role."""
    entries = [("before-parameter-build", _check_iam), ("after-call", _record_failed_call)]
    botocore.handlers.BUILTIN_HANDLERS.extend(entries)
    saved_session = boto3.DEFAULT_SESSION
    boto3.DEFAULT_SESSION = None  # a new default session picks the handlers up
    try:
        yield
    finally:
        for entry in entries:
            botocore.handlers.BUILTIN_HANDLERS.remove(entry)
        boto3.DEFAULT_SESSION = saved_session


@contextlib.contextmanager
def as_the_platform() -> Iterator[None]:
    """Calls made by Lambda or API Gateway themselves (not by a function): no role check."""
    token = _current_role.set(None)
    try:
        yield
    finally:
        _current_role.reset(token)


# --- functions --------------------------------------------------------------------------


@dataclass
class LambdaContext:
    function_name: str
    function_version: str
    invoked_function_arn: str
    memory_limit_in_mb: int
    timeout_s: int
    aws_request_id: str = field(default_factory=lambda: str(uuid.uuid4()))
    started: float = field(default_factory=time.monotonic)

    @property
    def log_group_name(self) -> str:
        return f"/aws/lambda/{self.function_name}"

    @property
    def log_stream_name(self) -> str:
        return "e2e"

    def get_remaining_time_in_millis(self) -> int:
        return max(0, int((self.timeout_s - (time.monotonic() - self.started)) * 1000))


def _flightdeck_modules() -> dict[str, Any]:
    return {k: sys.modules.pop(k) for k in list(sys.modules) if k == "flightdeck" or k.startswith("flightdeck.")}


@dataclass
class Invocation:
    function: str
    event: dict[str, Any]
    result: Any = None
    error: BaseException | None = None
    metrics: list[dict[str, Any]] = field(default_factory=list)  # EMF documents printed
    logs: list[dict[str, Any]] = field(default_factory=list)  # JSON log lines printed

    @property
    def failed_records(self) -> list[str]:
        return (
            [f["itemIdentifier"] for f in (self.result or {}).get("batchItemFailures", [])]
            if isinstance(self.result, dict)
            else []
        )


# The handler of the streaming functions: the Lambda Web Adapter's start script (infra/functions.py).
STREAMING_HANDLER = "flightdeck/handlers/web.sh"


class DeployedFunction:
    """One Lambda function: its configuration from moto, its role's policies, its own modules."""

    def __init__(self, name: str, agent: str, lam: Any, iam: Any):
        self.config = lam.get_function_configuration(FunctionName=name)
        self.name = name
        self.agent = agent
        self.handler = self.config["Handler"]
        if self.handler == STREAMING_HANDLER:
            # The web adapter's start script (infra/functions.py): the web server calls the function's own
            # entry point, named in its description; here it is called directly, its stream read to the end.
            self.short = self.config["Description"].rsplit(": ", 1)[1]
            self.handler = f"flightdeck.handlers.{self.short}.handler"
        else:
            self.short = self.handler.removeprefix("flightdeck.handlers.").removesuffix(".handler")
        self.environment: dict[str, str] = dict(self.config.get("Environment", {}).get("Variables", {}))
        role_name = self.config["Role"].rsplit("/", 1)[-1]
        documents = [
            json.dumps(iam.get_role_policy(RoleName=role_name, PolicyName=p)["PolicyDocument"])
            for p in iam.list_role_policies(RoleName=role_name)["PolicyNames"]
        ]
        for attached in iam.list_attached_role_policies(RoleName=role_name)["AttachedPolicies"]:
            policy = iam.get_policy(PolicyArn=attached["PolicyArn"])["Policy"]
            version = iam.get_policy_version(PolicyArn=attached["PolicyArn"], VersionId=policy["DefaultVersionId"])
            documents.append(json.dumps(version["PolicyVersion"]["Document"]))
        self.role = FunctionRole(name, role_name, documents)
        self._modules: dict[str, Any] | None = None
        self.invocations: list[Invocation] = []
        # The function's stdout, as CloudWatch Logs would get it: log lines and EMF metrics. One stream for
        # the life of its modules, since the logger binds to the stream it finds at import.
        self.stdout = io.StringIO()

    def runtime_environment(self) -> dict[str, str]:
        return {
            **self.environment,
            "AWS_REGION": REGION,
            "AWS_DEFAULT_REGION": REGION,
            "AWS_ACCESS_KEY_ID": "e2e",
            "AWS_SECRET_ACCESS_KEY": "e2e",
            "AWS_SESSION_TOKEN": "e2e",
            "AWS_LAMBDA_FUNCTION_NAME": self.name,
            "AWS_LAMBDA_FUNCTION_MEMORY_SIZE": str(self.config["MemorySize"]),
            "AWS_LAMBDA_FUNCTION_VERSION": "$LATEST",
            "LAMBDA_TASK_ROOT": "/var/task",
            "POWERTOOLS_TRACE_DISABLED": "true",
            "POWERTOOLS_DEV": "false",
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        }

    @contextlib.contextmanager
    def _execution_environment(self) -> Iterator[None]:
        outer_modules = _flightdeck_modules()
        outer_env = dict(os.environ)
        os.environ.clear()
        os.environ.update(self.runtime_environment())
        if self._modules:
            sys.modules.update(self._modules)
        token = _current_role.set(self.role)
        try:
            yield
        finally:
            _current_role.reset(token)
            self._modules = _flightdeck_modules()
            sys.modules.update(outer_modules)
            os.environ.clear()
            os.environ.update(outer_env)

    def invoke(self, event: dict[str, Any]) -> Invocation:
        import importlib

        call = Invocation(self.name, event)
        start = self.stdout.tell()
        with self._execution_environment(), contextlib.redirect_stdout(self.stdout):
            module_name, attr = self.handler.rsplit(".", 1)
            context = LambdaContext(
                self.name, "$LATEST", self.config["FunctionArn"], self.config["MemorySize"], self.config["Timeout"]
            )
            try:
                handler = getattr(importlib.import_module(module_name), attr)
                # Every function runs in this one process, each with its own modules swapped in: a think's
                # delegations sent from threads would run beside the delegate's invocation (which a POST to it
                # makes here, in-process) and see its modules and environment. One after another here, as
                # Lambda runs each function in its own environment.
                outbox = sys.modules.get("flightdeck.domain.outbox")
                if outbox is not None:
                    outbox.MAX_CONCURRENT_DISPATCHES = 1
                call.result = handler(event, context)
                if hasattr(call.result, "chunks"):  # a stream (flightdeck.api.sse.StreamReply), buffered here
                    call.result = {
                        "statusCode": call.result.status,
                        "headers": call.result.headers,
                        "body": b"".join(call.result.chunks).decode("utf-8"),
                    }
            except Exception as exc:  # noqa: BLE001 - a function error, as Lambda reports it
                call.error = exc
        self.stdout.seek(start)
        for line in self.stdout.read().splitlines():
            if line.startswith("{"):
                try:
                    document = json.loads(line)
                except ValueError:
                    continue
                (call.metrics if "_aws" in document else call.logs).append(document)
        self.invocations.append(call)
        return call


# --- the deployment as Lambda and API Gateway run it -------------------------------------


class HarnessError(AssertionError):
    pass


class Runtime:
    """Every function of the deployed stacks, their SQS triggers, and their REST APIs over HTTP."""

    def __init__(self, stacks: dict[str, Any]):
        self.functions: dict[str, DeployedFunction] = {}
        self.apis: dict[str, str] = {}  # rest api id -> agent
        self.http_apis: set[str] = set()
        self.by_agent: dict[str, dict[str, DeployedFunction]] = {}
        lam, iam = boto3.client("lambda", region_name=REGION), boto3.client("iam", region_name=REGION)
        for deployed in stacks.values():
            agent = next(
                (
                    t["Value"]
                    for r in deployed.template["Resources"].values()
                    for t in (r.get("Properties", {}).get("Tags") or [])
                    if isinstance(t, dict) and t.get("Key") == "flightdeck:agent"
                ),
                None,
            )
            for name in deployed.of_type("AWS::Lambda::Function").values():
                function = DeployedFunction(name, agent, lam, iam)
                self.functions[function.config["FunctionArn"]] = function
                self.by_agent.setdefault(agent, {})[function.short] = function
            for api in deployed.of_type("AWS::ApiGateway::RestApi").values():
                self.apis[api] = agent
            # The lean front door (e2e_lean): its HTTP API, and the function URLs below.
            self.http_apis.update(deployed.of_type("AWS::ApiGatewayV2::Api").values())
        self.mappings = [
            m for m in lam.list_event_source_mappings()["EventSourceMappings"] if m["FunctionArn"] in self.functions
        ]
        for mapping in self.mappings:
            # This harness is Lambda's poller. moto's own would receive the messages (hiding them for the
            # visibility timeout) to run the function in Docker, which is not here: switched off.
            lam.update_event_source_mapping(UUID=mapping["UUID"], Enabled=False)
        self.http_log: list[tuple[str, str, int]] = []
        self.http_bodies: list[tuple[str, str, Any]] = []  # (method, url, JSON body sent) of every request
        self.failures: list[str] = []  # function errors, failed records, refused or failed AWS calls
        self._apigw = boto3.client("apigateway", region_name=REGION)
        self._v2 = boto3.client("apigatewayv2", region_name=REGION)
        self.url_functions = e2e_lean.function_urls(lam, list(self.functions))  # url id -> function ARN
        self._sqs = boto3.client("sqs", region_name=REGION)

    def function(self, agent: str, handler: str) -> DeployedFunction:
        return self.by_agent[agent][handler]

    def errors(self) -> list[Invocation]:
        return [i for f in self.functions.values() for i in f.invocations if i.error is not None]

    def _check(self, call: Invocation) -> Invocation:
        """Note what went wrong in one invocation (the function's error, its failed records, its AWS errors)."""
        function = next(f for f in self.functions.values() if f.name == call.function)
        if call.error is not None:
            self.failures.append(f"{function.agent}/{function.short}: {type(call.error).__name__}: {call.error}")
        if call.failed_records:
            self.failures.append(f"{function.agent}/{function.short}: {len(call.failed_records)} record(s) failed")
        for action, resource in function.role.denied:
            note = f"{function.agent}/{function.short}: IAM denied {action} on {resource}"
            if note not in self.failures:
                self.failures.append(note)
        return call

    def missing_resources(self) -> list[str]:
        """Every resource a function's environment names (table, queues, secrets, peer URL parameters) that
        does not exist. Read as the platform, not through the functions' roles."""
        problems = []
        with as_the_platform():
            dynamodb = boto3.client("dynamodb", region_name=REGION)
            secrets = boto3.client("secretsmanager", region_name=REGION)
            ssm = boto3.client("ssm", region_name=REGION)
            lam = boto3.client("lambda", region_name=REGION)
            for function in self.functions.values():
                env, where = function.environment, f"{function.agent}/{function.short}"

                def exists(call, *args, **kwargs) -> bool:
                    try:
                        call(*args, **kwargs)
                        return True
                    except ClientError:
                        return False

                for name, value in env.items():
                    if name.endswith(("_QUEUE_URL", "_DLQ_URL")) and value:
                        if not exists(self._sqs.get_queue_attributes, QueueUrl=value, AttributeNames=["QueueArn"]):
                            problems.append(f"{where}: {name}={value}: no such queue")
                    elif name == "STATE_TABLE":
                        if not exists(dynamodb.describe_table, TableName=value):
                            problems.append(f"{where}: {name}={value}: no such table")
                    elif name.endswith("_FUNCTION"):
                        if not exists(lam.get_function, FunctionName=value):
                            problems.append(f"{where}: {name}={value}: no such function")
                    elif name.endswith("_SECRET_ARN") and value:
                        if not exists(secrets.describe_secret, SecretId=value):
                            problems.append(f"{where}: {name}={value}: no such secret")
                for peer in filter(None, env.get("DISCOVERED_PEERS", "").split(",")):
                    parameter = f"{env['PEER_URL_PARAMETER_PREFIX']}/{peer}/api-url"
                    if not exists(ssm.get_parameter, Name=parameter):
                        problems.append(f"{where}: DISCOVERED_PEERS {peer}: no parameter {parameter} (not deployed?)")
        return problems

    def failed_calls(self) -> list[str]:
        """AWS errors the functions got: some are expected (a secret never rotated has no AWSPREVIOUS)."""
        return [
            f"{f.agent}/{f.short}: {op}: {code}: {message}"
            for f in self.functions.values()
            for op, code, message in f.role.failed_calls
        ]

    def fail_on_failures(self, what: str) -> None:
        if self.failures:
            raise HarnessError(
                f"{what}: "
                + "; ".join(self.failures)
                + "\nAWS errors the functions got: "
                + "; ".join(self.failed_calls())
            )

    # --- SQS ------------------------------------------------------------------------

    def pump_once(self, agents: set[str] | None = None) -> int:
        """One pass over the asynchronous invocations and the event source mappings (of these agents);
        returns how many events and messages were handed over."""
        handed = self._run_async_invocations(agents)
        for mapping in self.mappings:
            if agents is not None and self.functions[mapping["FunctionArn"]].agent not in agents:
                continue
            queue_name = mapping["EventSourceArn"].rsplit(":", 1)[-1]
            url = self._sqs.get_queue_url(QueueName=queue_name)["QueueUrl"]
            got = self._sqs.receive_message(
                QueueUrl=url,
                MaxNumberOfMessages=min(10, mapping.get("BatchSize", 10)),
                AttributeNames=["All"],
                MessageAttributeNames=["All"],
            )
            messages = got.get("Messages", [])
            if not messages:
                continue
            handed += len(messages)
            records = [
                {
                    "messageId": m["MessageId"],
                    "receiptHandle": m["ReceiptHandle"],
                    "body": m["Body"],
                    "attributes": m.get("Attributes", {}),
                    "messageAttributes": m.get("MessageAttributes", {}),
                    "md5OfBody": m["MD5OfBody"],
                    "eventSource": "aws:sqs",
                    "eventSourceARN": mapping["EventSourceArn"],
                    "awsRegion": REGION,
                }
                for m in messages
            ]
            function = self.functions[mapping["FunctionArn"]]
            call = self._check(function.invoke({"Records": records}))
            failed = set()
            if call.error is not None:
                failed = {r["messageId"] for r in records}
            elif "ReportBatchItemFailures" in mapping.get("FunctionResponseTypes", []) and isinstance(
                call.result, dict
            ):
                failed = {f["itemIdentifier"] for f in call.result.get("batchItemFailures", [])}
            for message in messages:
                if message["MessageId"] not in failed:
                    self._sqs.delete_message(QueueUrl=url, ReceiptHandle=message["ReceiptHandle"])
        return handed

    def _run_async_invocations(self, agents: set[str] | None) -> int:
        lam = boto3.client("lambda", region_name=REGION)
        handed = 0
        for function in self.functions.values():
            if agents is not None and function.agent not in agents:
                continue
            for invocation in RECORDER.take(function.name):
                handed += 1
                invocation.attempts += 1
                with as_the_platform():
                    try:
                        config = lam.get_function_event_invoke_config(FunctionName=function.name)
                    except ClientError:
                        config = {}  # Lambda's defaults: 2 retries, no destination
                call = function.invoke(invocation.event)
                if call.error is None:
                    self._check(call)
                    continue
                if invocation.attempts <= config.get("MaximumRetryAttempts", 2):
                    RECORDER.put_back(invocation)  # Lambda runs it again (here: on the next pass)
                else:
                    destination = config.get("DestinationConfig", {}).get("OnFailure", {}).get("Destination")
                    if destination:
                        url = self._sqs.get_queue_url(QueueName=destination.rsplit(":", 1)[-1])["QueueUrl"]
                        with as_the_platform():
                            self._sqs.send_message(
                                QueueUrl=url,
                                MessageBody=json.dumps(
                                    {
                                        "requestContext": {
                                            "condition": "RetriesExhausted",
                                            "approximateInvokeCount": invocation.attempts,
                                        },
                                        "requestPayload": invocation.event,
                                        "responsePayload": {"errorMessage": str(call.error)},
                                    }
                                ),
                            )
                self._check(call)
        return handed

    def run_until(
        self, done, *, max_passes: int = 60, what: str = "the condition", agents: set[str] | None = None
    ) -> None:
        """Pump the queues (of these agents) until done() is true; fail at the first failure, or if they run dry."""
        for _ in range(max_passes):
            self.fail_on_failures(f"before {what}")
            if done():
                return
            if self.pump_once(agents) == 0:
                self.fail_on_failures(f"before {what}")
                if not done():
                    raise HarnessError(
                        f"the queues ran dry before {what}; http: {self.http_log}; "
                        f"AWS errors the functions got: {self.failed_calls()}"
                    )
        raise HarnessError(f"{what} not reached after {max_passes} passes")

    # --- HTTP: API Gateway's proxy integration ------------------------------------------

    @contextlib.contextmanager
    def serving_http(self) -> Iterator[None]:
        pattern = re.compile(r"https://([a-z0-9]+)\.execute-api\.[a-z0-9-]+\.amazonaws\.com/.*")
        # moto consults the default `responses` registry before its own: this wins for execute-api URLs.
        callbacks = [
            responses.add_callback(method, url, callback=self._serve)
            for method in ("GET", "POST", "PUT", "DELETE", "PATCH")
            for url in (pattern, re.compile(e2e_lean.FUNCTION_URL_HOST))
        ]
        try:
            yield
        finally:
            for cb in callbacks:
                responses.remove(cb)

    def _serve(self, request: Any) -> tuple[int, dict[str, str], str]:
        parts = urlsplit(request.url)
        api_id = parts.hostname.split(".")[0]
        try:
            sent = json.loads(request.body) if request.body else None
        except ValueError:
            sent = request.body
        self.http_bodies.append((request.method, request.url, sent))
        text = request.body.decode() if isinstance(request.body, bytes) else (request.body or "")
        with as_the_platform():
            if ".lambda-url." in parts.hostname or api_id in self.http_apis:
                status, headers, body = self._lean_http(request.method, parts, dict(request.headers), text)
            else:
                status, headers, body = self.http(
                    api_id, request.method, parts.path, parts.query, dict(request.headers), request.body or b""
                )
        self.http_log.append((request.method, request.url, status))
        return status, headers, body

    def http(
        self, api_id: str, method: str, path: str, query: str, headers: dict[str, str], body: bytes | str
    ) -> tuple[int, dict[str, str], str]:
        if api_id not in self.apis:
            return 403, {}, json.dumps({"message": "Forbidden"})
        stage, _, rest = path.lstrip("/").partition("/")
        try:
            self._apigw.get_stage(restApiId=api_id, stageName=stage)
        except ClientError:
            return 403, {}, json.dumps({"message": "Forbidden"})
        resource, params = self._match(api_id, "/" + rest)
        if resource is None or method not in (resource.get("resourceMethods") or {}):
            return 404, {}, json.dumps({"error": {"code": "not_found", "message": f"no route for {method} /{rest}"}})
        method_config = self._apigw.get_method(restApiId=api_id, resourceId=resource["id"], httpMethod=method)
        if method_config["methodIntegration"]["type"] == "MOCK":
            return self._mock(method_config["methodIntegration"], stage)
        text = body.decode() if isinstance(body, bytes) else body
        event = self._proxy_event(api_id, stage, method, path, resource["path"], params, query, headers, text)
        if method_config.get("authorizationType") == "CUSTOM":
            refusal = self._authorize(api_id, stage, event)
            if refusal is not None:
                return refusal
        uri = method_config["methodIntegration"]["uri"]
        # Buffered (2015-03-31 .../invocations) or streaming (2021-11-15 .../response-streaming-invocations).
        function_arn = re.search(r"functions/(arn:[^/]+)/(?:response-streaming-)?invocations", uri).group(1)
        call = self._check(self.functions[function_arn].invoke(event))
        if call.error is not None:
            return 502, {}, json.dumps({"message": "Internal server error"})
        if int(call.result.get("statusCode", 0)) >= 500:
            self.failures.append(f"{self.functions[function_arn].agent}: {method} {path} answered {call.result}")
        result = call.result
        return int(result["statusCode"]), dict(result.get("headers") or {}), result.get("body") or ""

    def _lean_http(
        self, method: str, parts: Any, headers: dict[str, str], body: str
    ) -> tuple[int, dict[str, str], str]:
        """The lean front door (e2e_lean): a function URL passes any path to its function, in a payload 2.0 event
        (no authorizer); the HTTP API routes by route key to its integration, in payload 1.0."""
        url_id = parts.hostname.split(".")[0]
        if ".lambda-url." in parts.hostname:
            if url_id not in self.url_functions:
                return 403, {}, json.dumps({"Message": "Forbidden"})
            arn = self.url_functions[url_id]
            event = e2e_lean.url_event(method, parts.path, parts.query, headers, body, parts.hostname)
        else:
            target = e2e_lean.http_api_target(self._v2, url_id, method, parts.path or "/")
            if target is None:
                return 404, {}, json.dumps({"message": "Not Found"})
            arn, route_path, params = target
            event = e2e_lean.http_api_event(url_id, method, parts.path, route_path, params, parts.query, headers, body)
        call = self._check(self.functions[arn].invoke(event))
        if call.error is not None:
            return 502, {}, json.dumps({"message": "Internal Server Error"})
        result = call.result
        if int(result.get("statusCode", 0)) >= 500:
            self.failures.append(f"{self.functions[arn].agent}: {method} {parts.path} answered {result}")
        return int(result["statusCode"]), dict(result.get("headers") or {}), result.get("body") or ""

    def _mock(self, integration: dict[str, Any], stage: str) -> tuple[int, dict[str, str], str]:
        """A MOCK integration's 200 (the web console's files: infra/console.py), as API Gateway renders it."""
        from tests.support.apigw_mock import render

        answer = integration["integrationResponses"]["200"]
        overrides, body = render(answer["responseTemplates"]["application/json"], stage)
        static = {
            k.removeprefix("method.response.header."): v.strip("'")
            for k, v in (answer.get("responseParameters") or {}).items()
        }
        return 200, {**static, **overrides}, body

    def _match(self, api_id: str, path: str) -> tuple[dict[str, Any] | None, dict[str, str]]:
        for resource in self._apigw.get_resources(restApiId=api_id, limit=500)["items"]:
            template = re.sub(
                r"\{(\w+)\}", r"(?P<\1>[^/]+)", re.escape(resource["path"]).replace(r"\{", "{").replace(r"\}", "}")
            )
            m = re.fullmatch(template, path.rstrip("/") or "/")
            if m:
                return resource, m.groupdict()
        return None, {}

    def _proxy_event(self, api_id, stage, method, path, resource_path, params, query, headers, body) -> dict[str, Any]:
        return {
            "resource": resource_path,
            "path": "/" + path.lstrip("/").partition("/")[2],
            "httpMethod": method,
            "headers": headers,
            "multiValueHeaders": {k: [v] for k, v in headers.items()},
            "queryStringParameters": dict(parse_qsl(query)) or None,
            "multiValueQueryStringParameters": None,
            "pathParameters": params or None,
            "stageVariables": None,
            "requestContext": {
                "resourcePath": resource_path,
                "httpMethod": method,
                "path": path,
                "stage": stage,
                "accountId": ACCOUNT,
                "apiId": api_id,
                "requestId": str(uuid.uuid4()),
                "requestTimeEpoch": int(time.time() * 1000),
                "protocol": "HTTP/1.1",
                "identity": {
                    "sourceIp": "203.0.113.7",
                    "userAgent": headers.get("User-Agent"),
                    "apiKey": None,
                    "apiKeyId": None,
                },
                "domainName": f"{api_id}.execute-api.{REGION}.amazonaws.com",
            },
            "body": body or None,
            "isBase64Encoded": False,
        }

    def _authorize(self, api_id: str, stage: str, event: dict[str, Any]) -> tuple[int, dict, str] | None:
        (authorizer,) = self._apigw.get_authorizers(restApiId=api_id)["items"]
        header = authorizer["identitySource"].removeprefix("method.request.header.")
        if not any(k.lower() == header.lower() for k in event["headers"]):
            return 401, {}, json.dumps({"error": {"code": "unauthorized", "message": "no " + header}})
        function_arn = re.search(r"functions/(arn:[^/]+)/invocations", authorizer["authorizerUri"]).group(1)
        method_arn = (
            f"arn:aws:execute-api:{REGION}:{ACCOUNT}:{api_id}/{stage}/{event['httpMethod']}"
            f"{event['requestContext']['resourcePath']}"
        )
        auth_event = {
            "type": "REQUEST",
            "methodArn": method_arn,
            "resource": event["resource"],
            "path": event["path"],
            "httpMethod": event["httpMethod"],
            "headers": event["headers"],
            "queryStringParameters": event["queryStringParameters"],
            "pathParameters": event["pathParameters"],
            "stageVariables": None,
            "requestContext": event["requestContext"],
        }
        call = self._check(self.functions[function_arn].invoke(auth_event))
        if call.error is not None:
            return 503, {}, json.dumps({"error": {"code": "service_unavailable", "message": "authorizer failed"}})
        answer = call.result
        allowed = any(
            s["Effect"] == "Allow"
            and any(
                fnmatch.fnmatchcase(method_arn, r)
                for r in (s["Resource"] if isinstance(s["Resource"], list) else [s["Resource"]])
            )
            for s in answer["policyDocument"]["Statement"]
        )
        if not allowed:
            return 403, {}, json.dumps({"error": {"code": "forbidden", "message": "this token is not accepted"}})
        key_value = answer.get("usageIdentifierKey")
        keys = [k for k in self._apigw.get_api_keys(includeValues=True)["items"] if k.get("value") == key_value]
        plans = [
            p
            for k in keys
            if k.get("enabled")
            for p in self._apigw.get_usage_plans(keyId=k["id"])["items"]
            if any(s["apiId"] == api_id and s["stage"] == stage for s in p.get("apiStages", []))
        ]
        if not plans:
            return 403, {}, json.dumps({"error": {"code": "forbidden", "message": "this peer has no usage plan"}})
        event["requestContext"]["authorizer"] = {"principalId": answer["principalId"], **(answer.get("context") or {})}
        event["requestContext"]["identity"].update(apiKey=key_value, apiKeyId=keys[0]["id"])
        return None
