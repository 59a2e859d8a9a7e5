"""max_concurrent_tasks (issue 25): an agent with that many sessions busy refuses a message that would start
one more turn (429 agent_busy on /api/chat, JSON-RPC -32000 on /a2a), and takes it again once a turn ends.

The limit is a condition of the write that starts the turn (a counter item in the agent's table), so it holds
under truly concurrent requests: those go over HTTP to the loopback moto server.
"""

from __future__ import annotations

import json
import uuid
from concurrent.futures import ThreadPoolExecutor

import pytest
import requests

from flightdeck import wiring
from flightdeck.adapters.dynamo.keys import HOLDS_LOAD, LOAD_PK, LOAD_SK
from tests.conftest import MOTO_CONFIG
from tests.integration.test_a2a_server import err, message, ok, rpc
from tests.support.harness import agent_config, make_agent, new_session_id
from tests.support.invokes import RECORDER

LIMIT = 3


def limited_config(name: str, limit: int = LIMIT) -> str:
    config = json.loads(agent_config(name, ["worker"]))
    config["max_concurrent_tasks"] = limit
    return json.dumps(config)


@pytest.fixture
def agent(aws, monkeypatch):
    yield make_agent(monkeypatch, extra_env={"AGENT_CONFIG": limited_config("orchestrator")})
    wiring.reset()


@pytest.fixture
def agent_on_server(moto_server, monkeypatch):
    monkeypatch.setenv("AWS_ENDPOINT_URL", moto_server)
    requests.post(f"{moto_server}/moto-api/config", json=MOTO_CONFIG, timeout=10).raise_for_status()
    RECORDER.clear()
    name = f"load-{uuid.uuid4().hex[:8]}"  # the server's state lives as long as the session
    yield make_agent(monkeypatch, name=name, extra_env={"AGENT_CONFIG": limited_config(name)})
    wiring.reset()


def chat(agent, sid, content):
    return agent.api("chat_post", body={"session_id": sid, "content": content})


def busy(agent) -> int:
    item = agent.item(LOAD_PK, LOAD_SK)
    return int(item["busy"]) if item else 0


def test_n_concurrent_new_tasks_against_a_limit_of_k_start_exactly_k(agent_on_server):
    """N threads at once, each a message that would start a new session's turn, through the ingest the route
    runs (the harness calls the HTTP handler in-process, whose resolver state is one per process: concurrent
    calls of it would mix their requests), each write a real HTTP request to the moto server."""
    from flightdeck.domain.chat import ingest_chat
    from flightdeck.domain.records import AgentBusyError
    from flightdeck.wiring import deps

    agent, n = agent_on_server, 12
    d = deps()

    def send(sid):
        try:
            return ingest_chat(d, "@worker a long job", sid, caller="tester")
        except AgentBusyError as exc:
            return exc

    sids = [new_session_id() for _ in range(n)]
    with ThreadPoolExecutor(n) as pool:
        answers = list(pool.map(send, sids))
    started = [sid for sid, a in zip(sids, answers) if not isinstance(a, AgentBusyError)]
    assert len(started) == LIMIT, answers
    assert all(a.limit == LIMIT for a in answers if isinstance(a, AgentBusyError))
    assert busy(agent) == LIMIT
    # Exactly those sessions exist: a refused message stored nothing.
    metas = {i["pk"]["S"] for i in agent.table_items() if i["sk"]["S"] == "META" and i["pk"]["S"].startswith("S#")}
    assert metas == {f"S#{sid}" for sid in started}
    # Over HTTP, one more is refused as 429 agent_busy, with Retry-After.
    status, headers, body = chat(agent, new_session_id(), "one more")
    assert (status, body["error"]["code"], headers["retry-after"]) == (429, "agent_busy", "5")
    assert "max_concurrent_tasks (3" in body["error"]["message"]


def test_a_busy_agent_still_queues_a_message_for_a_busy_session_and_takes_new_work_once_a_turn_ends(agent):
    sids = [new_session_id() for _ in range(LIMIT)]
    for sid in sids:
        assert chat(agent, sid, "@worker a long job")[0] == 202
    status, headers, body = chat(agent, new_session_id(), "one more")
    assert (status, body["error"]["code"], headers["retry-after"]) == (429, "agent_busy", "5")
    # A follow-up to a session under way starts no turn: it waits in the inbox as ever.
    status, _, body = chat(agent, sids[0], "and a follow-up")
    assert (status, body["status"]) == (202, "queued")
    assert busy(agent) == LIMIT
    agent.run_queue("turns")  # each session delegates to the worker and waits: still busy
    assert busy(agent) == LIMIT
    # One session's turn ends (its delegation answered): idle, its slot given back in that write.
    from tests.integration.test_api_callbacks import post

    dispatches = {d["session_id"]: d for d in agent.bodies("dispatch")}
    last = dispatches[sids[-1]]
    post(agent, agent.token(sids[-1], last["turn"], last["tool_use_id"]), "done")
    agent.run_queue("turns")
    assert agent.api("session_get", SESSION_ID=sids[-1])[2]["status"] == "idle"
    assert busy(agent) == LIMIT - 1 and HOLDS_LOAD not in agent.item(f"S#{sids[-1]}", "META")
    assert chat(agent, new_session_id(), "now there is room")[0] == 202


def test_a2a_message_send_past_the_limit_is_a_json_rpc_error_and_its_task_is_rejected(agent):
    for _ in range(LIMIT):
        assert chat(agent, new_session_id(), "@worker a long job")[0] == 202
    msg = message("one task too many")
    error = err(rpc(agent, "message/send", {"message": msg}), -32000)
    assert "max_concurrent_tasks" in error["message"]
    assert error["data"]["maxConcurrentTasks"] == LIMIT and error["data"]["retryAfterSeconds"] == 5
    # The task it stored first is rejected (terminal): its context is free for the client's next message.
    task = ok(rpc(agent, "tasks/get", {"id": _task_id(agent, error["data"]["contextId"])}))
    assert task["status"]["state"] == "rejected"
    assert busy(agent) == LIMIT


def _task_id(agent, context_id: str) -> str:
    from flightdeck.domain.a2a.ports import task_id_of

    [item] = [
        i for i in agent.table_items() if i["pk"]["S"] == f"S#{context_id}" and i["sk"]["S"].startswith("A2A#TASK#")
    ]
    return task_id_of(context_id, item["sk"]["S"].removeprefix("A2A#TASK#"))


def test_the_sweep_recounts_a_slot_that_a_busy_session_deleted_by_ttl_never_gave_back(agent):
    from flightdeck.domain.deadlines import sweep
    from flightdeck.wiring import deps

    sids = [new_session_id() for _ in range(LIMIT)]
    for sid in sids:
        assert chat(agent, sid, "@worker a long job")[0] == 202
    # TTL deletes one of them while it is busy (its turn outlived its retention): no write gives its slot back.
    agent.dynamodb.delete_item(TableName=agent.table, Key={"pk": {"S": f"S#{sids[0]}"}, "sk": {"S": "META"}})
    assert chat(agent, new_session_id(), "one more")[0] == 429
    sweep(deps())
    assert busy(agent) == LIMIT - 1
    assert chat(agent, new_session_id(), "one more")[0] == 202
