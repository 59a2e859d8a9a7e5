"""The lean front door's resources for e2e_cloud (infra/lean_door.py), which moto's CloudFormation (moto 5.2) lacks.

What it lacks, found by deploying the lean stack into it:
- AWS::ApiGatewayV2::Api, ::Stage, ::Integration, ::Route: no CloudFormation model at all (skipped with a
  warning). The API is created before the stack (CreateApi: the functions' PUBLIC_BASE_URL and the Lambda
  permissions' SourceArn name its id), the rest after it (CreateIntegration, CreateRoute, CreateStage);
- AWS::Lambda::Url: no CloudFormation model either (moto's Lambda serves CreateFunctionUrlConfig, but does not
  mock invoking the URL). Created after the stack. Worse, moto's create_stack crashes (AttributeError in
  validate_outputs) on an output that names a Fn::GetAtt of a type it has no model for, and a function's
  environment naming one cannot be resolved: such outputs and environment variables are taken out of the
  template, and after the URLs exist the outputs are resolved from the template's own values and the
  functions' environment put whole (UpdateFunctionConfiguration).
"""

from __future__ import annotations

from typing import Any

URL = "AWS::Lambda::Url"
BEFORE = ("AWS::ApiGatewayV2::Api",)
# In this order: an integration before the routes that target it, the URLs before what names them.
AFTER = ("AWS::ApiGatewayV2::Integration", "AWS::ApiGatewayV2::Route", "AWS::ApiGatewayV2::Stage", URL)


def _names(value: Any, ids: set[str]) -> bool:
    """Whether a template value names one of `ids` (Ref or Fn::GetAtt, anywhere inside it)."""
    if isinstance(value, dict):
        if value.get("Ref") in ids:
            return True
        att = value.get("Fn::GetAtt")
        if isinstance(att, list) and att and att[0] in ids:
            return True
        return any(_names(v, ids) for v in value.values())
    if isinstance(value, list):
        return any(_names(v, ids) for v in value)
    return False


def take_out_url_references(work: dict[str, Any]) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    """Outputs and function environment variables naming a function URL, removed from `work`: (outputs,
    {function logical id: its whole Variables as synthesized})."""
    urls = {lid for lid, r in work["Resources"].items() if r["Type"] == URL}
    outputs = {k: work["Outputs"].pop(k) for k, o in list(work.get("Outputs", {}).items()) if _names(o, urls)}
    environments: dict[str, dict[str, Any]] = {}
    for lid, resource in work["Resources"].items():
        if resource["Type"] != "AWS::Lambda::Function":
            continue
        variables = resource["Properties"].get("Environment", {}).get("Variables", {})
        if _names(variables, urls):
            environments[lid] = dict(variables)
            for name in [n for n, v in variables.items() if _names(v, urls)]:
                del variables[name]
    return outputs, environments


def create_before(client: Any, props: dict[str, Any]) -> tuple[str, dict[str, str]]:
    """AWS::ApiGatewayV2::Api: (its Ref, its attributes)."""
    api = client("apigatewayv2").create_api(
        Name=props["Name"], ProtocolType=props["ProtocolType"], Description=props.get("Description", "")
    )
    return api["ApiId"], {"ApiEndpoint": api["ApiEndpoint"], "ApiId": api["ApiId"]}


def create_after(client: Any, kind: str, props: dict[str, Any]) -> tuple[str, dict[str, str]]:
    """One resource of AFTER, through its service's API: (its Ref, its attributes)."""
    if kind == URL:
        config = client("lambda").create_function_url_config(
            FunctionName=props["TargetFunctionArn"], AuthType=props["AuthType"], InvokeMode=props["InvokeMode"]
        )
        return config["FunctionArn"], {"FunctionUrl": config["FunctionUrl"], "FunctionArn": config["FunctionArn"]}
    v2 = client("apigatewayv2")
    if kind == "AWS::ApiGatewayV2::Integration":
        made = v2.create_integration(
            ApiId=props["ApiId"],
            IntegrationType=props["IntegrationType"],
            IntegrationUri=props["IntegrationUri"],
            PayloadFormatVersion=props["PayloadFormatVersion"],
        )
        return made["IntegrationId"], {}
    if kind == "AWS::ApiGatewayV2::Route":
        made = v2.create_route(
            ApiId=props["ApiId"],
            RouteKey=props["RouteKey"],
            Target=props["Target"],
            AuthorizationType=props.get("AuthorizationType", "NONE"),
        )
        return made["RouteId"], {}
    if kind == "AWS::ApiGatewayV2::Stage":
        v2.create_stage(ApiId=props["ApiId"], StageName=props["StageName"], AutoDeploy=props.get("AutoDeploy", False))
        return props["StageName"], {}
    raise AssertionError(kind)
