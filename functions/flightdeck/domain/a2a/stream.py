"""message/stream and tasks/resubscribe: a task's A2A v0.3 events as it moves, read from its stored state.

The events, in order (the HTTP layer wraps each in a JSON-RPC response with the request's id,
one SSE `data:` line each):

1. the Task (kind "task"): as message/send answers it (working, or submitted), or on
   tasks/resubscribe as it stands now (its artifacts included once it completed);
2. status-update events (state working, final false) as the session moves, one per step of
   its timeline (flightdeck.domain.timeline: thinking, delegating to <agent>, <agent>
   answered, timed out, "2 of 3 delegations answered"...): the step in words as the status
   message, and as data in metadata.flightdeck;
3. the answer as artifact-update events (the first replaces the artifact, the others append,
   the last has lastChunk): while a think runs, the text it has produced so far, relayed as it
   grows (flightdeck.domain.live: the stream marks the session watched, the turn worker writes
   the text at most once per poll interval, each poll relays what is new); once the task
   completed, the rest of the stored answer word by word, lastChunk on the last (an empty
   text when nothing was left). The stored answer is the source of truth: when what was
   relayed is not its beginning (the think that answered is not the one relayed: that one
   called tools, or was retried), the answer replaces it, word by word from an append false;
   after the last append false, the chunks joined are the stored answer; a task held to a schema has its
   data part (the JSON, or the mismatch marked: flightdeck.domain.a2a.contracts) in the last chunk too;
4. last: a status-update with final true and the state the task ended in (completed, failed,
   canceled, rejected; input-required and auth-required end a stream too).

The status timestamps of a stream never go back (_Stamps).

Each poll reads the task (A2AStatePort.get_task: one GetItem) and the session's timeline
and live text (SessionsPort.get_session: one Query, and get_results while its turn waits: one
more): at most three requests per poll interval, the last poll included (the steps since the
one before go out before the answer). Besides, one write marks the session watched (before the
task starts on message/stream, on the first poll on tasks/resubscribe) and one again each
WATCH_MS / 2 while the task runs. Closing the stream stops the reads and nothing else: the
task goes on, and tasks/resubscribe (or tasks/get) finds it.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

from flightdeck.domain.a2a.contracts import answer_parts
from flightdeck.domain.a2a.ports import TaskRecord, parse_task_id, ports
from flightdeck.domain.a2a.tasks import (
    agent_message,
    answer_artifact_id,
    render_task,
    send_message,
    status_of,
    visible_task,
)
from flightdeck.domain.a2a.wire import TERMINAL_STATES, MessageSendParams, TaskIdParams
from flightdeck.domain.live import TextFollower, keep_watching, live_text, start_watching
from flightdeck.domain.model import word_chunks
from flightdeck.domain.ports import Deps
from flightdeck.domain.session_events import read_timeline
from flightdeck.domain.streaming import Note, Pace, Step, paced
from flightdeck.domain.timeline import PROGRESS_KINDS, TimelineEvent, describe

# A stream ends in these states: the terminal ones, and those that wait for the client.
STREAM_END_STATES = TERMINAL_STATES | {"input-required", "auth-required"}
# A long answer goes out in at most this many pieces (words grouped), not one event per word.
MAX_ANSWER_CHUNKS = 200

Event = dict[str, Any]


def _iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


class _Stamps:
    """A stream's status timestamps, never earlier than the one before. A step is stamped when a poll
    finds it (no step records its time), and the task's status with when the task got there: found on
    the poll that sees the task over, a step is stamped no later than the task's end, and what a poll
    stamped after that end (or a clock of another function behind this one's) moves the status's on."""

    def __init__(self, deps: Deps) -> None:
        self._deps = deps
        self._last = 0

    def _after(self, ms: int) -> str:
        self._last = max(self._last, ms)
        return _iso(self._last)

    def step(self, rec: TaskRecord, over: bool) -> str:
        now = self._deps.clock.now_ms()
        return self._after(min(now, rec.updated_ms) if over else now)

    def status(self, rec: TaskRecord) -> dict[str, Any]:
        status = status_of(rec)
        status["timestamp"] = self._after(rec.updated_ms)
        return status


def status_update(
    rec: TaskRecord, status: dict[str, Any], final: bool, metadata: dict[str, Any] | None = None
) -> Event:
    event: Event = {
        "kind": "status-update",
        "taskId": rec.task_id,
        "contextId": rec.session_id,
        "status": status,
        "final": final,
    }
    if metadata:
        event["metadata"] = metadata
    return event


def artifact_chunk(rec: TaskRecord, text: str, append: bool, last: bool) -> Event:
    return {
        "kind": "artifact-update",
        "taskId": rec.task_id,
        "contextId": rec.session_id,
        "artifact": {
            "artifactId": answer_artifact_id(rec),
            "name": "answer",
            "parts": [{"kind": "text", "text": text}],
        },
        "append": append,
        "lastChunk": last,
    }


def artifact_updates(rec: TaskRecord, rest: str | None = None) -> list[Event]:
    """The stored answer word by word (rest None), or only its `rest` after what was relayed live."""
    chunks = word_chunks(rec.answer if rest is None else rest, MAX_ANSWER_CHUNKS)
    return [
        artifact_chunk(rec, chunk, append=rest is not None or index > 0, last=index == len(chunks) - 1)
        for index, chunk in enumerate(chunks)
    ]


def ending(rec: TaskRecord, relayed: TextFollower | None = None, status: dict[str, Any] | None = None) -> list[Event]:
    """The events that close a task's stream: its answer (if it completed; after what `relayed` sent of it
    already), then the final status (`status`: as the stream stamped it)."""
    events = artifact_updates(rec, relayed.rest(rec.answer) if relayed else None) if rec.state == "completed" else []
    data = [p for p in answer_parts(rec.answer, rec.contract) if p["kind"] == "data"] if events else []
    if data:
        # Held to a schema: the last chunk also carries the answer as data (or its mismatch, marked), so the
        # artifact a client assembles is the one tasks/get shows: the text, and the data part.
        events[-1]["artifact"]["parts"].extend(data)
    events.append(status_update(rec, status or status_of(rec), final=True))
    return events


def _progress(rec: TaskRecord, step: TimelineEvent, timestamp: str) -> Event:
    # A step happened while the task worked, even when it is reported on the poll that found it over.
    state = "working" if rec.state in STREAM_END_STATES else rec.state
    status = {
        "state": state,
        "timestamp": timestamp,
        "message": agent_message(rec, describe(step), f"step-{step.id}"),
    }
    return status_update(rec, status, final=False, metadata={"flightdeck": step.as_dict(rec.session_id)})


def follow(
    deps: Deps, session_id: str, key: str, pace: Pace, state: str, *, since_task_message: bool
) -> Iterator[Event | Note]:
    """The task's events after the first one, to its final status-update.

    since_task_message: report the steps after the task's own message (message/stream: the task
    just started on an idle session, so its message is the session's latest); otherwise only the
    steps from now on (tasks/resubscribe: the Task sent first says what happened before).
    """
    a2a = ports(deps).store
    sent: set[str] = set()
    last: dict[str, Any] = {"state": state, "baseline": None}
    relayed = TextFollower()
    stamps = _Stamps(deps)

    def step() -> Step[Event]:
        rec = a2a.get_task(session_id, key)
        if rec is None:  # expired (retention): nothing more will happen
            return Step([], done=True)
        over = rec.state in STREAM_END_STATES
        events: list[Event] = []
        if rec.state != last["state"] and not over:
            last["state"] = rec.state
            events.append(status_update(rec, stamps.status(rec), final=False))
        # Also once when it is over: the steps since the last poll (the last answer, the last think) first.
        session = deps.sessions.get_session(session_id)
        if session is not None and not over:
            keep_watching(deps, session)
        timeline = read_timeline(deps, session) if session is not None else []
        if last["baseline"] is None:
            if since_task_message:
                mine = max((i for i, e in enumerate(timeline) if e.kind == "message"), default=-1)
                last["baseline"] = {e.id for e in timeline[: mine + 1]}
            else:
                last["baseline"] = {e.id for e in timeline}
        for event in timeline:
            if event.kind in PROGRESS_KINDS and event.id not in sent and event.id not in last["baseline"]:
                sent.add(event.id)
                events.append(_progress(rec, event, stamps.step(rec, over)))
        if over:
            return Step(events + ending(rec, relayed, stamps.status(rec)), done=True)
        live = live_text(session) if session is not None else None
        piece = relayed.next_piece(live) if live is not None else None
        if piece is not None:
            text, offset = piece
            events.append(artifact_chunk(rec, text, append=offset > 0, last=False))
        return Step(events)

    return paced(pace, step)


def message_stream(
    deps: Deps, params: MessageSendParams, pace: Pace, remaining_ms: int | None = None, caller: str | None = None
) -> Iterator[Event | Note]:
    """Start the task as message/send does (its A2AError raised here, before any event), then its events."""
    config = params.configuration
    if config is not None and config.blocking:
        # The stream is the wait: the first event goes out as soon as the task exists.
        params = params.model_copy(update={"configuration": config.model_copy(update={"blocking": False})})
    task = send_message(deps, params, remaining_ms, caller, before_start=lambda sid: start_watching(deps, sid))
    session_id, key = parse_task_id(task["id"]) or ("", "")
    state = task["status"]["state"]

    def events() -> Iterator[Event | Note]:
        yield task
        if state in STREAM_END_STATES:
            rec = ports(deps).store.get_task(session_id, key)
            if rec is not None:
                yield from ending(rec)
            return
        # A message that continues a working task reports the steps from now on (those before it were
        # the task's own, already followed); a new task's, those after its message.
        yield from follow(deps, session_id, key, pace, state, since_task_message=not params.message.taskId)

    return events()


def resubscribe(deps: Deps, params: TaskIdParams, pace: Pace, caller: str | None = None) -> Iterator[Event | Note]:
    """The task as it stands (A2AError -32001 raised here for a task the caller cannot see), then its events."""
    rec = visible_task(deps, params.id, caller)

    def events() -> Iterator[Event | Note]:
        yield render_task(deps, rec)
        if rec.state in STREAM_END_STATES:
            yield status_update(rec, status_of(rec), final=True)
            return
        yield from follow(deps, rec.session_id, rec.key, pace, rec.state, since_task_message=False)

    return events()
