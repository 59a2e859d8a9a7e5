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

Every event has an SSE id, the stream's position after it (flightdeck.domain.resume): a client that
reconnects with Last-Event-ID (tasks/resubscribe or SubscribeToTask again, or message/stream with the same
messageId, which is the same message) gets the events after that one and none twice: no Task first, the
steps after it, the live text on from its offset, the answer's chunks on from theirs, the final status if it
was not sent. For the ids, the Task of a running task goes out with the first poll's events (that poll reads
the timeline, which says where the stream starts); a task that ended needs no timeline: every step of it
is before the Task.

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

from flightdeck.domain.a2a.checks import visible_task
from flightdeck.domain.a2a.contracts import answer_parts
from flightdeck.domain.a2a.core_models import SendMessageRequest, SubscribeToTaskRequest
from flightdeck.domain.a2a.ports import TaskRecord, parse_task_id, ports
from flightdeck.domain.a2a.protocol import TERMINAL_STATES, UNSUPPORTED_OPERATION, A2AError
from flightdeck.domain.a2a.render import agent_message, answer_artifact_id, render_task, status_of
from flightdeck.domain.a2a.resumption import for_task
from flightdeck.domain.a2a.tasks import send_message
from flightdeck.domain.live import TextFollower, keep_watching, live_text, start_watching
from flightdeck.domain.model import word_chunks
from flightdeck.domain.ports import Deps
from flightdeck.domain.resume import ALL, Cursor, Marked, handled_ids, mark
from flightdeck.domain.session_events import read_timeline, resume_text
from flightdeck.domain.streaming import Note, Pace, Step, paced
from flightdeck.domain.timeline import PROGRESS_KINDS, TimelineEvent, describe

# A stream ends in these states: the terminal ones, and those that wait for the client.
STREAM_END_STATES = TERMINAL_STATES | {"input-required", "auth-required"}
# Cursor.e once the answer's last chunk went out (or the Task that carries the answer whole).
ANSWERED = -1
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
    return [m.event for m in marked_ending(rec, Cursor(a=ALL, s=rec.state), relayed, status)]


def marked_ending(
    rec: TaskRecord, at: Cursor, relayed: TextFollower | None = None, status: dict[str, Any] | None = None
) -> list[Marked[Event]]:
    """ending(), each event with its id: the chunks with the answer's offset they reach (ANSWERED after the
    last), the final status. A stream at ANSWERED sends the final status only."""
    rest = relayed.rest(rec.answer) if relayed else None
    events = artifact_updates(rec, rest) if rec.state == "completed" and at.e != ANSWERED else []
    data = [p for p in answer_parts(rec.answer, rec.contract) if p["kind"] == "data"] if events else []
    if data:
        # Held to a schema: the last chunk also carries the answer as data (or its mismatch, marked), so the
        # artifact a client assembles is the one tasks/get shows: the text, and the data part.
        events[-1]["artifact"]["parts"].extend(data)
    marked = []
    offset = len(rec.answer) - len(rest) if rest is not None else 0
    for event in events:
        offset += sum(len(p.get("text", "")) for p in event["artifact"]["parts"] if p.get("kind") == "text")
        marked.append(Marked(event, at.with_(t=None, e=ANSWERED if event["lastChunk"] else offset).encode()))
    final = status_update(rec, status or status_of(rec), final=True)
    marked.append(Marked(final, at.with_(t=None, s=rec.state, e=None, f=True).encode()))
    return marked


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
    deps: Deps,
    session_id: str,
    key: str,
    pace: Pace,
    state: str,
    *,
    since_task_message: bool,
    first: Event | None = None,
    cursor: Cursor | None = None,
) -> Iterator[Marked[Event] | Note]:
    """The task's events after the first one, to its final status-update, each with its id.

    since_task_message: report the steps after the task's own message (message/stream: the task
    just started on an idle session, so its message is the session's latest); otherwise only the
    steps from now on (tasks/resubscribe: the Task sent first says what happened before).
    first: the Task, sent with the first poll's events (its id says where the timeline stood).
    cursor: a Last-Event-ID: the events after it (and no Task first).
    """
    a2a = ports(deps).store
    handled: set[str] = set()
    at = [cursor or Cursor(s=state)]
    relayed = TextFollower()
    stamps = _Stamps(deps)
    started = [False]

    def step() -> Step[Marked[Event]]:
        rec = a2a.get_task(session_id, key)
        if rec is None:  # expired (retention): nothing more will happen
            return Step([], done=True)
        over = rec.state in STREAM_END_STATES
        if at[0].f and rec.state == at[0].s:
            return Step([], done=True)  # the client had the final event, and the task has not moved since
        out: list[Marked[Event]] = []
        # Also once when it is over: the steps since the last poll (the last answer, the last think) first.
        session = deps.sessions.get_session(session_id)
        if session is not None and not over:
            keep_watching(deps, session)
        timeline = read_timeline(deps, session) if session is not None else []

        def here(**changes: Any) -> str:
            anchor, extra = mark(timeline, lambda e: e.kind not in PROGRESS_KINDS or e.id in handled)
            at[0] = at[0].with_(a=anchor, x=extra, **changes)
            return at[0].encode()

        if not started[0]:
            started[0] = True
            if cursor is not None:
                handled.update(handled_ids(timeline, cursor))
                if cursor.f:  # the task moved on since its last final event (input-required, answered)
                    at[0] = at[0].with_(f=False, e=None)
                elif cursor.e is not None and cursor.e != ANSWERED:
                    relayed.key, relayed.sent = (0, 0), rec.answer[: cursor.e]
                elif cursor.t is not None and session is not None:
                    resume_text(relayed, session, cursor.t)
            elif since_task_message:
                mine = max((i for i, e in enumerate(timeline) if e.kind == "message"), default=-1)
                handled.update(e.id for e in timeline[: mine + 1])
            else:
                handled.update(e.id for e in timeline)
            if first is not None:
                out.append(Marked(first, here()))
        if rec.state != at[0].s and not over:
            out.append(Marked(status_update(rec, stamps.status(rec), final=False), here(s=rec.state)))
        for event in timeline:
            if event.kind in PROGRESS_KINDS and event.id not in handled:
                handled.add(event.id)
                out.append(Marked(_progress(rec, event, stamps.step(rec, over)), here()))
        if over:
            here()
            return Step(out + marked_ending(rec, at[0], relayed, stamps.status(rec)), done=True)
        live = live_text(session) if session is not None else None
        piece = relayed.next_piece(live) if live is not None else None
        if live is not None and piece is not None:
            text, offset = piece
            chunk = artifact_chunk(rec, text, append=offset > 0, last=False)
            out.append(Marked(chunk, here(t=(live.turn, live.attempt, offset + len(text)))))
        return Step(out)

    return paced(pace, step)


def message_stream(
    deps: Deps,
    params: SendMessageRequest,
    pace: Pace,
    remaining_ms: int | None = None,
    caller: str | None = None,
    cursor: Cursor | None = None,
) -> Iterator[Marked[Event] | Note]:
    """Start the task as message/send does (its A2AError raised here, before any event), then its events;
    with `cursor` (the same message again, with Last-Event-ID, if it names a position of this task), the
    events after it."""
    config = params.configuration
    if not config.returnImmediately:
        # The stream is the wait: the first event goes out as soon as the task exists.
        params = params.model_copy(update={"configuration": config.model_copy(update={"returnImmediately": True})})
    task = send_message(deps, params, remaining_ms, caller, before_start=lambda sid: start_watching(deps, sid))
    if task.get("kind") == "message":  # answered at once, no task (flightdeck.domain.a2a.test_agent)
        return iter([Marked(task, Cursor(f=True).encode())])
    session_id, key = parse_task_id(task["id"]) or ("", "")
    cursor = for_task(cursor, task["id"])
    state = task["status"]["state"]

    def events() -> Iterator[Marked[Event] | Note]:
        if state in STREAM_END_STATES and cursor is None:
            yield Marked(task, Cursor(a=ALL, s=state).encode())
            rec = ports(deps).store.get_task(session_id, key)
            if rec is not None:
                yield from marked_ending(rec, Cursor(a=ALL, s=state))
            return
        # A message that continues a working task reports the steps from now on (those before it were
        # the task's own, already followed); a new task's, those after its message.
        yield from follow(
            deps,
            session_id,
            key,
            pace,
            state,
            since_task_message=not params.message.taskId,
            first=None if cursor is not None else task,
            cursor=cursor,
        )

    return events()


def resubscribe(
    deps: Deps,
    params: SubscribeToTaskRequest,
    pace: Pace,
    caller: str | None = None,
    cursor: Cursor | None = None,
    *,
    refuse_finished: bool = False,
) -> Iterator[Marked[Event] | Note]:
    """The task as it stands (A2AError -32001 raised here for a task the caller cannot see), then its events;
    with `cursor` (Last-Event-ID, if it names a position of this task), only the events after it.
    `refuse_finished` (v1.0's SubscribeToTask): a task already completed, failed, canceled or rejected is -32004
    (UnsupportedOperationError), unless resumed."""
    rec = visible_task(deps, params.id, caller)
    cursor = for_task(cursor, rec.task_id)
    if refuse_finished and cursor is None and rec.state in TERMINAL_STATES:
        raise A2AError(
            UNSUPPORTED_OPERATION,
            f"Unsupported operation: task {rec.task_id} is {rec.state}, it has no updates to subscribe to "
            "(GetTask reads it)",
            {"taskId": rec.task_id, "state": rec.state},
        )

    def events() -> Iterator[Marked[Event] | Note]:
        if cursor is None and rec.state in STREAM_END_STATES:
            yield Marked(render_task(deps, rec), Cursor(a=ALL, s=rec.state, e=ANSWERED).encode())
            final = status_update(rec, status_of(rec), final=True)
            yield Marked(final, Cursor(a=ALL, s=rec.state, f=True).encode())
            return
        first = render_task(deps, rec) if cursor is None else None
        yield from follow(
            deps, rec.session_id, rec.key, pace, rec.state, since_task_message=False, first=first, cursor=cursor
        )

    return events()
