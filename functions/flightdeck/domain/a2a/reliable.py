"""The reliable-delivery extension (ahead of A2A v1.1): an idempotent SendMessage.

A client that may retry a send names it with an idempotency key: the HTTP header `Idempotency-Key` (the IETF
httpapi draft's), or `params.metadata["<RELIABLE_DELIVERY_URI>"] = {"idempotencyKey": "..."}` for a client
that cannot set headers. A send that starts a task under a key starts it once: every retry with that key
(whatever its messageId: clients mint a new one per attempt) is answered with that same task as it stands.
The task's id is derived from the key, so the store's create condition (the task item must not exist) is the
guard, not a read before the write. Without a key nothing changes: a message sent again with the same
messageId is the same message, as before. Stream resumption is its own extension
(flightdeck.domain.a2a.resumption). The card declares the extension (`extension_entry`).
"""

from __future__ import annotations

import re
from typing import Any

RELIABLE_DELIVERY_URI = "urn:flightdeck:a2a:ext:reliable-delivery:v1"
IDEMPOTENCY_HEADER = "Idempotency-Key"
KEY_FIELD = "idempotencyKey"
# The draft's key is a string; ours: 1-255 printable ASCII characters (it becomes part of a task id's seed).
KEY_RE = re.compile(r"[\x21-\x7e]{1,255}")


class BadIdempotencyKey(ValueError):
    pass


def idempotency_key(metadata: dict[str, Any] | None) -> str:
    """The send's idempotency key ("" when it gives none); BadIdempotencyKey says what is wrong with one."""
    given = (metadata or {}).get(RELIABLE_DELIVERY_URI)
    if given is None:
        return ""
    key = given.get(KEY_FIELD) if isinstance(given, dict) else None
    if not isinstance(key, str) or not KEY_RE.fullmatch(key):
        raise BadIdempotencyKey(
            f'metadata["{RELIABLE_DELIVERY_URI}"].{KEY_FIELD}: 1-255 printable ASCII characters, no spaces'
        )
    return key


def with_header_key(metadata: dict[str, Any] | None, header: str | None) -> dict[str, Any] | None:
    """The send's metadata with the Idempotency-Key header's key in it (the header wins over the metadata)."""
    if header is None:
        return metadata
    return {**(metadata or {}), RELIABLE_DELIVERY_URI: {KEY_FIELD: header.strip()}}


def extension_entry() -> dict[str, Any]:
    """The card's capabilities.extensions entry: optional, so a client that knows nothing of it is unaffected."""
    return {
        "uri": RELIABLE_DELIVERY_URI,
        "description": "Idempotent SendMessage: a retried send with the same Idempotency-Key header (or "
        f'metadata["{RELIABLE_DELIVERY_URI}"].{KEY_FIELD}) starts nothing new and answers the same task.',
        "required": False,
        "params": {"follows": ["a2aproject/A2A#1987 (idempotent retries)"], "idempotencyHeader": IDEMPOTENCY_HEADER},
    }
