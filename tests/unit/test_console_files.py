"""The console's static files under /console/ of the local gateway (flightdeck.local.console_files): the
page, its scripts with their types and a CSP, agents.json listing every agent, nothing outside console/."""

from __future__ import annotations

import json

from flightdeck.local.console_files import CONSOLE_DIR, ConsoleFiles
from flightdeck.local.gateway import ApiGateway
from flightdeck.local.invocation import FunctionRegistry

AGENTS = {"orchestrator": "http://127.0.0.1:1", "worker": "http://127.0.0.1:2"}


def _gateway() -> ApiGateway:
    return ApiGateway(FunctionRegistry("orchestrator"), console=ConsoleFiles(agents=AGENTS))


def _get(gateway: ApiGateway, path: str, method: str = "GET"):
    return gateway.handle(method=method, target=path, headers=[], body=b"", source_ip="127.0.0.1", local_port=1)


def test_the_page_its_modules_and_the_agents_list_are_served_with_their_types():
    gateway = _gateway()
    page = _get(gateway, "/console/")
    assert page.status == 200 and page.body == (CONSOLE_DIR / "index.html").read_bytes()
    headers = dict(page.headers)
    assert headers["Content-Type"].startswith("text/html")
    assert "default-src 'self'" in headers["Content-Security-Policy"]
    script = _get(gateway, "/console/js/app.js")
    assert script.status == 200 and dict(script.headers)["Content-Type"].startswith("text/javascript")
    assert dict(_get(gateway, "/console/style.css").headers)["Content-Type"].startswith("text/css")
    listed = _get(gateway, "/console/agents.json")
    assert listed.status == 200 and json.loads(listed.body) == AGENTS
    moved = _get(gateway, "/console")
    assert moved.status == 301 and dict(moved.headers)["Location"] == "/console/"


def test_nothing_outside_the_console_directory_and_only_reads():
    gateway = _gateway()
    for path in (
        "/console/../pyproject.toml",
        "/console/%2e%2e/README.md",
        "/console/js/../../dev.sh",
        "/console/nope.js",
    ):
        answer = _get(gateway, path)
        assert answer.status == 404 and json.loads(answer.body)["error"]["code"] == "not_found", path
    refused = _get(gateway, "/console/index.html", method="POST")
    assert refused.status == 405 and dict(refused.headers)["Allow"] == "GET, HEAD"
    # Without a console, the path is the API's: unknown.
    bare = ApiGateway(FunctionRegistry("orchestrator"))
    assert _get(bare, "/console/").status == 404
