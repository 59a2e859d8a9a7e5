"""Bedrock ConverseStream answers as the wire carries them (application/vnd.amazon.eventstream), for
botocore to parse: a test client's HTTP send is replaced, everything after it is botocore's own.

The framing (prelude, string headers, payload, CRC32s) is AWS's event stream encoding; botocore
only decodes it, so the encoder is written here.
"""

from __future__ import annotations

import binascii
import json
import struct
from typing import Any

from botocore.awsrequest import AWSResponse


def _header(name: str, value: str) -> bytes:
    n, v = name.encode(), value.encode()
    return struct.pack("!B", len(n)) + n + b"\x07" + struct.pack("!H", len(v)) + v  # 7: a string value


def message(headers: dict[str, str], payload: bytes) -> bytes:
    encoded = b"".join(_header(k, v) for k, v in headers.items())
    prelude = struct.pack("!II", 12 + len(encoded) + len(payload) + 4, len(encoded))
    prelude += struct.pack("!I", binascii.crc32(prelude) & 0xFFFFFFFF)
    body = prelude + encoded + payload
    return body + struct.pack("!I", binascii.crc32(body) & 0xFFFFFFFF)


def event(kind: str, body: dict[str, Any]) -> bytes:
    return message(
        {":message-type": "event", ":event-type": kind, ":content-type": "application/json"}, json.dumps(body).encode()
    )


def exception(kind: str, text: str) -> bytes:
    return message(
        {":message-type": "exception", ":exception-type": kind, ":content-type": "application/json"},
        json.dumps({"message": text}).encode(),
    )


class _Raw:
    """The HTTP body, handed over in small pieces (messages split across reads, as on a socket)."""

    def __init__(self, data: bytes):
        self.data = data

    def stream(self, *args: Any, **kwargs: Any):
        for i in range(0, len(self.data), 7):
            yield self.data[i : i + 7]


def answer_with(client: Any, data: bytes, sent: list[dict[str, Any]] | None = None) -> None:
    """Every ConverseStream call of this client gets `data` (sent: where the request bodies go)."""

    def send(request: Any, **_: Any) -> AWSResponse:
        if sent is not None:
            sent.append(json.loads(request.body))
        return AWSResponse(request.url, 200, {"content-type": "application/vnd.amazon.eventstream"}, _Raw(data))

    client.meta.events.register("before-send.bedrock-runtime.ConverseStream", send)
