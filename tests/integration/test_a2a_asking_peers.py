"""A peer that asks a question (issue 39): after we answer, peers differ in what they send first (a2a-sdk 0.3
republishes the stored task still input-required, its question moved to history, with the answer's first
artifact chunk; others the task as it was). An update that still carries the question we answered, or none
newer, is the task working on our answer, not a new question: by poll, push (our agent delegating) and
stream (`flightdeck chat --a2a`), against a2a-sdk 0.3 (in process) and 1.3.0 (its own venv, v1.0) agents.
The answer comes as appended chunks of one artifact, which reach us as one text.

Each agent shows that first state until a gate opens, which the test opens once we have read it."""

from __future__ import annotations

import asyncio
import io
import json
import re
import subprocess
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import requests
from a2a import types as sdk
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events import EventQueue
from a2a.server.tasks import TaskUpdater
from a2a.utils import new_task

from flightdeck.chat_client.a2a_chat import A2AChat
from flightdeck.chat_client.transport import Console, Polling
from tests.integration.test_a2a_interop import _delegating, _session, _wait_for, sdk_agent
from tests.support import a2a1
from tests.support.harness import new_session_id
from tests.support.inprocess import gateway, pumping

SERVER_1X = Path(__file__).resolve().parents[1] / "support" / "a2a1_server.py"
ANSWER = "echo: 2024 (answering which year?)"


class AnswersLate(AgentExecutor):
    """a2a-sdk 0.3's counterpart of tests/support/a2a1_server.Asking."""

    def __init__(self):
        self.gate = threading.Event()
        self.seen: list[str] = []

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        task = context.current_task
        if task is None:
            task = new_task(context.message)
            await event_queue.enqueue_event(task)
        text = context.get_user_input()
        self.seen.append(text)
        updater = TaskUpdater(event_queue, task.id, task.context_id)
        if "?ask" in text:
            await updater.start_work()
            await updater.requires_input(
                updater.new_agent_message([sdk.Part(root=sdk.TextPart(text="which year?"))]), final=True
            )
            return
        await updater.add_artifact([sdk.Part(root=sdk.TextPart(text=f"echo: {text}"))], "answer", name="answer")
        while not self.gate.is_set():
            await asyncio.sleep(0.02)
        await updater.add_artifact(
            [sdk.Part(root=sdk.TextPart(text=" (answering which year?)"))], "answer", name="answer", append=True
        )
        await updater.complete()

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        await TaskUpdater(event_queue, context.task_id, context.context_id).cancel()


@contextmanager
def sdk03_asking(push: bool, streaming: bool = False) -> Iterator[tuple[str, Callable[[], None]]]:
    executor = AnswersLate()
    with sdk_agent(push=push, executor=executor, streaming=streaming) as url:
        yield url, executor.gate.set
    assert len(executor.seen) == 2, executor.seen  # asked once, answered once: no second answer


@contextmanager
def sdk1_asking(push: bool, gate: Path) -> Iterator[tuple[str, Callable[[], None]]]:
    proc = subprocess.Popen(
        [a2a1.python(), str(SERVER_1X), "1" if push else "0", str(gate)], stdout=subprocess.PIPE, text=True
    )
    try:
        url = proc.stdout.readline().strip()
        assert url.startswith("http://"), "the a2a-sdk 1.x agent did not start"
        yield url, gate.touch
    finally:
        proc.kill()
        proc.wait(5)


def _peer(sdk_version: str, push: bool, tmp_path: Path, streaming: bool = False):
    return sdk03_asking(push, streaming) if sdk_version == "0.3" else sdk1_asking(push, tmp_path / "gate")


def _remotes(agent) -> list[dict]:
    return [i for i in agent.table_items() if i["sk"]["S"].startswith("A2A#REMOTE#")]


@pytest.mark.parametrize("push", [False, True], ids=["polled", "pushed"])
@pytest.mark.parametrize("sdk_version", ["0.3", "1.3"])
def test_a_peer_still_showing_the_question_we_answered_is_working_on_it(aws, monkeypatch, tmp_path, sdk_version, push):
    from flightdeck.domain.a2a.client import clear_card_cache

    clear_card_cache()
    with _peer(sdk_version, push, tmp_path) as (peer_url, open_gate), gateway("orchestrator") as gateway_url:
        agent = _delegating(monkeypatch, peer_url, gateway_url)
        sid = new_session_id()
        agent.api("chat_post", body={"session_id": sid, "content": "@echo ?ask which year? summarise ?answer 2024"})
        with pumping(agent, "turns", "dispatch", "timers"):
            # The answer is sent (our second delegation's record): its send answer, and any push or poll
            # until the gate opens, still says input-required.
            _wait_for(lambda: len(_remotes(agent)) == 2, 30)
            open_gate()
            s = _wait_for(lambda: (lambda v: v if v["status"] == "idle" else None)(_session(agent, sid)), 30)
    results = [b["toolResult"] for m in s["messages"] for b in m["content"] if "toolResult" in b]
    assert json.loads(results[0]["content"][0]["text"])["question"] == "which year?"
    assert [r["content"][0]["text"] for r in results[1:]] == [ANSWER]  # the answer, not a second question
    assert ANSWER in s["messages"][-1]["content"][0]["text"]
    assert {r["mode"]["S"] for r in _remotes(agent)} == {"push" if push else "poll"}


class _Cue(io.StringIO):
    """The chat's timeline; calls `cue` once it has drawn a second task line (our answer's first event: polled,
    the task still input-required; streamed, the first chunk)."""

    def __init__(self, cue: Callable[[], None]):
        super().__init__()
        self.cue = cue

    def write(self, text: str) -> int:
        written = super().write(text)
        if len(re.findall(r"task \S+ \(context", self.getvalue())) >= 2:
            self.cue()
        return written


# Not 1.3 polled: a2a-sdk 1.3.0 answers a returnImmediately send at a task-level event, and the first event after
# the answer here is an artifact chunk held at the gate, which opens on that answer (the delegation tests poll 1.3).
@pytest.mark.parametrize(
    ("sdk_version", "streaming"),
    [("0.3", False), ("0.3", True), ("1.3", True)],
    ids=["0.3-polled", "0.3-streamed", "1.3-streamed"],
)
def test_the_chat_client_reads_a_question_it_answered_as_work_on_it(tmp_path, sdk_version, streaming):
    with _peer(sdk_version, False, tmp_path, streaming) as (peer_url, open_gate):
        out, err = io.StringIO(), _Cue(open_gate)
        chat = A2AChat(peer_url, None, Console(out, err), Polling(first_s=0.05, max_s=0.2), requests.Session())
        chat.open()
        chat.streaming = streaming  # the 1.x agent's card says it streams; polled: message/send, then tasks/get
        chat.say("?ask")
        assert chat.state == "input-required" and out.getvalue().strip() == "which year?"
        chat.say("2024")
        assert chat.state == "completed", err.getvalue()
        assert out.getvalue().strip().splitlines()[-1] == ANSWER
