"""The strict a2a-sdk 1.x client and the stream-resumption extension: run by
tests/integration/test_a2a_stream_resumption_ext.py in the 1.x SDK's own venv, as
`python a2a1_resuming_client.py URL TOKEN URI`. It imports nothing of ours.

One client asks for the extension (A2A-Extensions on its HTTP client), streams a task to its end and reads
each event's sequence and cursor from its metadata; another, with the cursor of an event before the end as
Last-Event-ID, subscribes to the task; a third asks for nothing and streams another task. It prints one JSON
object of what it saw (sequences, what resumed, whether the plain client saw the URI) and exits 0.
"""

from __future__ import annotations

import asyncio
import json
import sys
import uuid

import httpx
from a2a.client import A2ACardResolver, ClientConfig, ClientFactory
from a2a.types import a2a_pb2 as pb
from google.protobuf import json_format


def _message(text: str) -> pb.SendMessageRequest:
    return pb.SendMessageRequest(
        message=pb.Message(role=pb.ROLE_USER, parts=[pb.Part(text=text)], message_id=str(uuid.uuid4()))
    )


def _ours(event: pb.StreamResponse, uri: str) -> dict:
    payload = json_format.MessageToDict(getattr(event, event.WhichOneof("payload")))
    return (payload.get("metadata") or {}).get(uri) or {}


async def _events(url: str, headers: dict[str, str], call) -> list[pb.StreamResponse]:
    """What `call(client)` streams, through a client whose HTTP client sends these headers."""
    async with httpx.AsyncClient(timeout=60, headers=headers) as http:
        card = await A2ACardResolver(http, url).get_agent_card()
        client = ClientFactory(ClientConfig(streaming=True, httpx_client=http)).create(card)
        return [e async for e in call(client)]


async def main(url: str, token: str, uri: str) -> dict:
    seen: dict = {}
    auth = {"Authorization": f"Bearer {token}"}
    events = await _events(url, {**auth, "A2A-Extensions": uri}, lambda c: c.send_message(_message("name two rivers")))
    ours = [_ours(e, uri) for e in events]
    seen["sequences"] = [o.get("sequence") for o in ours]
    task_id = events[0].task.id
    k = len(events) - 2  # resumed after event k (its sequence is k): the last two events again
    resuming = {**auth, "A2A-Extensions": uri, "Last-Event-ID": ours[k - 1]["cursor"]}
    again = await _events(url, resuming, lambda c: c.subscribe(pb.SubscribeToTaskRequest(id=task_id)))
    seen["resumed_after"] = k
    seen["resumed"] = [_ours(e, uri).get("sequence") for e in again]
    seen["resumed_same"] = [e.SerializeToString() for e in again] == [e.SerializeToString() for e in events[k:]]
    events = await _events(url, auth, lambda c: c.send_message(_message("name a lake")))
    seen["plain_end"] = pb.TaskState.Name(events[-1].status_update.status.state)
    seen["plain_saw_uri"] = any(uri in json.dumps(json_format.MessageToDict(e)) for e in events)
    return seen


if __name__ == "__main__":
    print(json.dumps(asyncio.run(main(*sys.argv[1:4]))))
