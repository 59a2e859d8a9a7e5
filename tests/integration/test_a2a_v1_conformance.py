"""What the official A2A TCK 1.0 (a2aproject/a2a-tck, branch 1.0-dev) found (issue 39), through the real handlers
on moto and over loopback HTTP (the local gateway): the endpoint with a trailing slash, every answer of the
JSON-RPC path in JSON-RPC, SubscribeToTask on a finished task, ProtoJSON's two spellings of a field name, the
card per A2A-Version with its cache headers, and v0.3's "default" push config."""

from __future__ import annotations

import json

import requests

from flightdeck.local.function_url import build_function_url_event
from tests.integration.test_a2a_v1 import V1
from tests.support.inprocess import gateway

GET_TASK = {"jsonrpc": "2.0", "id": "r1", "method": "GetTask", "params": {"id": "a~b"}}


def _rpc_error(resp: requests.Response) -> dict:
    assert resp.headers["content-type"].startswith("application/json"), resp.headers
    body = resp.json()
    assert body["jsonrpc"] == "2.0" and "result" not in body, body
    return body["error"]


def test_the_endpoint_answers_json_rpc_with_and_without_a_trailing_slash(orchestrator):
    auth = {**orchestrator.auth_headers(), **V1}
    with gateway("orchestrator") as url:
        for path in ("/a2a", "/a2a/"):
            resp = requests.post(f"{url}{path}", json=GET_TASK, headers=auth, timeout=30)
            assert resp.status_code == 200 and _rpc_error(resp)["code"] == -32001, (path, resp.text)
            # The slash opens nothing: the token is checked there as well.
            assert requests.post(f"{url}{path}", json=GET_TASK, headers=V1, timeout=30).status_code == 401
            # Every refusal of the path is JSON-RPC: a GET, a body that is not JSON-typed, broken JSON.
            get = requests.get(f"{url}{path}", timeout=30)
            assert get.status_code == 405 and get.headers["allow"] == "POST"
            assert _rpc_error(get)["code"] == -32600
            typed = requests.post(f"{url}{path}", data="x", headers={**auth, "content-type": "text/plain"}, timeout=30)
            assert typed.status_code == 200 and _rpc_error(typed)["code"] == -32600
            broken = requests.post(f"{url}{path}", data="{", headers={**auth, "content-type": "application/json"})
            assert broken.status_code == 200 and _rpc_error(broken)["code"] == -32700


def _function_url_event(method: str, path: str, body: str, headers: dict[str, str]) -> dict:
    return build_function_url_event(
        method=method,
        raw_path=path,
        query_string="",
        headers=list(headers.items()),
        body=body.encode(),
        source_ip="127.0.0.1",
        url_id="test",
    )


def test_a_function_url_serves_the_slash_and_answers_other_paths_in_json_rpc(orchestrator):
    # The lean front door: the a2a function's own URL passes any path as sent.
    headers = {"content-type": "application/json", **orchestrator.auth_headers(), **V1}
    status, _, body = orchestrator.call(_function_url_event("POST", "/a2a/", json.dumps(GET_TASK), headers), "a2a")
    assert status == 200 and body["error"]["code"] == -32001, body
    status, _, body = orchestrator.call(_function_url_event("POST", "/a2a/", json.dumps(GET_TASK), V1), "a2a")
    assert status == 401, body
    status, _, body = orchestrator.call(_function_url_event("GET", "/a2a/", "", {}), "a2a")
    assert status == 405 and body["jsonrpc"] == "2.0" and body["error"]["code"] == -32600, body
    status, _, body = orchestrator.call(_function_url_event("POST", "/a2a/x", json.dumps(GET_TASK), headers), "a2a")
    assert status == 404 and body["jsonrpc"] == "2.0" and body["error"]["code"] == -32600, body
