"""The stream-resumption extension (ahead of A2A v1.1; it follows the draft of a2aproject/A2A#1986).

Every A2A stream (message/stream, tasks/resubscribe, SendStreamingMessage, SubscribeToTask) numbers its
events, and each event's SSE id is a cursor: the stream's position after it (flightdeck.domain.resume), its
sequence number `n` and a short hash `k` of its task's id. What the extension adds, for a client that asks:

- asking: the request's `A2A-Extensions` header (v0.3: `X-A2A-Extensions`) lists STREAM_RESUMPTION_URI, or its
  params' metadata has the URI as a key (v0.3's tasks/resubscribe, and the sends of both versions);
- each event then carries `metadata[URI] = {"sequence": n, "cursor": "<its SSE id>"}`: sequence 1 is the
  stream's first event, each next one is one more, and a resumed stream goes on from the cursor's number, so
  a subscriber that read up to n gets n+1, n+2... (clients whose SDK hides SSE ids read the cursor here);
  the response's `A2A-Extensions` header names the URI;
- resuming: the cursor as `Last-Event-ID` (any version), or `metadata[URI] = {"cursor": "..."}` in the params
  (v0.3; v1.0's SubscribeToTaskRequest has no metadata field). The events after it, in order, each once
  (replay); or, when the cursor names no position of this task (another task's, forged, one this server
  never wrote), a gap: the stream starts again from the Task as it stands, sequence 1, its metadata
  `{"gap": true}`; the client replaces what it had with it.

The numbers count the events of one subscription and its resumptions, not of the task: our streams are
derived from the stored task and timeline, not stored event by event, so two subscribers that started apart
number apart (the draft's per-task counter would need a write per event). A client that asks nothing sees no
metadata and no header; its SSE ids are as opaque as before.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from flightdeck.domain import resume
from flightdeck.domain.resume import Cursor, Marked
from flightdeck.domain.streaming import Note

STREAM_RESUMPTION_URI = "urn:flightdeck:a2a:ext:stream-resumption:v1"
EXTENSIONS_HEADERS = ("a2a-extensions", "x-a2a-extensions")
CURSOR_FIELD = "cursor"


def _ours(metadata: Any) -> dict[str, Any] | None:
    given = metadata.get(STREAM_RESUMPTION_URI) if isinstance(metadata, dict) else None
    return given if isinstance(given, dict) else None


def asked(headers: Mapping[str, Any] | None, metadata: Any) -> bool:
    """Whether the request asks for the extension (its header's list, or its params' metadata)."""
    if _ours(metadata) is not None:
        return True
    for name, value in (headers or {}).items():
        if name.lower() in EXTENSIONS_HEADERS and isinstance(value, str):
            if STREAM_RESUMPTION_URI in (uri.strip() for uri in value.split(",")):
                return True
    return False


def cursor_given(last_event_id: str | None, metadata: Any) -> str | None:
    """The cursor to resume from: Last-Event-ID, else the params' metadata[URI].cursor."""
    if last_event_id:
        return last_event_id
    value = (_ours(metadata) or {}).get(CURSOR_FIELD)
    return value if isinstance(value, str) else None


def for_task(cursor: Cursor | None, task_id: str) -> Cursor | None:
    """The cursor if it names a position of this task, else None (the stream starts from the Task)."""
    return cursor if cursor is not None and cursor.k == resume.short(task_id) else None


def _task_id(event: dict[str, Any]) -> str:
    return str(event.get("taskId") or (event.get("id") if event.get("kind") == "task" else "") or "")


def _with_metadata(event: dict[str, Any], ours: dict[str, Any]) -> dict[str, Any]:
    return {**event, "metadata": {**(event.get("metadata") or {}), STREAM_RESUMPTION_URI: ours}}


def numbered(
    items: Iterator[Marked[dict[str, Any]] | Note], cursor: Cursor | None, resuming: bool, shown: bool
) -> Iterator[Marked[dict[str, Any]] | Note]:
    """The stream's events with their sequence numbers and task in their ids (and, `shown`, in their metadata).

    cursor: the one the request resumes from, as decoded (None: none, or one this server cannot read);
    resuming: the request gave one. A resumed stream never starts with a Task (flightdeck.domain.a2a.stream),
    so a Task first after a cursor says it named no position of the task: a gap, and the numbers start again."""
    sequence = cursor.n if cursor is not None else 0
    first = True
    for item in items:
        if isinstance(item, Note):
            yield item
            continue
        event = item.event
        gap = first and resuming and event.get("kind") == "task"
        if gap:
            sequence = 0
        first = False
        sequence += 1
        at = resume.decode(item.id)
        # (An id too long to read back names no position either way: it stays as it is.)
        event_id = at.with_(n=sequence, k=resume.short(_task_id(event))).encode() if at is not None else item.id
        if shown:
            ours: dict[str, Any] = {"sequence": sequence, CURSOR_FIELD: event_id}
            if gap:
                ours["gap"] = True
            event = _with_metadata(event, ours)
        yield Marked(event, event_id)


def extension_entry() -> dict[str, Any]:
    """The card's capabilities.extensions entry: optional, so a client that knows nothing of it is unaffected."""
    return {
        "uri": STREAM_RESUMPTION_URI,
        "description": "Stream resumption: with this URI in A2A-Extensions, each stream event's "
        f'metadata["{STREAM_RESUMPTION_URI}"] has its sequence number and cursor; SubscribeToTask / '
        "tasks/resubscribe (or the same send again) with the cursor as Last-Event-ID (v0.3 also: "
        f"metadata.{CURSOR_FIELD}) replays the events after it, each once, or, for a cursor that names no "
        "position of the task, starts again from the Task marked gap: true.",
        "required": False,
        "params": {
            "follows": ["a2aproject/A2A#1986 (reliable stream resumption)"],
            "cursorHeader": "Last-Event-ID",
            "cursorField": CURSOR_FIELD,
        },
    }
