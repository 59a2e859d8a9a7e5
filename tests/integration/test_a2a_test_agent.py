"""The TCK's test agent (A2A_TEST_AGENT=tck; flightdeck.domain.a2a.test_agent), v0.3 and v1.0: a message with a
`tck-artifact-*` messageId runs as a task whose completed artifact is a text, a file by bytes or by URL, or a
data part (v1.0's shapes validate against a2a.proto's Task through protobuf's own parser, in the a2a-sdk 1.x
venv); `tck-message-response` is answered by a Message and starts no task (also as a stream's one event);
with the setting off the same messages are the agent's as usual. Through the real handlers on moto."""

from __future__ import annotations

import base64
import json
import subprocess
import uuid

import pytest
import requests

from flightdeck.chat_client.sse import ServerEvent, read_events
from flightdeck.domain.a2a import wire_v1
from tests.support import a2a1
from tests.support.harness import make_agent
from tests.support.inprocess import gateway
from tests.support.stream_drops import STREAMING, rpc

V1 = {"A2A-Version": "1.0"}
TCK = {"A2A_TEST_AGENT": "tck"}
# The TCK's expectations (a2aproject/a2a-tck, tests/compatibility/core_operations/test_artifacts.py), in v1.0.
EXPECTED = {
    "tck-artifact-text": {"text": "Generated text content"},
    "tck-artifact-file": {
        "raw": base64.b64encode(b"tck").decode(),
        "filename": "output.txt",
        "mediaType": "text/plain",
    },
    "tck-artifact-file-url": {
        "url": "https://example.com/output.txt",
        "filename": "output.txt",
        "mediaType": "text/plain",
    },
    "tck-artifact-data": {"data": {"key": "value", "count": 42}},
}
# Run in a2a-sdk 1.x's venv: each v1.0 Task through protobuf's ParseDict (an unknown field is an error).
PARSE_TASKS = """
import json, sys
from google.protobuf import json_format
from a2a.types import a2a_pb2 as pb
for task in json.load(sys.stdin):
    part = json_format.ParseDict(task, pb.Task()).artifacts[0].parts[0]
    if part.WhichOneof("content") != "text":
        print(part.WhichOneof("content"))
"""


def _message(version: str, message_id: str) -> dict:
    if version == "1.0":
        return {"role": "ROLE_USER", "messageId": message_id, "parts": [{"text": "TCK artifact test"}]}
    return {"kind": "message", "role": "user", "messageId": message_id, "parts": [{"kind": "text", "text": "TCK"}]}


def _call(agent, version: str, method_v03: str, method_v1: str, params: dict) -> dict:
    v1 = version == "1.0"
    status, _, resp = agent.api(
        "a2a_message_send", body=rpc(method_v1 if v1 else method_v03, params), headers=V1 if v1 else None
    )
    assert status == 200 and "result" in resp, resp
    return resp["result"]


def _send(agent, version: str, message_id: str) -> dict:
    """A non-blocking send; the result as the version answers it."""
    config = {"returnImmediately": True} if version == "1.0" else {"blocking": False}
    message = _message(version, message_id)
    return _call(agent, version, "message/send", "SendMessage", {"message": message, "configuration": config})


def _completed(agent, version: str, message_id: str) -> dict:
    sent = _send(agent, version, message_id)
    task_id = sent["task"]["id"] if version == "1.0" else sent["id"]
    agent.run_queue("turns")
    task = _call(agent, version, "tasks/get", "GetTask", {"id": task_id})
    state = task["status"]["state"]
    assert state in ("completed", "TASK_STATE_COMPLETED"), task
    return task


@pytest.mark.parametrize("version", ["0.3", "1.0"])
def test_a_tck_artifact_message_completes_with_its_artifact(aws, monkeypatch, version):
    agent = make_agent(monkeypatch, extra_env=TCK)
    tasks = {}
    for prefix, expected in EXPECTED.items():
        task = _completed(agent, version, f"{prefix}-{uuid.uuid4()}")
        [artifact] = task["artifacts"]
        [part] = artifact["parts"]
        wire = part if version == "1.0" else wire_v1.part_to_wire(part)
        assert artifact["artifactId"] and wire == expected, (prefix, task)
        tasks[prefix] = task
    if version == "0.3":  # v0.3's own shapes
        assert tasks["tck-artifact-file"]["artifacts"][0]["parts"][0]["kind"] == "file"
        assert tasks["tck-artifact-data"]["artifacts"][0]["parts"][0]["kind"] == "data"
    else:  # strictly a2a.proto's Task: protobuf's ParseDict in the a2a-sdk 1.x venv
        parsed = subprocess.run(
            [a2a1.python(), "-c", PARSE_TASKS], input=json.dumps(list(tasks.values())), capture_output=True, text=True
        )
        assert parsed.returncode == 0 and parsed.stdout.split() == ["raw", "url", "data"], parsed.stderr[-3000:]


@pytest.mark.parametrize("version", ["0.3", "1.0"])
def test_a_tck_message_response_is_a_message_and_no_task(aws, monkeypatch, version):
    agent = make_agent(monkeypatch, extra_env=TCK)
    result = _send(agent, version, f"tck-message-response-{uuid.uuid4()}")
    message = result["message"] if version == "1.0" else result
    assert version == "1.0" or message["kind"] == "message"
    assert message["parts"][0]["text"] == "Direct message response" and message["role"] in ("agent", "ROLE_AGENT")
    assert not [i for i in agent.table_items() if i["sk"]["S"].startswith("A2A#TASK#")]


def test_off_the_same_messages_are_the_agents(aws, monkeypatch):
    agent = make_agent(monkeypatch)
    task = _completed(agent, "1.0", f"tck-artifact-data-{uuid.uuid4()}")
    assert [set(p) for p in task["artifacts"][0]["parts"]] == [{"text"}]
    assert "task" in _send(agent, "1.0", f"tck-message-response-{uuid.uuid4()}")


def test_a_streamed_tck_message_response_is_the_streams_one_event(aws, monkeypatch):
    with gateway("orchestrator") as url:
        agent = make_agent(monkeypatch, extra_env={**STREAMING, **TCK})
        body = rpc("SendStreamingMessage", {"message": _message("1.0", f"tck-message-response-{uuid.uuid4()}")})
        resp = requests.post(f"{url}/a2a", json=body, headers={**agent.auth_headers(), **V1})
    events = [json.loads(e.data)["result"] for e in read_events([resp.content]) if isinstance(e, ServerEvent)]
    assert [list(e) for e in events] == [["message"]]
    assert events[0]["message"]["parts"] == [{"text": "Direct message response"}]
