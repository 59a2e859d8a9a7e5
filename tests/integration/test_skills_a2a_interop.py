"""Skills with contracts and the a2a-sdk (0.3), both ways (issue 25).

An a2a-sdk server whose card publishes the skill-contracts extension becomes `<agent>__<skill>` tools of our
agent; our structured call reaches it as a data part and its data answer comes back to our model as JSON.
An a2a-sdk client calls a skill of ours with a data part and a responseSchema in the request's metadata, and
reads the answer as a data part (sent, polled, streamed).
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
import uuid
from contextlib import contextmanager

import httpx
import pytest
import uvicorn
from a2a import types as sdk
from a2a.client import A2ACardResolver, ClientConfig, ClientFactory
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.apps import A2AStarletteApplication
from a2a.server.events import EventQueue
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.tasks import (
    BasePushNotificationSender,
    InMemoryPushNotificationConfigStore,
    InMemoryTaskStore,
    TaskUpdater,
)
from a2a.utils import new_task

from tests.integration.test_a2a_interop import _free_socket, _session, _wait_for
from tests.integration.test_skills_api import QUOTE_IN, QUOTE_OUT, config_with_skills
from tests.support.harness import make_agent, new_session_id
from tests.support.inprocess import gateway, pumping

CONTRACTS_URI = "urn:flightdeck:a2a:ext:skill-contracts:v1"

# --- an a2a-sdk agent publishing a skill with schemas ----------------------------------------------------


class QuoteExecutor(AgentExecutor):
    """Answers a structured call to get_quote with a data part (and its text rendering)."""

    def __init__(self):
        self.seen: list[tuple[list[dict], dict | None]] = []  # (parts, message metadata) of each message

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        task = context.current_task or new_task(context.message)
        await event_queue.enqueue_event(task)
        parts = [p.root.model_dump(mode="json", exclude_none=True) for p in context.message.parts]
        self.seen.append((parts, context.message.metadata))
        call = next((p["data"] for p in parts if p["kind"] == "data"), {})
        product = (call.get("arguments") or {}).get("product", "?")
        answer = {"product": product, "price": 4.25}
        updater = TaskUpdater(event_queue, task.id, task.context_id)
        await updater.start_work()
        await updater.add_artifact(
            [sdk.Part(root=sdk.DataPart(data=answer)), sdk.Part(root=sdk.TextPart(text=json.dumps(answer)))],
            name="answer",
        )
        await updater.complete()

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        await TaskUpdater(event_queue, context.task_id, context.context_id).cancel()


@contextmanager
def quoting_agent(executor: QuoteExecutor):
    sock = _free_socket()
    url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    extension = sdk.AgentExtension(
        uri=CONTRACTS_URI,
        required=False,
        params={"skills": {"get_quote": {"inputSchema": QUOTE_IN, "outputSchema": QUOTE_OUT}}},
    )
    card = sdk.AgentCard(
        name="shop",
        description="a2a-sdk shop agent",
        url=url + "/",
        version="1.0.0",
        protocol_version="0.3.0",
        preferred_transport="JSONRPC",
        default_input_modes=["text/plain", "application/json"],
        default_output_modes=["application/json", "text/plain"],
        capabilities=sdk.AgentCapabilities(streaming=False, push_notifications=True, extensions=[extension]),
        skills=[sdk.AgentSkill(id="get_quote", name="Get a quote", description="Price a product", tags=["shop"])],
    )
    store = InMemoryPushNotificationConfigStore()
    handler = DefaultRequestHandler(
        agent_executor=executor,
        task_store=InMemoryTaskStore(),
        push_config_store=store,
        push_sender=BasePushNotificationSender(httpx.AsyncClient(), store),
    )
    app = A2AStarletteApplication(agent_card=card, http_handler=handler).build()
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    # Waited for, not given a fixed time: on a busy machine the server takes longer to start.
    started_by = time.monotonic() + 60
    while not server.started:
        assert thread.is_alive() and time.monotonic() < started_by, "the server did not start"
        time.sleep(0.01)
    try:
        yield url
    finally:
        server.should_exit = True
        thread.join(5)


def test_an_sdk_agent_s_published_skill_is_our_tool_called_with_a_data_part_and_its_data_is_json(aws, monkeypatch):
    from flightdeck.domain.a2a.client import clear_card_cache
    from flightdeck.domain.skills.peers import clear_cache

    clear_card_cache()
    clear_cache()
    executor = QuoteExecutor()
    try:
        with quoting_agent(executor) as peer_url, gateway("orchestrator") as gateway_url:
            config = {
                "name": "orchestrator",
                "model": {"provider": "local"},
                "delegates": [
                    {"agent": "shop", "protocol": "a2a", "card_url": f"{peer_url}/.well-known/agent-card.json"}
                ],
            }
            agent = make_agent(
                monkeypatch,
                delegates=[],
                allow=f"shop:{peer_url},orchestrator:{gateway_url}",
                extra_env={"AGENT_CONFIG": json.dumps(config), "ASYNC_TOOL_TIMEOUT_MS": "20000"},
            )
            sid = new_session_id()
            body = {"session_id": sid, "content": '@shop:get_quote {"product": "widget"}'}
            assert agent.api("chat_post", body=body)[0] == 202
            with pumping(agent, "turns", "dispatch"):
                s = _wait_for(lambda: (lambda v: v if v["status"] == "idle" else None)(_session(agent, sid)), 20)
    finally:
        clear_cache()
    [use] = [b["toolUse"] for m in s["messages"] for b in m["content"] if "toolUse" in b]
    assert (use["name"], use["input"]) == ("shop__get_quote", {"product": "widget"})
    [(parts, _metadata)] = executor.seen
    assert parts == [{"kind": "data", "data": {"skill": "get_quote", "arguments": {"product": "widget"}}}]
    [result] = [b["toolResult"] for m in s["messages"] for b in m["content"] if "toolResult" in b]
    assert result["status"] == "success"
    assert json.loads(result["content"][0]["text"]) == {"product": "widget", "price": 4.25}


# --- the a2a-sdk client calling a skill of ours -----------------------------------------------------------


@pytest.fixture
def served(aws, monkeypatch):
    with gateway("worker") as url:
        agent = make_agent(
            monkeypatch,
            "worker",
            delegates=[],
            extra_env={
                "AGENT_CONFIG": config_with_skills(),
                "STREAMING": "on",
                "STREAM_POLL_INTERVAL_MS": "100",
                "STREAM_KEEPALIVE_MS": "1000",
            },
        )
        yield agent, url


def _call(skill: str, arguments: dict, **extra) -> sdk.Message:
    return sdk.Message(
        role=sdk.Role.user,
        parts=[sdk.Part(root=sdk.DataPart(data={"skill": skill, "arguments": arguments}))],
        message_id=str(uuid.uuid4()),
        **extra,
    )


async def _client(http: httpx.AsyncClient, url: str, streaming: bool):
    card = await A2ACardResolver(http, url).get_agent_card()
    [extension] = [e for e in card.capabilities.extensions or [] if e.uri == CONTRACTS_URI]
    assert extension.uri == CONTRACTS_URI and extension.params["skills"]["get_quote"]["inputSchema"] == QUOTE_IN
    return ClientFactory(ClientConfig(streaming=streaming, polling=True, httpx_client=http)).create(card)


def _data(task: sdk.Task) -> dict:
    [artifact] = task.artifacts
    [data] = [p.root.data for p in artifact.parts if isinstance(p.root, sdk.DataPart)]
    return data


def test_an_sdk_client_calls_our_skill_with_a_data_part_and_a_response_schema_in_metadata(served):
    agent, url = served
    schema = {"type": "object", "properties": {"total": {"type": "number"}}, "required": ["total"]}

    async def scenario():
        async with httpx.AsyncClient(timeout=30, headers=agent.auth_headers()) as http:
            client = await _client(http, url, streaming=False)
            async for task, _update in client.send_message(  # noqa: B007 - the first event is kept
                _call("get_quote", {"product": "widget"}), request_metadata={"responseSchema": schema}
            ):
                break
            assert task.status.state == sdk.TaskState.working
            await asyncio.to_thread(agent.run_queue, "turns")
            return await client.get_task(sdk.TaskQueryParams(id=task.id))

    done = asyncio.run(scenario())
    assert done.status.state == sdk.TaskState.completed
    assert isinstance(_data(done)["total"], (int, float))  # the caller's schema, not the skill's


def test_an_sdk_client_s_call_with_wrong_arguments_is_invalid_params_and_nothing_is_stored(served):
    from a2a.client.errors import A2AClientJSONRPCError

    agent, url = served
    before = agent.table_items()

    async def scenario():
        async with httpx.AsyncClient(timeout=30, headers=agent.auth_headers()) as http:
            client = await _client(http, url, streaming=False)
            with pytest.raises(A2AClientJSONRPCError) as refused:
                async for _event in client.send_message(_call("get_quote", {"colour": "red"})):
                    pass
            return refused.value.error

    error = asyncio.run(scenario())
    assert error.code == -32602 and '"product" is a required property' in error.message
    assert agent.table_items() == before


def test_an_sdk_client_streams_a_skill_call_and_assembles_the_data_answer(served):
    agent, url = served

    async def scenario():
        async with httpx.AsyncClient(timeout=30, headers=agent.auth_headers()) as http:
            client = await _client(http, url, streaming=True)
            with pumping(agent, "turns"):
                call = _call("count_words", {"text": "one two three"})
                async for task, _update in client.send_message(call):  # noqa: B007 - the last event is kept
                    pass
            return task

    task = asyncio.run(scenario())
    assert task.status.state == sdk.TaskState.completed
    assert _data(task) == {"words": 3}  # the last chunk carried the data part
    texts = "".join(p.root.text for p in task.artifacts[0].parts if isinstance(p.root, sdk.TextPart))
    assert json.loads(texts) == {"words": 3}
