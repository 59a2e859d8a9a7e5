"""The strict a2a-sdk 1.x client against one of our agents: run by tests/integration/test_a2a_v1_interop.py
in the 1.x SDK's own venv (tests/support/a2a1.py), as `python a2a1_client.py URL TOKEN HOOK_URL HOLD_FILE` (while HOLD_FILE exists the test runs no think).

It prints one JSON object of what it saw and exits 0, or a traceback and 1. It imports nothing of ours: the
SDK reads the card, chooses the JSONRPC 1.0 interface, sends A2A-Version: 1.0 and parses every answer with
protobuf's ParseDict (an unknown field is an error).
"""

from __future__ import annotations

import asyncio
import json
import sys
import uuid
from pathlib import Path

import httpx
from a2a.client import A2ACardResolver, ClientConfig, ClientFactory
from a2a.types import a2a_pb2 as pb
from a2a.utils.errors import TaskNotFoundError, UnsupportedOperationError


def message(text: str, task_id: str = "", context_id: str = "") -> pb.Message:
    return pb.Message(
        role=pb.ROLE_USER,
        parts=[pb.Part(text=text)],
        message_id=str(uuid.uuid4()),
        task_id=task_id,
        context_id=context_id,
    )


async def one(client, msg: pb.Message) -> list[pb.StreamResponse]:
    return [event async for event in client.send_message(pb.SendMessageRequest(message=msg))]


def state(task: pb.Task) -> str:
    return pb.TaskState.Name(task.status.state)


async def until(client, task_id: str, states: set[str], seconds: float = 30) -> pb.Task:
    for _ in range(int(seconds / 0.1)):
        task = await client.get_task(pb.GetTaskRequest(id=task_id))
        if state(task) in states:
            return task
        await asyncio.sleep(0.1)
    raise AssertionError(f"{task_id} never reached {states}: {state(task)}")


async def main(url: str, token: str, hook: str, hold: Path) -> dict:
    seen: dict = {}
    async with httpx.AsyncClient(timeout=60, headers={"Authorization": f"Bearer {token}"}) as http:
        card = await A2ACardResolver(http, url).get_agent_card()
        seen["interfaces"] = [(i.protocol_binding, i.protocol_version) for i in card.supported_interfaces]
        blocking = ClientFactory(ClientConfig(streaming=False, httpx_client=http)).create(card)
        polling = ClientFactory(ClientConfig(streaming=False, polling=True, httpx_client=http)).create(card)
        streaming = ClientFactory(ClientConfig(streaming=True, httpx_client=http)).create(card)
        seen["version_header"] = http.headers.get("A2A-Version")

        # send (blocking: v1.0's default), get
        [answer] = await one(blocking, message("how far is the moon"))
        seen["send"] = [state(answer.task), answer.task.artifacts[0].parts[0].text]
        got = await blocking.get_task(pb.GetTaskRequest(id=answer.task.id, history_length=1))
        seen["get"] = [state(got), len(got.history)]

        # returnImmediately, push config with authentication, list, cancel, the push itself
        [started] = await one(polling, message("@worker a long job"))
        long_id = started.task.id
        seen["immediately"] = state(started.task)
        config = pb.TaskPushNotificationConfig(
            task_id=long_id,
            id="cfg-1",
            url=f"{hook}/a2a",
            token="tok-1",
            authentication=pb.AuthenticationInfo(scheme="Bearer", credentials="secret-1"),
        )
        created = await polling.create_task_push_notification_config(config)
        seen["push_created"] = created == config
        fetched = await polling.get_task_push_notification_config(
            pb.GetTaskPushNotificationConfigRequest(task_id=long_id, id="cfg-1")
        )
        seen["push_get"] = fetched == config
        listed = await polling.list_task_push_notification_configs(
            pb.ListTaskPushNotificationConfigsRequest(task_id=long_id)
        )
        seen["push_list"] = [c.id for c in listed.configs]
        tasks = await polling.list_tasks(pb.ListTasksRequest(page_size=1))
        seen["list"] = [[t.id for t in tasks.tasks], bool(tasks.next_page_token), tasks.total_size]
        seen["list_first_is_latest"] = tasks.tasks[0].id == long_id
        canceled = await polling.cancel_task(pb.CancelTaskRequest(id=long_id))
        seen["cancel"] = state(canceled)
        await polling.delete_task_push_notification_config(
            pb.DeleteTaskPushNotificationConfigRequest(task_id=long_id, id="cfg-1")
        )
        listed = await polling.list_task_push_notification_configs(
            pb.ListTaskPushNotificationConfigsRequest(task_id=long_id)
        )
        seen["push_after_delete"] = len(listed.configs)

        # stream to the end; subscribing to the finished task is refused, as a2a-sdk's own server refuses it
        events = await one(streaming, message("name two rivers"))
        seen["stream"] = [e.WhichOneof("payload") for e in events]
        last = events[-1].status_update
        seen["stream_end"] = pb.TaskState.Name(last.status.state)
        seen["stream_text"] = "".join(
            p.text for e in events if e.HasField("artifact_update") for p in e.artifact_update.artifact.parts
        )
        stream_task = events[0].task.id
        try:
            [e async for e in streaming.subscribe(pb.SubscribeToTaskRequest(id=stream_task))]
            seen["subscribe_finished"] = "streamed"
        except UnsupportedOperationError:
            seen["subscribe_finished"] = "UnsupportedOperationError"

        # continuation: a message with the working task's id continues it (the test runs no think meanwhile)
        hold.touch()
        [first] = await one(polling, message("what is the capital of peru"))
        [more] = await one(polling, message("and how many people live there", task_id=first.task.id))
        hold.unlink()
        seen["continued_same_task"] = more.task.id == first.task.id
        done = await until(polling, first.task.id, {"TASK_STATE_COMPLETED"})
        seen["continued"] = [pb.Role.Name(m.role) for m in done.history]

        # input-required, answered by the next message on the task
        [asked] = await one(blocking, message("?ask which year? summarise"))
        seen["asked"] = [state(asked.task), asked.task.status.message.parts[0].text]
        # a task waiting for input is not finished: subscribing gives it as it stands
        request = pb.SubscribeToTaskRequest(id=asked.task.id)
        seen["subscribe"] = [e.WhichOneof("payload") async for e in streaming.subscribe(request)]
        [answered] = await one(blocking, message("2024", task_id=asked.task.id))
        seen["answered"] = [state(answered.task), answered.task.artifacts[0].parts[0].text]

        try:
            await blocking.get_task(pb.GetTaskRequest(id="nope~abc"))
        except TaskNotFoundError:
            seen["not_found"] = True
    return seen


if __name__ == "__main__":
    print(json.dumps(asyncio.run(main(*sys.argv[1:4], Path(sys.argv[4])))))
