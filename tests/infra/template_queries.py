"""Small readers of a synthesized CloudFormation template (plain dicts)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from flightdeck import topology

Template = dict[str, Any]
# The handler of the streaming functions (infra/functions.py WEB_HANDLER).
STREAMING_HANDLER = "flightdeck/handlers/web.sh"


def resources(template: Template, kind: str) -> dict[str, dict[str, Any]]:
    return {k: r for k, r in template["Resources"].items() if r["Type"] == kind}


def referenced_ids(value: Any) -> set[str]:
    """Logical ids a value points at through Ref / Fn::GetAtt (anywhere inside it)."""
    found: set[str] = set()
    if isinstance(value, dict):
        if "Ref" in value and isinstance(value["Ref"], str) and not value["Ref"].startswith("AWS::"):
            found.add(value["Ref"])
        if "Fn::GetAtt" in value:
            found.add(value["Fn::GetAtt"][0])
        for v in value.values():
            found |= referenced_ids(v)
    elif isinstance(value, list):
        for v in value:
            found |= referenced_ids(v)
    return found


def function_ids(template: Template) -> dict[str, str]:
    """handler module name -> logical id of its AWS::Lambda::Function."""
    out = {}
    for lid, r in resources(template, "AWS::Lambda::Function").items():
        handler = r["Properties"]["Handler"]
        prefix, suffix = "flightdeck.handlers.", ".handler"
        if handler == STREAMING_HANDLER:
            # A streaming function's handler is the web adapter's start script: its description names it.
            name = r["Properties"]["Description"].rsplit(": ", 1)[1]
            assert name in topology.STREAMING_HANDLERS, (lid, name)
        else:
            assert handler.startswith(prefix) and handler.endswith(suffix), handler
            name = handler[len(prefix) : -len(suffix)]
        assert name not in out, f"two functions for handler {name}"
        out[name] = lid
    return out


def function(template: Template, handler: str) -> dict[str, Any]:
    return template["Resources"][function_ids(template)[handler]]["Properties"]


def queue_ids(template: Template) -> dict[str, tuple[str, bool]]:
    """logical id -> (topology queue key, is_dlq), recognized by queue name."""
    out = {}
    for lid, r in resources(template, "AWS::SQS::Queue").items():
        name = r["Properties"]["QueueName"]
        for spec in topology.QUEUES:
            if name.endswith(spec.dlq_name("")):
                out[lid] = (spec.key, True)
            elif name.endswith(spec.name("")):
                out[lid] = (spec.key, False)
        assert lid in out, f"queue {name} matches no topology queue"
    return out


def queue_id(template: Template, key: str, dlq: bool = False) -> str:
    matches = [lid for lid, v in queue_ids(template).items() if v == (key, dlq)]
    assert len(matches) == 1, (key, dlq, matches)
    return matches[0]


def table_id(template: Template) -> str:
    (lid,) = resources(template, "AWS::DynamoDB::Table")
    return lid


def statements_of_role(template: Template, role_id: str) -> list[dict[str, Any]]:
    statements = []
    for policy in resources(template, "AWS::IAM::Policy").values():
        if {"Ref": role_id} in policy["Properties"].get("Roles", []):
            statements.extend(policy["Properties"]["PolicyDocument"]["Statement"])
    role = template["Resources"][role_id]["Properties"]
    for inline in role.get("Policies", []):
        statements.extend(inline["PolicyDocument"]["Statement"])
    return statements


def statements_of(template: Template, handler: str) -> list[dict[str, Any]]:
    role_ref = function(template, handler)["Role"]
    return statements_of_role(template, role_ref["Fn::GetAtt"][0])


def actions(statement: dict[str, Any]) -> list[str]:
    a = statement["Action"]
    return [a] if isinstance(a, str) else list(a)


def statement_resources(statement: dict[str, Any]) -> list[Any]:
    r = statement["Resource"]
    return r if isinstance(r, list) else [r]


@dataclass
class Reach:
    """What a function's role allows, in topology terms."""

    send: set[str] = field(default_factory=set)
    send_dlq: set[str] = field(default_factory=set)
    consume: set[str] = field(default_factory=set)
    table: bool = False  # reads and writes the table
    read_table: bool = False  # reads the table (and its indexes) and writes nothing
    read_peers: bool = False  # dynamodb:GetItem alone, on the table alone (the peer authorizer's lookup)
    # dynamodb:UpdateItem alone, on the table alone, of the watch mark's attributes alone, returning none
    watch_sessions: bool = False
    # dynamodb:UpdateItem alone, on the table alone, of the owed-think mark's attributes alone, returning none
    defer_owed: bool = False
    read_stream: bool = False  # the table's stream records (an event source mapping's grant)
    secret: bool = False  # the callback HMAC key
    peer_tokens: bool = False  # the bearer tokens presented to peers
    bedrock: bool = False
    peer_urls: set[str] = field(default_factory=set)  # names of the SSM parameters it may read (ssm:GetParameter)
    invoke: set[str] = field(default_factory=set)  # names of the functions it may invoke (lambda:InvokeFunction)
    other: set[str] = field(default_factory=set)


# What reading a DynamoDB stream takes (Table.grantStreamRead, granted by a DynamoEventSource); two of them are
# in Table.grantReadData too, on the table's own ARN: those count as reading the table.
STREAM_ACTIONS = {"dynamodb:DescribeStream", "dynamodb:GetRecords", "dynamodb:GetShardIterator", "dynamodb:ListStreams"}


def ssm_parameter_name(arn: Any) -> str:
    """The parameter name an SSM parameter ARN (a string or an Fn::Join of pseudo parameters) names."""
    text = arn if isinstance(arn, str) else "".join(p if isinstance(p, str) else "?" for p in arn["Fn::Join"][1])
    assert arn if isinstance(arn, str) else arn["Fn::Join"][0] == "", arn
    head, sep, name = text.partition(":parameter/")
    assert sep and "*" not in text and head.startswith("arn:"), f"not one exact parameter: {text}"
    return "/" + name


def function_name_of_arn(arn: Any) -> str:
    """The function an unqualified Lambda function ARN (a string or an Fn::Join of pseudo parameters) names."""
    text = arn if isinstance(arn, str) else "".join(p if isinstance(p, str) else "?" for p in arn["Fn::Join"][1])
    assert arn if isinstance(arn, str) else arn["Fn::Join"][0] == "", arn
    head, sep, name = text.partition(":function:")
    assert sep and "*" not in text and ":" not in name and head.startswith("arn:"), f"not one exact function: {text}"
    return name


def reach(template: Template, handler: str) -> Reach:
    queues = queue_ids(template)
    result = Reach()
    for st in statements_of(template, handler):
        assert st["Effect"] == "Allow"
        acts = actions(st)
        targets = set().union(*(referenced_ids(r) for r in statement_resources(st)))
        if acts == ["dynamodb:GetItem"] and statement_resources(st) == [{"Fn::GetAtt": [table_id(template), "Arn"]}]:
            result.read_peers = True
            continue
        if (
            acts == ["dynamodb:UpdateItem"]
            and statement_resources(st) == [{"Fn::GetAtt": [table_id(template), "Arn"]}]
            and st.get("Condition")
            == {
                "ForAllValues:StringEquals": {"dynamodb:Attributes": ["pk", "sk", "until", "expires_at"]},
                "StringEqualsIfExists": {"dynamodb:ReturnValues": "NONE"},
            }
        ):
            result.watch_sessions = True
            continue
        if (
            acts == ["dynamodb:UpdateItem"]
            and statement_resources(st) == [{"Fn::GetAtt": [table_id(template), "Arn"]}]
            and st.get("Condition")
            == {
                "ForAllValues:StringEquals": {"dynamodb:Attributes": ["pk", "sk", "owed_think", "due_at", "due_shard"]},
                "StringEqualsIfExists": {"dynamodb:ReturnValues": "NONE"},
            }
        ):
            result.defer_owed = True
            continue
        for act in acts:
            service = act.split(":")[0]
            if act == "sqs:SendMessage":
                for lid in targets:
                    key, dlq = queues[lid]
                    (result.send_dlq if dlq else result.send).add(key)
            elif act == "sqs:ReceiveMessage":
                for lid in targets:
                    key, dlq = queues[lid]
                    assert not dlq, f"{handler} consumes a DLQ"
                    result.consume.add(key)
            elif act in STREAM_ACTIONS and all(
                r == "*" or (isinstance(r, dict) and r.get("Fn::GetAtt", [None, ""])[1] == "StreamArn")
                for r in statement_resources(st)
            ):
                result.read_stream = True  # on the stream alone (ListStreams takes no resource)
            elif service == "dynamodb":
                reading = act.split(":")[1].startswith(
                    ("Get", "BatchGet", "Query", "Scan", "Describe", "ConditionCheck")
                )
                if reading:
                    result.read_table = True
                else:
                    result.table = True
            elif service == "secretsmanager":
                for lid in targets:
                    if lid.startswith("PeerTokens"):
                        result.peer_tokens = True
                    elif lid.startswith("CallbackSecret"):
                        result.secret = True
                    else:
                        result.other.add(f"{act} on {lid}")
            elif service == "bedrock":
                result.bedrock = True
            elif act == "ssm:GetParameter":
                result.peer_urls |= {ssm_parameter_name(r) for r in statement_resources(st)}
            elif act == "lambda:InvokeFunction":
                result.invoke |= {function_name_of_arn(r) for r in statement_resources(st)}
            elif service in ("sqs", "logs", "xray"):
                pass
            else:
                result.other.add(act)
    if result.table:
        result.read_table = False  # reading is part of reading and writing
    return result


def api_routes(template: Template) -> set[tuple[str, str, str]]:
    """(method, path, handler) of every API Gateway method."""
    by_function = {lid: name for name, lid in function_ids(template).items()}
    routes = set()
    for (http_method, path), p in methods_by_route(template).items():
        integration = p["Integration"]
        if path == "/console" or path.startswith("/console/"):
            continue  # the web console's static files, MOCK integrations (tests/infra/test_infra_console.py)
        assert integration["Type"] == "AWS_PROXY"
        fns = referenced_ids(integration["Uri"]) & set(by_function)
        assert len(fns) == 1
        routes.add((http_method, path, by_function[fns.pop()]))
    return routes


def methods_by_route(template: Template) -> dict[tuple[str, str], dict[str, Any]]:
    """(method, path) -> properties of its AWS::ApiGateway::Method."""
    rest_apis = resources(template, "AWS::ApiGateway::RestApi")
    assert len(rest_apis) == 1
    api_id = next(iter(rest_apis))
    res = resources(template, "AWS::ApiGateway::Resource")

    def path_of(resource_id: Any) -> str:
        if resource_id == {"Fn::GetAtt": [api_id, "RootResourceId"]}:
            return ""
        props = res[resource_id["Ref"]]["Properties"]
        return path_of(props["ParentId"]) + "/" + props["PathPart"]

    out = {}
    for method in resources(template, "AWS::ApiGateway::Method").values():
        p = method["Properties"]
        key = (p["HttpMethod"], path_of(p["ResourceId"]) or "/")
        assert key not in out, f"two methods for {key}"
        out[key] = p
    return out


def usage_plans_by_name(template: Template) -> dict[str, tuple[str, dict[str, Any]]]:
    """UsagePlanName -> (logical id, properties) of every AWS::ApiGateway::UsagePlan."""
    return {
        r["Properties"]["UsagePlanName"]: (lid, r["Properties"])
        for lid, r in resources(template, "AWS::ApiGateway::UsagePlan").items()
    }


def api_keys_by_name(template: Template) -> dict[str, tuple[str, dict[str, Any]]]:
    """Name -> (logical id, properties) of every AWS::ApiGateway::ApiKey."""
    return {
        r["Properties"]["Name"]: (lid, r["Properties"])
        for lid, r in resources(template, "AWS::ApiGateway::ApiKey").items()
    }


def plan_of_key(template: Template, key_id: str) -> str:
    """The logical id of the one usage plan an API key (logical id) is attached to."""
    plans = [
        referenced_ids(r["Properties"]["UsagePlanId"])
        for r in resources(template, "AWS::ApiGateway::UsagePlanKey").values()
        if r["Properties"]["KeyId"] == {"Ref": key_id}
    ]
    assert len(plans) == 1 and len(plans[0]) == 1, (key_id, plans)
    return plans[0].pop()
