"""DynamoDB adapter: a peer's own sessions, newest first, through the sessions index.

The index (flightdeck.topology.SESSIONS_INDEX) holds the keys of every session's META item by
owner and creation time, nothing else; a page is therefore two requests: one Query on the index
(up to `limit` keys, newest first) and one BatchGetItem of those META items for their status,
dates, first message and counts (a retry only for keys DynamoDB leaves unprocessed). Expired sessions are filtered out, as
every read of the state filters on the TTL attribute (moto, like AWS, deletes them lazily).

The cursor is the index's LastEvaluatedKey as base64url JSON: it positions a page inside the
caller's own partition only (a cursor naming another owner is refused), so it needs no signature.
"""

from __future__ import annotations

import base64
import binascii
import json
import time
from collections.abc import Callable
from typing import Any

from boto3.dynamodb.types import TypeDeserializer

from flightdeck import topology
from flightdeck.adapters.dynamo.keys import FIRST_MSG
from flightdeck.domain.numerals import parse_nonneg_int
from flightdeck.domain.session_list import InvalidCursorError, SessionPage, SessionSummary, first_message_of

PK, SK, TTL = topology.PARTITION_KEY, topology.SORT_KEY, topology.TTL_ATTRIBUTE
OWNER, CREATED = topology.SESSION_OWNER_ATTRIBUTE, topology.SESSION_CREATED_AT_ATTRIBUTE
SESSION_PREFIX = "S#"  # a session's partition key (flightdeck.adapters.dynamo.keys)
META = "META"
# META's listing attributes (flightdeck.adapters.dynamo puts them in writes it makes anyway).
FIRST, CALLS = "first_message", "calls"
_CURSOR_TYPES = {PK: "S", SK: "S", OWNER: "S", CREATED: "N"}
# Epoch milliseconds: 13 digits until the year 2286; DynamoDB takes up to 38.
_CREATED_DIGITS = 20
_de = TypeDeserializer()


def encode_cursor(key: dict[str, Any]) -> str:
    return (
        base64.urlsafe_b64encode(json.dumps(key, sort_keys=True, separators=(",", ":")).encode()).rstrip(b"=").decode()
    )


def typed_key(text: str, types: dict[str, str]) -> dict[str, Any] | None:
    """The DynamoDB key a page cursor encodes (encode_cursor), when it has exactly these attributes, each of
    its type holding a string; None for anything else (the caller refuses it in its own words)."""
    try:
        key = json.loads(base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)))
    except (ValueError, binascii.Error):
        return None
    if (
        not isinstance(key, dict)
        or set(key) != set(types)
        or any(
            not isinstance(key[k], dict) or set(key[k]) != {t} or not isinstance(key[k][t], str)
            for k, t in types.items()
        )
    ):
        return None
    return key


def decode_cursor(cursor: str, owner: str) -> dict[str, Any]:
    """The ExclusiveStartKey a cursor stands for; InvalidCursorError unless it is one of owner's listing."""
    key = typed_key(cursor, _CURSOR_TYPES)
    if key is None:
        raise InvalidCursorError("the cursor is not one this listing handed out")
    if key[OWNER]["S"] != owner or key[SK]["S"] != META or not key[PK]["S"].startswith(SESSION_PREFIX):
        raise InvalidCursorError("the cursor is not one of this caller's listing")
    # A number DynamoDB takes (ASCII digits: it refuses "²" and other scripts' digits as a 5xx) and keys it
    # can send (a lone surrogate has no UTF-8): a forged cursor is a 400.
    if parse_nonneg_int(key[CREATED]["N"], _CREATED_DIGITS) is None or not utf8(key[PK]["S"]):
        raise InvalidCursorError("the cursor is not one this listing handed out")
    return key


def utf8(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


class SessionIndex:
    """GET /api/sessions against one agent's table. `clock` returns epoch milliseconds."""

    def __init__(
        self,
        table_name: str,
        client: Any = None,
        *,
        client_factory: Callable[[], Any] | None = None,
        clock: Callable[[], int] | None = None,
    ):
        self.table = table_name
        self._client = client
        self._client_factory = client_factory
        self._clock = clock or (lambda: int(time.time() * 1000))

    @property
    def client(self) -> Any:
        if self._client is None:
            if self._client_factory is not None:
                self._client = self._client_factory()
            else:
                import boto3

                self._client = boto3.client("dynamodb")
        return self._client

    def list_owned(self, owner: str, limit: int, cursor: str | None) -> SessionPage:
        query: dict[str, Any] = {
            "TableName": self.table,
            "IndexName": topology.SESSIONS_INDEX,
            "KeyConditionExpression": "#owner = :owner",
            "ExpressionAttributeNames": {"#owner": OWNER},
            "ExpressionAttributeValues": {":owner": {"S": owner}},
            "ScanIndexForward": False,  # newest first
            "Limit": limit,
        }
        if cursor:
            query["ExclusiveStartKey"] = decode_cursor(cursor, owner)
        found = self.client.query(**query)
        keys = [{PK: item[PK], SK: item[SK]} for item in found.get("Items", [])]
        metas = self._get_all(keys)
        now_s = self._clock() // 1000
        sessions = []
        for key in keys:
            meta = metas.get(key[PK]["S"])
            # Gone since the index was read, expired (TTL), or (never) someone else's.
            if meta is None or meta.get(OWNER) != owner or int(meta.get(TTL, now_s + 1)) <= now_s:
                continue
            sessions.append(
                SessionSummary(
                    session_id=key[PK]["S"].removeprefix(SESSION_PREFIX),
                    status=str(meta.get("status", "")),
                    created_at=int(meta.get(CREATED, 0)),
                    updated_at=int(meta.get("updated_at", 0)),
                    first_message=_preview(meta),
                    turns=int(meta.get("msg_count", 0)),
                    delegations=int(meta.get(CALLS, 0)),
                )
            )
        last = found.get("LastEvaluatedKey")
        return SessionPage(sessions=sessions, cursor=encode_cursor(last) if last else None)

    def _get_all(self, keys: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
        """META items by partition key: one BatchGetItem (a page is at most 100 keys), plus retries of
        what DynamoDB leaves unprocessed."""
        if not keys:
            return {}
        request: dict[str, Any] = {
            self.table: {
                "Keys": keys,
                "ConsistentRead": True,
                # A read is billed by the whole item's size: the projection only trims the answer.
                "ProjectionExpression": f"#pk, #status, #owner, #created, updated_at, #ttl, msg_count, {FIRST}, "
                f"{FIRST_MSG}, {CALLS}",
                "ExpressionAttributeNames": {
                    "#pk": PK,
                    "#status": "status",
                    "#owner": OWNER,
                    "#created": CREATED,
                    "#ttl": TTL,
                },
            }
        }
        items: dict[str, dict[str, Any]] = {}
        for attempt in range(8):
            answer = self.client.batch_get_item(RequestItems=request)
            for item in answer.get("Responses", {}).get(self.table, []):
                plain = {k: _de.deserialize(v) for k, v in item.items()}
                items[str(plain[PK])] = plain
            request = answer.get("UnprocessedKeys") or {}
            if not request:
                return items
            time.sleep(min(0.5, 0.02 * 2**attempt))
        raise RuntimeError("DynamoDB kept keys of a session listing unprocessed")


def _preview(meta: dict[str, Any]) -> str:
    """The listing's start of the first message: kept on META, or derived from the first message META carries."""
    if FIRST_MSG in meta:
        return first_message_of(json.loads(str(meta[FIRST_MSG])))
    return str(meta.get(FIRST, ""))
