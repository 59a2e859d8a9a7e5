"""The web console on AWS (infra/console.py): with deploy.console (the example's orchestrator), GET /console and
GET /console/<file> for each file of console/ are MOCK methods whose templates decode to the files exactly
(the page's <base> under the stage), public, with the page's headers; no function, no bucket, nothing in the
Lambda asset. An agent without it (the worker) has no /console. cdk-nag passes (tests/infra/test_infra_nag.py)."""

from __future__ import annotations

import pytest
from template_queries import methods_by_route, resources

from flightdeck import topology
from flightdeck.local.console_files import SECURITY_HEADERS as LOCAL_HEADERS
from infra.console import BASE_MARKER, CONSOLE_DIR, CSP, SECURITY_HEADERS, SET_CSP, console_files
from tests.support.apigw_mock import render

pytestmark = pytest.mark.slow


def test_the_console_route_serves_each_file_exactly_public_with_its_headers(orchestrator_tpl) -> None:
    methods = {path: p for (verb, path), p in methods_by_route(orchestrator_tpl).items() if path.startswith("/console")}
    files = console_files()
    assert set(methods) == {"/console", *(f"/console/{name}" for name in files)}
    assert {"index.html", "style.css", "js/app.js", "js/api.js"} <= set(files)
    for path, method in methods.items():
        assert method["HttpMethod"] == "GET" and method["AuthorizationType"] == "NONE"
        assert not method.get("ApiKeyRequired")
        integration = method["Integration"]
        assert integration["Type"] == "MOCK" and "Uri" not in integration
        [answer] = integration["IntegrationResponses"]
        headers = {
            k.removeprefix("method.response.header."): v.strip("'") for k, v in answer["ResponseParameters"].items()
        }
        assert {k: headers[k] for k in SECURITY_HEADERS} == SECURITY_HEADERS
        name = path.removeprefix("/console/") if path != "/console" else "index.html"
        template = answer["ResponseTemplates"]["application/json"]
        assert template.startswith(SET_CSP)  # the policy, set by the template (it holds quotes)
        overrides, body = render(template, "prod")
        assert overrides == {"Content-Security-Policy": CSP}
        expected = (CONSOLE_DIR / name).read_text()
        if name == "index.html":
            assert headers["Content-Type"].startswith("text/html")
            expected = expected.replace(BASE_MARKER, '<base href="/prod/console/">')
        assert body == expected, path
    # The same headers as the local gateway's.
    assert {**SECURITY_HEADERS, "Content-Security-Policy": CSP} == dict(LOCAL_HEADERS)
    assert any(o.get("Description", "").startswith("The web console") for o in orchestrator_tpl["Outputs"].values())


def test_no_function_bucket_or_custom_resource_serves_it_and_the_worker_has_none(synth) -> None:
    worker = synth.templates["Flightdeck-worker"]
    assert not [path for _, path in methods_by_route(worker) if path.startswith("/console")]
    orchestrator = synth.templates["Flightdeck-orchestrator"]
    assert not resources(orchestrator, "AWS::S3::Bucket")
    assert not [lid for lid, r in orchestrator["Resources"].items() if r["Type"].startswith("Custom::")]
    # Nothing of it in the Lambda asset (the static files are the API's templates).
    ours = {f.read_bytes() for f in console_files().values()}
    assets = [p for p in synth.outdir.glob("asset.*") if p.is_dir()]
    static = [f for a in assets for f in a.rglob("*") if f.suffix in (".html", ".css", ".js")]
    assert assets and not [f for f in static if f.read_bytes() in ours]
    # The same functions as the worker's (the console adds none).
    assert len(resources(orchestrator, "AWS::Lambda::Function")) == len(resources(worker, "AWS::Lambda::Function"))


def test_the_console_s_api_routes_exist_only_beside_its_page(synth) -> None:
    """Issue 36: the inspector and the delegate lanes are the console's: no method for them where it is off, and
    the functions are told (CONSOLE) so that a route the gateway lacks is 404 there too."""
    console_routes = {(r.method, r.path) for r in topology.ROUTES if r.console}
    for stack, on in (("Flightdeck-orchestrator", True), ("Flightdeck-worker", False)):
        template = synth.templates[stack]
        methods = set(methods_by_route(template))
        assert (console_routes <= methods) if on else not console_routes & methods, stack
        for function in resources(template, "AWS::Lambda::Function").values():
            variables = function["Properties"]["Environment"]["Variables"]
            assert variables["CONSOLE"] == ("on" if on else "off"), stack
