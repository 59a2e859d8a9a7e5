"""Deploy a synthesized CDK app into moto's CloudFormation, the way `cdk deploy` would.

- bootstrap: the SSM parameter the templates' BootstrapVersion reads, and the assets bucket;
- assets: each file asset of `<stack>.assets.json` uploaded to its destination (a directory
  zipped, as the CDK CLI does);
- stacks: created in the order the cloud assembly's dependencies give, from their templates.

What moto's CloudFormation (the installed version) cannot create is created through the
service APIs from the template's own values, and nothing else is changed:

- before the stack (other resources reference them, so their Ref/GetAtt are replaced in the
  template by the values the API returned):
  - AWS::KMS::Key: moto's CloudFormation crashes on the key's Tags (KeyError 'TagKey' in its tagger);
  - AWS::SecretsManager::Secret: unsupported (a generated secret string is generated with the
    template's GenerateSecretString parameters through GetRandomPassword);
- after the stack (they reference the stack's resources; moto skips them with a warning):
  - AWS::ApiGateway::Stage: unsupported; its Ref (the stage name, here the template's StageName)
    is replaced before creation, so URLs, permissions and the published API URL name the stage;
  - AWS::ApiGateway::Authorizer, ::ApiKey, ::UsagePlan, ::UsagePlanKey, ::Account: unsupported.
    Their Refs stay unresolved in the stack, so the stack's PeerUsagePlanId output and the
    methods' AuthorizerId are empty: callers pass the plan id (`peers add --usage-plan-id`), and
    the gateway of e2e_lambda takes the REST API's one authorizer for CUSTOM methods;
  - AWS::CloudWatch::Alarm, AWS::SQS::QueuePolicy, AWS::SNS::TopicPolicy: unsupported;
  - AWS::Lambda::EventInvokeConfig (the turn worker's asynchronous retries and on-failure
    destination): unsupported; put through PutFunctionEventInvokeConfig;
  - AWS::SSM::Parameter (the published API URL): moto's CloudFormation crashes on its Tags (a
    map in CloudFormation, a list to moto: TypeError); its Ref (the template's Name) is
    replaced before creation, and it is put after the stage it names (PutParameter);
  - AWS::CloudWatch::Dashboard: supported, but its body names the alarms (Fn::GetAtt Arn), which
    moto's CloudFormation did not create, so it refuses the template: taken out of it and put
    after the alarms (PutDashboard, the body resolved);
- an AWS::ApiGateway::Method with a MOCK integration (the web console's files, infra/console.py): moto's
  CloudFormation wants an IntegrationHttpMethod and a Uri a MOCK has not, and drops integration responses;
  taken out of the template and put after the stack (PutMethod, PutIntegration, PutMethodResponse,
  PutIntegrationResponse), its templates as they are;
- never created: AWS::ApiGateway::RequestValidator, ::GatewayResponse, ::Model (unsupported;
  request validation and API Gateway's own error answers are not emulated);
- the lean front door's HTTP API and function URLs: tests/e2e/e2e_lean.py says what and how.

UNSUPPORTED lists every type moto's CloudFormation skipped for these templates; `deploy`
records what it skipped (moto warns per resource) so a test can hold it to that list.
"""

from __future__ import annotations

import io
import json
import re
import warnings
import zipfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import boto3
import e2e_lean

ACCOUNT = "123456789012"  # moto's default account
REGION = "us-east-1"
BOOTSTRAP_VERSION_PARAMETER = "/cdk-bootstrap/hnb659fds/version"
ASSETS_BUCKET = f"cdk-hnb659fds-assets-{ACCOUNT}-{REGION}"

CREATED_BEFORE = ("AWS::KMS::Key", "AWS::SecretsManager::Secret")
CREATED_AFTER = (
    "AWS::ApiGateway::Stage",
    "AWS::ApiGateway::Authorizer",
    "AWS::ApiGateway::ApiKey",
    "AWS::ApiGateway::UsagePlan",
    "AWS::ApiGateway::UsagePlanKey",
    "AWS::ApiGateway::Account",
    "AWS::CloudWatch::Alarm",
    "AWS::SQS::QueuePolicy",
    "AWS::SNS::TopicPolicy",
    "AWS::CloudWatch::Dashboard",
    "AWS::SSM::Parameter",
    "AWS::Lambda::EventInvokeConfig",
)
# Types moto's CloudFormation knows but fails on here: taken out of the template.
DEFERRED = ("AWS::CloudWatch::Dashboard", "AWS::SSM::Parameter")
# Ref of these returns a property the template sets: replaced by it before creation.
REF_IS_PROPERTY = {"AWS::ApiGateway::Stage": "StageName", "AWS::SSM::Parameter": "Name"}
NOT_CREATED = ("AWS::ApiGateway::RequestValidator", "AWS::ApiGateway::GatewayResponse", "AWS::ApiGateway::Model")
# Types moto's CloudFormation skips (everything above but the KMS key, which it crashes on, and DEFERRED).
UNSUPPORTED = frozenset(CREATED_BEFORE[1:] + CREATED_AFTER + NOT_CREATED) - set(DEFERRED)
PSEUDO = {
    "AWS::AccountId": ACCOUNT,
    "AWS::Region": REGION,
    "AWS::Partition": "aws",
    "AWS::URLSuffix": "amazonaws.com",
    "AWS::NoValue": None,
}


def _mock_method(resource: dict[str, Any]) -> bool:
    return (
        resource["Type"] == "AWS::ApiGateway::Method"
        and resource["Properties"].get("Integration", {}).get("Type") == "MOCK"
    )


class Unresolvable(LookupError):
    """An intrinsic that names something not created (yet)."""


@dataclass
class Values:
    """What Ref and Fn::GetAtt of a logical id return, as far as known."""

    refs: dict[str, str] = field(default_factory=dict)
    attributes: dict[tuple[str, str], str] = field(default_factory=dict)
    # Called for a GetAtt not in `attributes`: (logical id, attribute) -> value.
    attribute_of: Callable[[str, str], str] | None = None

    def ref(self, name: str) -> Any:
        if name in PSEUDO:
            return PSEUDO[name]
        if name in self.refs:
            return self.refs[name]
        raise Unresolvable(f"Ref {name}")

    def get_att(self, name: str, attribute: str) -> str:
        if (name, attribute) in self.attributes:
            return self.attributes[(name, attribute)]
        if self.attribute_of is not None and name in self.refs:
            value = self.attribute_of(name, attribute)
            self.attributes[(name, attribute)] = value
            return value
        raise Unresolvable(f"Fn::GetAtt {name}.{attribute}")


def resolve(value: Any, values: Values, *, partial: bool = False) -> Any:
    """Evaluate the intrinsics of a template value. partial: leave what cannot be resolved as it is."""

    def walk(v: Any) -> Any:
        if isinstance(v, list):
            return [walk(x) for x in v]
        if not isinstance(v, dict):
            return v
        if len(v) == 1:
            ((key, arg),) = v.items()
            try:
                if key == "Ref":
                    return values.ref(arg)
                if key == "Fn::GetAtt":
                    name, attribute = arg if isinstance(arg, list) else arg.split(".", 1)
                    return values.get_att(name, attribute)
                if key == "Fn::Join":
                    sep, items = arg[0], walk(arg[1])
                    if all(isinstance(i, str) for i in items):
                        return sep.join(items)
                    raise Unresolvable("Fn::Join of an unresolved value")
                if key == "Fn::Select":
                    index, items = walk(arg[0]), walk(arg[1])
                    if isinstance(items, list) and not isinstance(index, dict):
                        return items[int(index)]
                    raise Unresolvable("Fn::Select of an unresolved value")
                if key == "Fn::Split":
                    sep, text = arg[0], walk(arg[1])
                    if isinstance(text, str):
                        return text.split(sep)
                    raise Unresolvable("Fn::Split of an unresolved value")
                if key == "Fn::Sub":
                    template, extra = (arg, {}) if isinstance(arg, str) else (arg[0], walk(arg[1]))

                    def sub(m: re.Match[str]) -> str:
                        name = m.group(1)
                        if name in extra:
                            return str(extra[name])
                        if "." in name:
                            return values.get_att(*name.split(".", 1))
                        return str(values.ref(name))

                    return re.sub(r"\$\{([^}!][^}]*)\}", sub, template)
            except Unresolvable:
                if not partial:
                    raise
                return {key: walk(arg) if key != "Ref" else arg}
        return {k: walk(x) for k, x in v.items()}

    return walk(value)


def _zip_directory(path: Path) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for file in sorted(p for p in path.rglob("*") if p.is_file()):
            archive.write(file, file.relative_to(path).as_posix())
    return buffer.getvalue()


def _tags(props: dict[str, Any]) -> list[dict[str, str]]:
    tags = props.get("Tags") or []
    return [{"Key": k, "Value": v} for k, v in tags.items()] if isinstance(tags, dict) else list(tags)


@dataclass
class DeployedStack:
    name: str
    template: dict[str, Any]  # as synthesized (before any replacement)
    physical: dict[str, str]  # logical id -> physical id (stack resources and API-created ones)
    outputs: dict[str, str]
    skipped: set[str]  # resource types moto's CloudFormation warned it does not support

    def of_type(self, kind: str) -> dict[str, str]:
        return {
            lid: self.physical[lid]
            for lid, r in self.template["Resources"].items()
            if r["Type"] == kind and lid in self.physical
        }


class MotoCloud:
    """Deploys stacks of one cloud assembly (cdk.out) into the active moto mock."""

    def __init__(self, outdir: Path):
        self.outdir = outdir
        self.manifest = json.loads((outdir / "manifest.json").read_text())
        self._clients: dict[str, Any] = {}
        self.cfn = self.client("cloudformation")
        self.stacks: dict[str, DeployedStack] = {}
        self._physical: dict[str, dict[str, str]] = {}  # stack -> logical id -> physical id, once created

    def client(self, service: str) -> Any:
        if service not in self._clients:
            self._clients[service] = boto3.client(service, region_name=REGION)
        return self._clients[service]

    def stack_names(self) -> list[str]:
        """The assembly's stacks, each after the stacks it depends on."""
        artifacts = {k: a for k, a in self.manifest["artifacts"].items() if a["type"] == "aws:cloudformation:stack"}
        ordered: list[str] = []

        def visit(name: str) -> None:
            if name in ordered:
                return
            for dep in artifacts[name].get("dependencies", []):
                if dep in artifacts:
                    visit(dep)
            ordered.append(name)

        for name in artifacts:
            visit(name)
        return ordered

    def template(self, stack: str) -> dict[str, Any]:
        return json.loads((self.outdir / f"{stack}.template.json").read_text())

    # --- bootstrap and assets ---------------------------------------------------------

    def bootstrap(self, version: str = "21") -> None:
        self.client("ssm").put_parameter(Name=BOOTSTRAP_VERSION_PARAMETER, Value=version, Type="String", Overwrite=True)
        self.client("s3").create_bucket(Bucket=ASSETS_BUCKET)

    def publish_assets(self, stack: str) -> list[str]:
        """Upload the stack's file assets; returns the object keys."""
        s3 = self.client("s3")
        manifest = json.loads((self.outdir / f"{stack}.assets.json").read_text())
        keys = []
        for asset in manifest["files"].values():
            source = self.outdir / asset["source"]["path"]
            body = _zip_directory(source) if asset["source"].get("packaging") == "zip" else source.read_bytes()
            for destination in asset["destinations"].values():
                bucket = (
                    destination["bucketName"].replace("${AWS::AccountId}", ACCOUNT).replace("${AWS::Region}", REGION)
                )
                s3.put_object(Bucket=bucket, Key=destination["objectKey"], Body=body)
                keys.append(destination["objectKey"])
        return keys

    # --- stacks -----------------------------------------------------------------------

    def deploy(self, stack: str, template: dict[str, Any] | None = None) -> DeployedStack:
        """Create one stack (template: a changed copy of the synthesized one, for negative tests)."""
        self.publish_assets(stack)
        original = template if template is not None else self.template(stack)
        work = json.loads(json.dumps(original))
        values = Values(attribute_of=lambda lid, attr: self._attribute(stack, work, lid, attr))
        physical: dict[str, str] = {}
        for lid, resource in list(work["Resources"].items()):
            if resource["Type"] in CREATED_BEFORE:
                physical[lid] = self._create_before(stack, lid, resource, values)
                del work["Resources"][lid]
            elif resource["Type"] in e2e_lean.BEFORE:  # the lean front door's HTTP API: e2e_lean
                ref, attributes = e2e_lean.create_before(self.client, resolve(resource["Properties"], values))
                physical[lid] = values.refs[lid] = ref
                values.attributes.update({(lid, k): v for k, v in attributes.items()})
                del work["Resources"][lid]
            elif resource["Type"] in REF_IS_PROPERTY:
                values.refs[lid] = resource["Properties"][REF_IS_PROPERTY[resource["Type"]]]
        deferred = {
            lid: work["Resources"].pop(lid)
            for lid, r in list(work["Resources"].items())
            if r["Type"] in DEFERRED or _mock_method(r)
        }
        late_outputs, late_environments = e2e_lean.take_out_url_references(work)
        work = resolve(work, Values(refs=dict(values.refs), attributes=dict(values.attributes)), partial=True)
        for resource in work["Resources"].values():
            depends = resource.get("DependsOn")
            if depends:
                kept = [d for d in ([depends] if isinstance(depends, str) else depends) if d in work["Resources"]]
                resource["DependsOn"] = kept
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            self.cfn.create_stack(
                StackName=stack, TemplateBody=json.dumps(work), Capabilities=["CAPABILITY_IAM", "CAPABILITY_NAMED_IAM"]
            )
        skipped = {
            m.group(1)
            for w in caught
            if (m := re.search(r"Tried to parse (\S+) but it's not supported", str(w.message)))
        }
        described = self.cfn.describe_stacks(StackName=stack)["Stacks"][0]
        if described["StackStatus"] != "CREATE_COMPLETE":
            raise RuntimeError(f"{stack}: {described['StackStatus']} {described.get('StackStatusReason')}")
        for summary in self.cfn.list_stack_resources(StackName=stack)["StackResourceSummaries"]:
            if summary.get("PhysicalResourceId"):
                physical[summary["LogicalResourceId"]] = summary["PhysicalResourceId"]
        self._physical[stack] = physical
        for lid, pid in physical.items():
            values.refs.setdefault(lid, self._ref_value(work, lid, pid))
        for lid, resource in work["Resources"].items():
            if resource["Type"] == "AWS::ApiGateway::Deployment" and lid not in physical:
                # moto lists no physical id for a deployment: the REST API's one deployment is it.
                api = resolve(resource["Properties"]["RestApiId"], values)
                (deployment,) = self.client("apigateway").get_deployments(restApiId=api)["items"]
                physical[lid] = values.refs[lid] = deployment["id"]
        for kind in e2e_lean.AFTER:
            for lid, resource in work["Resources"].items():
                if resource["Type"] == kind:
                    ref, attributes = e2e_lean.create_after(self.client, kind, resolve(resource["Properties"], values))
                    physical[lid] = values.refs[lid] = ref
                    values.attributes.update({(lid, k): v for k, v in attributes.items()})
        for lid, variables in late_environments.items():
            self.client("lambda").update_function_configuration(
                FunctionName=physical[lid], Environment={"Variables": resolve(variables, values)}
            )
        for kind in CREATED_AFTER:
            for lid, resource in {**work["Resources"], **deferred}.items():
                if resource["Type"] == kind:
                    physical[lid] = self._create_after(stack, lid, resource, values)
                    values.refs[lid] = physical[lid]
        for lid, resource in deferred.items():
            if _mock_method(resource):
                physical[lid] = self._put_mock_method(resolve(resource["Properties"], values, partial=True))
        outputs = {o["OutputKey"]: o.get("OutputValue", "") for o in described.get("Outputs", [])}
        outputs.update({key: resolve(output["Value"], values) for key, output in late_outputs.items()})
        deployed = DeployedStack(stack, original, physical, outputs, skipped)
        self.stacks[stack] = deployed
        return deployed

    def deploy_all(self, order: Iterable[str] | None = None) -> dict[str, DeployedStack]:
        self.bootstrap()
        for stack in order or self.stack_names():
            self.deploy(stack)
        return self.stacks

    def _ref_value(self, template: dict[str, Any], lid: str, physical: str) -> str:
        """Ref of a stack resource as CloudFormation answers it (moto lists some physical ids differently)."""
        kind = template["Resources"].get(lid, {}).get("Type")
        if kind == "AWS::SQS::Queue" and not physical.startswith("https://"):
            return self.client("sqs").get_queue_url(QueueName=physical)["QueueUrl"]
        return physical

    def _attribute(self, stack: str, template: dict[str, Any], lid: str, attribute: str) -> str:
        kind = template["Resources"][lid]["Type"]
        ref = self._physical[stack][lid]
        if kind == "AWS::SQS::Queue":
            url = self._ref_value(template, lid, ref)
            name = url.rsplit("/", 1)[-1]
            return {"QueueName": name, "Arn": f"arn:aws:sqs:{REGION}:{ACCOUNT}:{name}"}[attribute]
        if kind == "AWS::Lambda::Function" and attribute == "Arn":
            return self.client("lambda").get_function(FunctionName=ref)["Configuration"]["FunctionArn"]
        if kind == "AWS::IAM::Role" and attribute == "Arn":
            return self.client("iam").get_role(RoleName=ref)["Role"]["Arn"]
        if kind == "AWS::Logs::LogGroup" and attribute == "Arn":
            return f"arn:aws:logs:{REGION}:{ACCOUNT}:log-group:{ref}:*"
        if kind == "AWS::ApiGateway::RestApi" and attribute == "RootResourceId":
            return self.client("apigateway").get_rest_api(restApiId=ref)["rootResourceId"]
        if kind == "AWS::CloudWatch::Alarm" and attribute == "Arn":
            return f"arn:aws:cloudwatch:{REGION}:{ACCOUNT}:alarm:{ref}"
        raise Unresolvable(f"Fn::GetAtt {lid}.{attribute} ({kind}): not known to this harness")

    # --- what moto's CloudFormation cannot create -----------------------------------------

    def _create_before(self, stack: str, lid: str, resource: dict[str, Any], values: Values) -> str:
        props = resolve(resource.get("Properties", {}), values)
        if resource["Type"] == "AWS::KMS::Key":
            kms = self.client("kms")
            key = kms.create_key(
                Description=props.get("Description", ""),
                Policy=json.dumps(props["KeyPolicy"]),
                Tags=[{"TagKey": t["Key"], "TagValue": t["Value"]} for t in _tags(props)],
            )["KeyMetadata"]
            if props.get("EnableKeyRotation"):
                kms.enable_key_rotation(KeyId=key["KeyId"])
            values.refs[lid] = key["KeyId"]
            values.attributes[(lid, "Arn")] = key["Arn"]
            return key["KeyId"]
        if resource["Type"] == "AWS::SecretsManager::Secret":
            sm = self.client("secretsmanager")
            generate = props.get("GenerateSecretString")
            if generate is not None:
                options = {
                    k: v
                    for k, v in generate.items()
                    if k
                    in (
                        "PasswordLength",
                        "ExcludeCharacters",
                        "ExcludeNumbers",
                        "ExcludePunctuation",
                        "ExcludeUppercase",
                        "ExcludeLowercase",
                        "IncludeSpace",
                        "RequireEachIncludedType",
                    )
                }
                secret_string = sm.get_random_password(**options)["RandomPassword"]
            else:
                secret_string = props["SecretString"]
            arn = sm.create_secret(
                Name=props.get("Name") or f"{lid}-{stack}",
                Description=props.get("Description", ""),
                SecretString=secret_string,
                Tags=_tags(props),
            )["ARN"]
            values.refs[lid] = arn  # Ref of a secret is its ARN
            return arn
        raise AssertionError(resource["Type"])

    def _put_mock_method(self, props: dict[str, Any]) -> str:
        apigw = self.client("apigateway")
        where = {"restApiId": props["RestApiId"], "resourceId": props["ResourceId"], "httpMethod": props["HttpMethod"]}
        apigw.put_method(**where, authorizationType=props["AuthorizationType"])
        integration = props["Integration"]
        apigw.put_integration(**where, type="MOCK", requestTemplates=integration.get("RequestTemplates", {}))
        for response in props.get("MethodResponses", []):
            apigw.put_method_response(
                **where,
                statusCode=response["StatusCode"],
                responseParameters=response.get("ResponseParameters", {}),
            )
        for response in integration.get("IntegrationResponses", []):
            apigw.put_integration_response(
                **where,
                statusCode=response["StatusCode"],
                responseParameters=response.get("ResponseParameters", {}),
                responseTemplates=response.get("ResponseTemplates", {}),
            )
        return f"{props['ResourceId']}:{props['HttpMethod']}"

    def _create_after(self, stack: str, lid: str, resource: dict[str, Any], values: Values) -> str:
        kind, props = resource["Type"], resolve(resource.get("Properties", {}), values)
        apigw = self.client("apigateway")
        if kind == "AWS::ApiGateway::Stage":
            apigw.create_stage(
                restApiId=props["RestApiId"],
                stageName=props["StageName"],
                deploymentId=props["DeploymentId"],
                tracingEnabled=bool(props.get("TracingEnabled")),
                tags={t["Key"]: t["Value"] for t in _tags(props)},
            )
            return props["StageName"]
        if kind == "AWS::ApiGateway::Authorizer":
            return apigw.create_authorizer(
                restApiId=props["RestApiId"],
                name=props["Name"],
                type=props["Type"],
                authorizerUri=props["AuthorizerUri"],
                identitySource=props["IdentitySource"],
                authorizerResultTtlInSeconds=props.get("AuthorizerResultTtlInSeconds", 300),
            )["id"]
        if kind == "AWS::ApiGateway::ApiKey":
            return apigw.create_api_key(
                name=props["Name"],
                value=props["Value"],
                enabled=props.get("Enabled", False),
                description=props.get("Description", ""),
            )["id"]
        if kind == "AWS::ApiGateway::UsagePlan":
            options: dict[str, Any] = {}
            if props.get("Throttle"):
                options["throttle"] = {
                    "burstLimit": props["Throttle"]["BurstLimit"],
                    "rateLimit": props["Throttle"]["RateLimit"],
                }
            if props.get("Quota"):
                options["quota"] = {"limit": props["Quota"]["Limit"], "period": props["Quota"]["Period"]}
            return apigw.create_usage_plan(
                name=props["UsagePlanName"],
                description=props.get("Description", ""),
                apiStages=[{"apiId": s["ApiId"], "stage": s["Stage"]} for s in props.get("ApiStages", [])],
                **options,
            )["id"]
        if kind == "AWS::ApiGateway::UsagePlanKey":
            apigw.create_usage_plan_key(
                usagePlanId=props["UsagePlanId"], keyId=props["KeyId"], keyType=props["KeyType"]
            )
            return f"{props['UsagePlanId']}:{props['KeyId']}"
        if kind == "AWS::ApiGateway::Account":
            apigw.update_account(
                patchOperations=[{"op": "replace", "path": "/cloudwatchRoleArn", "value": props["CloudWatchRoleArn"]}]
            )
            return ACCOUNT
        if kind == "AWS::CloudWatch::Alarm":
            self.client("cloudwatch").put_metric_alarm(
                **{k: v for k, v in props.items() if k not in ("Tags",)}, Tags=_tags(props)
            )
            return props["AlarmName"]
        if kind == "AWS::SQS::QueuePolicy":
            sqs = self.client("sqs")
            for url in props["Queues"]:
                sqs.set_queue_attributes(QueueUrl=url, Attributes={"Policy": json.dumps(props["PolicyDocument"])})
            return ",".join(props["Queues"])
        if kind == "AWS::SSM::Parameter":
            self.client("ssm").put_parameter(
                Name=props["Name"],
                Value=props["Value"],
                Type=props["Type"],
                Description=props.get("Description", ""),
                Tags=_tags(props),
            )
            return props["Name"]
        if kind == "AWS::CloudWatch::Dashboard":
            self.client("cloudwatch").put_dashboard(
                DashboardName=props["DashboardName"], DashboardBody=props["DashboardBody"]
            )
            return props["DashboardName"]
        if kind == "AWS::Lambda::EventInvokeConfig":
            self.client("lambda").put_function_event_invoke_config(
                FunctionName=props["FunctionName"],
                Qualifier=props["Qualifier"],
                **{
                    k: props[k]
                    for k in ("MaximumRetryAttempts", "MaximumEventAgeInSeconds", "DestinationConfig")
                    if k in props
                },
            )
            return f"{props['FunctionName']}:{props['Qualifier']}"
        if kind == "AWS::SNS::TopicPolicy":
            sns = self.client("sns")
            for arn in props["Topics"]:
                sns.set_topic_attributes(
                    TopicArn=arn, AttributeName="Policy", AttributeValue=json.dumps(props["PolicyDocument"])
                )
            return ",".join(props["Topics"])
        raise AssertionError(kind)
