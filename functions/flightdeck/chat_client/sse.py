"""Server-Sent Events as a client reads them (the WHATWG event-stream format), from the bytes of a response.

Hand-written because the client's one HTTP library, requests, has no SSE reader, and the packages
that have one are not dependencies of the client (httpx-sse needs httpx; sseclient is unmaintained):
the format is small. What the format says, and no more: lines end at LF, CRLF or CR (a CR at the end
of a chunk waits for the next one); `data:` lines join with LF; `event:` and `id:` set the event's
type and id; a blank line dispatches the event, unless it has no data; a line starting with `:` is a
comment (servers' keep-alives: returned, a caller may ignore them or read what they say); unknown
fields (`retry:`) are ignored; an event cut off by the end of the stream is not dispatched.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass

# A line longer than this is not an event stream's (one event of ours is one answer's text, well under
# it): the stream is given up rather than buffered without end.
MAX_LINE_BYTES = 8 * 1024 * 1024


@dataclass(frozen=True)
class ServerEvent:
    data: str
    event: str = "message"  # the type, "message" unless the event says otherwise
    id: str | None = None  # the event's own id field, if it had one


@dataclass(frozen=True)
class Comment:
    text: str


class StreamError(Exception):
    """The bytes are not an event stream a client can go on reading."""


def _lines(chunks: Iterable[bytes]) -> Iterator[bytes]:
    buffer = b""
    for chunk in chunks:
        buffer += chunk
        start = 0
        while True:
            cr, lf = buffer.find(b"\r", start), buffer.find(b"\n", start)
            end = min(i for i in (cr, lf) if i >= 0) if cr >= 0 or lf >= 0 else -1
            if end < 0 or (end == cr and end == len(buffer) - 1):  # no line end yet, or a CR that may precede LF
                break
            yield buffer[start:end]
            start = end + 2 if end == cr and buffer[end + 1 : end + 2] == b"\n" else end + 1
        buffer = buffer[start:]
        if len(buffer) > MAX_LINE_BYTES:
            raise StreamError(f"a line of more than {MAX_LINE_BYTES} bytes")
    if buffer.endswith(b"\r"):
        yield buffer[:-1]  # the stream ended right after a CR: that ended the line


def read_events(chunks: Iterable[bytes]) -> Iterator[ServerEvent | Comment]:
    """Each event and comment of the stream, as it is complete (chunks: the body as it arrives)."""
    data: list[str] = []
    event_type, event_id = "", None
    first = True
    for raw in _lines(chunks):
        line = raw.decode("utf-8", "replace")
        if first:
            line, first = line.removeprefix("\ufeff"), False  # a byte order mark opens the stream at most
        if not line:
            if data:
                yield ServerEvent("\n".join(data), event_type or "message", event_id)
            data, event_type = [], ""  # the id stays: the spec's last event id
            continue
        if line.startswith(":"):
            yield Comment(line[1:].removeprefix(" "))
            continue
        name, colon, value = line.partition(":")
        value = value.removeprefix(" ") if colon else ""
        if name == "data":
            data.append(value)
        elif name == "event":
            event_type = value
        elif name == "id" and "\0" not in value:
            event_id = value
