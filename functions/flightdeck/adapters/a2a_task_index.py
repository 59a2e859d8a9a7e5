"""DynamoDB adapter: a peer's own A2A tasks, latest update first, through the tasks index (ListTasks).

The index (flightdeck.topology.TASKS_INDEX) is keyed on what a task item carries anyway: its `owner` and
its `updated_ms` (flightdeck.adapters.a2a_state writes both with every change of the task), so no write
changes and it costs one index write per task update, no request more. Items without both (a session's
META has an owner, no `updated_ms`; a task made while authentication was off has no owner) are not in it.
Keys only: a page is one Query here, then the records themselves (flightdeck.domain.a2a.listing).

The page token is the index's LastEvaluatedKey as base64url JSON, checked to be a key of the caller's own
partition of the index (as flightdeck.adapters.session_index's cursor), so it needs no signature.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from flightdeck import topology
from flightdeck.adapters.session_index import encode_cursor, typed_key, utf8
from flightdeck.domain.a2a.ports import TASK_ID_SEPARATOR

PK, SK = topology.PARTITION_KEY, topology.SORT_KEY
OWNER, UPDATED = topology.TASK_OWNER_ATTRIBUTE, topology.TASK_UPDATED_AT_ATTRIBUTE
SESSION_PREFIX = "S#"
TASK_PREFIX = "A2A#TASK#"  # flightdeck.adapters.dynamo.keys.A2A_TASK
_TOKEN_TYPES = {PK: "S", SK: "S", OWNER: "S", UPDATED: "N"}
_DIGITS = re.compile(r"[0-9]{1,20}")


class InvalidPageToken(ValueError):
    """A page token this listing did not hand out to this caller."""


# The page token is the session listing's cursor codec (flightdeck.adapters.session_index), over this index's key.
encode_token = encode_cursor


def decode_token(token: str, owner: str) -> dict[str, Any]:
    key = typed_key(token, _TOKEN_TYPES)
    if key is None:
        raise InvalidPageToken("pageToken is not one this listing handed out")
    if (
        key[OWNER]["S"] != owner
        or not key[SK]["S"].startswith(TASK_PREFIX)
        or not key[PK]["S"].startswith(SESSION_PREFIX)
    ):
        raise InvalidPageToken("pageToken is not one of this caller's listing")
    if not _DIGITS.fullmatch(key[UPDATED]["N"]) or not all(utf8(key[k]["S"]) for k in (PK, SK)):
        raise InvalidPageToken("pageToken is not one this listing handed out")
    return key


class TaskIndex:
    """ListTasks against one agent's table."""

    def __init__(self, table_name: str, client_factory: Callable[[], Any]):
        self.table = table_name
        self._client_factory = client_factory

    def owned_task_ids(self, owner: str, limit: int, token: str | None) -> tuple[list[str], str | None]:
        """Up to `limit` task ids of the owner, latest update first, and the next page's token (None: the
        last page). Raises InvalidPageToken."""
        query: dict[str, Any] = {
            "TableName": self.table,
            "IndexName": topology.TASKS_INDEX,
            "KeyConditionExpression": "#owner = :owner",
            "ExpressionAttributeNames": {"#owner": OWNER},
            "ExpressionAttributeValues": {":owner": {"S": owner}},
            "ScanIndexForward": False,  # latest update first
            "Limit": limit,
        }
        if token:
            query["ExclusiveStartKey"] = decode_token(token, owner)
        found = self._client_factory().query(**query)
        ids = [
            f"{item[PK]['S'].removeprefix(SESSION_PREFIX)}{TASK_ID_SEPARATOR}{item[SK]['S'].removeprefix(TASK_PREFIX)}"
            for item in found.get("Items", [])
            if item[SK]["S"].startswith(TASK_PREFIX)
        ]
        last = found.get("LastEvaluatedKey")
        return ids, encode_token(last) if last else None

    def count_owned(self, owner: str) -> int:
        """How many tasks the owner has (ListTasks' totalSize): Select COUNT over its keys in the index."""
        total, start = 0, None
        while True:
            query: dict[str, Any] = {
                "TableName": self.table,
                "IndexName": topology.TASKS_INDEX,
                "KeyConditionExpression": "#owner = :owner",
                "ExpressionAttributeNames": {"#owner": OWNER},
                "ExpressionAttributeValues": {":owner": {"S": owner}},
                "Select": "COUNT",
            }
            if start:
                query["ExclusiveStartKey"] = start
            found = self._client_factory().query(**query)
            total += int(found.get("Count", 0))
            start = found.get("LastEvaluatedKey")
            if not start:
                return total

    def context_task_ids(self, owner: str, session_id: str) -> list[str]:
        """The owner's tasks of one context, latest update first: one Query of its partition (keys, owner and
        update time only)."""
        items: list[dict[str, Any]] = []
        query: dict[str, Any] = {
            "TableName": self.table,
            "KeyConditionExpression": "#pk = :pk AND begins_with(#sk, :prefix)",
            "ExpressionAttributeNames": {"#pk": PK, "#sk": SK, "#owner": OWNER, "#updated": UPDATED},
            "ExpressionAttributeValues": {":pk": {"S": SESSION_PREFIX + session_id}, ":prefix": {"S": TASK_PREFIX}},
            "ProjectionExpression": "#pk, #sk, #owner, #updated",
            "ConsistentRead": True,
        }
        while True:
            found = self._client_factory().query(**query)
            items += [i for i in found.get("Items", []) if i.get(OWNER, {}).get("S") == owner]
            if not found.get("LastEvaluatedKey"):
                break
            query["ExclusiveStartKey"] = found["LastEvaluatedKey"]
        items.sort(key=lambda i: (int(i[UPDATED]["N"]), i[SK]["S"]), reverse=True)
        return [f"{session_id}{TASK_ID_SEPARATOR}{i[SK]['S'].removeprefix(TASK_PREFIX)}" for i in items]
