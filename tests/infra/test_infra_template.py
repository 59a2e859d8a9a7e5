"""Properties of the synthesized stacks that matter for correctness and least privilege."""

from __future__ import annotations

import json

import pytest
from aws_cdk.assertions import Match, Template
from template_queries import (
    actions,
    api_routes,
    function,
    function_ids,
    queue_id,
    queue_ids,
    reach,
    referenced_ids,
    resources,
    statement_resources,
    statements_of,
)

from flightdeck import config_file, topology
from flightdeck.settings import RESOURCE_VARIABLES
from infra.functions import API_TIMEOUT_S, worker_handlers

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def orch(orchestrator_tpl) -> Template:
    return Template.from_json(orchestrator_tpl)


# --- state ------------------------------------------------------------------------------


def test_table_keys_ttl_index_billing_pitr(orch: Template) -> None:
    orch.resource_count_is("AWS::DynamoDB::Table", 1)
    orch.has_resource_properties(
        "AWS::DynamoDB::Table",
        {
            "KeySchema": [
                {"AttributeName": topology.PARTITION_KEY, "KeyType": "HASH"},
                {"AttributeName": topology.SORT_KEY, "KeyType": "RANGE"},
            ],
            "AttributeDefinitions": Match.array_with(
                [
                    {"AttributeName": topology.PARTITION_KEY, "AttributeType": "S"},
                    {"AttributeName": topology.SORT_KEY, "AttributeType": "S"},
                    {"AttributeName": topology.DEADLINE_SHARD_ATTRIBUTE, "AttributeType": "S"},
                    {"AttributeName": topology.DEADLINE_AT_ATTRIBUTE, "AttributeType": "N"},
                    {"AttributeName": topology.SESSION_OWNER_ATTRIBUTE, "AttributeType": "S"},
                    {"AttributeName": topology.SESSION_CREATED_AT_ATTRIBUTE, "AttributeType": "N"},
                    {"AttributeName": topology.TASK_UPDATED_AT_ATTRIBUTE, "AttributeType": "N"},
                ]
            ),
            "TimeToLiveSpecification": {"AttributeName": topology.TTL_ATTRIBUTE, "Enabled": True},
            "BillingMode": "PAY_PER_REQUEST",
            "PointInTimeRecoverySpecification": {"PointInTimeRecoveryEnabled": True},
            "GlobalSecondaryIndexes": [
                {
                    "IndexName": topology.DEADLINE_INDEX,
                    "KeySchema": [
                        {"AttributeName": topology.DEADLINE_SHARD_ATTRIBUTE, "KeyType": "HASH"},
                        {"AttributeName": topology.DEADLINE_AT_ATTRIBUTE, "KeyType": "RANGE"},
                    ],
                    # Keys only: a write that keeps a session listed writes nothing to it (ARCHITECTURE §3).
                    "Projection": {"ProjectionType": "KEYS_ONLY"},
                },
                {
                    "IndexName": topology.SESSIONS_INDEX,
                    "KeySchema": [
                        {"AttributeName": topology.SESSION_OWNER_ATTRIBUTE, "KeyType": "HASH"},
                        {"AttributeName": topology.SESSION_CREATED_AT_ATTRIBUTE, "KeyType": "RANGE"},
                    ],
                    "Projection": {"ProjectionType": "KEYS_ONLY"},
                },
                {
                    "IndexName": topology.TASKS_INDEX,
                    "KeySchema": [
                        {"AttributeName": topology.TASK_OWNER_ATTRIBUTE, "KeyType": "HASH"},
                        {"AttributeName": topology.TASK_UPDATED_AT_ATTRIBUTE, "KeyType": "RANGE"},
                    ],
                    "Projection": {"ProjectionType": "KEYS_ONLY"},
                },
            ],
        },
    )


def test_table_retained_unless_retain_data_is_false(orchestrator_tpl, planner_tpl) -> None:
    (orch_table,) = resources(orchestrator_tpl, "AWS::DynamoDB::Table").values()
    (plan_table,) = resources(planner_tpl, "AWS::DynamoDB::Table").values()
    assert orch_table["DeletionPolicy"] == "Retain" and orch_table["UpdateReplacePolicy"] == "Retain"
    assert plan_table["DeletionPolicy"] == "Delete"
    assert "TableName" not in orch_table["Properties"], "a fixed name breaks redeploys next to a retained table"


def test_a_stack_created_with_the_deadline_index_projecting_all_keeps_it(orchestrator_tpl, planner_tpl) -> None:
    # CloudFormation cannot change an index's projection in place: deploy.deadline_index_projection keeps ALL.
    def projection(template: dict) -> str:
        (table,) = resources(template, "AWS::DynamoDB::Table").values()
        [index] = [
            i for i in table["Properties"]["GlobalSecondaryIndexes"] if i["IndexName"] == topology.DEADLINE_INDEX
        ]
        return str(index["Projection"]["ProjectionType"])

    assert (projection(orchestrator_tpl), projection(planner_tpl)) == ("KEYS_ONLY", "ALL")


# --- queues -----------------------------------------------------------------------------


@pytest.mark.parametrize("spec", topology.QUEUES, ids=lambda s: s.key)
def test_queue_and_its_dlq(orchestrator_tpl, spec: topology.QueueSpec) -> None:
    prefix = "flightdeck-orchestrator"
    queue = orchestrator_tpl["Resources"][queue_id(orchestrator_tpl, spec.key)]["Properties"]
    dlq_id = queue_id(orchestrator_tpl, spec.key, dlq=True)
    dlq = orchestrator_tpl["Resources"][dlq_id]["Properties"]
    assert queue["QueueName"] == spec.name(prefix)
    assert dlq["QueueName"] == spec.dlq_name(prefix)
    if spec.fifo:
        assert queue["QueueName"].endswith(".fifo") and dlq["QueueName"].endswith(".fifo")
        assert queue["FifoQueue"] is True and dlq["FifoQueue"] is True
    else:
        assert "FifoQueue" not in queue and "FifoQueue" not in dlq
    assert queue["VisibilityTimeout"] == spec.visibility_timeout_s
    assert queue["RedrivePolicy"] == {
        "deadLetterTargetArn": {"Fn::GetAtt": [dlq_id, "Arn"]},
        "maxReceiveCount": spec.max_receive_count,
    }
    assert "RedrivePolicy" not in dlq
    assert queue["SqsManagedSseEnabled"] is True and dlq["SqsManagedSseEnabled"] is True


def test_every_queue_refuses_plain_http(orchestrator_tpl) -> None:
    covered = set()
    for policy in resources(orchestrator_tpl, "AWS::SQS::QueuePolicy").values():
        for st in policy["Properties"]["PolicyDocument"]["Statement"]:
            if st["Effect"] == "Deny" and st.get("Condition") == {"Bool": {"aws:SecureTransport": "false"}}:
                covered |= referenced_ids(policy["Properties"]["Queues"])
    assert covered == set(queue_ids(orchestrator_tpl))
    assert len(covered) == 2 * len(topology.QUEUES)


def test_an_alarm_on_every_dlq(orchestrator_tpl) -> None:
    alarms = [
        a
        for a in resources(orchestrator_tpl, "AWS::CloudWatch::Alarm").values()
        if a["Properties"]["AlarmName"].endswith("-dlq-not-empty")
    ]
    watched = set()
    for alarm in alarms:
        p = alarm["Properties"]
        assert p["MetricName"] == "ApproximateNumberOfMessagesVisible"
        assert p["Namespace"] == "AWS/SQS"
        assert p["ComparisonOperator"] == "GreaterThanThreshold" and p["Threshold"] == 0
        assert p["TreatMissingData"] == "notBreaching"
        (dimension,) = p["Dimensions"]
        assert dimension["Name"] == "QueueName"
        watched |= referenced_ids(dimension["Value"])
    dlqs = {lid for lid, (_, dlq) in queue_ids(orchestrator_tpl).items() if dlq}
    assert watched == dlqs and len(dlqs) == len(topology.QUEUES)


# --- alarm notifications ---------------------------------------------------------------


ACCOUNT = {"orchestrator": {"Ref": "AWS::AccountId"}, "planner": "123456789012"}  # planner: deploy.account


def _from_our_alarms(statement: dict, agent: str) -> bool:
    """Conditions admitting only this account's alarms named flightdeck-<agent>-*."""
    condition = statement["Condition"]
    arn = condition["ArnLike"]["aws:SourceArn"]
    arn = arn if isinstance(arn, str) else arn["Fn::Join"][1][-1]
    return condition["StringEquals"] == {"aws:SourceAccount": ACCOUNT[agent]} and arn.endswith(
        f":alarm:flightdeck-{agent}-*"
    )


def _alarm_topic(template) -> tuple[str, dict]:
    (lid,) = resources(template, "AWS::SNS::Topic")
    return lid, template["Resources"][lid]["Properties"]


@pytest.mark.parametrize("agent", ["orchestrator", "planner"])
def test_alarm_topic_is_encrypted_with_a_rotated_key_cloudwatch_may_use(synth, agent: str) -> None:
    template = synth.templates[f"Flightdeck-{agent}"]
    _, topic = _alarm_topic(template)
    assert topic["TopicName"] == f"flightdeck-{agent}-alarms"
    (key_id,) = referenced_ids(topic["KmsMasterKeyId"])
    key = template["Resources"][key_id]
    assert key["Type"] == "AWS::KMS::Key" and key["Properties"]["EnableKeyRotation"] is True
    # the AWS managed alias/aws/sns would not do: CloudWatch cannot be allowed to use it
    (grant,) = [
        st
        for st in key["Properties"]["KeyPolicy"]["Statement"]
        if st.get("Principal") == {"Service": "cloudwatch.amazonaws.com"}
    ]
    assert grant["Effect"] == "Allow"
    assert sorted(actions(grant)) == ["kms:Decrypt", "kms:GenerateDataKey*"]
    assert _from_our_alarms(grant, agent), grant["Condition"]


@pytest.mark.parametrize("agent", ["orchestrator", "planner"])
def test_alarm_topic_policy_refuses_plain_http_and_admits_only_our_alarms(synth, agent: str) -> None:
    template = synth.templates[f"Flightdeck-{agent}"]
    topic_id, _ = _alarm_topic(template)
    (policy,) = resources(template, "AWS::SNS::TopicPolicy").values()
    assert policy["Properties"]["Topics"] == [{"Ref": topic_id}]
    statements = policy["Properties"]["PolicyDocument"]["Statement"]
    deny = [st for st in statements if st["Effect"] == "Deny"]
    assert len(deny) == 1
    assert deny[0]["Condition"] == {"Bool": {"aws:SecureTransport": "false"}} and deny[0]["Principal"] == "*"
    allow = [st for st in statements if st["Effect"] == "Allow"]
    assert len(allow) == 1
    assert allow[0]["Principal"] == {"Service": "cloudwatch.amazonaws.com"} and actions(allow[0]) == ["sns:Publish"]
    assert allow[0]["Resource"] == {"Ref": topic_id}
    assert _from_our_alarms(allow[0], agent), allow[0]["Condition"]


@pytest.mark.parametrize("agent", ["orchestrator", "planner"])
def test_every_dlq_alarm_notifies_the_topic(synth, agent: str) -> None:
    template = synth.templates[f"Flightdeck-{agent}"]
    topic_id, _ = _alarm_topic(template)
    alarms = resources(template, "AWS::CloudWatch::Alarm").values()
    names = set()
    for alarm in alarms:
        p = alarm["Properties"]
        names.add(p["AlarmName"])
        assert p["AlarmActions"] == [{"Ref": topic_id}], p["AlarmName"]
        assert p["OKActions"] == [{"Ref": topic_id}], p["AlarmName"]  # "the DLQ is empty again"
        assert p.get("ActionsEnabled", True) is True
    assert names == {f"flightdeck-{agent}-{spec.key}-dlq-not-empty" for spec in topology.QUEUES} | {
        f"flightdeck-{agent}-sessions-overdue"
    } | {f"flightdeck-{agent}-{spec.key}-oldest-message-age" for spec in topology.QUEUES if spec.age_alarm_s}


def test_no_alarm_emails_no_subscriptions(orchestrator_tpl) -> None:
    assert resources(orchestrator_tpl, "AWS::SNS::Subscription") == {}


@pytest.mark.parametrize("agent", ["orchestrator", "planner"])
def test_alarm_topic_arn_output(synth, agent: str) -> None:
    template = synth.templates[f"Flightdeck-{agent}"]
    topic_id, _ = _alarm_topic(template)
    assert template["Outputs"]["AlarmTopicArn"]["Value"] == {"Ref": topic_id}


def test_visibility_timeout_is_six_times_the_consumer_timeout(orchestrator_tpl) -> None:
    for spec in topology.QUEUES:
        timeout = function(orchestrator_tpl, spec.handler)["Timeout"]
        assert timeout == topology.WORKER_TIMEOUT_S
        assert spec.visibility_timeout_s >= 6 * timeout


# --- functions --------------------------------------------------------------------------


def test_one_function_per_handler(orchestrator_tpl) -> None:
    assert set(function_ids(orchestrator_tpl)) == set(topology.HANDLERS)


@pytest.mark.parametrize("handler", topology.HANDLERS)
def test_function_runtime_architecture_code_and_logs(orchestrator_tpl, handler: str) -> None:
    props = function(orchestrator_tpl, handler)
    streams = handler in topology.STREAMING_HANDLERS
    # A streaming function runs the web adapter's start script (tests/infra/test_infra_streaming.py).
    assert props["Handler"] == ("flightdeck/handlers/web.sh" if streams else f"flightdeck.handlers.{handler}.handler")
    assert props["Runtime"] in ("python3.12", "python3.13")
    assert props["Architectures"] == ["arm64"]
    # The stream's owed-think starter only hands thinks on (topology.STREAM_CONSUMER); the think 256 MB (its
    # measured peak: docs/PERFORMANCE.md); every other function 512 MB.
    memory = {topology.STREAM_CONSUMER.handler: topology.STREAM_CONSUMER.memory_mb, topology.THINK_HANDLER: 256}
    assert props["MemorySize"] == memory.get(handler, 512)
    assert props["Timeout"] == (
        topology.STREAM_TIMEOUT_S
        if streams
        else topology.WORKER_TIMEOUT_S
        if handler in worker_handlers()
        else API_TIMEOUT_S
    )
    assert props["TracingConfig"] == {"Mode": "Active"}
    # its own log group, with a retention
    (log_group,) = referenced_ids(props["LoggingConfig"]["LogGroup"])
    assert orchestrator_tpl["Resources"][log_group]["Properties"]["RetentionInDays"] == 30


def test_one_code_asset_for_all_functions(orchestrator_tpl) -> None:
    keys = {
        json.dumps(f["Properties"]["Code"], sort_keys=True)
        for f in resources(orchestrator_tpl, "AWS::Lambda::Function").values()
    }
    assert len(keys) == 1


def test_memory_from_deploy_section(planner_tpl) -> None:
    # The think function's own (think_memory_mb: it waits on the model); the owed-think starter's fixed (one
    # invoke per record); every other function's memory_mb.
    assert function(planner_tpl, topology.THINK_HANDLER)["MemorySize"] == 256
    starter = topology.STREAM_CONSUMER
    assert function(planner_tpl, starter.handler)["MemorySize"] == starter.memory_mb
    fixed = {topology.THINK_HANDLER, starter.handler}
    others = {h: function(planner_tpl, h)["MemorySize"] for h in topology.HANDLERS if h not in fixed}
    assert set(others.values()) == {1024}, others


def test_the_think_function_has_256_mb_unless_the_file_says_otherwise(orchestrator_tpl) -> None:
    # issue 37: a think peaks at about 100 MB resident and waits on the model, billed by GB-s.
    assert function(orchestrator_tpl, topology.THINK_HANDLER)["MemorySize"] == 256
    assert function(orchestrator_tpl, "chat_ingest")["MemorySize"] == 512


def test_no_managed_policies_on_function_roles(orchestrator_tpl) -> None:
    for handler in topology.HANDLERS:
        role_id = function(orchestrator_tpl, handler)["Role"]["Fn::GetAtt"][0]
        assert "ManagedPolicyArns" not in orchestrator_tpl["Resources"][role_id]["Properties"]


@pytest.mark.parametrize("spec", topology.QUEUES, ids=lambda s: s.key)
def test_event_source_mapping(orchestrator_tpl, spec: topology.QueueSpec) -> None:
    fn_id = function_ids(orchestrator_tpl)[spec.handler]
    mappings = [
        m["Properties"]
        for m in resources(orchestrator_tpl, "AWS::Lambda::EventSourceMapping").values()
        if m["Properties"]["EventSourceArn"] == {"Fn::GetAtt": [queue_id(orchestrator_tpl, spec.key), "Arn"]}
    ]
    assert len(mappings) == 1
    (m,) = mappings
    assert m["FunctionName"] == {"Ref": fn_id}
    assert m["BatchSize"] == spec.batch_size
    assert m["FunctionResponseTypes"] == ["ReportBatchItemFailures"]


def test_no_other_event_source_mappings(orchestrator_tpl) -> None:
    assert len(resources(orchestrator_tpl, "AWS::Lambda::EventSourceMapping")) == len(topology.QUEUES)


# --- thinks: asynchronous invokes of the turn worker ------------------------------------


def test_a_think_that_fails_is_retried_by_lambda_then_goes_to_the_turns_queue(orchestrator_tpl) -> None:
    (config,) = [c["Properties"] for c in resources(orchestrator_tpl, "AWS::Lambda::EventInvokeConfig").values()]
    assert config["FunctionName"] == {"Ref": function_ids(orchestrator_tpl)["turn_worker"]}
    assert config["Qualifier"] == "$LATEST"
    assert config["MaximumRetryAttempts"] == 2  # Lambda runs a failed think twice more
    assert config["MaximumEventAgeInSeconds"] == 3600
    # The delayed-retry queue, whose consumer (the turn worker) hands the think to the sweep.
    turns_queue = queue_id(orchestrator_tpl, "turns")
    assert config["DestinationConfig"] == {"OnFailure": {"Destination": {"Fn::GetAtt": [turns_queue, "Arn"]}}}
    # The turns DLQ keeps its alarm, which names the invocation records its queue could not hand over.
    (alarm,) = [
        a["Properties"]
        for a in resources(orchestrator_tpl, "AWS::CloudWatch::Alarm").values()
        if a["Properties"]["AlarmName"] == "flightdeck-orchestrator-turns-dlq-not-empty"
    ]
    assert "asynchronous invocations of turn_worker" in alarm["AlarmDescription"]
    # The turns queue itself is the delayed retry path: a standard queue (FIFO has no per-message delay).
    turns = orchestrator_tpl["Resources"][queue_id(orchestrator_tpl, "turns")]["Properties"]
    assert turns["QueueName"] == "flightdeck-orchestrator-turns" and "FifoQueue" not in turns


def test_only_the_turn_worker_has_a_fixed_name_and_no_function_references_itself(orchestrator_tpl) -> None:
    names = {h: function(orchestrator_tpl, h).get("FunctionName") for h in topology.HANDLERS}
    assert {h: n for h, n in names.items() if n} == {"turn_worker": "flightdeck-orchestrator-turn-worker"}
    # The invoke permission names it by an ARN built from the name: no Ref/GetAtt of any function.
    fn_ids = set(function_ids(orchestrator_tpl).values())
    for handler in topology.HANDLERS:
        for st in statements_of(orchestrator_tpl, handler):
            if "lambda:InvokeFunction" in actions(st):
                assert not set().union(*(referenced_ids(r) for r in statement_resources(st))) & fn_ids


# --- environment ------------------------------------------------------------------------

EXPECTED_VARIABLES = {
    "AGENT_NAME", "AGENT_DESCRIPTION", "AGENT_CONFIG", "STATE_TABLE", "TURN_WORKER_FUNCTION", "TURNS_QUEUE_URL",
    "DISPATCH_QUEUE_URL",
    "DELIVERY_QUEUE_URL", "DELIVERY_DLQ_URL", "TIMERS_QUEUE_URL", "TOOL_CALLBACK_SECRET_ARN", "PEER_TOKENS_SECRET_ARN",
    "ALLOWED_HOST_MAPPING", "DISCOVERED_PEERS", "PEER_URL_PARAMETER_PREFIX", "POWERTOOLS_SERVICE_NAME",
    "POWERTOOLS_METRICS_NAMESPACE", "PUBLIC_BASE_URL",
}  # fmt: skip


def test_environment_of_every_function(orchestrator_tpl) -> None:
    deployment = config_file.load(config_file.DEFAULT_CONFIG)
    spec = deployment.agents["orchestrator"]
    # The same settings everywhere; the streaming functions add their web adapter's own variables.
    from infra.functions import WEB_ADAPTER_ENVIRONMENT

    envs = [
        {k: v for k, v in f["Properties"]["Environment"]["Variables"].items() if k not in WEB_ADAPTER_ENVIRONMENT}
        for f in resources(orchestrator_tpl, "AWS::Lambda::Function").values()
    ]
    assert all(env == envs[0] for env in envs)
    env = envs[0]
    assert EXPECTED_VARIABLES <= set(env)
    for name, value in deployment.environment("orchestrator").items():
        assert env[name] == value
    assert env["AGENT_NAME"] == "orchestrator"
    assert env["AGENT_DESCRIPTION"] == spec.description
    assert json.loads(env["AGENT_CONFIG"]) == json.loads(spec.agent_config_json())
    assert env["POWERTOOLS_SERVICE_NAME"] == "orchestrator"
    assert env["POWERTOOLS_METRICS_NAMESPACE"] == "Flightdeck"
    assert env["STATE_TABLE"] == {"Ref": next(iter(resources(orchestrator_tpl, "AWS::DynamoDB::Table")))}
    # A plain name (no reference: the turn worker's own environment names it), the turn worker's.
    assert env["TURN_WORKER_FUNCTION"] == "flightdeck-orchestrator-turn-worker"
    assert function(orchestrator_tpl, "turn_worker")["FunctionName"] == env["TURN_WORKER_FUNCTION"]
    for key in ("turns", "dispatch", "delivery", "timers"):
        assert env[f"{key.upper()}_QUEUE_URL"] == {"Ref": queue_id(orchestrator_tpl, key)}
    assert env["DELIVERY_DLQ_URL"] == {"Ref": queue_id(orchestrator_tpl, "delivery", dlq=True)}
    assert env["TOOL_CALLBACK_SECRET_ARN"] == {"Ref": secret_id(orchestrator_tpl, "CallbackSecret")}
    assert env["PEER_TOKENS_SECRET_ARN"] == {"Ref": secret_id(orchestrator_tpl, "PeerTokens")}
    assert env["INBOUND_AUTH"] == "required"
    # the worker is an agent of the same file: its URL is found at run time, not configured
    assert env["ALLOWED_HOST_MAPPING"] == ""
    assert env["DISCOVERED_PEERS"] == "worker"
    assert env["PEER_URL_PARAMETER_PREFIX"] == "/flightdeck/two-agents"


def test_every_function_names_the_deployed_api_as_its_public_base_url(orchestrator_tpl) -> None:
    """The card's url (and the A2A push URL) come from PUBLIC_BASE_URL, never a request's Host header: the stage
    URL, built from the RestApi id so the functions need not refer to the stage (which depends on them)."""
    (api_id,) = resources(orchestrator_tpl, "AWS::ApiGateway::RestApi")
    ((stage_id, stage),) = resources(orchestrator_tpl, "AWS::ApiGateway::Stage").items()
    url = {
        "Fn::Join": [
            "",
            [
                "https://",
                {"Ref": api_id},
                ".execute-api.",
                {"Ref": "AWS::Region"},
                ".",
                {"Ref": "AWS::URLSuffix"},
                "/" + stage["Properties"]["StageName"],
            ],
        ]
    }
    for f in resources(orchestrator_tpl, "AWS::Lambda::Function").values():
        assert f["Properties"]["Environment"]["Variables"]["PUBLIC_BASE_URL"] == url
    # The same URL the stack outputs (that one refers to the stage), without its trailing slash.
    output = orchestrator_tpl["Outputs"]["ApiUrl"]["Value"]["Fn::Join"][1]
    assert output[:6] == url["Fn::Join"][1][:6] and output[6:] == ["/", {"Ref": stage_id}, "/"]


def test_a_public_base_url_the_file_sets_wins(planner_tpl) -> None:
    for handler in topology.HANDLERS:
        env = function(planner_tpl, handler)["Environment"]["Variables"]
        assert env["PUBLIC_BASE_URL"] == "https://planner.example.com/agent"


# --- one-pass deploy: the agents of a file find each other at run time --------------------


def test_each_stack_publishes_its_url_in_a_parameter_named_by_deployment_and_agent(synth) -> None:
    for agent in ("orchestrator", "worker"):
        template = synth.templates[f"Flightdeck-{agent}"]
        (parameter,) = resources(template, "AWS::SSM::Parameter").values()
        props = parameter["Properties"]
        assert props["Name"] == f"/flightdeck/two-agents/{agent}/api-url"
        assert props["Type"] == "String"
        assert props["Value"] == template["Outputs"]["ApiUrl"]["Value"]  # the stage URL, as the output says
        assert template["Outputs"]["ApiUrlParameterName"]["Value"] == {
            "Ref": next(iter(resources(template, "AWS::SSM::Parameter")))
        }


def test_two_agents_are_wired_in_one_pass(synth) -> None:
    """Both stacks of one synthesis: each allows the other by name and may read exactly the parameter the
    other publishes; neither references the other (no export, no import), so there is no cycle and either
    deploys first."""
    published = {
        agent: next(iter(resources(synth.templates[f"Flightdeck-{agent}"], "AWS::SSM::Parameter").values()))[
            "Properties"
        ]["Name"]
        for agent in ("orchestrator", "worker")
    }
    for agent, peer in (("orchestrator", "worker"), ("worker", "orchestrator")):
        template = synth.templates[f"Flightdeck-{agent}"]
        env = function(template, "dispatch_worker")["Environment"]["Variables"]
        assert env["DISCOVERED_PEERS"].split(",") == [peer]
        assert topology.peer_url_parameter(env["PEER_URL_PARAMETER_PREFIX"], peer) == published[peer]
        readable = set().union(*(reach(template, h).peer_urls for h in topology.HANDLERS))
        assert readable == {published[peer]}
        text = json.dumps(template)
        assert "Fn::ImportValue" not in text
        assert not any("Export" in output for output in template["Outputs"].values())
    messages = [t for name in ("Flightdeck-orchestrator", "Flightdeck-worker") for _, _, t in synth.messages[name]]
    assert not any("URL" in t and "unknown" in t for t in messages), messages


def test_a_configured_url_wins_and_a_name_outside_the_file_is_a_warning(synth, planner_tpl) -> None:
    env = function(planner_tpl, "dispatch_worker")["Environment"]["Variables"]
    assert "helper:" in env["ALLOWED_HOST_MAPPING"]  # in the file, but its deploy.peer_urls entry wins
    assert env["DISCOVERED_PEERS"] == ""
    assert not any(reach(planner_tpl, h).peer_urls for h in topology.HANDLERS)  # nothing to look up
    planner_warnings = [text for level, _, text in synth.messages["Flightdeck-planner"] if level == "warning"]
    assert any("'ghost'" in w and "allowed_hosts" in w for w in planner_warnings), planner_warnings
    assert not any("'helper'" in w for w in planner_warnings)


def test_known_peers_and_explicit_hosts_form_the_allowlist(planner_tpl) -> None:
    env = function(planner_tpl, "dispatch_worker")["Environment"]["Variables"]
    assert env["ALLOWED_HOST_MAPPING"] == (
        "audit:https://audit.example.com/base,helper:https://abc123.execute-api.eu-west-1.amazonaws.com/prod/"
    )


def test_stack_values_win_and_local_secrets_never_reach_lambda(synth, planner_tpl) -> None:
    env = function(planner_tpl, "callback")["Environment"]["Variables"]
    assert env["ASYNC_TOOL_TIMEOUT_MS"] == "45000"  # agent env over defaults
    assert env["STATE_TABLE"] != "not-this-one"
    assert "TOOL_CALLBACK_SECRET" not in env
    assert "PEER_TOKENS" not in env and env["PEER_TOKENS_SECRET_ARN"] == {"Ref": secret_id(planner_tpl, "PeerTokens")}
    for name, template in synth.templates.items():
        text = json.dumps(template)
        assert "local-only" not in text, f"a local-only secret leaked into {name}"


def secret_id(template, prefix: str) -> str:
    (lid,) = [lid for lid in resources(template, "AWS::SecretsManager::Secret") if lid.startswith(prefix)]
    return lid


# --- permissions ------------------------------------------------------------------------

# Written from the issue, independently of infra/access.py.
# peer_urls: the SSM parameter the worker's stack publishes its URL in, read where a service name is
# resolved (dispatch, delivery, a reply route, A2A push and poll URLs).
WORKER_URL = {"/flightdeck/two-agents/worker/api-url"}
# Every think starts as an asynchronous invoke of the turn worker, by its fixed name.
TURN_WORKER = {"flightdeck-orchestrator-turn-worker"}
EXPECTED_REACH = {
    # + dispatch, peer_tokens: POST /api/sessions/{id}/cancel cancels the session's own delegations at
    # their peers (issue 14, point 10), a retry going to the dispatch queue.
    "chat_ingest": dict(
        table=True, send={"dispatch", "thinks"}, invoke=TURN_WORKER, peer_tokens=True, peer_urls=WORKER_URL
    ),
    "callback": dict(table=True, send={"thinks"}, invoke=TURN_WORKER, secret=True),
    "agent_card": dict(),
    # + invoke, beyond the list: local tools complete a turn inside the turn worker
    # (domain.turn_loop -> aggregation.record_and_advance -> thinks.start), so it starts thinks in itself.
    # + turns: a throttled model's think waits out its backoff there (the retry path), which the turn
    # worker also consumes, and its asynchronous invocations' on-failure destination (it hands those to the sweep).
    # + secret, peer_tokens, peer_urls, the delivery DLQ: it dispatches and delivers inline
    # (domain.outbox), the queues being the retry path.
    "turn_worker": dict(
        consume={"turns", "thinks"},
        table=True,
        send={"dispatch", "delivery", "timers", "turns", "thinks"},
        invoke=TURN_WORKER,
        secret=True,
        peer_tokens=True,
        peer_urls=WORKER_URL,
        send_dlq={"delivery"},
    ),
    # + timers: an A2A peer that does not push is polled on the timers queue.
    # peer_tokens: it presents our bearer token to the peer it dispatches to.
    "dispatch_worker": dict(
        consume={"dispatch"},
        table=True,
        secret=True,
        peer_tokens=True,
        send={"timers", "thinks"},
        invoke=TURN_WORKER,
        peer_urls=WORKER_URL,
    ),
    "delivery_worker": dict(consume={"delivery"}, send_dlq={"delivery"}, peer_urls=WORKER_URL),
    # peer_tokens, beyond the "only dispatch_worker": A2A polls (tasks/get to the peer) run here.
    # + dispatch: the delegations a deadline gives up on are canceled at their peers (a retry on dispatch).
    "deadline_timer": dict(
        consume={"timers"},
        table=True,
        send={"timers", "dispatch", "thinks"},
        invoke=TURN_WORKER,
        peer_tokens=True,
        peer_urls=WORKER_URL,
    ),
    # + dispatch, peer_tokens, peer_urls: as the timer, it cancels the delegations it times out.
    "sweeper": dict(
        table=True, send={"dispatch", "thinks"}, invoke=TURN_WORKER, peer_tokens=True, peer_urls=WORKER_URL
    ),
    # A2A JSON-RPC: tasks start turns; a canceled task's push notifications go to delivery, its
    # delegations are canceled at their peers (peer_tokens; a retry on dispatch).
    "a2a": dict(
        table=True, send={"delivery", "dispatch", "thinks"}, invoke=TURN_WORKER, peer_tokens=True, peer_urls=WORKER_URL
    ),
    # API Gateway's authorizer of the peer routes: one GetItem (the peer registry entry) on the table
    # itself (not its index), nothing else.
    "peer_authorizer": dict(read_peers=True),
    # GET /api/sessions/{id}/events: the caller's registry entry and the session, read; its one write, the
    # session's watch mark (the live relay: the keys, `until` and the TTL, nothing returned); nothing sent.
    "session_events": dict(read_table=True, watch_sessions=True),
    # The owed-think starter (THINK_START = "stream"; the example does not set it: no stream, no mapping): it
    # starts thinks, and puts a mark whose start failed into the deadline index (that mark's attributes alone).
    "owed_thinks": dict(invoke=TURN_WORKER, defer_owed=True),
}


@pytest.mark.parametrize("handler", sorted(EXPECTED_REACH))
def test_least_privilege(orchestrator_tpl, handler: str) -> None:
    expected = {
        "send": set(),
        "send_dlq": set(),
        "consume": set(),
        "table": False,
        "read_table": False,
        "read_peers": False,
        "watch_sessions": False,
        "defer_owed": False,
        "read_stream": False,
        "invoke": set(),
        "secret": False,
        "peer_tokens": False,
        "bedrock": False,
        "peer_urls": set(),
    }
    expected.update(EXPECTED_REACH[handler])
    got = reach(orchestrator_tpl, handler)
    assert got.other == set()
    assert {k: getattr(got, k) for k in expected} == expected


def test_every_handler_has_expected_permissions_listed() -> None:
    assert set(EXPECTED_REACH) == set(topology.HANDLERS)


def test_agent_card_touches_no_data(orchestrator_tpl) -> None:
    for st in statements_of(orchestrator_tpl, "agent_card"):
        for act in actions(st):
            assert act.split(":")[0] in ("logs", "xray"), act


def test_peer_authorizer_only_gets_items_from_the_table(orchestrator_tpl, planner_tpl) -> None:
    for template in (orchestrator_tpl, planner_tpl):
        table = next(iter(resources(template, "AWS::DynamoDB::Table")))
        statements = statements_of(template, "peer_authorizer")
        data = [st for st in statements if not {a.split(":")[0] for a in actions(st)} <= {"logs", "xray"}]
        # no index, no other action: a GetItem reads the table alone
        assert data == [{"Action": "dynamodb:GetItem", "Effect": "Allow", "Resource": {"Fn::GetAtt": [table, "Arn"]}}]


def test_callback_cannot_send_to_dispatch(orchestrator_tpl) -> None:
    dispatch = queue_id(orchestrator_tpl, "dispatch")
    for st in statements_of(orchestrator_tpl, "callback"):
        if any(a.startswith("sqs:") for a in actions(st)):
            assert dispatch not in set().union(*(referenced_ids(r) for r in statement_resources(st)))


def test_secret_readable_only_by_callback_and_dispatch(orchestrator_tpl) -> None:
    readers = {h for h in topology.HANDLERS if reach(orchestrator_tpl, h).secret}
    assert readers == {"callback", "dispatch_worker", "turn_worker"}


def test_peer_tokens_readable_only_by_the_functions_that_call_peers(orchestrator_tpl, planner_tpl) -> None:
    for template in (orchestrator_tpl, planner_tpl):
        readers = {h for h in topology.HANDLERS if reach(template, h).peer_tokens}
        # + the functions that cancel delegations at their peers (the cancel route, A2A tasks/cancel, the sweep).
        assert readers == {"dispatch_worker", "deadline_timer", "turn_worker", "chat_ingest", "a2a", "sweeper"}


def test_peer_tokens_secret_starts_empty_and_is_an_output(orch: Template, orchestrator_tpl) -> None:
    orch.has_resource_properties("AWS::SecretsManager::Secret", {"SecretString": "{}"})
    assert orchestrator_tpl["Outputs"]["PeerTokensSecretArn"]["Value"] == {
        "Ref": secret_id(orchestrator_tpl, "PeerTokens")
    }


def test_peer_tokens_of_the_file_never_reach_aws(synth) -> None:
    # [agents.NAME.peers] and peer_tokens are LOCAL ONLY: neither in AGENT_CONFIG nor anywhere in a template.
    for name, template in synth.templates.items():
        text = json.dumps(template)
        assert "fdp_" not in text and "LOCAL-ONLY" not in text, f"a local-only peer token leaked into {name}"


def test_wildcard_resource_only_for_xray(synth) -> None:
    for name, template in synth.templates.items():
        for lid, policy in resources(template, "AWS::IAM::Policy").items():
            for st in policy["Properties"]["PolicyDocument"]["Statement"]:
                if "*" in statement_resources(st):
                    assert set(actions(st)) <= {"xray:PutTraceSegments", "xray:PutTelemetryRecords", "xray:PutSpans"}, (
                        name,
                        lid,
                        st,
                    )


def test_bedrock_only_for_a_bedrock_agent(orchestrator_tpl, planner_tpl) -> None:
    assert not any(reach(orchestrator_tpl, h).bedrock for h in topology.HANDLERS)
    assert {h for h in topology.HANDLERS if reach(planner_tpl, h).bedrock} == {"turn_worker"}
    (st,) = [s for s in statements_of(planner_tpl, "turn_worker") if any(a.startswith("bedrock:") for a in actions(s))]
    # ConverseStream too: a think a stream watches streams (flightdeck.domain.live).
    assert actions(st) == ["bedrock:InvokeModel", "bedrock:InvokeModelWithResponseStream"]
    text = json.dumps(statement_resources(st))
    assert ":inference-profile/us.anthropic.claude-3-5-haiku-20241022-v1:0" in text
    assert ":bedrock:*::foundation-model/anthropic.claude-3-5-haiku-20241022-v1:0" in text


# --- schedule, secret -------------------------------------------------------------------


def test_sweep_schedule(orchestrator_tpl, planner_tpl) -> None:
    for template, rate in ((orchestrator_tpl, "rate(1 minute)"), (planner_tpl, "rate(3 minutes)")):
        (rule,) = resources(template, "AWS::Events::Rule").values()
        assert rule["Properties"]["ScheduleExpression"] == rate
        (target,) = rule["Properties"]["Targets"]
        assert target["Arn"] == {"Fn::GetAtt": [function_ids(template)["sweeper"], "Arn"]}


def test_callback_secret_is_generated(orch: Template) -> None:
    orch.resource_count_is("AWS::SecretsManager::Secret", 2)  # + the peer tokens
    orch.has_resource_properties(
        "AWS::SecretsManager::Secret",
        {"GenerateSecretString": {"ExcludePunctuation": True, "PasswordLength": 64, "IncludeSpace": False}},
    )


# --- API --------------------------------------------------------------------------------


def test_a_method_for_every_route(orchestrator_tpl) -> None:
    assert api_routes(orchestrator_tpl) == {(r.method, r.path, r.handler) for r in topology.ROUTES}


def test_stage_throttling_logging_and_tracing(orchestrator_tpl, planner_tpl) -> None:
    for template, (rate, burst) in ((orchestrator_tpl, (50, 100)), (planner_tpl, (7, 9))):
        (stage,) = resources(template, "AWS::ApiGateway::Stage").values()
        p = stage["Properties"]
        (settings,) = p["MethodSettings"]
        assert settings["HttpMethod"] == "*" and settings["ResourcePath"] == "/*"
        assert (settings["ThrottlingRateLimit"], settings["ThrottlingBurstLimit"]) == (rate, burst)
        assert settings["LoggingLevel"] == "ERROR" and settings["DataTraceEnabled"] is False
        assert p["TracingEnabled"] is True
        (log_group,) = referenced_ids(p["AccessLogSetting"]["DestinationArn"])
        assert template["Resources"][log_group]["Type"] == "AWS::Logs::LogGroup"
        assert "$context.status" in p["AccessLogSetting"]["Format"]
        # Calls API Gateway answers itself (401, 429, disabled key) are recorded with who and why.
        for field in ("$context.authorizer.principalId", "$context.identity.apiKeyId", "$context.error.responseType"):
            assert field in p["AccessLogSetting"]["Format"]


# The JSON-RPC routes whose body the function parses itself.
RAW_JSON_RPC = ("a2a_POST_a2a", "a2a_POST_mcp")


def test_request_validation(orchestrator_tpl) -> None:
    (validator_id,) = resources(orchestrator_tpl, "AWS::ApiGateway::RequestValidator")
    validator = orchestrator_tpl["Resources"][validator_id]["Properties"]
    assert validator["ValidateRequestBody"] is True and validator["ValidateRequestParameters"] is True
    models = resources(orchestrator_tpl, "AWS::ApiGateway::Model")
    methods = [m["Properties"] for m in resources(orchestrator_tpl, "AWS::ApiGateway::Method").values()]
    for p in methods:
        assert p["RequestValidatorId"] == {"Ref": validator_id}
        if p["HttpMethod"] == "POST" and p.get("OperationName") not in RAW_JSON_RPC:
            # JSON syntax only: any JSON value passes, the functions check the shape (422)
            (model,) = referenced_ids(p["RequestModels"]["application/json"])
            schema = models[model]["Properties"]["Schema"]
            assert set(schema["type"]) == {"object", "array", "string", "number", "boolean", "null"}
    assert any(p.get("RequestParameters") == {"method.request.path.session_id": True} for p in methods)
    # JSON-RPC answers malformed JSON itself (-32700; MCP's own errors): no gateway body check on POST /a2a
    # and POST /mcp.
    raw = [p for p in methods if p.get("OperationName") in RAW_JSON_RPC]
    assert len(raw) == len(RAW_JSON_RPC) and all("RequestModels" not in p for p in raw)


def test_gateway_errors_use_the_functions_error_shape(orchestrator_tpl) -> None:
    responses = {
        r["Properties"]["ResponseType"]: r["Properties"]
        for r in resources(orchestrator_tpl, "AWS::ApiGateway::GatewayResponse").values()
    }
    expected = {
        "BAD_REQUEST_BODY": ("400", "malformed_json"),
        "REQUEST_TOO_LARGE": ("413", "payload_too_large"),
        "THROTTLED": ("429", "throttled"),
        "MISSING_AUTHENTICATION_TOKEN": ("404", "not_found"),
    }
    for kind, (status, code) in expected.items():
        assert responses[kind]["StatusCode"] == status
        assert f'{{"error":{{"code":"{code}","message":' in responses[kind]["ResponseTemplates"]["application/json"]
    assert {"DEFAULT_4XX", "DEFAULT_5XX"} <= set(responses)


def _error_body(code: str, message: str) -> dict:
    return {"application/json": json.dumps({"error": {"code": code, "message": message}}, separators=(",", ":"))}


# The peer authorizer's and the usage plans' refusals, answered as the functions answer them.
EXPECTED_AUTH_RESPONSES = {
    "UNAUTHORIZED": ("401", "unauthorized", "a peer bearer token is required (Authorization: Bearer <token>)",
                     {"gatewayresponse.header.WWW-Authenticate": "'Bearer realm=\"flightdeck\"'"}),
    "ACCESS_DENIED": ("403", "forbidden", "this token is not accepted", None),
    "INVALID_API_KEY": ("403", "forbidden", "this peer has no usage plan on this agent", None),
    "QUOTA_EXCEEDED": ("429", "quota_exceeded", "this peer's daily quota is used up ([agents.NAME.gateway] "
                       "peer_quota_per_day; peer_limits.PEER.quota_per_day for one peer)", None),
    # A throttle names the keys that set the limit, and when to come back.
    "THROTTLED": ("429", "throttled", "too many requests: over this caller's usage plan ([agents.NAME.gateway] "
                  "peer_rate_limit and peer_burst_limit; peer_limits.PEER for one peer) or the stage's throttle "
                  "([agents.NAME.deploy] throttle_rate); retry later", {"gatewayresponse.header.Retry-After": "'1'"}),
    "AUTHORIZER_FAILURE": ("503", "service_unavailable", "a dependency is unavailable; retry later",
                           {"gatewayresponse.header.Retry-After": "'1'"}),
    "AUTHORIZER_CONFIGURATION_ERROR": ("503", "service_unavailable", "a dependency is unavailable; retry later",
                                       {"gatewayresponse.header.Retry-After": "'1'"}),
}  # fmt: skip


@pytest.mark.parametrize("kind", sorted(EXPECTED_AUTH_RESPONSES))
def test_authorizer_and_usage_plan_refusals(orchestrator_tpl, kind: str) -> None:
    responses = [
        r["Properties"]
        for r in resources(orchestrator_tpl, "AWS::ApiGateway::GatewayResponse").values()
        if r["Properties"]["ResponseType"] == kind
    ]
    assert len(responses) == 1, kind
    (got,) = responses
    status, code, message, headers = EXPECTED_AUTH_RESPONSES[kind]
    assert got["StatusCode"] == status
    assert got["ResponseTemplates"] == _error_body(code, message)
    assert got.get("ResponseParameters") == headers


def test_outputs(orchestrator_tpl) -> None:
    outputs = orchestrator_tpl["Outputs"]
    url = outputs["ApiUrl"]["Value"]["Fn::Join"][1]
    card = outputs["AgentCardUrl"]["Value"]["Fn::Join"][1]
    assert url[0] == "https://" and url[-1] == "/"
    assert card[:-1] == url[:-1] and card[-1] == "/.well-known/agent-card.json"


# --- deploy faults: the account-wide role once, outputs, body limits ---------------------


def test_the_account_wide_api_gateway_role_is_set_once_in_its_own_stack(synth) -> None:
    for name in ("Flightdeck-orchestrator", "Flightdeck-worker"):
        template = synth.templates[name]
        assert resources(template, "AWS::ApiGateway::Account") == {}
        principals = json.dumps(
            [r["Properties"]["AssumeRolePolicyDocument"] for r in resources(template, "AWS::IAM::Role").values()]
        )
        assert "apigateway.amazonaws.com" not in principals, f"{name} creates an API Gateway role"
    account = json.loads((synth.outdir / "Flightdeck-ApiGatewayAccount.template.json").read_text())
    (setting,) = resources(account, "AWS::ApiGateway::Account").values()
    ((role_id, role),) = resources(account, "AWS::IAM::Role").items()
    assert setting["Properties"]["CloudWatchRoleArn"] == {"Fn::GetAtt": [role_id, "Arn"]}
    assert role["DeletionPolicy"] == "Retain"  # the account setting keeps naming it after a teardown
    manifest = json.loads((synth.outdir / "manifest.json").read_text())
    stacks = [k for k, a in manifest["artifacts"].items() if a["type"] == "aws:cloudformation:stack"]
    assert stacks.count("Flightdeck-ApiGatewayAccount") == 1
    for name in ("Flightdeck-orchestrator", "Flightdeck-worker"):
        assert "Flightdeck-ApiGatewayAccount" in manifest["artifacts"][name]["dependencies"]


def test_the_account_stack_is_left_out_on_request(tmp_path) -> None:
    import aws_cdk as cdk

    from infra.deployment import build

    app = cdk.App(outdir=str(tmp_path), context={"bundleDeps": False, "nag": False, "apigwCloudWatchRole": "false"})
    build(app)
    assert [c.node.id for c in app.node.children if isinstance(c, cdk.Stack)] == [
        "Flightdeck-orchestrator",
        "Flightdeck-worker",
    ]


def test_the_callback_secret_arn_is_an_output(orchestrator_tpl) -> None:
    output = orchestrator_tpl["Outputs"]["CallbackSecretArn"]
    assert output["Value"] == {"Ref": secret_id(orchestrator_tpl, "CallbackSecret")}
    assert "put-secret-value" in output["Description"]


def test_a_body_limit_lambda_cannot_take_fails_synth() -> None:
    from infra.environment import MAX_BODY_BYTES_ON_AWS, agent_environment

    deployment = config_file.load(config_file.DEFAULT_CONFIG)
    resources_ = {k: "x" * 8 for k in RESOURCE_VARIABLES}
    deployment.defaults["MAX_BODY_BYTES"] = str(MAX_BODY_BYTES_ON_AWS)
    agent_environment(deployment, "worker", resources_, peer_url_prefix="/flightdeck/x")
    deployment.defaults["MAX_BODY_BYTES"] = str(MAX_BODY_BYTES_ON_AWS + 1)
    with pytest.raises(ValueError, match="MAX_BODY_BYTES"):
        agent_environment(deployment, "worker", resources_, peer_url_prefix="/flightdeck/x")
