"""Interop with the a2a-sdk (0.3): its client against our server, and its server as a peer we delegate to.

Our handlers are served over loopback HTTP by flightdeck.local.gateway (the same
API Gateway proxy events as on AWS), on moto in-process; the a2a-sdk server runs
under uvicorn on loopback in a thread.
"""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
import uuid
from contextlib import contextmanager

import httpx
import pytest
import uvicorn
from a2a import types as sdk
from a2a.client import A2ACardResolver, ClientConfig, ClientFactory
from a2a.client.errors import A2AClientJSONRPCError
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

from tests.support.harness import make_agent, new_session_id
from tests.support.inprocess import gateway, pumping

# --- our agent over loopback HTTP -------------------------------------------------------------


def _free_socket() -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    return sock


# --- an a2a-sdk agent on loopback ------------------------------------------------------------------


class EchoExecutor(AgentExecutor):
    """Answers every task with an artifact "echo: <text>" after a short pause."""

    def __init__(self, delay_s: float = 0.2):
        self.delay_s = delay_s

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        task = context.current_task or new_task(context.message)
        await event_queue.enqueue_event(task)
        updater = TaskUpdater(event_queue, task.id, task.context_id)
        await updater.start_work()
        await asyncio.sleep(self.delay_s)
        await updater.add_artifact(
            [sdk.Part(root=sdk.TextPart(text=f"echo: {context.get_user_input()}"))], name="answer"
        )
        await updater.complete()

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        await TaskUpdater(event_queue, context.task_id, context.context_id).cancel()


class AskingExecutor(AgentExecutor):
    """Asks "which year?" when the task says ?ask; the next message on the task answers it."""

    def __init__(self):
        self.seen: list[tuple[str, str, str]] = []  # (text, task id, context id) of each message

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        task = context.current_task
        if task is None:
            task = new_task(context.message)
            await event_queue.enqueue_event(task)
        text = context.get_user_input()
        self.seen.append((text, task.id, task.context_id))
        updater = TaskUpdater(event_queue, task.id, task.context_id)
        await updater.start_work()
        if "?ask" in text:
            await updater.requires_input(
                updater.new_agent_message([sdk.Part(root=sdk.TextPart(text="which year?"))]), final=True
            )
            return
        await updater.add_artifact(
            [sdk.Part(root=sdk.TextPart(text=f"echo: {text} (answering which year?)"))], name="answer"
        )
        await updater.complete()

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        await TaskUpdater(event_queue, context.task_id, context.context_id).cancel()


@contextmanager
def sdk_agent(push: bool, delay_s: float = 0.2, executor: AgentExecutor | None = None, streaming: bool = False):
    sock = _free_socket()
    url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    card = sdk.AgentCard(
        name="echo",
        description="a2a-sdk echo agent",
        url=url + "/",
        version="1.0.0",
        protocol_version="0.3.0",
        preferred_transport="JSONRPC",
        default_input_modes=["text/plain"],
        default_output_modes=["text/plain"],
        capabilities=sdk.AgentCapabilities(streaming=streaming, push_notifications=push),
        skills=[sdk.AgentSkill(id="echo", name="echo", description="echoes", tags=["echo"])],
    )
    extra = {}
    if push:
        store = InMemoryPushNotificationConfigStore()
        extra = {"push_config_store": store, "push_sender": BasePushNotificationSender(httpx.AsyncClient(), store)}
    handler = DefaultRequestHandler(
        agent_executor=executor or EchoExecutor(delay_s), task_store=InMemoryTaskStore(), **extra
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


# --- the a2a-sdk client against our server ------------------------------------------------------


@pytest.fixture
def served(aws, monkeypatch):
    """An orchestrator served over loopback HTTP; its allowlist admits webhooks under /hooks of itself."""
    with gateway("orchestrator") as url:
        agent = make_agent(monkeypatch, allow=f"worker:http://127.0.0.1:9,hooks:{url}/hooks")
        yield agent, url


def _message(text: str) -> sdk.Message:
    return sdk.Message(role=sdk.Role.user, parts=[sdk.Part(root=sdk.TextPart(text=text))], message_id=str(uuid.uuid4()))


async def _client(http: httpx.AsyncClient, url: str, blocking: bool):
    card = await A2ACardResolver(http, url).get_agent_card()  # validated as an AgentCard by the sdk
    assert card.url == f"{url}/a2a" and card.capabilities.push_notifications is True
    return ClientFactory(ClientConfig(streaming=False, polling=not blocking, httpx_client=http)).create(card)


async def _send(client, text: str) -> sdk.Task:
    async for event in client.send_message(_message(text)):
        task, _update = event
        return task
    raise AssertionError("no response")


def test_sdk_client_send_get_and_blocking_send(served):
    agent, url = served

    async def scenario():
        async with httpx.AsyncClient(timeout=30, headers=agent.auth_headers()) as http:
            client = await _client(http, url, blocking=False)
            task = await _send(client, "how far is the moon")
            assert task.status.state == sdk.TaskState.working
            await asyncio.to_thread(agent.run_queue, "turns")
            done = await client.get_task(sdk.TaskQueryParams(id=task.id, history_length=1))
            assert done.status.state == sdk.TaskState.completed
            assert "how far is the moon" in done.artifacts[0].parts[0].root.text
            assert [m.role for m in done.history] == [sdk.Role.agent]
            blocking = await _client(http, url, blocking=True)
            with pumping(agent, "turns"):
                answered = await _send(blocking, "and the sun")
            assert answered.status.state == sdk.TaskState.completed
            assert "and the sun" in answered.artifacts[0].parts[0].root.text

    asyncio.run(scenario())


def test_sdk_client_multi_turn_conversation_by_context_id_and_continuation_by_task_id(served):
    from tests.integration.test_inbox import drain

    agent, url = served

    async def scenario():
        async with httpx.AsyncClient(timeout=30, headers=agent.auth_headers()) as http:
            client = await _client(http, url, blocking=False)
            first = await _send(client, "what is the capital of peru")
            assert first.status.state == sdk.TaskState.working
            # While it works, a message with its taskId continues the same task.
            follow = _message("and how many people live there")
            follow.task_id, follow.context_id = first.id, first.context_id
            async for event in client.send_message(follow):
                continued, _ = event
                break
            assert (continued.id, continued.status.state) == (first.id, sdk.TaskState.working)
            await asyncio.to_thread(drain, agent, first.context_id)
            done = await client.get_task(sdk.TaskQueryParams(id=first.id))
            assert done.status.state == sdk.TaskState.completed
            assert [m.role for m in done.history] == [sdk.Role.user, sdk.Role.agent, sdk.Role.user, sdk.Role.agent]
            assert "and how many people live there" in done.artifacts[0].parts[0].root.text
            # The conversation goes on in the same context: a new task, the session's history kept.
            later = _message("thank you")
            later.context_id = first.context_id
            async for event in client.send_message(later):
                second, _ = event
                break
            assert second.context_id == first.context_id and second.id != first.id
            await asyncio.to_thread(drain, agent, first.context_id)
            answered = await client.get_task(sdk.TaskQueryParams(id=second.id))
            assert answered.status.state == sdk.TaskState.completed
            assert [m.role for m in answered.history] == [sdk.Role.user, sdk.Role.agent]
        return first.context_id

    context = asyncio.run(scenario())
    messages = agent.api("session_get", SESSION_ID=context)[2]["messages"]
    assert [m["content"][0]["text"] for m in messages if m["role"] == "user"] == [
        "what is the capital of peru",
        "and how many people live there",
        "thank you",
    ]


def test_sdk_client_cancel_and_push_config_round_trip(served):
    agent, url = served

    async def scenario():
        async with httpx.AsyncClient(timeout=30, headers=agent.auth_headers()) as http:
            client = await _client(http, url, blocking=False)
            task = await _send(client, "@worker a long job")
            await asyncio.to_thread(agent.run_queue, "turns")  # delegated; the worker is never reached
            hook = sdk.PushNotificationConfig(url=f"{url}/hooks/a2a", token="tok", id="cfg-1")
            set_ = await client.set_task_callback(
                sdk.TaskPushNotificationConfig(task_id=task.id, push_notification_config=hook)
            )
            assert set_.push_notification_config == hook
            got = await client.get_task_callback(
                sdk.GetTaskPushNotificationConfigParams(id=task.id, push_notification_config_id="cfg-1")
            )
            assert got == set_
            # list and delete are not on the sdk's Client: plain JSON-RPC, parsed with the sdk's response types.
            listed = await http.post(
                f"{url}/a2a",
                json={
                    "jsonrpc": "2.0",
                    "id": 1,
                    "method": "tasks/pushNotificationConfig/list",
                    "params": {"id": task.id},
                },
            )
            listed = sdk.ListTaskPushNotificationConfigResponse.model_validate(listed.json()).root
            assert [c.push_notification_config.id for c in listed.result] == ["cfg-1"]
            with pytest.raises(A2AClientJSONRPCError) as refused:
                await client.set_task_callback(
                    sdk.TaskPushNotificationConfig(
                        task_id=task.id, push_notification_config=sdk.PushNotificationConfig(url="https://evil.test/x")
                    )
                )
            assert refused.value.error.code == -32602
            canceled = await client.cancel_task(sdk.TaskIdParams(id=task.id))
            assert canceled.status.state == sdk.TaskState.canceled
            with pytest.raises(A2AClientJSONRPCError) as again:
                await client.cancel_task(sdk.TaskIdParams(id=task.id))
            assert again.value.error.code == -32002
            deleted = await http.post(
                f"{url}/a2a",
                json={
                    "jsonrpc": "2.0",
                    "id": 2,
                    "method": "tasks/pushNotificationConfig/delete",
                    "params": {"id": task.id, "pushNotificationConfigId": "cfg-1"},
                },
            )
            deleted = sdk.DeleteTaskPushNotificationConfigResponse.model_validate(deleted.json()).root
            assert isinstance(deleted, sdk.DeleteTaskPushNotificationConfigSuccessResponse) and deleted.result is None
            with pytest.raises(A2AClientJSONRPCError) as missing:
                await client.get_task(sdk.TaskQueryParams(id=task.id + "0"))
            assert missing.value.error.code == -32001
        return task

    task = asyncio.run(scenario())
    # The canceled task was pushed to the webhook configured when it was still working.
    deliveries = [json.loads(m["Body"]) for m in agent.receive("delivery")]
    assert [(d["kind"], d["task"]["status"]["state"]) for d in deliveries] == [("a2a_push", "canceled")]
    assert deliveries[0]["task_id"] == task.id


def test_sdk_client_answers_our_agent_s_question_on_its_task(served):
    agent, url = served

    async def scenario():
        async with httpx.AsyncClient(timeout=30, headers=agent.auth_headers()) as http:
            client = await _client(http, url, blocking=True)
            with pumping(agent, "turns"):
                asked = await _send(client, "?ask which year? summarise the plan")
                assert asked.status.state == sdk.TaskState.input_required
                assert asked.status.message.parts[0].root.text == "which year?"
                answer = sdk.Message(
                    role=sdk.Role.user,
                    parts=[sdk.Part(root=sdk.TextPart(text="2024"))],
                    message_id=str(uuid.uuid4()),
                    task_id=asked.id,
                    context_id=asked.context_id,
                )
                async for done, _update in client.send_message(answer):  # noqa: B007 - the first event is kept
                    break
            return asked, done

    asked, done = asyncio.run(scenario())
    assert done.id == asked.id and done.status.state == sdk.TaskState.completed
    assert 'told "2024"' in done.artifacts[0].parts[0].root.text
    assert [m.role for m in done.history] == [sdk.Role.user, sdk.Role.agent, sdk.Role.user, sdk.Role.agent]


# --- an a2a-sdk server as the peer we delegate to --------------------------------------------------


def _delegating(monkeypatch, peer_url: str, gateway_url: str):
    config = {
        "name": "orchestrator",
        "description": "delegates to an A2A agent",
        "model": {"provider": "local"},
        "delegates": [{"agent": "echo", "protocol": "a2a", "card_url": f"{peer_url}/.well-known/agent-card.json"}],
    }
    return make_agent(
        monkeypatch,
        delegates=[],
        allow=f"echo:{peer_url},orchestrator:{gateway_url}",
        extra_env={"AGENT_CONFIG": json.dumps(config), "ASYNC_TOOL_TIMEOUT_MS": "20000"},
    )


def _wait_for(predicate, timeout_s: float = 10.0):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError("timed out waiting")


def _session(agent, sid):
    return agent.api("session_get", SESSION_ID=sid)[2]


def test_delegate_to_an_sdk_agent_that_pushes(aws, monkeypatch):
    from flightdeck.domain.a2a.client import clear_card_cache

    clear_card_cache()
    with sdk_agent(push=True) as peer_url, gateway("orchestrator") as gateway_url:
        agent = _delegating(monkeypatch, peer_url, gateway_url)
        sid = new_session_id()
        assert agent.api("chat_post", body={"session_id": sid, "content": "@echo hello there"})[0] == 202
        agent.run_queue("turns")
        assert agent.run_queue("dispatch") == {"batchItemFailures": []}
        remote = [i for i in agent.table_items() if i["sk"]["S"].startswith("A2A#REMOTE#")]
        assert len(remote) == 1 and remote[0]["mode"]["S"] == "push"
        # The sdk agent pushes its task to POST /api/a2a/push with our token; the last push completes our turn.
        turns = _wait_for(lambda: agent.receive("turns"))
        assert agent.turn_item(sid, 1)["completed_by"] == "callback"  # the push receiver
        agent.run_queue("turns", turns)
    s = _session(agent, sid)
    assert s["status"] == "idle"
    result = s["messages"][2]["content"][0]["toolResult"]
    assert result["status"] == "success" and result["content"][0]["text"] == "echo: hello there"
    assert "echo: hello there" in s["messages"][-1]["content"][0]["text"]
    assert agent.receive("timers") == []  # nothing polled


def test_delegate_to_an_sdk_agent_without_push_polls_it(aws, monkeypatch):
    from flightdeck.domain.a2a.client import clear_card_cache

    clear_card_cache()
    with sdk_agent(push=False) as peer_url, gateway("orchestrator") as gateway_url:
        agent = _delegating(monkeypatch, peer_url, gateway_url)
        sid = new_session_id()
        agent.api("chat_post", body={"session_id": sid, "content": "@echo poll me"})
        agent.run_queue("turns")
        agent.run_queue("dispatch")
        remote = [i for i in agent.table_items() if i["sk"]["S"].startswith("A2A#REMOTE#")]
        assert remote[0]["mode"]["S"] == "poll"
        # The first tasks/get waits one second on the timers queue (SQS DelaySeconds).
        polls = _wait_for(lambda: agent.receive("timers"), timeout_s=5)
        assert [json.loads(p["Body"])["kind"] for p in polls] == ["a2a_poll"]
        assert agent.run_queue("timers", polls) == {"batchItemFailures": []}
        turns = agent.receive("turns")
        if not turns:  # the sdk agent was still working: the next poll is queued
            polls = _wait_for(lambda: agent.receive("timers"), timeout_s=5)
            agent.run_queue("timers", polls)
            turns = agent.receive("turns")
        assert agent.turn_item(sid, 1)["completed_by"] == "a2a_poll"
        agent.run_queue("turns", turns)
    s = _session(agent, sid)
    assert s["status"] == "idle"
    assert s["messages"][2]["content"][0]["toolResult"]["content"][0]["text"] == "echo: poll me"


def test_an_sdk_agent_s_question_is_answered_on_its_task_and_it_finishes(aws, monkeypatch):
    from flightdeck.domain.a2a.client import clear_card_cache

    clear_card_cache()
    executor = AskingExecutor()
    with sdk_agent(push=True, executor=executor) as peer_url, gateway("orchestrator") as gateway_url:
        agent = _delegating(monkeypatch, peer_url, gateway_url)
        sid = new_session_id()
        agent.api("chat_post", body={"session_id": sid, "content": "@echo ?ask which year? summarise ?answer 2024"})
        with pumping(agent, "turns", "dispatch"):
            s = _wait_for(lambda: (lambda v: v if v["status"] == "idle" else None)(_session(agent, sid)), 20)
    results = [b["toolResult"] for m in s["messages"] for b in m["content"] if "toolResult" in b]
    asked = json.loads(results[0]["content"][0]["text"])
    [(first, task_id, context_id), (second, again_task, again_context)] = executor.seen
    assert asked == {
        "status": "input_required",
        "question": "which year?",
        "context_id": context_id,
        "task_id": task_id,
    }
    assert (second, again_task, again_context) == ("2024", task_id, context_id)  # the same task, answered
    assert results[1]["content"][0]["text"] == "echo: 2024 (answering which year?)"
    assert "echo: 2024 (answering which year?)" in s["messages"][-1]["content"][0]["text"]
