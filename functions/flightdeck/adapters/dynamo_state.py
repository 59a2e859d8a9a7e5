"""DynamoDB adapter: sessions, messages, reply routes, turn aggregation, results.

One table per agent (flightdeck.topology). Every invariant of docs/ARCHITECTURE.md §2 is a
condition expression evaluated by DynamoDB, never a read-then-write:
  - a result item is put with attribute_not_exists (first writer wins);
  - a result counts only while its turn is waiting and expects that id, in the
    same transaction as the put;
  - waiting -> complete is a conditional update; the winner alone gets True;
  - a message queued in a busy session's inbox counts on META in the same transaction, and a turn
    ends idle only while that count equals the consumed one (else it starts the next turn).
moto does not delete expired items (nor does AWS promptly): reads filter on the
TTL attribute.
"""

from __future__ import annotations

import dataclasses
import json
import random
import time
import uuid
import zlib
from collections.abc import Callable, Sequence
from typing import Any, cast

import boto3
from boto3.dynamodb.types import TypeDeserializer, TypeSerializer
from botocore.exceptions import ClientError

from flightdeck import topology
from flightdeck.adapters.peer_registry import proof_check, refusal
from flightdeck.domain.liveness import Overdue
from flightdeck.domain.peers import PeerProof, PeerRefusedError
from flightdeck.domain.records import (
    SESSION_CANCELED,
    AgentBusyError,
    Completion,
    Expiry,
    InboxFullError,
    Intake,
    ItemTooLargeError,
    Iteration,
    LiveText,
    MessageSlot,
    QueuedMessage,
    RecordOutcome,
    ReplayedError,
    ReplyRoute,
    ResultSource,
    Session,
    SessionBusyError,
    SessionNotFoundError,
    Stamp,
    TaskNotOpenError,
    ToolResult,
    TurnAggregation,
    TurnEnd,
    TurnSeed,
)
from flightdeck.domain.session_list import first_message_of

_ser = TypeSerializer()
_de = TypeDeserializer()
PK, SK, TTL = topology.PARTITION_KEY, topology.SORT_KEY, topology.TTL_ATTRIBUTE
SHARD, DUE = topology.DEADLINE_SHARD_ATTRIBUTE, topology.DEADLINE_AT_ATTRIBUTE

META = "META"
ROUTE = "ROUTE"  # a session's reply route as its own item: sessions stored before the route moved into META
# The session's reply route (B side): a map on META with the attributes the ROUTE item had, changed in
# the writes that change META anyway (ingest, end of turn): no item, no transaction item, of its own.
ROUTE_ATTR = "route"
# The A2A store's pointer to a session's task, and its task items (flightdeck.adapters.a2a_state).
A2A_CURRENT = "A2A#CURRENT"
A2A_TASK = "A2A#TASK#"
# The session's inbox (ARCHITECTURE §2): one item per message that was queued or named by the client,
# keyed by its identity; META counts the messages queued (`inbox_count`) and those whose turn started
# (`inbox_consumed`), so "nothing waits" is a condition on META alone.
INBOX = "INBOX#"
INBOX_COUNT, INBOX_CONSUMED = "inbox_count", "inbox_consumed"
# The agent's load (max_concurrent_tasks, ARCHITECTURE §2): one counter item of sessions holding a slot, and
# on the META of each such session the mark HOLDS_LOAD. A slot is taken in the transaction that makes a
# session busy (conditioned on the count being below the limit) and given back in the one that makes it idle,
# so no crash between two writes can lose one; only a busy session deleted by TTL can, which recount_load
# repairs. No limit configured: none of this is written.
LOAD_PK, LOAD_SK = "AGENT#load", "COUNT"
LOAD_BUSY, LOAD_SEQ, LOAD_RECOUNTED = "busy", "seq", "recounted_at"
HOLDS_LOAD = "holds_load"
# A session whose META keeps changing under a writer: give up after this many conditional attempts.
_INTAKE_ATTEMPTS = 16
# A new session's snapshot travels in its first think's invoke payload (asynchronous invokes take
# 256 KB): a larger one is left out, and that think queries instead.
MAX_SNAPSHOT_CHARS = 64_000
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


def _inbox_sk(key: str) -> str:
    return INBOX + key


def _queued(item: dict[str, Any]) -> QueuedMessage:
    route = None
    if item.get("reply_service"):
        route = (item["reply_service"], item["reply_token"], int(item.get("reply_expires", 0)))
    return QueuedMessage(
        key=item[SK][len(INBOX) :],
        seq=int(item.get("seq", 0)),
        message=json.loads(item["content"]),
        turn=int(item.get("turn", 0)),
        route=route,
        task_key=item.get("task_key", ""),
        message_id=item.get("message_id", ""),
    )


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


def _route_live(route: dict[str, Any] | None, now_ms: int) -> bool:
    """Whether a stored route (META's map, or a ROUTE item) still waits for its answer."""
    if not route:
        return False
    return route.get("status") == "active" and int(route.get(TTL, 0)) > now_ms // 1000


def _with_route(op: dict[str, Any], clause: str, condition: str, values: dict[str, Any]) -> dict[str, Any]:
    """A META update that also changes the session's route: its SET clause and its condition."""
    update = dict(op["Update"])
    head, sep, tail = update["UpdateExpression"].partition(" REMOVE ")
    update["UpdateExpression"] = f"{head}, {clause}" + (sep + tail if sep else "")
    update["ConditionExpression"] = f"({update['ConditionExpression']}) AND {condition}"
    update["ExpressionAttributeNames"] = {
        **update["ExpressionAttributeNames"],
        "#route": ROUTE_ATTR,
        "#status": "status",
        "#ttl": TTL,
    }
    update["ExpressionAttributeValues"] = {**update["ExpressionAttributeValues"], **values}
    update["ReturnValuesOnConditionCheckFailure"] = "ALL_OLD"
    return {"Update": update}


# A route may be put where none waits for its answer (none, answered, or expired)...
_ROUTE_FREE = "(attribute_not_exists(#route) OR #route.#status = :r_retired OR #route.#ttl < :r_nows)"
# ...and the route that waits is answered (retired, or replaced by the next one) only while it waits.
_ROUTE_WAITING = "(#route.#status = :r_active AND #route.#ttl > :r_nows)"


def _is_condition_failure(exc: ClientError) -> bool:
    return exc.response.get("Error", {}).get("Code") == "ConditionalCheckFailedException"


def _too_large(exc: ClientError) -> bool:
    error = exc.response.get("Error", {})
    return error.get("Code") == "ValidationException" and "size" in str(error.get("Message", "")).lower()


def stored_messages(items: list[dict[str, Any]]) -> list[tuple[int, int, dict[str, Any]]]:
    """(turn, slot, message) of every stored message, in conversation order: the message items, each
    inbox item whose turn started as that turn's input, and each iteration's model reply as the
    assistant message of its turn (stored once, never copied)."""
    return [(turn, slot, message) for turn, slot, message, _ in stored_items(items)]


def stored_items(items: list[dict[str, Any]]) -> list[tuple[int, int, dict[str, Any], dict[str, Any]]]:
    """stored_messages, each with the item it was read from."""
    out = []
    for i in items:
        parts = i[SK].split("#")
        if parts[0] == "ITER":
            out.append((int(parts[1]), int(MessageSlot.REPLY), json.loads(i["reply"])["message"], i))
        elif parts[0] == "MSG":
            out.append((int(parts[1]), int(parts[2]), json.loads(i["content"]), i))
        elif parts[0] == "INBOX" and int(i.get("turn", 0)):
            out.append((int(i["turn"]), int(MessageSlot.INPUT), json.loads(i["content"]), i))
    return sorted(out, key=lambda t: (t[0], t[1]))


def _conversation(
    items: list[dict[str, Any]], current_turn: int, created_at: int = 0
) -> tuple[list[dict[str, Any]], list[Stamp]]:
    """The Converse messages, rebuilt from what is stored once: the message items in key order,
    and after an assistant message that called tools in a turn that has completed, the user
    message of their results, built from the turn's result items in call order. With each, its
    Stamp: the times its items carry anyway (created_at: the session's, the first message's time
    when its item has none)."""
    results: dict[int, dict[str, dict[str, Any]]] = {}
    # Iterations whose reply ended their turn although it called tools (it asked for input: the next
    # message answers its calls, flightdeck.domain.asking): they have no results to rebuild.
    answered_by_message: set[int] = set()
    for i in items:
        if i[SK].startswith("RESULT#"):
            results.setdefault(int(i[SK].split("#")[1]), {})[i["tool_use_id"]] = i
        elif i[SK].startswith("ITER#") and i.get("ends_turn"):
            answered_by_message.add(int(i[SK].split("#")[1]))
    stored = stored_items(items)
    dispatched = {int(i[SK].split("#")[1]): int(i.get("created_at", 0)) for i in items if i[SK].startswith("TURN#")}
    messages: list[dict[str, Any]] = []
    stamps: list[Stamp] = []
    for index, (turn, _slot, message, item) in enumerate(stored):
        messages.append(message)
        stamps.append(_stamp(item, dispatched.get(turn, 0), created_at if index == 0 else 0))
        uses = [b["toolUse"] for b in message.get("content", []) if "toolUse" in b]
        if message.get("role") != "assistant" or not uses or turn >= current_turn or turn in answered_by_message:
            continue
        following = stored[index + 1][2] if index + 1 < len(stored) else {}
        if any("toolResult" in b for b in following.get("content", [])):
            continue  # the results were stored with the message (a canceled turn's closing)
        got = results.get(turn, {})
        messages.append(
            {"role": "user", "content": [_result_of(got.get(u["toolUseId"]), u["toolUseId"]).as_block() for u in uses]}
        )
        recorded = {k: int(v.get("recorded_at", 0)) for k, v in got.items()}
        stamps.append(Stamp(at=max(recorded.values(), default=0), results=recorded))
    return messages, stamps


def _stamp(item: dict[str, Any], dispatched: int, fallback: int) -> Stamp:
    """A stored message's times: a reply's think (stored in its ITER item's reply), a message's arrival."""
    if item[SK].startswith("ITER#"):
        reply = json.loads(item["reply"])
        think, usage = reply.get("think") or {}, reply.get("usage") or {}
        return Stamp(
            at=int(think.get("ended_ms", 0)),
            started=int(think.get("started_ms", 0)),
            tokens_in=int(usage.get("inputTokens", 0)),
            tokens_out=int(usage.get("outputTokens", 0)),
            dispatched=dispatched,
        )
    return Stamp(at=int(item.get("at") or item.get("accepted_at") or fallback))


def _this_life(items: list[dict[str, Any]], base_turn: int, created_at: int) -> list[dict[str, Any]]:
    """The items of a session put over an expired one (take_message): its turns count from base_turn,
    so an item of an earlier turn, or a message queued before it began, is the old session's."""

    def turn_of(item: dict[str, Any]) -> int | None:
        head = item[SK].split("#")
        if head[0] in ("ITER", "MSG", "TURN", "RESULT", "DISPATCH") and len(head) > 1 and head[1].isdecimal():
            return int(head[1])
        if head[0] == "INBOX":
            return int(item["turn"]) if int(item.get("turn", 0)) else None
        return None

    kept = []
    for item in items:
        turn = turn_of(item)
        if turn is not None and turn < base_turn:
            continue
        if item[SK].startswith(INBOX) and turn is None and int(item.get("accepted_at", 0)) < created_at:
            continue
        kept.append(item)
    return kept


def _calls_tools(reply: dict[str, Any]) -> bool:
    return any("toolUse" in b for b in (reply.get("message") or {}).get("content", []))


def _iteration(session_id: str, turn: int, item: dict[str, Any]) -> Iteration:
    return Iteration(session_id, turn, json.loads(item["reply"]))


def _route(session_id: str, item: dict[str, Any]) -> ReplyRoute:
    answered = None
    if item.get("answered_service"):
        answered = ReplyRoute(
            session_id,
            item["answered_service"],
            item["answered_token"],
            "retired",
            int(item.get("answered_expires", 0)),
            int(item.get("answered_turn", 0)),
        )
    return ReplyRoute(
        session_id,
        item["callback_service"],
        item["bearer_token"],
        item["status"],
        int(item[TTL]),
        int(item.get("retired_turn", 0)),
        int(item.get("from_turn", 0)),
        answered,
    )


def _aggregation(session_id: str, turn: int, item: dict[str, Any]) -> TurnAggregation:
    return TurnAggregation(
        session_id=session_id,
        turn=turn,
        expected=frozenset(item.get("expected", ())),
        total=int(item["total_tools"]),
        received=int(item["received"]),
        status=item["status"],
        deadline_ms=int(item["deadline_ms"]),
        completed_by=item.get("completed_by", ""),
        deadlines={k: int(v) for k, v in (item.get("deadlines") or {}).items()},
        due_ms=int(item.get(DUE, 0)),
    )


def _result_of(item: dict[str, Any] | None, tool_use_id: str) -> ToolResult:
    if item is None:
        # Every completion writes a result for each expected id: this is an id past the hard limit.
        return ToolResult(
            tool_use_id, "error", json.dumps({"status": "error", "reason": "missing"}), ResultSource.TIMEOUT
        )
    return ToolResult(
        item["tool_use_id"],
        item["result_status"],
        item["text"],
        ResultSource(item["source"]),
        int(item.get("recorded_at", 0)),
    )


def _live_fields(by_sk: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The live relay's Session fields (flightdeck.adapters.live_state writes the items)."""
    watch, live = by_sk.get(WATCH), by_sk.get(LIVE)
    return {
        "watched_until_ms": int(watch["until"]) if watch else 0,
        "live": LiveText(int(live["turn"]), int(live["attempt"]), str(live["text"])) if live else None,
    }


class StateStore:
    """All of one agent's DynamoDB state. `clock` returns epoch milliseconds."""

    def __init__(
        self,
        table_name: str,
        client: Any = None,
        clock: Callable[[], int] | None = None,
        owed_think_grace_ms: int = OWED_THINK_GRACE_MS,
    ):
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

    def _route_of(self, meta: dict[str, Any] | None) -> dict[str, Any] | None:
        """META's reply route, unless it has expired (as an expired ROUTE item was never read)."""
        route = (meta or {}).get(ROUTE_ATTR)
        return route if route and self._alive(route) else None

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
            kwargs.update(
                KeyConditionExpression="#pk = :pk",
                ExpressionAttributeNames={"#pk": PK},
                ExpressionAttributeValues=_vals(pk=pk),
            )
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
                # botocore-stubs types the reasons as TypedDicts; callers read them as plain dicts.
                reasons = cast(list[dict[str, Any]], exc.response.get("CancellationReasons") or [])
                codes = {r.get("Code") for r in reasons}
                if any(
                    r.get("Code") == "ValidationError" and "size" in str(r.get("Message", "")).lower() for r in reasons
                ):
                    raise ItemTooLargeError(
                        next(str(r.get("Message")) for r in reasons if r.get("Code") == "ValidationError")
                    ) from exc
                if "ConditionalCheckFailed" in codes or not codes & {"TransactionConflict", "ThrottlingError"}:
                    return reasons or [{"Code": "ConditionalCheckFailed"}]
                time.sleep(random.uniform(0, 0.02 * 2**attempt))
        raise RuntimeError("transaction kept conflicting")

    # --- sessions ---------------------------------------------------------------------
    def get_session(self, session_id: str, snapshot: str = "") -> Session | None:
        """The session as stored: one Query of its partition. snapshot: what the write that created the
        session put (Intake.snapshot), which is the whole partition then: read from it, no request."""
        if snapshot:
            items = [p for p in (_plain(i) for i in json.loads(snapshot)) if self._alive(p)]
        else:
            items = self._query_prefix(_pk(session_id), "")
        meta = next((i for i in items if i[SK] == META), None)
        if meta is None:
            return None
        if "base_turn" in meta:  # put over an expired session: what is left of that one is not this one's
            items = _this_life(items, int(meta["base_turn"]), int(meta.get("created_at", 0)))
        turn = int(meta["turn"])
        messages, stamps = _conversation(items, turn, int(meta.get("created_at", 0)))
        by_sk = {i[SK]: i for i in items}
        iteration = by_sk.get(_iter_sk(turn))
        route = self._route_of(meta) if ROUTE_ATTR in meta else by_sk.get(ROUTE)
        aggregation = by_sk.get(_turn_sk(turn))
        inbox = [_queued(i) for i in items if i[SK].startswith(INBOX)]
        return Session(
            session_id=session_id,
            status=meta["status"],
            turn=turn,
            messages=messages,
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
            queued=tuple(sorted((q for q in inbox if not q.turn), key=lambda q: q.seq)),
            inbox_accepted=int(meta.get(INBOX_COUNT, 0)),
            inbox_consumed=int(meta.get(INBOX_CONSUMED, 0)),
            input=next((q for q in inbox if q.turn == turn), None),
            stamps=tuple(stamps),
            holds_load=HOLDS_LOAD in meta,
        )

    def _absent_condition(self) -> dict[str, Any]:
        """A put's condition that no live item holds its key: one past its retention that TTL has not
        deleted yet is no repeat (a message id reused after its session expired is a new message)."""
        return {
            "ConditionExpression": "attribute_not_exists(#pk) OR #ttl < :nows",
            "ExpressionAttributeNames": {"#pk": PK, "#ttl": TTL},
            "ExpressionAttributeValues": _vals(nows=self.now_ms() // 1000),
        }

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
        """take_message for a message that must start a turn now: the turn it started. Raises
        SessionBusyError when the session is busy, ReplayedError for a delegation that arrived again."""
        intake = self.take_message(
            session_id,
            message,
            retention_ms,
            route=route,
            parent=parent,
            owner=owner,
            likely_new=likely_new,
            must_exist=must_exist,
        )
        if intake.replayed:
            raise ReplayedError(session_id, intake.turn, intake.user_messages)
        return intake.turn

    def take_message(
        self,
        session_id: str,
        message: dict[str, Any],
        retention_ms: int,
        *,
        route: tuple[str, str, int] | None = None,
        parent: dict[str, Any] | None = None,
        owner: str | None = None,
        likely_new: bool = False,
        key: str | None = None,
        queue_limit: int = 0,
        continues_task: str = "",
        message_id: str = "",
        must_exist: bool = False,
        proof: PeerProof | None = None,
        max_busy: int | None = None,
    ) -> Intake:
        """Take a user message in: on an idle (or new) session it starts the next turn; on a busy one,
        with queue_limit, it waits in the session's inbox (at most queue_limit messages wait). Either
        way one conditional transaction, no read-then-write: META's status is in its condition.

        route: (callback_service, bearer_token, ttl_ms), where the answer goes (B side); it is the
        session's reply route from the turn the message starts. A delegation whose route is stored
        already with the same token is a replay.
        owner: the authenticated peer; a new session is stored as theirs, an existing one
        must be theirs (a condition of the write too), else SessionNotFoundError: another
        peer's session does not exist for them. None: authentication is off, no owner.
        likely_new: try creating the session first, with no read (a fresh or derived id):
        one request when it is new; the failed condition returns the existing item otherwise.
        key: the message's identity (a digest of the client's id, or of its reply token): it is stored
        as the inbox item INBOX#<key>, put on condition that it does not exist, so a repeat changes
        nothing and is answered as the first one stands now (replayed). None: no identity; a message
        that starts at once is then stored as MSG#<turn>#0.
        continues_task: the key of the A2A task this message continues: the same write requires the task
        to be working (else TaskNotOpenError) and, when the message starts its turn at once, records that
        turn on the task, so the end of the turn before does not complete the task.
        message_id: the A2A messageId, kept with the inbox item (the task's history shows it).
        must_exist: continue an existing session only (a delegation continuing a conversation, e.g.
        answering its question): SessionNotFoundError when there is none.
        proof: the caller's token, checked against the peer registry by the same transaction (a
        ConditionCheck): PeerRefusedError when refused, nothing stored. Intake.caller_verified says
        whether a write checked it (an answer given without a write did not).
        max_busy: the agent's max_concurrent_tasks: a message that would make a session busy takes a slot
        of the agent's load in the same transaction, on condition that fewer than max_busy are taken, else
        AgentBusyError (nothing stored). A message queued on a busy session takes none. None: no limit,
        nothing more written.
        Raises SessionBusyError (busy without queue_limit, or a session that keeps changing under
        us), InboxFullError, SessionNotFoundError, TaskNotOpenError.
        """
        pk = _pk(session_id)
        meta = None if likely_new and not must_exist else self._get(pk, META)
        if must_exist and meta is None:
            raise SessionNotFoundError(session_id)
        route_checked = False
        for _ in range(_INTAKE_ATTEMPTS):
            # A session past its retention that TTL has not deleted yet (that can take days) is gone for
            # every reader: a message to its id starts a new session over it, conditioned on that TTL.
            expired = meta if meta is not None and not self._alive(meta) else None
            if expired is not None:
                if must_exist:
                    raise SessionNotFoundError(session_id)
                meta = None
            if meta is not None:
                if owner is not None and meta.get("owner", "") != owner:
                    raise SessionNotFoundError(session_id)
                if route is not None and not route_checked:
                    route_checked = True
                    existing = self._route_of(meta)
                    if existing is not None and existing["bearer_token"] == route[1]:
                        return Intake("started", int(meta["turn"]), int(meta.get("msg_count", 1)), replayed=True)
            intake: Intake
            load: list[dict[str, Any]] = []
            if meta is None or meta["status"] == "idle":
                ops, intake = self._start_ops(
                    session_id,
                    meta,
                    message,
                    retention_ms,
                    route,
                    parent,
                    owner,
                    key,
                    continues_task,
                    message_id,
                    expired,
                )
                load = self._take_load(ops, expired, max_busy)
            elif queue_limit <= 0:
                # A repeat of a message that started its turn (an A2A task's hand-off done again) is
                # answered from its item; a read on this refusal path only.
                stored = self._get(pk, _inbox_sk(key)) if key else None
                if stored is not None:
                    return self._repeat(stored, meta)
                raise SessionBusyError(session_id)
            else:
                waiting = int(meta.get(INBOX_COUNT, 0)) - int(meta.get(INBOX_CONSUMED, 0))
                if waiting >= queue_limit:
                    stored = self._get(pk, _inbox_sk(key)) if key else None
                    if stored is not None:
                        return self._repeat(stored, meta)
                    raise InboxFullError(session_id, waiting)
                ops, intake = self._queue_ops(
                    session_id, meta, message, retention_ms, route, owner, key, continues_task, message_id
                )
            checks = [proof_check(self.table, proof)] if proof else []
            reasons = self._transact(ops + checks + load)
            if reasons is None:
                if proof is not None:
                    intake = dataclasses.replace(intake, caller_verified=True)
                if meta is None and expired is None and likely_new and all("Put" in op for op in ops):
                    # A new session: these items are its whole partition, so its first think can
                    # start from them instead of querying (its write's conditions catch a change since).
                    snapshot = json.dumps([op["Put"]["Item"] for op in ops], separators=(",", ":"))
                    if len(snapshot) <= MAX_SNAPSHOT_CHARS:
                        intake = dataclasses.replace(intake, snapshot=snapshot)
                return intake
            load_reasons = reasons[len(ops) + len(checks) :]
            if proof is not None:
                # The registry's check comes after the session's items: a refusal outranks any other failure.
                peer_reason = reasons[len(ops)] if len(reasons) > len(ops) else {}
                reasons = reasons[: len(ops)]
                if peer_reason.get("Code") == "ConditionalCheckFailed":
                    raise PeerRefusedError(refusal(proof, peer_reason))
            if load:
                load_reason = load_reasons[0] if load_reasons else {}
                reasons = reasons[: len(ops)]
                # At capacity, and nothing else failed (a repeat, a session that changed: those are answered
                # as they would be anyway, and a changed session is tried again).
                if load_reason.get("Code") == "ConditionalCheckFailed" and not any(
                    r.get("Code") == "ConditionalCheckFailed" for r in reasons
                ):
                    raise AgentBusyError(max_busy or 0)
            meta_reason = reasons[0] if reasons else {}
            msg_reason = reasons[1] if len(reasons) > 1 else {}
            if meta_reason.get("Code") == "ConditionalCheckFailed" and meta_reason.get("Item"):
                meta = _plain(meta_reason["Item"])
                live = _route_live(meta.get(ROUTE_ATTR), self.now_ms())
                if route is not None and meta.get("status") == "idle" and live:
                    raise SessionBusyError(session_id)  # a live reply route is never overwritten
            elif meta_reason.get("Code") == "ConditionalCheckFailed":
                meta = self._get(pk, META)
            if msg_reason.get("Code") == "ConditionalCheckFailed" and msg_reason.get("Item"):
                return self._repeat(_plain(msg_reason["Item"]), meta)
            if continues_task and len(reasons) == len(ops) and reasons[-1].get("Code") == "ConditionalCheckFailed":
                raise TaskNotOpenError(continues_task)
            if meta_reason.get("Code") != "ConditionalCheckFailed":
                raise SessionBusyError(session_id)  # a live reply route is never overwritten
        raise SessionBusyError(session_id)

    def _repeat(self, item: dict[str, Any], meta: dict[str, Any] | None) -> Intake:
        """The answer to a message that is already in: the turn it started, or its place in the inbox now."""
        entry = _queued(item)
        if entry.turn:
            return Intake("started", entry.turn, int(item.get("msg_no", 0)), replayed=True)
        meta = meta or {}
        position = max(1, entry.seq - int(meta.get(INBOX_CONSUMED, 0)))
        return Intake("queued", 0, int(meta.get("msg_count", 0)) + position, position, replayed=True)

    def _take_load(
        self, ops: list[dict[str, Any]], expired: dict[str, Any] | None, max_busy: int | None
    ) -> list[dict[str, Any]]:
        """Mark the session that ops[0] makes busy as holding a slot of the agent's load; the counter's
        update (conditioned on the limit) to run in the same transaction, if a slot is to be taken. A new
        session put over an expired one that held a slot takes that slot over (no second count)."""
        inherits = expired is not None and HOLDS_LOAD in expired
        if max_busy is None and not inherits:
            return []
        first = ops[0]
        if "Put" in first:
            put = first["Put"]
            put["Item"][HOLDS_LOAD] = {"N": "1"}
            if expired is not None:
                held = f"attribute_exists({HOLDS_LOAD})" if inherits else f"attribute_not_exists({HOLDS_LOAD})"
                put["ConditionExpression"] = f"({put['ConditionExpression']}) AND {held}"
        else:
            update = first["Update"]
            head, sep, tail = update["UpdateExpression"].partition(" REMOVE ")
            update["UpdateExpression"] = f"{head}, {HOLDS_LOAD} = :holds" + (sep + tail if sep else "")
            update["ExpressionAttributeValues"] = {**update["ExpressionAttributeValues"], **_vals(holds=1)}
        if inherits:
            return []
        return [self._load_op(+1, max_busy)]

    def _load_op(self, delta: int, max_busy: int | None = None) -> dict[str, Any]:
        """The load counter moved by delta (a slot taken: only below max_busy). Its seq counts every move,
        so a recount knows whether the count changed while it counted."""
        update: dict[str, Any] = {
            "TableName": self.table,
            "Key": _item(**{PK: LOAD_PK, SK: LOAD_SK}),
            "UpdateExpression": "ADD #busy :delta, #seq :one",
            "ExpressionAttributeNames": {"#busy": LOAD_BUSY, "#seq": LOAD_SEQ},
            "ExpressionAttributeValues": _vals(delta=delta, one=1),
        }
        if max_busy is not None:
            update["ConditionExpression"] = "attribute_not_exists(#busy) OR #busy < :max"
            update["ExpressionAttributeValues"].update(_vals(max=max_busy))
        return {"Update": update}

    def _input_op(
        self,
        pk: str,
        turn: int,
        message: dict[str, Any],
        expires: int,
        key: str | None,
        msg_no: int,
        message_id: str,
        task_key: str,
    ) -> dict[str, Any]:
        """The message that starts `turn`: an inbox item when it has an identity, else MSG#<turn>#0."""
        if key is None:
            return self._put_message_op(pk, turn, MessageSlot.INPUT, message, expires)
        return {
            "Put": {
                "TableName": self.table,
                "Item": _item(
                    **{
                        PK: pk,
                        SK: _inbox_sk(key),
                        "content": _dumps(message),
                        "seq": 0,
                        "turn": turn,
                        "msg_no": msg_no,
                        "accepted_at": self.now_ms(),
                        "message_id": message_id or None,
                        "task_key": task_key or None,
                        TTL: expires,
                    }
                ),
                **self._absent_condition(),
                "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
            }
        }

    def _task_op(self, pk: str, task_key: str, start_turn: int | None) -> dict[str, Any]:
        """The A2A task a message continues must be working; a message that starts its turn at once
        also records that turn on it (flightdeck.adapters.a2a_state: a completion conditions on it).
        Either way the message is in the session now: the task's hand-off mark goes (its due time in the
        deadline index, set when an answer resumed it: flightdeck.adapters.a2a_state.resume_task)."""
        key = _item(**{PK: pk, SK: A2A_TASK + task_key})
        names = {"#state": "state", "#shard": SHARD, "#due": DUE}
        values = _vals(working="working")
        update = "REMOVE #shard, #due"
        if start_turn is not None:
            values.update(_vals(turn=start_turn))
            update = "SET last_input_turn = :turn " + update
        return {
            "Update": {
                "TableName": self.table,
                "Key": key,
                "UpdateExpression": update,
                "ConditionExpression": "#state = :working",
                "ExpressionAttributeNames": names,
                "ExpressionAttributeValues": values,
            }
        }

    @staticmethod
    def _route_map(
        route: tuple[str, str, int], expires_s: int, from_turn: int, now: int, answered: ReplyRoute | None = None
    ) -> dict[str, Any]:
        """The session's reply route from `from_turn` on, as META holds it (answered: the route this one
        replaces in the write that answers it, kept for a redelivery of that think)."""
        service, token, _ = route
        route_map: dict[str, Any] = {
            "callback_service": service,
            "bearer_token": token,
            "status": "active",
            "created_at": now,
            "from_turn": from_turn,
            TTL: expires_s,
        }
        if answered is not None:
            route_map.update(
                answered_service=answered.callback_service,
                answered_token=answered.bearer_token,
                answered_expires=answered.expires_at,
                answered_turn=from_turn - 1,
            )
        return route_map

    def _route_put(
        self,
        route: tuple[str, str, int],
        expires_s: int,
        from_turn: int,
        now: int,
        answered: ReplyRoute | None = None,
        answers_meta: bool = True,
    ) -> tuple[str, str, dict[str, Any]]:
        """The META clause, condition and values that put the session's reply route. A route that waits
        for its answer is never overwritten (one answer per request), except by the write that answers
        it (answered; answers_meta False: that route is a ROUTE item of its own, retired beside)."""
        values = _vals(route=self._route_map(route, expires_s, from_turn, now, answered), r_nows=now // 1000)
        if answered is not None and answers_meta:
            values.update(_vals(r_active="active"))
            return "#route = :route", _ROUTE_WAITING, values
        values.update(_vals(r_retired="retired"))
        return "#route = :route", _ROUTE_FREE, values

    @staticmethod
    def _route_retire(turn: int, now: int) -> tuple[str, str, dict[str, Any]]:
        """The META clause, condition and values that retire the waiting route: this turn answered it."""
        return (
            "#route.#status = :r_retired, #route.retired_at = :r_now, #route.retired_turn = :r_turn",
            _ROUTE_WAITING,
            _vals(r_retired="retired", r_active="active", r_now=now, r_turn=turn, r_nows=now // 1000),
        )

    def _start_ops(
        self,
        session_id: str,
        meta: dict[str, Any] | None,
        message: dict[str, Any],
        retention_ms: int,
        route: tuple[str, str, int] | None,
        parent: dict[str, Any] | None,
        owner: str | None,
        key: str | None,
        continues_task: str,
        message_id: str,
        expired: dict[str, Any] | None = None,
    ) -> tuple[list[dict[str, Any]], Intake]:
        """expired: the META of a session past its retention, not deleted yet: the new session is put
        over it, on condition that it is still that expired one, and its turns count on from it, so no
        key of the new session is one of the old one's (whose items reads skip: `base_turn`)."""
        now = self.now_ms()
        pk = _pk(session_id)
        expires = self._expiry(retention_ms)
        ops: list[dict[str, Any]] = []
        if meta is None:
            turn, seq = (int(expired["turn"]) + 1 if expired is not None else 1), 1
            ops.append(
                {
                    "Put": {
                        "TableName": self.table,
                        "Item": _item(
                            **{
                                PK: pk,
                                SK: META,
                                "status": "busy",
                                "turn": turn,
                                "base_turn": turn if expired is not None else None,
                                "msg_count": 1,
                                "created_at": now,
                                "updated_at": now,
                                # The listing's preview (GET /api/sessions): a few bytes on a write made anyway.
                                "first_message": first_message_of(message) or None,
                                TTL: expires,
                                "parent": json.dumps(parent or {}),
                                "owner": owner,
                                OWED: turn,
                                SHARD: deadline_shard(session_id),
                                DUE: now + self.owed_think_grace_ms,
                            }
                        ),
                        "ConditionExpression": "attribute_not_exists(#pk)",
                        "ExpressionAttributeNames": {"#pk": PK},
                        "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
                    }
                }
            )
            if expired is not None:
                put = ops[0]["Put"]
                put["ConditionExpression"] = "#ttl = :old_ttl AND turn = :old_turn"
                put["ExpressionAttributeNames"] = {"#ttl": TTL}
                put["ExpressionAttributeValues"] = _vals(old_ttl=int(expired[TTL]), old_turn=int(expired["turn"]))
        else:
            turn, seq = int(meta["turn"]) + 1, int(meta.get("msg_count", 0)) + 1
            condition = "#status = :idle AND turn = :prevturn"
            names = {"#status": "status", "#ttl": TTL, "#owed": OWED, "#shard": SHARD, "#due": DUE}
            values = _vals(busy="busy", idle="idle", turn=turn, seq=seq, now=now, exp=expires, prevturn=turn - 1)
            values.update(self._owed_values(session_id, turn, now))
            if owner is not None:
                condition += " AND #owner = :owner"
                names["#owner"] = "owner"
                values.update(_vals(owner=owner))
            ops.append(
                {
                    "Update": {
                        "TableName": self.table,
                        "Key": _item(**{PK: pk, SK: META}),
                        "UpdateExpression": "SET #status = :busy, turn = :turn, msg_count = :seq, updated_at = :now, "
                        "#ttl = :exp, #owed = :owed, #shard = :shard, #due = :due",
                        "ConditionExpression": condition,
                        "ExpressionAttributeNames": names,
                        "ExpressionAttributeValues": values,
                        "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
                    }
                }
            )
        if route is not None:
            if meta is None:
                item = ops[0]["Put"]["Item"]
                item[ROUTE_ATTR] = _ser.serialize(self._route_map(route, self._expiry(route[2]), turn, now))
            else:
                ops[0] = _with_route(ops[0], *self._route_put(route, self._expiry(route[2]), turn, now))
        ops.append(self._input_op(pk, turn, message, expires, key, seq, message_id, continues_task))
        if continues_task:
            ops.append(self._task_op(pk, continues_task, turn))
        return ops, Intake("started", turn, seq)

    def _queue_ops(
        self,
        session_id: str,
        meta: dict[str, Any],
        message: dict[str, Any],
        retention_ms: int,
        route: tuple[str, str, int] | None,
        owner: str | None,
        key: str | None,
        continues_task: str,
        message_id: str,
    ) -> tuple[list[dict[str, Any]], Intake]:
        """A busy session's inbox takes the message: META counts it (its condition: still busy, and the
        count as read, which gives the message its place) and the inbox item holds it."""
        now = self.now_ms()
        pk = _pk(session_id)
        count, consumed = int(meta.get(INBOX_COUNT, 0)), int(meta.get(INBOX_CONSUMED, 0))
        condition = "#status = :busy AND " + (
            f"attribute_not_exists({INBOX_COUNT})" if count == 0 else f"{INBOX_COUNT} = :count"
        )
        names = {"#status": "status"}
        values = _vals(busy="busy", next=count + 1, **({"count": count} if count else {}))
        if owner is not None:
            condition += " AND #owner = :owner"
            names["#owner"] = "owner"
            values.update(_vals(owner=owner))
        attrs: dict[str, Any] = {
            PK: pk,
            SK: _inbox_sk(key or uuid.uuid4().hex),
            "content": _dumps(message),
            "seq": count + 1,
            "accepted_at": now,
            "message_id": message_id or None,
            "task_key": continues_task or None,
            TTL: self._expiry(retention_ms),
        }
        if route is not None:
            attrs.update(reply_service=route[0], reply_token=route[1], reply_expires=self._expiry(route[2]))
        ops: list[dict[str, Any]] = [
            {
                "Update": {
                    "TableName": self.table,
                    "Key": _item(**{PK: pk, SK: META}),
                    "UpdateExpression": f"SET {INBOX_COUNT} = :next",
                    "ConditionExpression": condition,
                    "ExpressionAttributeNames": names,
                    "ExpressionAttributeValues": values,
                    "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
                }
            },
            {
                "Put": {
                    "TableName": self.table,
                    "Item": _item(**attrs),
                    **self._absent_condition(),
                    "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
                }
            },
        ]
        if continues_task:
            ops.append(self._task_op(pk, continues_task, None))
        position = count + 1 - consumed
        return ops, Intake("queued", 0, int(meta.get("msg_count", 0)) + position, position)

    def _put_message_op(self, pk: str, turn: int, slot: int, message: dict[str, Any], expires: int) -> dict[str, Any]:
        return {
            "Put": {
                "TableName": self.table,
                "Item": _item(
                    # `at`: the timeline's time for it (an attribute of the put, no request more).
                    **{
                        PK: pk,
                        SK: _msg_sk(turn, slot),
                        "content": _dumps(message),
                        "turn": turn,
                        "at": self.now_ms(),
                        TTL: expires,
                    }
                ),
                "ConditionExpression": "attribute_not_exists(#pk)",
                "ExpressionAttributeNames": {"#pk": PK},
            }
        }

    def _think_started_op(self, pk: str, turn: int, ends_turn: bool = False, status: str = "busy") -> dict[str, Any]:
        """The session is busy at `turn` and its think has happened: the owed-think mark goes
        (and with ends_turn, the session goes idle: the turn is over). status: what the session must be
        (a canceled one is closed the same way)."""
        update = "SET updated_at = :now"
        values = _vals(now=self.now_ms(), turn=turn, busy=status)
        condition = "attribute_exists(#pk) AND turn = :turn AND #status = :busy"
        op: dict[str, Any] = {}
        if ends_turn:
            update += ", #status = :idle"
            values.update(_vals(idle="idle"))
            # Idle only with nothing waiting in the inbox: a message queued after the session was read
            # fails this, and the turn's end starts its turn instead (no lost wake-up).
            condition += f" AND (attribute_not_exists({INBOX_COUNT}) OR {INBOX_COUNT} = {INBOX_CONSUMED})"
            op["ReturnValuesOnConditionCheckFailure"] = "ALL_OLD"
        return {
            "Update": {
                "TableName": self.table,
                "Key": _item(**{PK: pk, SK: META}),
                "UpdateExpression": update + " REMOVE #owed, #shard, #due",
                "ConditionExpression": condition,
                "ExpressionAttributeNames": {
                    "#pk": PK,
                    "#owed": OWED,
                    "#shard": SHARD,
                    "#due": DUE,
                    "#status": "status",
                },
                "ExpressionAttributeValues": values,
                **op,
            }
        }

    def _next_turn_ops(
        self,
        session_id: str,
        turn: int,
        view: Session | None,
        entry: QueuedMessage,
        retention_ms: int,
        now: int,
        status: str = "busy",
    ) -> list[dict[str, Any]]:
        """Instead of going idle, the session starts turn+1 with the first queued message: META moves on
        (one more consumed, one more user message, the next think owed, as any turn start marks it) on
        condition that nothing else consumed meanwhile, and the inbox item becomes that turn's input
        message by its `turn` attribute (no second copy of its content)."""
        pk = _pk(session_id)
        consumed = view.inbox_consumed if view is not None else 0
        msg_no = (view.user_messages if view is not None else 0) + 1
        expires = self._expiry(retention_ms) if retention_ms else None
        condition = "attribute_exists(#pk) AND turn = :turn AND #status = :busy AND " + (
            f"attribute_not_exists({INBOX_CONSUMED})" if consumed == 0 else f"{INBOX_CONSUMED} = :consumed"
        )
        values = {
            **_vals(turn=turn, next=turn + 1, busy=status, done=consumed + 1, no=msg_no, now=now),
            **self._owed_values(session_id, turn + 1, now),
        }
        if consumed:
            values.update(_vals(consumed=consumed))
        update = (
            f"SET turn = :next, {INBOX_CONSUMED} = :done, msg_count = :no, updated_at = :now, "
            "#owed = :owed, #shard = :shard, #due = :due"
        )
        if status != "busy":  # a canceled session's close starts the waiting message's turn: busy again
            update += ", #status = :nowbusy"
            values.update(_vals(nowbusy="busy"))
        names = {"#pk": PK, "#status": "status", "#owed": OWED, "#shard": SHARD, "#due": DUE}
        item_update, item_values = "SET turn = :next, msg_no = :no", _vals(next=turn + 1, no=msg_no)
        if expires is not None:
            update += ", #ttl = :exp"
            item_update += ", #ttl = :exp"
            values.update(_vals(exp=expires))
            item_values.update(_vals(exp=expires))
            names["#ttl"] = TTL
        return [
            {
                "Update": {
                    "TableName": self.table,
                    "Key": _item(**{PK: pk, SK: META}),
                    "UpdateExpression": update,
                    "ConditionExpression": condition,
                    "ExpressionAttributeNames": names,
                    "ExpressionAttributeValues": values,
                    "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
                }
            },
            {
                "Update": {
                    "TableName": self.table,
                    "Key": _item(**{PK: pk, SK: _inbox_sk(entry.key)}),
                    "UpdateExpression": item_update,
                    "ConditionExpression": "attribute_exists(#pk) AND attribute_not_exists(turn)",
                    "ExpressionAttributeNames": {"#pk": PK, **({"#ttl": TTL} if expires is not None else {})},
                    "ExpressionAttributeValues": item_values,
                }
            },
        ]

    def _task_turn_op(self, pk: str, task_key: str, turn: int) -> dict[str, Any]:
        """Record on an A2A task that a message of its own started `turn` (so that the turn before does
        not complete it; flightdeck.adapters.a2a_state.A2AStore.finish_task)."""
        return {
            "Update": {
                "TableName": self.table,
                "Key": _item(**{PK: pk, SK: A2A_TASK + task_key}),
                "UpdateExpression": "SET last_input_turn = :turn",
                "ConditionExpression": "attribute_exists(#pk)",
                "ExpressionAttributeNames": {"#pk": PK},
                "ExpressionAttributeValues": _vals(turn=turn),
            }
        }

    def _end_turn(
        self,
        session_id: str,
        turn: int,
        lead: list[dict[str, Any]],
        view: Session | None,
        *,
        retire: bool,
        retention_ms: int,
        extra: Sequence[dict[str, Any]] = (),
        status: str = "busy",
    ) -> tuple[list[dict[str, Any]] | None, QueuedMessage | None]:
        """End turn `turn` in one transaction with `lead` (and `extra`): the session goes idle when its
        inbox is empty, else the first queued message starts the next turn in the same write (its reply
        route becoming the session's). retire: the turn answered the session's reply route.

        view: the session as read before (its inbox); a message queued since fails the idle condition,
        and the session is read again. status: what the session is until this write (busy, or canceled
        for the close of a canceled session). Returns (None, the message started or None) on success, else the
        cancellation reasons of the last try (lead first) for the caller to interpret.
        """
        pk = _pk(session_id)
        queued = view.queued if view is not None else ()
        reasons: list[dict[str, Any]] | None = None
        task_op, legacy = True, False
        for _ in range(_INTAKE_ATTEMPTS):
            now = self.now_ms()
            entry = queued[0] if queued else None
            ops = list(lead)
            ops.extend(
                [self._think_started_op(pk, turn, ends_turn=True, status=status)]
                if entry is None
                else self._next_turn_ops(session_id, turn, view, entry, retention_ms, now, status)
            )
            ops.extend(extra)
            # The route changes in META's own update: the next message's route in place of the one this
            # turn answered, or the answered one retired. needs_waiting: its condition wants a route waiting.
            # legacy: the route this turn answers is a ROUTE item (a session stored before the route moved
            # into META): that item is retired beside, as it always was.
            meta_at, needs_waiting = len(lead), retire and not legacy
            if entry is not None and entry.route is not None:
                answered = view.route if retire and view is not None else None
                route_change = self._route_put(entry.route, entry.route[2], turn + 1, now, answered, not legacy)
                ops[meta_at] = _with_route(ops[meta_at], *route_change)
            elif retire and not legacy:
                ops[meta_at] = _with_route(ops[meta_at], *self._route_retire(turn, now))
            legacy_at = len(ops)
            if retire and legacy:
                ops.append(self._legacy_retire_op(pk, turn, now))
            task_at = len(ops)
            if entry is not None and entry.task_key and task_op:
                ops.append(self._task_turn_op(pk, entry.task_key, turn + 1))
            if entry is None and self._holds_load(session_id, view):
                # Idle: its slot of the agent's load is given back in this same write (never lost apart).
                meta_op = dict(ops[meta_at]["Update"])
                meta_op["UpdateExpression"] += f", {HOLDS_LOAD}"
                ops[meta_at] = {"Update": meta_op}
                ops.append(self._load_op(-1))
            reasons = self._transact(ops)
            if reasons is None:
                return None, entry
            failed = [i for i, r in enumerate(reasons) if r.get("Code") == "ConditionalCheckFailed"]
            if any(i < len(lead) for i in failed) or not failed:
                return reasons, None
            meta_reason = reasons[len(lead)]
            if len(lead) in failed:
                current = _plain(meta_reason.get("Item") or {})
                if current.get("status") != status or int(current.get("turn", -1)) != turn:
                    return reasons, None  # the session moved on: this end is stale
                changes_route = retire or (entry is not None and entry.route is not None)
                if retire and not legacy and ROUTE_ATTR not in current:
                    legacy = True  # its route is a ROUTE item of its own
                    continue
                if changes_route and _route_live(current.get(ROUTE_ATTR), now) != needs_waiting:
                    if retire:
                        retire = False  # the route expired or was retired meanwhile: nothing to answer
                        continue
                    return reasons, None  # a route waits for its answer: never overwritten
                view = self.get_session(session_id)  # the inbox changed since it was read
                queued = view.queued if view is not None else ()
                if entry is None and not queued:
                    return reasons, None
                continue
            if failed == [legacy_at] and retire and legacy:
                retire = False  # the ROUTE item expired or was retired meanwhile: nothing to answer
                continue
            if failed == [task_at]:
                task_op = False  # the task's record is gone (expired): nothing to note on it
                continue
            return reasons, None
        return reasons, None

    def _holds_load(self, session_id: str, view: Session | None) -> bool:
        if view is not None:
            return view.holds_load
        meta = self._get(_pk(session_id), META)  # no view handed in: a read on this rare path only
        return meta is not None and HOLDS_LOAD in meta

    def _legacy_retire_op(self, pk: str, turn: int, now: int) -> dict[str, Any]:
        """Retire a reply route stored as its own ROUTE item (before the route moved into META)."""
        return {
            "Update": {
                "TableName": self.table,
                "Key": _item(**{PK: pk, SK: ROUTE}),
                "UpdateExpression": "SET #status = :retired, retired_at = :now, retired_turn = :turn",
                "ConditionExpression": "#status = :active AND #ttl > :nows",
                "ExpressionAttributeNames": {"#status": "status", "#ttl": TTL},
                "ExpressionAttributeValues": _vals(
                    retired="retired", active="active", now=now, turn=turn, nows=now // 1000
                ),
            }
        }

    def append_message(
        self, session_id: str, message: dict[str, Any], turn: int, retention_ms: int, slot: int = MessageSlot.REPLY
    ) -> bool:
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

    def finish_session_turn(
        self,
        session_id: str,
        turn: int,
        retention_ms: int = 0,
        messages: Sequence[tuple[int, dict[str, Any]]] = (),
    ) -> TurnEnd:
        """End turn `turn` of a busy session: idle, or the next turn started with the first message of its
        inbox (as save_iteration(ends_turn=True) does). ended is False if the session is not busy at
        this turn (already done). messages: (slot, message) stored at `turn` in the same write (a
        canceled A2A task's closing ones): the owed mark that brought its closer stays until then."""
        view = self.get_session(session_id)
        if view is None or view.status != "busy" or view.turn != turn:
            return TurnEnd(False)
        pk, expires = _pk(session_id), self._expiry(retention_ms)
        lead = [self._put_message_op(pk, turn, slot, message, expires) for slot, message in messages]
        reasons, started = self._end_turn(session_id, turn, lead, view, retire=False, retention_ms=retention_ms)
        return TurnEnd(reasons is None, started)

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
        values = _vals(
            busy="busy",
            canceled=CANCELED,
            now=now,
            shard=deadline_shard(session_id),
            due=now + self.owed_think_grace_ms,
        )
        if owner is not None:
            condition += " AND #owner = :owner"
            names["#owner"] = "owner"
            values.update(_vals(owner=owner))
        try:
            resp = self.client.update_item(
                TableName=self.table,
                Key=_item(**{PK: pk, SK: META}),
                UpdateExpression="SET #status = :canceled, updated_at = :now, canceled_at = :now, #owed = turn, "
                "#shard = :shard, #due = :due",
                ConditionExpression=condition,
                ExpressionAttributeNames=names,
                ExpressionAttributeValues=values,
                ReturnValues="ALL_NEW",
            )
            return CANCELED, int(_plain(resp["Attributes"])["turn"])
        except ClientError as exc:
            if not _is_condition_failure(exc):
                raise
        meta = self._get(pk, META)  # why it was refused (rare: the happy path reads nothing)
        if meta is None or (owner is not None and meta.get("owner", "") != owner):
            raise SessionNotFoundError(session_id)
        return ("idle" if meta["status"] == "idle" else CANCELED), int(meta["turn"])

    def close_canceled_session(
        self,
        session_id: str,
        turn: int,
        messages: list[tuple[int, dict[str, Any]]],
        retention_ms: int,
        session: Session | None = None,
    ) -> TurnEnd:
        """Close a canceled session at `turn` with the closing messages ((slot, message): results for
        calls left open, the closing line), in one transaction that ends the turn as any turn ends: idle
        when nothing waits in the inbox, else the first waiting message starts the next turn (its think
        owed) in the same write; a reply route still waiting for its answer is retired (a canceled task
        answers nothing). session: the session as read (its inbox and route). ended False: closed already.
        """
        pk, expires = _pk(session_id), self._expiry(retention_ms)
        lead = [self._put_message_op(pk, turn, slot, message, expires) for slot, message in messages]
        session = session or self.get_session(session_id)
        route = session.route if session is not None else None
        waiting = route is not None and route.status == "active" and route.expires_at > self.now_ms() // 1000
        reasons, started = self._end_turn(
            session_id, turn, lead, session, retire=waiting, retention_ms=retention_ms, status=CANCELED
        )
        return TurnEnd(reasons is None, started)

    # --- reply routes (B side) -----------------------------------------------------------
    def get_route(self, session_id: str) -> ReplyRoute | None:
        meta = self._get(_pk(session_id), META)
        if meta is not None and ROUTE_ATTR in meta:
            route = self._route_of(meta)
            return _route(session_id, route) if route is not None else None
        item = self._get(_pk(session_id), ROUTE)  # a session stored before the route moved into META
        return _route(session_id, item) if item is not None else None

    def retire_route(self, session_id: str, bearer_token: str | None = None) -> bool:
        """active -> retired; the tombstone keeps a replayed request from re-arming it. bearer_token: only
        that route (not one a queued delegation has put in its place since)."""
        now = self.now_ms()
        for sk, path in ((META, "#route."), (ROUTE, "")):  # META's map; else a ROUTE item stored before it
            condition = f"{path}#status = :active"
            values = _vals(retired="retired", active="active", now=now)
            if bearer_token is not None:
                condition += f" AND {path}bearer_token = :token"
                values.update(_vals(token=bearer_token))
            names = {"#status": "status", **({"#route": ROUTE_ATTR} if path else {})}
            try:
                self.client.update_item(
                    TableName=self.table,
                    Key=_item(**{PK: _pk(session_id), SK: sk}),
                    UpdateExpression=f"SET {path}#status = :retired, {path}retired_at = :now",
                    ConditionExpression=condition,
                    ExpressionAttributeNames=names,
                    ExpressionAttributeValues=values,
                    ReturnValuesOnConditionCheckFailure="ALL_OLD",
                )
                return True
            except ClientError as exc:
                if not _is_condition_failure(exc):
                    raise
                found = cast(dict[str, Any], exc.response).get("Item") or {}  # the failed condition's item
                if ROUTE_ATTR in found:
                    return False  # META holds the route, and it is not (or no longer) that waiting one
        return False

    # --- think iterations --------------------------------------------------------------
    def get_iteration(self, session_id: str, turn: int) -> Iteration | None:
        item = self._get(_pk(session_id), _iter_sk(turn))
        return _iteration(session_id, turn, item) if item is not None else None

    def save_iteration(
        self,
        session_id: str,
        turn: int,
        reply: dict[str, Any],
        retention_ms: int,
        *,
        seed: TurnSeed | None = None,
        ends_turn: bool = False,
        retires_route: bool = False,
        session: Session | None = None,
    ) -> Iteration:
        """Store a model reply once (it is also the conversation's assistant message: no second copy)
        with the state change it makes, in one transaction; a second writer gets the first one back,
        from the failed condition, without a read.

        Always: the session's owed-think mark goes (the think has happened). seed: the reply calls
        tools, and their turn's aggregation record is created. ends_turn: the turn is over: the session
        goes idle, or, when a message waits in its inbox, the same write starts the next turn with it
        (Iteration.next_input; its think is owed from this write on). retires_route: the reply answers
        the session's reply route, which retires at this turn (a redelivery of this think re-sends the
        answer, which its caller deduplicates). session: the session as read for this think (its inbox
        and route).
        Raises LookupError when the session is no longer busy at this turn (a stale think).
        """
        pk = _pk(session_id)
        now = self.now_ms()
        iteration_put = {
            "Put": {
                "TableName": self.table,
                "Item": _item(
                    **{
                        PK: pk,
                        SK: _iter_sk(turn),
                        "reply": _dumps(reply),
                        "turn": turn,
                        # Only where it tells something: a reply that called tools, yet ended its turn.
                        "ends_turn": True if ends_turn and _calls_tools(reply) else None,
                        TTL: self._expiry(retention_ms),
                    }
                ),
                "ConditionExpression": "attribute_not_exists(#pk)",
                "ExpressionAttributeNames": {"#pk": PK},
                "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
            }
        }
        seed_ops = (
            []
            if seed is None
            else [
                self._seed_op(
                    session_id, turn, list(seed.tool_use_ids), seed.deadline_ms, retention_ms, now, seed.deadlines
                )
            ]
        )
        if ends_turn:
            reasons, started = self._end_turn(
                session_id,
                turn,
                [iteration_put],
                session,
                retire=retires_route,
                retention_ms=retention_ms,
                extra=seed_ops,
            )
            if reasons is None:
                return Iteration(session_id, turn, reply, fresh=True, next_input=started)
        else:
            think_op = self._think_started_op(pk, turn)
            if seed is not None:  # the listing's count of delegations, in the META update made anyway
                update = think_op["Update"]
                update["UpdateExpression"] = update["UpdateExpression"].replace(
                    "SET updated_at = :now", "SET updated_at = :now, calls = if_not_exists(calls, :zero) + :calls", 1
                )
                update["ExpressionAttributeValues"].update(_vals(zero=0, calls=len(seed.tool_use_ids)))
            if retires_route:
                think_op = _with_route(think_op, *self._route_retire(turn, now))
            ops = [iteration_put, think_op, *seed_ops]
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
        raise LookupError(f"session {session_id} is not at turn {turn}")

    # --- turn aggregation (A side) -------------------------------------------------------
    def _seed_op(
        self,
        session_id: str,
        turn: int,
        tool_use_ids: list[str],
        deadline_ms: int,
        retention_ms: int,
        now: int,
        deadlines: dict[str, int] | None = None,
    ) -> dict[str, Any]:
        if not tool_use_ids or len(set(tool_use_ids)) != len(tool_use_ids):
            raise ValueError("tool_use_ids must be non-empty and distinct")
        # Per-call deadlines are stored only when they differ; the index lists the turn at its earliest.
        own = {i: int(deadlines[i]) for i in tool_use_ids if deadlines and i in deadlines}
        per_call = own if len(set(own.values()) | {deadline_ms}) > 1 else None
        return {
            "Put": {
                "TableName": self.table,
                "Item": _item(
                    **{
                        PK: _pk(session_id),
                        SK: _turn_sk(turn),
                        "expected": set(tool_use_ids),
                        "total_tools": len(tool_use_ids),
                        "received": 0,
                        "status": "waiting",
                        "deadline_ms": deadline_ms,
                        "deadlines": per_call,
                        SHARD: deadline_shard(session_id),
                        DUE: min([deadline_ms, *own.values()]),
                        "created_at": now,
                        TTL: self._expiry(retention_ms),
                    }
                ),
                "ConditionExpression": "attribute_not_exists(#pk)",
                "ExpressionAttributeNames": {"#pk": PK},
            }
        }

    def seed_turn(
        self,
        session_id: str,
        turn: int,
        tool_use_ids: list[str],
        deadline_ms: int,
        retention_ms: int,
        deadlines: dict[str, int] | None = None,
    ) -> bool:
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

    def record_result(
        self, session_id: str, turn: int, result: ToolResult, retention_ms: int, completion: Completion | None = None
    ) -> tuple[RecordOutcome, bool]:
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
                "Item": _item(
                    **{
                        PK: pk,
                        SK: _result_sk(turn, result.tool_use_id),
                        "tool_use_id": result.tool_use_id,
                        "result_status": result.status,
                        "text": result.text,
                        "source": result.source.value,
                        "recorded_at": self.now_ms(),
                        TTL: self._expiry(retention_ms),
                    }
                ),
                "ConditionExpression": "attribute_not_exists(#pk)",
                "ExpressionAttributeNames": {"#pk": PK},
                "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
            }
        }

        def count_op(below: int | None = None) -> dict[str, Any]:
            """Count the result toward its waiting turn; below: only while fewer than that are in."""
            condition = "#status = :waiting AND contains(expected, :id)"
            values = _vals(one=1, waiting="waiting", id=result.tool_use_id)
            if below is not None:
                condition += " AND received < :before"
                values.update(_vals(before=below))
            return {
                "Update": {
                    "TableName": self.table,
                    "Key": _item(**{PK: pk, SK: _turn_sk(turn)}),
                    "UpdateExpression": "ADD received :one",
                    "ConditionExpression": condition,
                    "ExpressionAttributeNames": {"#status": "status"},
                    "ExpressionAttributeValues": values,
                    "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
                }
            }

        last: bool | None = None
        if completion is not None:
            last = completion.total <= 1
        for _ in range(4):
            if last is None or completion is None:  # (last is None exactly when completion is)
                ops = [put, count_op()]
            elif last:
                now = self.now_ms()
                complete = self._complete_op(
                    session_id,
                    turn,
                    completion.by,
                    completion.tombstone_ms,
                    now,
                    extra_condition=" AND contains(expected, :id) AND received = :before",
                    set_received=completion.total,
                )
                complete["Update"]["ExpressionAttributeValues"].update(
                    _vals(id=result.tool_use_id, before=completion.total - 1)
                )
                complete["Update"]["ReturnValuesOnConditionCheckFailure"] = "ALL_OLD"
                ops = [put, complete, self._advance_session_op(session_id, turn, now)]
            else:
                ops = [put, count_op(below=completion.total - 1)]
            reasons = self._transact(ops)
            if reasons is None:
                return RecordOutcome.ACCEPTED, bool(last)
            put_reason = reasons[0] if reasons else {}
            if put_reason.get("Code") == "ConditionalCheckFailed":
                old = _plain(put_reason.get("Item") or {})
                # The same kind of result again is a retry of an accepted one; anything
                # else (a callback after a synthesized timeout) arrived too late.
                return (
                    RecordOutcome.DUPLICATE if old.get("source") == result.source.value else RecordOutcome.LATE,
                    False,
                )
            turn_reason = reasons[1] if len(reasons) > 1 else {}
            agg = _plain(turn_reason.get("Item") or {})
            if (
                last is None
                or completion is None
                or turn_reason.get("Code") != "ConditionalCheckFailed"
                or agg.get("status") != "waiting"
                or result.tool_use_id not in agg.get("expected", ())
            ):
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
            self._complete_op(
                session_id, turn, completed_by, tombstone_ms, now, extra_condition=" AND received >= total_tools"
            ),
            self._advance_session_op(session_id, turn, now),
        ]
        return self._transact(ops) is None

    def _complete_op(
        self,
        session_id: str,
        turn: int,
        completed_by: str,
        tombstone_ms: int,
        now: int,
        extra_condition: str = "",
        set_received: int | None = None,
    ) -> dict[str, Any]:
        values = _vals(
            complete="complete", waiting="waiting", by=completed_by, now=now, exp=(now + tombstone_ms) // 1000
        )
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
                "ExpressionAttributeValues": {
                    **_vals(next=turn + 1, turn=turn, now=now),
                    **self._owed_values(session_id, turn + 1, now),
                },
            }
        }

    def complete_with_errors(
        self,
        session_id: str,
        turn: int,
        reason_results: Callable[[str], ToolResult],
        completed_by: str,
        tombstone_ms: int,
        retention_ms: int,
        due_by_ms: int | None = None,
    ) -> Expiry:
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
                ops.append(
                    {
                        "Put": {
                            "TableName": self.table,
                            "Item": _item(
                                **{
                                    PK: pk,
                                    SK: _result_sk(turn, tool_use_id),
                                    "tool_use_id": tool_use_id,
                                    "result_status": r.status,
                                    "text": r.text,
                                    "source": r.source.value,
                                    "recorded_at": now,
                                    TTL: self._expiry(retention_ms),
                                }
                            ),
                            "ConditionExpression": "attribute_not_exists(#pk)",
                            "ExpressionAttributeNames": {"#pk": PK},
                        }
                    }
                )
            if next_due is None:
                ops.append(self._complete_op(session_id, turn, completed_by, tombstone_ms, now, set_received=agg.total))
                ops.append(self._advance_session_op(session_id, turn, now))
            else:
                ops.append(
                    {
                        "Update": {
                            "TableName": self.table,
                            "Key": _item(**{PK: pk, SK: _turn_sk(turn)}),
                            "UpdateExpression": f"ADD received :n SET {DUE} = :next",
                            "ConditionExpression": "#status = :waiting AND received = :seen",
                            "ExpressionAttributeNames": {"#status": "status"},
                            "ExpressionAttributeValues": _vals(
                                n=len(due), next=next_due, waiting="waiting", seen=agg.received
                            ),
                        }
                    }
                )
            reasons = self._transact(ops)
            if reasons is None:
                return Expiry(next_due is None, tuple(due), next_due)
            if (
                next_due is None
                and len(reasons) > len(due)
                and reasons[len(due)].get("Code") == "ConditionalCheckFailed"
            ):
                return Expiry(False)  # someone else completed it
        return Expiry(False)

    def _move_due(self, session_id: str, turn: int, listed_ms: int, next_due_ms: int) -> None:
        """Nothing is due yet (the earliest call answered in time): the index lists the turn at the next deadline."""
        if listed_ms == next_due_ms:
            return
        try:
            self.client.update_item(
                TableName=self.table,
                Key=_item(**{PK: _pk(session_id), SK: _turn_sk(turn)}),
                UpdateExpression=f"SET {DUE} = :next",
                ConditionExpression="#status = :waiting",
                ExpressionAttributeNames={"#status": "status"},
                ExpressionAttributeValues=_vals(next=next_due_ms, waiting="waiting"),
            )
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
                elif item[SK].startswith(A2A_TASK):  # a task whose message was not handed over in time
                    overdue.append(Overdue(sid, 0, "handoff", int(item[DUE]), key=item[SK][len(A2A_TASK) :]))
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
                TableName=self.table,
                Key=_item(**{PK: _pk(session_id), SK: META}),
                UpdateExpression="REMOVE #owed, #shard, #due",
                ConditionExpression="#owed = :turn",
                ExpressionAttributeNames={"#owed": OWED, "#shard": SHARD, "#due": DUE},
                ExpressionAttributeValues=_vals(turn=turn),
            )
        except ClientError as exc:
            if not _is_condition_failure(exc):
                raise

    def defer_owed_think(self, session_id: str, turn: int, delay_ms: int = 0, due_by_ms: int | None = None) -> bool:
        """Move the owed mark of `turn` to delay_ms + the grace from now (one UpdateItem, only on the
        recovery and throttled paths): the sweep must not start a think a run of it may still overlap.
        Conditioned on the mark (a session that moved on keeps its own) and, given due_by_ms, on it
        being due by then, so of two sweeps listing it only one re-sends."""
        condition = "#owed = :turn"
        values = _vals(turn=turn, due=self.now_ms() + max(0, delay_ms) + self.owed_think_grace_ms)
        if due_by_ms is not None:
            condition += " AND #due <= :by"
            values.update(_vals(by=due_by_ms))
        try:
            self.client.update_item(
                TableName=self.table,
                Key=_item(**{PK: _pk(session_id), SK: META}),
                UpdateExpression="SET #due = :due",
                ConditionExpression=condition,
                ExpressionAttributeNames={"#owed": OWED, "#due": DUE},
                ExpressionAttributeValues=values,
            )
            return True
        except ClientError as exc:
            if not _is_condition_failure(exc):
                raise
            return False

    # --- the agent's load (max_concurrent_tasks) ----------------------------------------------
    def busy_count(self) -> int:
        """How many sessions hold a slot of the agent's load, as its counter says."""
        item = self._get(LOAD_PK, LOAD_SK)
        return int(item.get(LOAD_BUSY, 0)) if item is not None else 0

    def recount_load(self, every_ms: int) -> int | None:
        """Repair the load counter from the sessions that hold a slot (a busy session deleted by TTL never
        gave its slot back): at most once per every_ms (the first sweep to claim the interval does it),
        one Scan of the table for the marked sessions, and the count written only if no slot was taken or
        given back meanwhile (the counter's seq as read before; else the next interval tries again).
        Returns the count written, or None when it did not recount (no counter: no slot was ever taken)."""
        now = self.now_ms()
        counter = self._get(LOAD_PK, LOAD_SK)
        if counter is None or now - int(counter.get(LOAD_RECOUNTED, 0)) < every_ms:
            return None
        key = _item(**{PK: LOAD_PK, SK: LOAD_SK})
        last = counter.get(LOAD_RECOUNTED)
        try:
            self.client.update_item(
                TableName=self.table,
                Key=key,
                UpdateExpression="SET #at = :now",
                ConditionExpression="attribute_not_exists(#at)" if last is None else "#at = :last",
                ExpressionAttributeNames={"#at": LOAD_RECOUNTED},
                ExpressionAttributeValues=_vals(now=now, **({} if last is None else {"last": int(last)})),
            )
        except ClientError as exc:
            if not _is_condition_failure(exc):
                raise
            return None  # another sweep recounts this interval
        held = 0
        kwargs: dict[str, Any] = {
            "TableName": self.table,
            "FilterExpression": f"#sk = :meta AND attribute_exists({HOLDS_LOAD})",
            "ProjectionExpression": "#sk",
            "ExpressionAttributeNames": {"#sk": SK},
            "ExpressionAttributeValues": _vals(meta=META),
            "ConsistentRead": True,
        }
        while True:
            page = self.client.scan(**kwargs)
            held += len(page.get("Items", []))
            if "LastEvaluatedKey" not in page:
                break
            kwargs["ExclusiveStartKey"] = page["LastEvaluatedKey"]
        seq = int(counter.get(LOAD_SEQ, 0))
        try:
            self.client.update_item(
                TableName=self.table,
                Key=key,
                UpdateExpression="SET #busy = :held",
                ConditionExpression="#seq = :seq" if seq else "attribute_not_exists(#seq)",
                ExpressionAttributeNames={"#busy": LOAD_BUSY, "#seq": LOAD_SEQ},
                ExpressionAttributeValues=_vals(held=held, **({"seq": seq} if seq else {})),
            )
        except ClientError as exc:
            if not _is_condition_failure(exc):
                raise
            return None
        return held

    # --- dispatch claims (A side) ----------------------------------------------------------
    def claim_dispatch(
        self, session_id: str, turn: int, tool_use_id: str, retention_ms: int, status: str = "sending"
    ) -> bool:
        """True if this delegation still needs sending (new, or a previous attempt did not finish); a claim under
        another status than "sending" is final at once."""
        try:
            self.client.put_item(
                TableName=self.table,
                Item=_item(
                    **{
                        PK: _pk(session_id),
                        SK: _dispatch_sk(turn, tool_use_id),
                        "status": status,
                        "updated_at": self.now_ms(),
                        TTL: self._expiry(retention_ms),
                    }
                ),
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
