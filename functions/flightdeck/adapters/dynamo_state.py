"""DynamoDB adapter: sessions, messages, reply routes, turn aggregation, results.

One table per agent (flightdeck.topology). Every invariant of DESIGN §2 is a
condition expression evaluated by DynamoDB, never a read-then-write:
  - a result item is put with attribute_not_exists (first writer wins);
  - a result counts only while its turn is waiting and expects that id, in the
    same transaction as the put;
  - waiting -> complete is a conditional update; the winner alone gets True.
moto does not delete expired items (nor does AWS promptly): reads filter on the
TTL attribute.
"""

from __future__ import annotations

import json
import random
import time
import zlib
from typing import Any, Callable

import boto3
from boto3.dynamodb.types import TypeDeserializer, TypeSerializer
from botocore.exceptions import ClientError

from flightdeck import topology
from flightdeck.domain.records import (
    Iteration,
    RecordOutcome,
    ReplyRoute,
    ResultSource,
    Session,
    SessionBusyError,
    SessionNotFoundError,
    ToolResult,
    TurnAggregation,
)

_ser = TypeSerializer()
_de = TypeDeserializer()
PK, SK, TTL = topology.PARTITION_KEY, topology.SORT_KEY, topology.TTL_ATTRIBUTE
SHARD, DUE = topology.DEADLINE_SHARD_ATTRIBUTE, topology.DEADLINE_AT_ATTRIBUTE

META = "META"
ROUTE = "ROUTE"


def _pk(session_id: str) -> str:
    return f"S#{session_id}"


def _turn_sk(turn: int) -> str:
    return f"TURN#{turn:06d}"


def _result_sk(turn: int, tool_use_id: str) -> str:
    return f"RESULT#{turn:06d}#{tool_use_id}"


def _msg_sk(seq: int) -> str:
    return f"MSG#{seq:06d}"


def _iter_sk(turn: int) -> str:
    return f"ITER#{turn:06d}"


def _dispatch_sk(turn: int, tool_use_id: str) -> str:
    return f"DISPATCH#{turn:06d}#{tool_use_id}"


def deadline_shard(session_id: str) -> str:
    return f"open#{zlib.crc32(session_id.encode()) % topology.DEADLINE_SHARDS}"


def _item(**attrs: Any) -> dict[str, Any]:
    return {k: _ser.serialize(v) for k, v in attrs.items() if v is not None}


def _plain(item: dict[str, Any]) -> dict[str, Any]:
    return {k: _de.deserialize(v) for k, v in item.items()}


def _vals(**values: Any) -> dict[str, Any]:
    return {f":{k}": _ser.serialize(v) for k, v in values.items()}


def _is_condition_failure(exc: ClientError) -> bool:
    return exc.response.get("Error", {}).get("Code") == "ConditionalCheckFailedException"


class StateStore:
    """All of one agent's DynamoDB state. `clock` returns epoch milliseconds."""

    def __init__(self, table_name: str, client: Any = None, clock: Callable[[], int] | None = None):
        self.table = table_name
        self._client = client
        self._clock = clock or (lambda: int(time.time() * 1000))

    @property
    def client(self) -> Any:
        if self._client is None:
            self._client = boto3.client("dynamodb")
        return self._client

    def now_ms(self) -> int:
        return self._clock()

    def _expiry(self, ttl_ms: int) -> int:
        return (self.now_ms() + ttl_ms) // 1000

    def _alive(self, item: dict[str, Any]) -> bool:
        exp = item.get(TTL)
        return exp is None or int(exp) > self.now_ms() // 1000

    def _get(self, pk: str, sk: str) -> dict[str, Any] | None:
        resp = self.client.get_item(TableName=self.table, Key=_item(**{PK: pk, SK: sk}), ConsistentRead=True)
        item = resp.get("Item")
        if not item:
            return None
        plain = _plain(item)
        return plain if self._alive(plain) else None

    def _query_prefix(self, pk: str, prefix: str) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = []
        kwargs: dict[str, Any] = {
            "TableName": self.table,
            "KeyConditionExpression": "#pk = :pk AND begins_with(#sk, :prefix)",
            "ExpressionAttributeNames": {"#pk": PK, "#sk": SK},
            "ExpressionAttributeValues": _vals(pk=pk, prefix=prefix),
            "ConsistentRead": True,
        }
        if not prefix:
            kwargs.update(KeyConditionExpression="#pk = :pk", ExpressionAttributeNames={"#pk": PK},
                          ExpressionAttributeValues=_vals(pk=pk))
        while True:
            resp = self.client.query(**kwargs)
            items.extend(p for p in map(_plain, resp.get("Items", [])) if self._alive(p))
            if "LastEvaluatedKey" not in resp:
                return items
            kwargs["ExclusiveStartKey"] = resp["LastEvaluatedKey"]

    def _transact(self, items: list[dict[str, Any]]) -> list[dict[str, Any]] | None:
        """Run a transaction; None on success, else the cancellation reasons.

        TransactionConflict (another transaction on the same items) is retried here;
        condition failures are the caller's to interpret.
        """
        for attempt in range(8):
            try:
                self.client.transact_write_items(TransactItems=items)
                return None
            except ClientError as exc:
                if exc.response.get("Error", {}).get("Code") != "TransactionCanceledException":
                    raise
                reasons = exc.response.get("CancellationReasons") or []
                codes = {r.get("Code") for r in reasons}
                if "ConditionalCheckFailed" in codes or not codes & {"TransactionConflict", "ThrottlingError"}:
                    return reasons or [{"Code": "ConditionalCheckFailed"}]
                time.sleep(random.uniform(0, 0.02 * 2**attempt))
        raise RuntimeError("transaction kept conflicting")

    # --- sessions ---------------------------------------------------------------------
    def get_session(self, session_id: str) -> Session | None:
        items = self._query_prefix(_pk(session_id), "")
        meta = next((i for i in items if i[SK] == META), None)
        if meta is None:
            return None
        messages = [json.loads(i["content"]) for i in items if i[SK].startswith("MSG#")]
        return Session(
            session_id=session_id,
            status=meta["status"],
            turn=int(meta["turn"]),
            messages=messages,
            created_at=int(meta.get("created_at", 0)),
            updated_at=int(meta.get("updated_at", 0)),
            parent=json.loads(meta.get("parent", "{}")),
            owner=meta.get("owner", ""),
        )

    def start_turn_with_message(
        self,
        session_id: str,
        message: dict[str, Any],
        retention_ms: int,
        route: tuple[str, str, int] | None = None,
        parent: dict[str, Any] | None = None,
        owner: str | None = None,
    ) -> int:
        """Append a user message to an idle (or new) session and claim the next turn.

        route: (callback_service, bearer_token, ttl_ms) to store as the session's reply route.
        owner: the authenticated peer; a new session is stored as theirs, an existing one
        must be theirs (a condition of the write too), else SessionNotFoundError: another
        peer's session does not exist for them. None: authentication is off, no owner.
        Returns the turn number to enqueue. Raises SessionBusyError when the session
        is busy (or another message won the race).
        """
        now = self.now_ms()
        pk = _pk(session_id)
        meta = self._get(pk, META)
        expires = self._expiry(retention_ms)
        ops: list[dict[str, Any]] = []
        if meta is None:
            turn, seq = 1, 1
            ops.append({
                "Put": {
                    "TableName": self.table,
                    "Item": _item(**{PK: pk, SK: META, "status": "busy", "turn": 1, "msg_count": 1,
                                     "created_at": now, "updated_at": now, TTL: expires,
                                     "parent": json.dumps(parent or {}), "owner": owner}),
                    "ConditionExpression": "attribute_not_exists(#pk)",
                    "ExpressionAttributeNames": {"#pk": PK},
                }
            })
        else:
            if owner is not None and meta.get("owner", "") != owner:
                raise SessionNotFoundError(session_id)
            if meta["status"] != "idle":
                raise SessionBusyError(session_id)
            turn, seq = int(meta["turn"]) + 1, int(meta["msg_count"]) + 1
            condition = "#status = :idle AND msg_count = :prev"
            names = {"#status": "status", "#ttl": TTL}
            values = _vals(busy="busy", idle="idle", turn=turn, seq=seq, now=now, exp=expires, prev=seq - 1)
            if owner is not None:
                condition += " AND #owner = :owner"
                names["#owner"] = "owner"
                values.update(_vals(owner=owner))
            ops.append({
                "Update": {
                    "TableName": self.table,
                    "Key": _item(**{PK: pk, SK: META}),
                    "UpdateExpression": "SET #status = :busy, turn = :turn, msg_count = :seq, updated_at = :now, #ttl = :exp",
                    "ConditionExpression": condition,
                    "ExpressionAttributeNames": names,
                    "ExpressionAttributeValues": values,
                }
            })
        ops.append(self._put_message_op(pk, seq, message, turn, expires))
        if route is not None:
            service, token, ttl_ms = route
            ops.append({
                "Put": {
                    "TableName": self.table,
                    "Item": _item(**{PK: pk, SK: ROUTE, "callback_service": service, "bearer_token": token,
                                     "status": "active", "created_at": now, TTL: self._expiry(ttl_ms)}),
                    # A live route is never overwritten: one answer per request.
                    "ConditionExpression": "attribute_not_exists(#pk) OR #status = :retired OR #ttl < :nows",
                    "ExpressionAttributeNames": {"#pk": PK, "#status": "status", "#ttl": TTL},
                    "ExpressionAttributeValues": _vals(retired="retired", nows=now // 1000),
                }
            })
        if self._transact(ops) is not None:
            if owner is not None:
                # Lost a race: to a message of the owner (busy), or to another peer creating this id.
                current = self._get(pk, META)
                if current is not None and current.get("owner", "") != owner:
                    raise SessionNotFoundError(session_id)
            raise SessionBusyError(session_id)
        return turn

    def _put_message_op(self, pk: str, seq: int, message: dict[str, Any], turn: int, expires: int) -> dict[str, Any]:
        return {
            "Put": {
                "TableName": self.table,
                "Item": _item(**{PK: pk, SK: _msg_sk(seq), "content": json.dumps(message), "turn": turn, TTL: expires}),
                "ConditionExpression": "attribute_not_exists(#pk)",
                "ExpressionAttributeNames": {"#pk": PK},
            }
        }

    def append_message(self, session_id: str, message: dict[str, Any], turn: int, retention_ms: int) -> bool:
        """Append a message at the next sequence number; idempotent for the same (turn, message).

        Only the turn worker appends while a session is busy (the FIFO group
        serialises it), so the next sequence number is the message count + 1; the
        conditions refuse anything else.
        """
        pk = _pk(session_id)
        meta = self._get(pk, META)
        if meta is None:
            raise LookupError(session_id)
        existing = [json.loads(i["content"]) for i in self._query_prefix(pk, "MSG#") if int(i.get("turn", 0)) == turn]
        if message in existing:
            return False
        seq = int(meta["msg_count"]) + 1
        ops = [
            {
                "Update": {
                    "TableName": self.table,
                    "Key": _item(**{PK: pk, SK: META}),
                    "UpdateExpression": "SET msg_count = :seq, updated_at = :now",
                    "ConditionExpression": "msg_count = :prev",
                    "ExpressionAttributeValues": _vals(seq=seq, prev=seq - 1, now=self.now_ms()),
                }
            },
            self._put_message_op(pk, seq, message, turn, self._expiry(retention_ms)),
        ]
        if self._transact(ops) is not None:
            raise RuntimeError(f"concurrent append to session {session_id}")
        return True

    def finish_session_turn(self, session_id: str, turn: int) -> bool:
        """busy -> idle at the end of turn `turn`; False if already done."""
        try:
            self.client.update_item(
                TableName=self.table,
                Key=_item(**{PK: _pk(session_id), SK: META}),
                UpdateExpression="SET #status = :idle, updated_at = :now",
                ConditionExpression="#status = :busy AND turn = :turn",
                ExpressionAttributeNames={"#status": "status"},
                ExpressionAttributeValues=_vals(idle="idle", busy="busy", turn=turn, now=self.now_ms()),
            )
            return True
        except ClientError as exc:
            if _is_condition_failure(exc):
                return False
            raise

    # --- reply routes (B side) -----------------------------------------------------------
    def get_route(self, session_id: str) -> ReplyRoute | None:
        item = self._get(_pk(session_id), ROUTE)
        if item is None:
            return None
        return ReplyRoute(session_id, item["callback_service"], item["bearer_token"], item["status"], int(item[TTL]))

    def retire_route(self, session_id: str) -> bool:
        """active -> retired; the tombstone keeps a replayed request from re-arming it."""
        try:
            self.client.update_item(
                TableName=self.table,
                Key=_item(**{PK: _pk(session_id), SK: ROUTE}),
                UpdateExpression="SET #status = :retired, retired_at = :now",
                ConditionExpression="#status = :active",
                ExpressionAttributeNames={"#status": "status"},
                ExpressionAttributeValues=_vals(retired="retired", active="active", now=self.now_ms()),
            )
            return True
        except ClientError as exc:
            if _is_condition_failure(exc):
                return False
            raise

    # --- think iterations --------------------------------------------------------------
    def get_iteration(self, session_id: str, turn: int) -> Iteration | None:
        item = self._get(_pk(session_id), _iter_sk(turn))
        if item is None:
            return None
        return Iteration(session_id, turn, json.loads(item["reply"]), bool(item.get("effects_done")))

    def save_iteration(self, session_id: str, turn: int, reply: dict[str, Any], retention_ms: int) -> Iteration:
        """Store a model reply once; a second writer gets the first one back."""
        try:
            self.client.put_item(
                TableName=self.table,
                Item=_item(**{PK: _pk(session_id), SK: _iter_sk(turn), "reply": json.dumps(reply),
                              "effects_done": False, TTL: self._expiry(retention_ms)}),
                ConditionExpression="attribute_not_exists(#pk)",
                ExpressionAttributeNames={"#pk": PK},
            )
            return Iteration(session_id, turn, reply, False)
        except ClientError as exc:
            if not _is_condition_failure(exc):
                raise
        stored = self.get_iteration(session_id, turn)
        assert stored is not None
        return stored

    def mark_iteration_done(self, session_id: str, turn: int) -> None:
        self.client.update_item(
            TableName=self.table,
            Key=_item(**{PK: _pk(session_id), SK: _iter_sk(turn)}),
            UpdateExpression="SET effects_done = :t",
            ExpressionAttributeValues=_vals(t=True),
        )

    # --- turn aggregation (A side) -------------------------------------------------------
    def seed_turn(self, session_id: str, turn: int, tool_use_ids: list[str], deadline_ms: int, retention_ms: int) -> bool:
        """Create the turn's aggregation record; False if it already exists (redelivery)."""
        if not tool_use_ids or len(set(tool_use_ids)) != len(tool_use_ids):
            raise ValueError("tool_use_ids must be non-empty and distinct")
        try:
            self.client.put_item(
                TableName=self.table,
                Item=_item(**{PK: _pk(session_id), SK: _turn_sk(turn), "expected": set(tool_use_ids),
                              "total_tools": len(tool_use_ids), "received": 0, "status": "waiting",
                              "deadline_ms": deadline_ms, SHARD: deadline_shard(session_id), DUE: deadline_ms,
                              "created_at": self.now_ms(), TTL: self._expiry(retention_ms)}),
                ConditionExpression="attribute_not_exists(#pk)",
                ExpressionAttributeNames={"#pk": PK},
            )
            return True
        except ClientError as exc:
            if _is_condition_failure(exc):
                return False
            raise

    def get_turn(self, session_id: str, turn: int) -> TurnAggregation | None:
        item = self._get(_pk(session_id), _turn_sk(turn))
        if item is None:
            return None
        return TurnAggregation(
            session_id=session_id, turn=turn, expected=frozenset(item.get("expected", ())),
            total=int(item["total_tools"]), received=int(item["received"]), status=item["status"],
            deadline_ms=int(item["deadline_ms"]), completed_by=item.get("completed_by", ""),
        )

    def get_results(self, session_id: str, turn: int) -> list[ToolResult]:
        return [
            ToolResult(i["tool_use_id"], i["result_status"], i["text"], ResultSource(i["source"]))
            for i in self._query_prefix(_pk(session_id), f"RESULT#{turn:06d}#")
        ]

    def record_result(self, session_id: str, turn: int, result: ToolResult, retention_ms: int) -> RecordOutcome:
        """Write one result at most once and count it toward its waiting turn, atomically."""
        pk = _pk(session_id)
        ops = [
            {
                "Put": {
                    "TableName": self.table,
                    "Item": _item(**{PK: pk, SK: _result_sk(turn, result.tool_use_id), "tool_use_id": result.tool_use_id,
                                     "result_status": result.status, "text": result.text, "source": result.source.value,
                                     "recorded_at": self.now_ms(), TTL: self._expiry(retention_ms)}),
                    "ConditionExpression": "attribute_not_exists(#pk)",
                    "ExpressionAttributeNames": {"#pk": PK},
                    "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
                }
            },
            {
                "Update": {
                    "TableName": self.table,
                    "Key": _item(**{PK: pk, SK: _turn_sk(turn)}),
                    "UpdateExpression": "ADD received :one",
                    "ConditionExpression": "#status = :waiting AND contains(expected, :id)",
                    "ExpressionAttributeNames": {"#status": "status"},
                    "ExpressionAttributeValues": _vals(one=1, waiting="waiting", id=result.tool_use_id),
                }
            },
        ]
        reasons = self._transact(ops)
        if reasons is None:
            return RecordOutcome.ACCEPTED
        put_reason = reasons[0] if reasons else {}
        if put_reason.get("Code") == "ConditionalCheckFailed":
            old = _plain(put_reason.get("Item") or {})
            # The same kind of result again is a retry of an accepted one; anything
            # else (a callback after a synthesized timeout) arrived too late.
            return RecordOutcome.DUPLICATE if old.get("source") == result.source.value else RecordOutcome.LATE
        return RecordOutcome.LATE

    def complete_turn(self, session_id: str, turn: int, completed_by: str, tombstone_ms: int) -> bool:
        """waiting -> complete once every expected result is in; True only for the winner.

        The same transaction claims the next turn on the session, so exactly one
        next-think is ever allocated for it.
        """
        now = self.now_ms()
        ops = [
            self._complete_op(session_id, turn, completed_by, tombstone_ms, now,
                              extra_condition=" AND received >= total_tools"),
            self._advance_session_op(session_id, turn, now),
        ]
        return self._transact(ops) is None

    def _complete_op(self, session_id: str, turn: int, completed_by: str, tombstone_ms: int, now: int,
                     extra_condition: str = "", set_received: int | None = None) -> dict[str, Any]:
        values = _vals(complete="complete", waiting="waiting", by=completed_by, now=now,
                       exp=(now + tombstone_ms) // 1000)
        update = "SET #status = :complete, completed_by = :by, completed_at = :now, #ttl = :exp"
        if set_received is not None:
            update += ", received = :received"
            values.update(_vals(received=set_received))
        return {
            "Update": {
                "TableName": self.table,
                "Key": _item(**{PK: _pk(session_id), SK: _turn_sk(turn)}),
                # Leaving the sparse deadline index is part of completing.
                "UpdateExpression": update + f" REMOVE {SHARD}, {DUE}",
                "ConditionExpression": "#status = :waiting" + extra_condition,
                "ExpressionAttributeNames": {"#status": "status", "#ttl": TTL},
                "ExpressionAttributeValues": values,
            }
        }

    def _advance_session_op(self, session_id: str, turn: int, now: int) -> dict[str, Any]:
        return {
            "Update": {
                "TableName": self.table,
                "Key": _item(**{PK: _pk(session_id), SK: META}),
                "UpdateExpression": "SET turn = :next, updated_at = :now",
                "ConditionExpression": "turn = :turn",
                "ExpressionAttributeValues": _vals(next=turn + 1, turn=turn, now=now),
            }
        }

    def complete_with_errors(self, session_id: str, turn: int, reason_results: Callable[[str], ToolResult],
                             completed_by: str, tombstone_ms: int, retention_ms: int) -> bool:
        """Synthesize a result for every missing id and complete the turn, all in one transaction.

        True only for the winner. A callback that commits first makes the
        transaction fail its put condition; we then re-read and try again.
        """
        for _ in range(10):
            agg = self.get_turn(session_id, turn)
            if agg is None or agg.status != "waiting":
                return False
            have = {r.tool_use_id for r in self.get_results(session_id, turn)}
            missing = sorted(agg.expected - have)
            now = self.now_ms()
            pk = _pk(session_id)
            ops: list[dict[str, Any]] = []
            for tool_use_id in missing:
                r = reason_results(tool_use_id)
                ops.append({
                    "Put": {
                        "TableName": self.table,
                        "Item": _item(**{PK: pk, SK: _result_sk(turn, tool_use_id), "tool_use_id": tool_use_id,
                                         "result_status": r.status, "text": r.text, "source": r.source.value,
                                         "recorded_at": now, TTL: self._expiry(retention_ms)}),
                        "ConditionExpression": "attribute_not_exists(#pk)",
                        "ExpressionAttributeNames": {"#pk": PK},
                    }
                })
            ops.append(self._complete_op(session_id, turn, completed_by, tombstone_ms, now, set_received=agg.total))
            ops.append(self._advance_session_op(session_id, turn, now))
            reasons = self._transact(ops)
            if reasons is None:
                return True
            if reasons[len(missing)].get("Code") == "ConditionalCheckFailed":
                return False  # someone else completed it
        return False

    def list_overdue(self, now_ms: int, limit: int = 100) -> list[tuple[str, int]]:
        """(session_id, turn) of waiting turns past their deadline, from the sparse index only."""
        overdue: list[tuple[str, int]] = []
        for shard in range(topology.DEADLINE_SHARDS):
            kwargs: dict[str, Any] = {
                "TableName": self.table,
                "IndexName": topology.DEADLINE_INDEX,
                "KeyConditionExpression": "#shard = :shard AND #due <= :now",
                "ExpressionAttributeNames": {"#shard": SHARD, "#due": DUE},
                "ExpressionAttributeValues": _vals(shard=f"open#{shard}", now=now_ms),
                "Limit": limit,
            }
            resp = self.client.query(**kwargs)
            for item in map(_plain, resp.get("Items", [])):
                overdue.append((item[PK][2:], int(item[SK].split("#")[1])))
        return overdue

    # --- dispatch claims (A side) ----------------------------------------------------------
    def claim_dispatch(self, session_id: str, turn: int, tool_use_id: str, retention_ms: int) -> bool:
        """True if this delegation still needs sending (new, or a previous attempt did not finish)."""
        try:
            self.client.put_item(
                TableName=self.table,
                Item=_item(**{PK: _pk(session_id), SK: _dispatch_sk(turn, tool_use_id), "status": "sending",
                              "updated_at": self.now_ms(), TTL: self._expiry(retention_ms)}),
                ConditionExpression="attribute_not_exists(#pk) OR #status = :sending",
                ExpressionAttributeNames={"#pk": PK, "#status": "status"},
                ExpressionAttributeValues=_vals(sending="sending"),
            )
            return True
        except ClientError as exc:
            if _is_condition_failure(exc):
                return False
            raise

    def finish_dispatch(self, session_id: str, turn: int, tool_use_id: str, status: str) -> None:
        self.client.update_item(
            TableName=self.table,
            Key=_item(**{PK: _pk(session_id), SK: _dispatch_sk(turn, tool_use_id)}),
            UpdateExpression="SET #status = :s, updated_at = :now",
            ExpressionAttributeNames={"#status": "status"},
            ExpressionAttributeValues=_vals(s=status, now=self.now_ms()),
        )

