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


# --- serving the lean door's HTTP for e2e_lambda.Runtime ----------------------------------------------------

FUNCTION_URL_HOST = r"https://([a-z0-9]+)\.lambda-url\.[a-z0-9-]+\.on\.aws/.*"


def function_urls(lam: Any, function_arns: list[str]) -> dict[str, str]:
    """url id (the host's first label) -> function ARN, for every function with a URL."""
    found = {}
    for arn in function_arns:
        try:
            url = lam.get_function_url_config(FunctionName=arn)["FunctionUrl"]
        except Exception:  # noqa: BLE001 - moto answers a function without a URL with an error
            continue
        found[url.split("//", 1)[1].split(".", 1)[0]] = arn
    return found


def url_event(method: str, path: str, query: str, headers: dict[str, str], body: str, host: str) -> dict[str, Any]:
    """A function URL's event (payload 2.0) for one request, as the lean door delivers it."""
    from flightdeck.local.function_url import build_function_url_event

    return build_function_url_event(
        method=method,
        raw_path=path or "/",
        query_string=query,
        headers=[("Host", host), *headers.items()],
        body=body.encode() if body else b"",
        source_ip="203.0.113.7",
        url_id=host.split(".", 1)[0],
    )


def http_api_event(
    api_id: str, method: str, path: str, route_path: str, params: dict[str, str], query: str, headers: dict[str, str],
    body: str,
) -> dict[str, Any]:  # fmt: skip
    """An HTTP API's Lambda proxy event in payload format 1.0 (the REST event's shape, stage $default)."""
    import time
    import uuid
    from urllib.parse import parse_qsl

    return {
        "version": "1.0",
        "resource": route_path,
        "path": path,
        "httpMethod": method,
        "headers": headers,
        "multiValueHeaders": {k: [v] for k, v in headers.items()},
        "queryStringParameters": dict(parse_qsl(query)) or None,
        "multiValueQueryStringParameters": None,
        "pathParameters": params or None,
        "stageVariables": None,
        "requestContext": {
            "resourcePath": route_path,
            "httpMethod": method,
            "path": path,
            "stage": "$default",
            "apiId": api_id,
            "requestId": str(uuid.uuid4()),
            "requestTimeEpoch": int(time.time() * 1000),
            "protocol": "HTTP/1.1",
            "identity": {"sourceIp": "203.0.113.7", "userAgent": headers.get("User-Agent")},
            "domainName": f"{api_id}.execute-api.us-east-1.amazonaws.com",
        },
        "body": body or None,
        "isBase64Encoded": False,
    }


def http_api_target(v2: Any, api_id: str, method: str, path: str) -> tuple[str, str, dict[str, str]] | None:
    """(function ARN, route path, path parameters) of the HTTP API route a request matches, or None."""
    import re

    for route in v2.get_routes(ApiId=api_id)["Items"]:
        route_method, _, route_path = route["RouteKey"].partition(" ")
        template = re.sub(r"\\\{(\w+)\\\}", r"(?P<\1>[^/]+)", re.escape(route_path))
        m = re.fullmatch(template, path)
        if route_method == method and m:
            integration = v2.get_integration(ApiId=api_id, IntegrationId=route["Target"].removeprefix("integrations/"))
            return integration["IntegrationUri"], route_path, m.groupdict()
    return None
