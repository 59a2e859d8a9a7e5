"""A strict a2a-sdk 1.x agent (v1.0 only: no v0.3 compatibility on its endpoint), as a delegate of ours: run by
tests/integration/test_a2a_v1_client.py in the 1.x SDK's own venv (tests/support/a2a1.py), as
`python a2a1_server.py PUSH [GATE]` (PUSH: 1 or 0, the card's pushNotifications). It prints its base URL on one
line, then serves until killed. It answers every message with an artifact "echo: <text>" after a short
pause (a message with "slow" in it: after a minute, so that it can be canceled while working); it imports
nothing of ours. With GATE (a file's path) it is an agent that asks (Asking).
"""

from __future__ import annotations

import asyncio
import socket
import sys
from pathlib import Path

import httpx
import uvicorn
from a2a.helpers.proto_helpers import new_task_from_user_message
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events import EventQueue
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes
from a2a.server.tasks import BasePushNotificationSender, InMemoryPushNotificationConfigStore, InMemoryTaskStore
from a2a.server.tasks.task_updater import TaskUpdater
from a2a.types import a2a_pb2 as pb
from starlette.applications import Starlette


class Echo(AgentExecutor):
    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        task = context.current_task
        if task is None:
            task = new_task_from_user_message(context.message)
            await event_queue.enqueue_event(task)
        updater = TaskUpdater(event_queue, task.id, task.context_id)
        await updater.start_work()
        await asyncio.sleep(60 if "slow" in context.get_user_input() else 0.3)
        await updater.add_artifact([pb.Part(text=f"echo: {context.get_user_input()}")], name="answer")
        await updater.complete()

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        await TaskUpdater(event_queue, context.task_id, context.context_id).cancel()


class Asking(AgentExecutor):
    """Asks "which year?" when the message says ?ask. Given the answer it shows the first chunk of its artifact
    while the task still says input-required (its question as it was), and appends the rest and completes
    once the gate file exists (the test's cue that we have read that first state)."""

    def __init__(self, gate: Path):
        self.gate = gate

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        task = context.current_task
        if task is None:
            task = new_task_from_user_message(context.message)
            await event_queue.enqueue_event(task)
        updater = TaskUpdater(event_queue, task.id, task.context_id)
        text = context.get_user_input()
        if "?ask" in text:
            await updater.start_work()
            await updater.requires_input(updater.new_agent_message([pb.Part(text="which year?")]))
            return
        await updater.add_artifact([pb.Part(text=f"echo: {text}")], artifact_id="answer", name="answer")
        while not self.gate.exists():
            await asyncio.sleep(0.02)
        await updater.add_artifact([pb.Part(text=" (answering which year?)")], artifact_id="answer", append=True)
        await updater.complete()

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        await TaskUpdater(event_queue, context.task_id, context.context_id).cancel()


def main() -> None:
    push = sys.argv[1] == "1"
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    sock.listen(128)  # a client that connects once the URL is printed waits in the backlog for uvicorn
    url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    card = pb.AgentCard(
        name="echo1",
        description="a strict a2a-sdk 1.x echo agent",
        version="1.0.0",
        supported_interfaces=[pb.AgentInterface(url=url + "/a2a", protocol_binding="JSONRPC", protocol_version="1.0")],
        default_input_modes=["text/plain"],
        default_output_modes=["text/plain"],
        capabilities=pb.AgentCapabilities(streaming=True, push_notifications=push),
        skills=[pb.AgentSkill(id="echo", name="echo", description="echoes", tags=["echo"])],
    )
    extra = {}
    if push:
        store = InMemoryPushNotificationConfigStore()
        extra = {"push_config_store": store, "push_sender": BasePushNotificationSender(httpx.AsyncClient(), store)}
    executor = Asking(Path(sys.argv[2])) if len(sys.argv) > 2 else Echo()
    handler = DefaultRequestHandler(agent_executor=executor, task_store=InMemoryTaskStore(), agent_card=card, **extra)
    app = Starlette(routes=create_agent_card_routes(card) + create_jsonrpc_routes(handler, "/a2a"))
    print(url, flush=True)
    uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off")).run(sockets=[sock])


if __name__ == "__main__":
    main()
