"""DynamoDB adapter: sessions, messages, reply routes, turn aggregation, results.

One table per agent (flightdeck.topology). Every invariant of docs/ARCHITECTURE.md §2 is a
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
    ItemTooLargeError,
    LiveText,
    MessageSlot,
    RecordOutcome,
    ReplayedError,
    ReplyRoute,
    ResultSource,
    SESSION_CANCELED,
    Completion,
    Expiry,
    Session,
    SessionBusyError,
    SessionNotFoundError,
    ToolResult,
    TurnAggregation,
    TurnSeed,
)
from flightdeck.domain.liveness import Overdue

_ser = TypeSerializer()
_de = TypeDeserializer()
PK, SK, TTL = topology.PARTITION_KEY, topology.SORT_KEY, topology.TTL_ATTRIBUTE
SHARD, DUE = topology.DEADLINE_SHARD_ATTRIBUTE, topology.DEADLINE_AT_ATTRIBUTE

META = "META"
ROUTE = "ROUTE"
# The A2A store's pointer to a session's task (flightdeck.adapters.a2a_state), same partition.
A2A_CURRENT = "A2A#CURRENT"
# A committed write that makes a think due (a new message, a completed turn) also marks it
# owed on the session, in the deadline index, due this long after: the sweep re-sends an
# owed think still unstarted by then (flightdeck.domain.liveness). The think's first write
# clears the mark, so on the happy path the recovery costs no request. Longer than a think can
# run (the turn worker's timeout): a think start has no deduplication, so a re-send must not
# overlap the think it stands in for, which would call the model a second time.
OWED_THINK_GRACE_MS = topology.WORKER_TIMEOUT_S * 1000 + 5_000
OWED = "owed_think"
# The live relay's items (flightdeck.adapters.live_state), same partition: read with the session.
WATCH = "WATCH"
LIVE = "LIVE"
CANCELED = SESSION_CANCELED


def _pk(session_id: str) -> str:
    return f"S#{session_id}"


def _turn_sk(turn: int) -> str:
    return f"TURN#{turn:06d}"


def _result_sk(turn: int, tool_use_id: str) -> str:
    return f"RESULT#{turn:06d}#{tool_use_id}"


def _msg_sk(turn: int, slot: int) -> str:
    # Ordered by think iteration, then by its place in it (flightdeck.domain.records.MessageSlot):
    # a message's key is known before it is written, so an append is one conditional put.
    return f"MSG#{turn:06d}#{int(slot)}"


def _dumps(value: Any) -> str:
    # Stored as UTF-8 without escaping: the stored size is the text's own size (an escaped
    # non-ASCII character would take up to 6 bytes against DynamoDB's 400 KB item limit).
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


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


def _too_large(exc: ClientError) -> bool:
    error = exc.response.get("Error", {})
    return error.get("Code") == "ValidationException" and "size" in str(error.get("Message", "")).lower()


def stored_messages(items: list[dict[str, Any]]) -> list[tuple[int, int, dict[str, Any]]]:
    """(turn, slot, message) of every stored message, in conversation order: the message items, and
    each iteration's model reply as the assistant message of its turn (stored once, never copied)."""
    out = []
    for i in items:
        parts = i[SK].split("#")
        if parts[0] == "ITER":
            out.append((int(parts[1]), int(MessageSlot.REPLY), json.loads(i["reply"])["message"]))
        elif parts[0] == "MSG":
            out.append((int(parts[1]), int(parts[2]), json.loads(i["content"])))
    return sorted(out, key=lambda t: (t[0], t[1]))


def _conversation(items: list[dict[str, Any]], current_turn: int) -> list[dict[str, Any]]:
    """The Converse messages, rebuilt from what is stored once: the message items in key order,
    and after an assistant message that called tools in a turn that has completed, the user
    message of their results, built from the turn's result items in call order."""
    results: dict[int, dict[str, dict[str, Any]]] = {}
    # Iterations whose reply ended their turn although it called tools (it asked for input: the next
    # message answers its calls, flightdeck.domain.asking): they have no results to rebuild.
    answered_by_message: set[int] = set()
    for i in items:
        if i[SK].startswith("RESULT#"):
            results.setdefault(int(i[SK].split("#")[1]), {})[i["tool_use_id"]] = i
        elif i[SK].startswith("ITER#") and i.get("ends_turn"):
            answered_by_message.add(int(i[SK].split("#")[1]))
    stored = stored_messages(items)
    messages: list[dict[str, Any]] = []
    for index, (turn, _slot, message) in enumerate(stored):
        messages.append(message)
        uses = [b["toolUse"] for b in message.get("content", []) if "toolUse" in b]
        if message.get("role") != "assistant" or not uses or turn >= current_turn or turn in answered_by_message:
            continue
        following = stored[index + 1][2] if index + 1 < len(stored) else {}
        if any("toolResult" in b for b in following.get("content", [])):
            continue  # the results were stored with the message (a canceled turn's closing)
        got = results.get(turn, {})
        messages.append({"role": "user", "content": [
            _result_of(got.get(u["toolUseId"]), u["toolUseId"]).as_block() for u in uses]})
    return messages


def _calls_tools(reply: dict[str, Any]) -> bool:
    return any("toolUse" in b for b in (reply.get("message") or {}).get("content", []))


def _iteration(session_id: str, turn: int, item: dict[str, Any]) -> Iteration:
    return Iteration(session_id, turn, json.loads(item["reply"]))


def _route(session_id: str, item: dict[str, Any]) -> ReplyRoute:
    return ReplyRoute(session_id, item["callback_service"], item["bearer_token"], item["status"], int(item[TTL]),
                      int(item.get("retired_turn", 0)))


def _aggregation(session_id: str, turn: int, item: dict[str, Any]) -> TurnAggregation:
    return TurnAggregation(
        session_id=session_id, turn=turn, expected=frozenset(item.get("expected", ())),
        total=int(item["total_tools"]), received=int(item["received"]), status=item["status"],
        deadline_ms=int(item["deadline_ms"]), completed_by=item.get("completed_by", ""),
        deadlines={k: int(v) for k, v in (item.get("deadlines") or {}).items()}, due_ms=int(item.get(DUE, 0)),
    )


def _result_of(item: dict[str, Any] | None, tool_use_id: str) -> ToolResult:
    if item is None:
        # Every completion writes a result for each expected id: this is an id past the hard limit.
        return ToolResult(tool_use_id, "error", json.dumps({"status": "error", "reason": "missing"}),
                          ResultSource.TIMEOUT)
    return ToolResult(item["tool_use_id"], item["result_status"], item["text"], ResultSource(item["source"]))


def _live_fields(by_sk: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The live relay's Session fields (flightdeck.adapters.live_state writes the items)."""
    watch, live = by_sk.get(WATCH), by_sk.get(LIVE)
    return {"watched_until_ms": int(watch["until"]) if watch else 0,
            "live": LiveText(int(live["turn"]), int(live["attempt"]), str(live["text"])) if live else None}


class StateStore:
    """All of one agent's DynamoDB state. `clock` returns epoch milliseconds."""

    def __init__(self, table_name: str, client: Any = None, clock: Callable[[], int] | None = None,
                 owed_think_grace_ms: int = OWED_THINK_GRACE_MS):
        self.table = table_name
        self._client = client
        self._clock = clock or (lambda: int(time.time() * 1000))
        self.owed_think_grace_ms = owed_think_grace_ms

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
                if _too_large(exc):
                    raise ItemTooLargeError(str(exc.response.get("Error", {}).get("Message", ""))) from exc
                if exc.response.get("Error", {}).get("Code") != "TransactionCanceledException":
                    raise
                reasons = exc.response.get("CancellationReasons") or []
                codes = {r.get("Code") for r in reasons}
                if any(r.get("Code") == "ValidationError" and "size" in str(r.get("Message", "")).lower()
                       for r in reasons):
                    raise ItemTooLargeError(next(str(r.get("Message")) for r in reasons
                                                 if r.get("Code") == "ValidationError")) from exc
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
        turn = int(meta["turn"])
        by_sk = {i[SK]: i for i in items}
        iteration = by_sk.get(_iter_sk(turn))
        route = by_sk.get(ROUTE)
        aggregation = by_sk.get(_turn_sk(turn))
        return Session(
            session_id=session_id,
            status=meta["status"],
            turn=turn,
            messages=_conversation(items, turn),
            created_at=int(meta.get("created_at", 0)),
            updated_at=int(meta.get("updated_at", 0)),
            parent=json.loads(meta.get("parent", "{}")),
            owner=meta.get("owner", ""),
            user_messages=int(meta.get("msg_count", 0)),
            iteration=_iteration(session_id, turn, iteration) if iteration else None,
            route=_route(session_id, route) if route else None,
            has_a2a_task=A2A_CURRENT in by_sk,
            aggregation=_aggregation(session_id, turn, aggregation) if aggregation else None,
            **_live_fields(by_sk),
        )

    def _owed_values(self, session_id: str, turn: int, now: int) -> dict[str, Any]:
        return _vals(owed=turn, shard=deadline_shard(session_id), due=now + self.owed_think_grace_ms)

    def start_turn_with_message(
        self,
        session_id: str,
        message: dict[str, Any],
        retention_ms: int,
        route: tuple[str, str, int] | None = None,
        parent: dict[str, Any] | None = None,
        owner: str | None = None,
        likely_new: bool = False,
        must_exist: bool = False,
    ) -> int:
        """Append a user message to an idle (or new) session and claim the next turn.

        route: (callback_service, bearer_token, ttl_ms) to store as the session's reply route;
        a request whose route is already stored with the same token raises ReplayedError.
        owner: the authenticated peer; a new session is stored as theirs, an existing one
        must be theirs (a condition of the write too), else SessionNotFoundError: another
        peer's session does not exist for them. None: authentication is off, no owner.
        likely_new: try creating the session first, with no read (a fresh or derived id):
        one request when it is new; the failed condition returns the existing item otherwise.
        must_exist: continue an existing session only (a delegation continuing a conversation):
        SessionNotFoundError when there is none.
        Returns the turn number to enqueue. Raises SessionBusyError when the session
        is busy (or another message won the race).
        """
        pk = _pk(session_id)
        meta = None if likely_new and not must_exist else self._get(pk, META)
        if must_exist and meta is None:
            raise SessionNotFoundError(session_id)
        for _ in range(2):
            try:
                ops, turn = self._start_ops(session_id, meta, message, retention_ms, route, parent, owner)
            except SessionBusyError:
                if must_exist and route is not None:
                    self._raise_if_replayed(session_id, route, owner)
                raise
            reasons = self._transact(ops)
            if reasons is None:
                return turn
            first = reasons[0] if reasons else {}
            if meta is None and first.get("Code") == "ConditionalCheckFailed" and first.get("Item"):
                meta = _plain(first["Item"])  # it exists: continue it, without a second read
                if not self._alive(meta):
                    raise SessionBusyError(session_id)
                if route is not None:
                    existing = self._get(pk, ROUTE)
                    if existing is not None and existing["bearer_token"] == route[1]:
                        if owner is not None and meta.get("owner", "") != owner:
                            raise SessionNotFoundError(session_id)
                        raise ReplayedError(session_id, int(meta["turn"]), int(meta.get("msg_count", 1)))
                continue
            if owner is not None:
                # Lost a race: to a message of the owner (busy), or to another peer creating this id.
                current = self._get(pk, META)
                if current is not None and current.get("owner", "") != owner:
                    raise SessionNotFoundError(session_id)
            if must_exist and route is not None:
                self._raise_if_replayed(session_id, route, owner)
            raise SessionBusyError(session_id)
        raise SessionBusyError(session_id)

    def _raise_if_replayed(self, session_id: str, route: tuple[str, str, int], owner: str | None) -> None:
        """A continuation refused as busy may be a re-send of one already taken (same reply token)."""
        pk = _pk(session_id)
        existing = self._get(pk, ROUTE)
        if existing is None or existing["bearer_token"] != route[1]:
            return
        meta = self._get(pk, META) or {}
        if owner is not None and meta.get("owner", "") != owner:
            raise SessionNotFoundError(session_id)
        raise ReplayedError(session_id, int(meta.get("turn", 1)), int(meta.get("msg_count", 1)))

    def _start_ops(self, session_id: str, meta: dict[str, Any] | None, message: dict[str, Any], retention_ms: int,
                   route: tuple[str, str, int] | None, parent: dict[str, Any] | None,
                   owner: str | None) -> tuple[list[dict[str, Any]], int]:
        now = self.now_ms()
        pk = _pk(session_id)
        expires = self._expiry(retention_ms)
        ops: list[dict[str, Any]] = []
        if meta is None:
            turn = 1
            ops.append({
                "Put": {
                    "TableName": self.table,
                    "Item": _item(**{PK: pk, SK: META, "status": "busy", "turn": 1, "msg_count": 1,
                                     "created_at": now, "updated_at": now, TTL: expires,
                                     "parent": json.dumps(parent or {}), "owner": owner,
                                     OWED: 1, SHARD: deadline_shard(session_id),
                                     DUE: now + self.owed_think_grace_ms}),
                    "ConditionExpression": "attribute_not_exists(#pk)",
                    "ExpressionAttributeNames": {"#pk": PK},
                    "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
                }
            })
        else:
            if owner is not None and meta.get("owner", "") != owner:
                raise SessionNotFoundError(session_id)
            if meta["status"] != "idle":
                raise SessionBusyError(session_id)
            turn, seq = int(meta["turn"]) + 1, int(meta.get("msg_count", 0)) + 1
            condition = "#status = :idle AND turn = :prevturn"
            names = {"#status": "status", "#ttl": TTL, "#owed": OWED, "#shard": SHARD, "#due": DUE}
            values = _vals(busy="busy", idle="idle", turn=turn, seq=seq, now=now, exp=expires, prevturn=turn - 1)
            values.update(self._owed_values(session_id, turn, now))
            if owner is not None:
                condition += " AND #owner = :owner"
                names["#owner"] = "owner"
                values.update(_vals(owner=owner))
            ops.append({
                "Update": {
                    "TableName": self.table,
                    "Key": _item(**{PK: pk, SK: META}),
                    "UpdateExpression": "SET #status = :busy, turn = :turn, msg_count = :seq, updated_at = :now, "
                                        "#ttl = :exp, #owed = :owed, #shard = :shard, #due = :due",
                    "ConditionExpression": condition,
                    "ExpressionAttributeNames": names,
                    "ExpressionAttributeValues": values,
                }
            })
        ops.append(self._put_message_op(pk, turn, MessageSlot.INPUT, message, expires))
        if route is not None:
            service, token, ttl_ms = route
            ops.append({
                "Put": {
                    "TableName": self.table,
                    "Item": _item(**{PK: pk, SK: ROUTE, "callback_service": service, "bearer_token": token,
                                     "status": "active", "created_at": now, TTL: self._expiry(ttl_ms)}),
                    # A live route is never overwritten: one answer per request. Nor is a retired one by the
                    # same request again (a re-sent continuation of the session: its replay).
                    "ConditionExpression": "attribute_not_exists(#pk) OR ((#status = :retired OR #ttl < :nows) "
                                           "AND bearer_token <> :token)",
                    "ExpressionAttributeNames": {"#pk": PK, "#status": "status", "#ttl": TTL},
                    "ExpressionAttributeValues": _vals(retired="retired", nows=now // 1000, token=token),
                }
            })
        return ops, turn

    def _put_message_op(self, pk: str, turn: int, slot: int, message: dict[str, Any], expires: int) -> dict[str, Any]:
        return {
            "Put": {
                "TableName": self.table,
                "Item": _item(**{PK: pk, SK: _msg_sk(turn, slot), "content": _dumps(message), "turn": turn,
                                 TTL: expires}),
                "ConditionExpression": "attribute_not_exists(#pk)",
                "ExpressionAttributeNames": {"#pk": PK},
            }
        }

    def _think_started_op(self, pk: str, turn: int, ends_turn: bool = False) -> dict[str, Any]:
        """The session is busy at `turn` and its think has happened: the owed-think mark goes
        (and with ends_turn, the session goes idle: the turn is over)."""
        update = "SET updated_at = :now"
        values = _vals(now=self.now_ms(), turn=turn, busy="busy")
        if ends_turn:
            update += ", #status = :idle"
            values.update(_vals(idle="idle"))
        return {
            "Update": {
                "TableName": self.table,
                "Key": _item(**{PK: pk, SK: META}),
                "UpdateExpression": update + " REMOVE #owed, #shard, #due",
                "ConditionExpression": "attribute_exists(#pk) AND turn = :turn AND #status = :busy",
                "ExpressionAttributeNames": {"#pk": PK, "#owed": OWED, "#shard": SHARD, "#due": DUE,
                                             "#status": "status"},
                "ExpressionAttributeValues": values,
            }
        }

    def _retire_route_op(self, pk: str, turn: int, now: int) -> dict[str, Any]:
        return {
            "Update": {
                "TableName": self.table,
                "Key": _item(**{PK: pk, SK: ROUTE}),
                "UpdateExpression": "SET #status = :retired, retired_at = :now, retired_turn = :turn",
                "ConditionExpression": "#status = :active AND #ttl > :nows",
                "ExpressionAttributeNames": {"#status": "status", "#ttl": TTL},
                "ExpressionAttributeValues": _vals(retired="retired", active="active", now=now, turn=turn,
                                                   nows=now // 1000),
            }
        }

    def append_message(self, session_id: str, message: dict[str, Any], turn: int, retention_ms: int,
                       slot: int = MessageSlot.REPLY) -> bool:
        """Store a message at its place in think iteration `turn`; False if that place is taken (a redelivery).

        One transaction and no read, whatever the conversation's length: the message's key is
        (turn, slot), and the same write clears the session's owed-think mark (the think has started).
        """
        pk = _pk(session_id)
        ops = [
            self._put_message_op(pk, turn, slot, message, self._expiry(retention_ms)),
            self._think_started_op(pk, turn),
        ]
        reasons = self._transact(ops)
        if reasons is None:
            return True
        if reasons and reasons[0].get("Code") == "ConditionalCheckFailed":
            return False
        raise LookupError(f"session {session_id} is not at turn {turn}")

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

    # --- cancellation (B side: the caller stopped waiting) --------------------------------------
    def cancel_session(self, session_id: str, owner: str | None) -> tuple[str, int]:
        """busy -> canceled, one conditional write: whatever the session was about to write (the reply
        of a think under way, refused by save_iteration's `#status = :busy`) is written no more.

        The same write marks the closing think owed, so the sweep sends it if the canceller dies
        before closing (close_canceled_session clears it). owner: the authenticated caller, who must
        own the session (a condition of the write); None: authentication is off.
        Returns (outcome, turn): "canceled" (by this call, or earlier and not closed yet) or "idle"
        (nothing to cancel). Raises SessionNotFoundError: none, or another peer's.
        """
        pk, now = _pk(session_id), self.now_ms()
        condition = "#status = :busy"
        names = {"#status": "status", "#owed": OWED, "#shard": SHARD, "#due": DUE}
        values = _vals(busy="busy", canceled=CANCELED, now=now, shard=deadline_shard(session_id),
                       due=now + self.owed_think_grace_ms)
        if owner is not None:
            condition += " AND #owner = :owner"
            names["#owner"] = "owner"
            values.update(_vals(owner=owner))
        try:
            resp = self.client.update_item(
                TableName=self.table, Key=_item(**{PK: pk, SK: META}),
                UpdateExpression="SET #status = :canceled, updated_at = :now, canceled_at = :now, #owed = turn, "
                                 "#shard = :shard, #due = :due",
                ConditionExpression=condition, ExpressionAttributeNames=names, ExpressionAttributeValues=values,
                ReturnValues="ALL_NEW")
            return CANCELED, int(_plain(resp["Attributes"])["turn"])
        except ClientError as exc:
            if not _is_condition_failure(exc):
                raise
        meta = self._get(pk, META)  # why it was refused (rare: the happy path reads nothing)
        if meta is None or (owner is not None and meta.get("owner", "") != owner):
            raise SessionNotFoundError(session_id)
        return ("idle" if meta["status"] == "idle" else CANCELED), int(meta["turn"])

    def close_canceled_session(self, session_id: str, turn: int, messages: list[tuple[int, dict[str, Any]]],
                               retention_ms: int) -> bool:
        """canceled -> idle at `turn`, with the closing messages ((slot, message): results for calls left
        open, the closing line), in one transaction; the owed mark goes. False if already closed."""
        pk, now = _pk(session_id), self.now_ms()
        expires = self._expiry(retention_ms)
        ops = [self._put_message_op(pk, turn, slot, message, expires) for slot, message in messages]
        ops.append({
            "Update": {
                "TableName": self.table,
                "Key": _item(**{PK: pk, SK: META}),
                "UpdateExpression": "SET #status = :idle, updated_at = :now REMOVE #owed, #shard, #due",
                "ConditionExpression": "turn = :turn AND #status = :canceled",
                "ExpressionAttributeNames": {"#status": "status", "#owed": OWED, "#shard": SHARD, "#due": DUE},
                "ExpressionAttributeValues": _vals(idle="idle", now=now, turn=turn, canceled=CANCELED),
            }
        })
        return self._transact(ops) is None

    # --- reply routes (B side) -----------------------------------------------------------
    def get_route(self, session_id: str) -> ReplyRoute | None:
        item = self._get(_pk(session_id), ROUTE)
        return _route(session_id, item) if item is not None else None

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
        return _iteration(session_id, turn, item) if item is not None else None

    def save_iteration(self, session_id: str, turn: int, reply: dict[str, Any], retention_ms: int, *,
                       seed: TurnSeed | None = None, ends_turn: bool = False,
                       retires_route: bool = False) -> Iteration:
        """Store a model reply once (it is also the conversation's assistant message: no second copy)
        with the state change it makes, in one transaction; a second writer gets the first one back,
        from the failed condition, without a read.

        Always: the session's owed-think mark goes (the think has happened). seed: the reply calls
        tools, and their turn's aggregation record is created. ends_turn: the session goes idle.
        retires_route: the reply answers the session's reply route, which retires at this turn (a
        redelivery of this think re-sends the answer, which its caller deduplicates).
        Raises LookupError when the session is no longer busy at this turn (a stale think).
        """
        pk = _pk(session_id)
        now = self.now_ms()
        ops: list[dict[str, Any]] = [
            {
                "Put": {
                    "TableName": self.table,
                    "Item": _item(**{PK: pk, SK: _iter_sk(turn), "reply": _dumps(reply), "turn": turn,
                                     # Only where it tells something: a reply that called tools, yet ended its turn.
                                     "ends_turn": True if ends_turn and _calls_tools(reply) else None,
                                     TTL: self._expiry(retention_ms)}),
                    "ConditionExpression": "attribute_not_exists(#pk)",
                    "ExpressionAttributeNames": {"#pk": PK},
                    "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
                }
            },
            self._think_started_op(pk, turn, ends_turn=ends_turn),
        ]
        if seed is not None:
            ops.append(self._seed_op(session_id, turn, list(seed.tool_use_ids), seed.deadline_ms, retention_ms, now,
                                     seed.deadlines))
        route_at = len(ops)
        if retires_route:
            ops.append(self._retire_route_op(pk, turn, now))
        for _ in range(2):
            reasons = self._transact(ops)
            if reasons is None:
                return Iteration(session_id, turn, reply, fresh=True)
            first = reasons[0] if reasons else {}
            if first.get("Code") == "ConditionalCheckFailed":
                if first.get("Item"):
                    return _iteration(session_id, turn, _plain(first["Item"]))
                stored = self.get_iteration(session_id, turn)
                assert stored is not None
                return stored
            if retires_route and len(reasons) > route_at and reasons[route_at].get("Code") == "ConditionalCheckFailed" \
                    and all(r.get("Code") in (None, "None") for r in reasons[:route_at]):
                ops = ops[:route_at]  # the route expired or was retired meanwhile: nothing to answer
                continue
            break
        raise LookupError(f"session {session_id} is not at turn {turn}")

    # --- turn aggregation (A side) -------------------------------------------------------
    def _seed_op(self, session_id: str, turn: int, tool_use_ids: list[str], deadline_ms: int, retention_ms: int,
                 now: int, deadlines: dict[str, int] | None = None) -> dict[str, Any]:
        if not tool_use_ids or len(set(tool_use_ids)) != len(tool_use_ids):
            raise ValueError("tool_use_ids must be non-empty and distinct")
        # Per-call deadlines are stored only when they differ; the index lists the turn at its earliest.
        own = {i: int(deadlines[i]) for i in tool_use_ids if deadlines and i in deadlines}
        per_call = own if len(set(own.values()) | {deadline_ms}) > 1 else None
        return {
            "Put": {
                "TableName": self.table,
                "Item": _item(**{PK: _pk(session_id), SK: _turn_sk(turn), "expected": set(tool_use_ids),
                                 "total_tools": len(tool_use_ids), "received": 0, "status": "waiting",
                                 "deadline_ms": deadline_ms, "deadlines": per_call,
                                 SHARD: deadline_shard(session_id), DUE: min([deadline_ms, *own.values()]),
                                 "created_at": now, TTL: self._expiry(retention_ms)}),
                "ConditionExpression": "attribute_not_exists(#pk)",
                "ExpressionAttributeNames": {"#pk": PK},
            }
        }

    def seed_turn(self, session_id: str, turn: int, tool_use_ids: list[str], deadline_ms: int, retention_ms: int,
                  deadlines: dict[str, int] | None = None) -> bool:
        """Create a turn's aggregation record on its own; False if it already exists. (A think
        seeds its turn in the write that stores its reply: save_iteration(seed=...).)
        deadline_ms: the latest of its calls' deadlines; deadlines: each call's, when they differ."""
        put = self._seed_op(session_id, turn, tool_use_ids, deadline_ms, retention_ms, self.now_ms(), deadlines)["Put"]
        try:
            self.client.put_item(**put)
            return True
        except ClientError as exc:
            if _is_condition_failure(exc):
                return False
            raise

    def get_turn(self, session_id: str, turn: int) -> TurnAggregation | None:
        item = self._get(_pk(session_id), _turn_sk(turn))
        return _aggregation(session_id, turn, item) if item is not None else None

    def get_results(self, session_id: str, turn: int) -> list[ToolResult]:
        return [_result_of(i, i["tool_use_id"]) for i in self._query_prefix(_pk(session_id), f"RESULT#{turn:06d}#")]

    def record_result(self, session_id: str, turn: int, result: ToolResult, retention_ms: int,
                      completion: Completion | None = None) -> tuple[RecordOutcome, bool]:
        """Write one result at most once and count it toward its waiting turn, atomically; with
        `completion`, the last expected result also completes the turn and claims the next think
        in the same transaction (one request for a result, whether or not it is the last).

        Returns (outcome, completed): completed is True only for the one write that completed it.
        Which variant to try first follows the turn's size (a one-call turn: the completing one);
        a failed count condition returns the turn item, which says which variant holds.
        """
        pk = _pk(session_id)
        put = {
            "Put": {
                "TableName": self.table,
                "Item": _item(**{PK: pk, SK: _result_sk(turn, result.tool_use_id), "tool_use_id": result.tool_use_id,
                                 "result_status": result.status, "text": result.text, "source": result.source.value,
                                 "recorded_at": self.now_ms(), TTL: self._expiry(retention_ms)}),
                "ConditionExpression": "attribute_not_exists(#pk)",
                "ExpressionAttributeNames": {"#pk": PK},
                "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
            }
        }
        count_only = {
            "Update": {
                "TableName": self.table,
                "Key": _item(**{PK: pk, SK: _turn_sk(turn)}),
                "UpdateExpression": "ADD received :one",
                "ConditionExpression": "#status = :waiting AND contains(expected, :id)",
                "ExpressionAttributeNames": {"#status": "status"},
                "ExpressionAttributeValues": _vals(one=1, waiting="waiting", id=result.tool_use_id),
                "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
            }
        }
        last: bool | None = None
        if completion is not None:
            last = completion.total <= 1
        for _ in range(4):
            if last is None:
                ops = [put, count_only]
            elif last:
                now = self.now_ms()
                complete = self._complete_op(session_id, turn, completion.by, completion.tombstone_ms, now,
                                             extra_condition=" AND contains(expected, :id) AND received = :before",
                                             set_received=completion.total)
                complete["Update"]["ExpressionAttributeValues"].update(
                    _vals(id=result.tool_use_id, before=completion.total - 1))
                complete["Update"]["ReturnValuesOnConditionCheckFailure"] = "ALL_OLD"
                ops = [put, complete, self._advance_session_op(session_id, turn, now)]
            else:
                not_last = json.loads(json.dumps(count_only))
                not_last["Update"]["ConditionExpression"] += " AND received < :before"
                not_last["Update"]["ExpressionAttributeValues"].update(_vals(before=completion.total - 1))
                ops = [put, not_last]
            reasons = self._transact(ops)
            if reasons is None:
                return RecordOutcome.ACCEPTED, bool(last)
            put_reason = reasons[0] if reasons else {}
            if put_reason.get("Code") == "ConditionalCheckFailed":
                old = _plain(put_reason.get("Item") or {})
                # The same kind of result again is a retry of an accepted one; anything
                # else (a callback after a synthesized timeout) arrived too late.
                return (RecordOutcome.DUPLICATE if old.get("source") == result.source.value else RecordOutcome.LATE,
                        False)
            turn_reason = reasons[1] if len(reasons) > 1 else {}
            agg = _plain(turn_reason.get("Item") or {})
            if (last is None or completion is None or turn_reason.get("Code") != "ConditionalCheckFailed"
                    or agg.get("status") != "waiting" or result.tool_use_id not in agg.get("expected", ())):
                return RecordOutcome.LATE, False
            # Only the count was wrong: the turn's item says whether this result is the last.
            completion = Completion(completion.by, int(agg["total_tools"]), completion.tombstone_ms)
            last = int(agg["received"]) >= completion.total - 1
        return RecordOutcome.LATE, False

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
                # The next think is owed from this commit on: the sweep re-sends it if it never starts.
                "UpdateExpression": "SET turn = :next, updated_at = :now, #owed = :owed, #shard = :shard, #due = :due",
                "ConditionExpression": "turn = :turn",
                "ExpressionAttributeNames": {"#owed": OWED, "#shard": SHARD, "#due": DUE},
                "ExpressionAttributeValues": {**_vals(next=turn + 1, turn=turn, now=now),
                                              **self._owed_values(session_id, turn + 1, now)},
            }
        }

    def complete_with_errors(self, session_id: str, turn: int, reason_results: Callable[[str], ToolResult],
                             completed_by: str, tombstone_ms: int, retention_ms: int,
                             due_by_ms: int | None = None) -> Expiry:
        """Synthesize a result for every missing id and complete the turn, all in one transaction.

        due_by_ms: only the missing ids whose deadline is at or before it (a timeout; None: every
        missing id, a cancel). When other ids stay open, the due ones' results are written and
        counted in one transaction that moves the turn, in the deadline index, to the earliest
        deadline still open; the last of them completes the turn. won is True only for the
        completer. A callback that commits first fails a condition (a put, or the count read
        before); we then re-read and try again.
        """
        for _ in range(10):
            agg = self.get_turn(session_id, turn)
            if agg is None or agg.status != "waiting":
                return Expiry(False)
            have = {r.tool_use_id for r in self.get_results(session_id, turn)}
            missing = sorted(agg.expected - have)
            due = missing if due_by_ms is None else [i for i in missing if agg.deadline_of(i) <= due_by_ms]
            still_open = [i for i in missing if i not in due]
            next_due = min((agg.deadline_of(i) for i in still_open), default=None)
            if next_due is not None and not due:
                self._move_due(session_id, turn, agg.due_ms, next_due)
                return Expiry(False, (), next_due)
            now = self.now_ms()
            pk = _pk(session_id)
            ops: list[dict[str, Any]] = []
            for tool_use_id in due:
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
            if next_due is None:
                ops.append(self._complete_op(session_id, turn, completed_by, tombstone_ms, now, set_received=agg.total))
                ops.append(self._advance_session_op(session_id, turn, now))
            else:
                ops.append({
                    "Update": {
                        "TableName": self.table,
                        "Key": _item(**{PK: pk, SK: _turn_sk(turn)}),
                        "UpdateExpression": f"ADD received :n SET {DUE} = :next",
                        "ConditionExpression": "#status = :waiting AND received = :seen",
                        "ExpressionAttributeNames": {"#status": "status"},
                        "ExpressionAttributeValues": _vals(n=len(due), next=next_due, waiting="waiting",
                                                           seen=agg.received),
                    }
                })
            reasons = self._transact(ops)
            if reasons is None:
                return Expiry(next_due is None, tuple(due), next_due)
            if next_due is None and len(reasons) > len(due) and reasons[len(due)].get("Code") == "ConditionalCheckFailed":
                return Expiry(False)  # someone else completed it
        return Expiry(False)

    def _move_due(self, session_id: str, turn: int, listed_ms: int, next_due_ms: int) -> None:
        """Nothing is due yet (the earliest call answered in time): the index lists the turn at the next deadline."""
        if listed_ms == next_due_ms:
            return
        try:
            self.client.update_item(
                TableName=self.table, Key=_item(**{PK: _pk(session_id), SK: _turn_sk(turn)}),
                UpdateExpression=f"SET {DUE} = :next", ConditionExpression="#status = :waiting",
                ExpressionAttributeNames={"#status": "status"},
                ExpressionAttributeValues=_vals(next=next_due_ms, waiting="waiting"))
        except ClientError as exc:
            if not _is_condition_failure(exc):
                raise

    def list_overdue(self, now_ms: int, limit: int = 100) -> list[Overdue]:
        """What the sparse index says is due: waiting turns past their deadline, and owed thinks
        past their grace (on the session's META item). Reads only those items, never the table."""
        overdue: list[Overdue] = []
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
                sid = item[PK][2:]
                if item[SK] == META:
                    overdue.append(Overdue(sid, int(item.get(OWED, item.get("turn", 0))), "think", int(item[DUE])))
                elif item[SK].startswith("TURN#"):
                    overdue.append(Overdue(sid, int(item[SK].split("#")[1]), "deadline", int(item[DUE])))
        return overdue

    def owed_think(self, session_id: str) -> int | None:
        """The think iteration a session is owed (committed as due, not yet started), or None."""
        meta = self._get(_pk(session_id), META)
        # A canceled session is owed the think that closes it (flightdeck.domain.session_cancel).
        if meta is None or meta.get("status") not in ("busy", CANCELED) or OWED not in meta:
            return None
        return int(meta[OWED]) if int(meta[OWED]) == int(meta["turn"]) else None

    def clear_owed_think(self, session_id: str, turn: int) -> None:
        """Drop a stale owed mark (the session moved on without clearing it)."""
        try:
            self.client.update_item(
                TableName=self.table, Key=_item(**{PK: _pk(session_id), SK: META}),
                UpdateExpression="REMOVE #owed, #shard, #due", ConditionExpression="#owed = :turn",
                ExpressionAttributeNames={"#owed": OWED, "#shard": SHARD, "#due": DUE},
                ExpressionAttributeValues=_vals(turn=turn))
        except ClientError as exc:
            if not _is_condition_failure(exc):
                raise

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

