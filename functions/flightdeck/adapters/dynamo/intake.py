"""Sessions' intake (SessionsPort.take_message): a user message starts a turn, or waits in the inbox."""

from __future__ import annotations

import dataclasses
import json
import uuid
from typing import Any

from flightdeck.adapters.dynamo.codec import (
    SERIALIZER,
    attr_values,
    ddb_item,
    dumps,
    plain_item,
    queued_message,
    route_live,
)
from flightdeck.adapters.dynamo.keys import (
    A2A_TASK,
    DUE,
    FIRST_KEY,
    FIRST_MSG,
    FIRST_MSG_MAX_BYTES,
    FIRST_TURN,
    HOLDS_LOAD,
    INBOX_CONSUMED,
    INBOX_COUNT,
    META,
    OWED,
    PK,
    ROUTE_ATTR,
    SHARD,
    SK,
    TTL,
    inbox_sk,
    session_pk,
)
from flightdeck.adapters.dynamo.ops import INTAKE_ATTEMPTS, StateOps, with_route
from flightdeck.adapters.peer_registry import proof_check, refusal
from flightdeck.domain.peers import PeerProof, PeerRefusedError
from flightdeck.domain.records import (
    AgentBusyError,
    InboxFullError,
    Intake,
    MessageSlot,
    ReplayedError,
    SessionBusyError,
    SessionNotFoundError,
    TaskNotOpenError,
)
from flightdeck.domain.session_list import first_message_of

# A new session's snapshot travels in its first think's invoke payload (asynchronous invokes take
# 256 KB): a larger one is left out, and that think queries instead.
MAX_SNAPSHOT_CHARS = 64_000


class IntakeStore(StateOps):
    """take_message and the writes it makes (a turn started, a message queued)."""

    def _absent_condition(self) -> dict[str, Any]:
        """A put's condition that no live item holds its key: one past its retention that TTL has not
        deleted yet is no repeat (a message id reused after its session expired is a new message)."""
        return {
            "ConditionExpression": "attribute_not_exists(#pk) OR #ttl < :nows",
            "ExpressionAttributeNames": {"#pk": PK, "#ttl": TTL},
            "ExpressionAttributeValues": attr_values(nows=self.now_ms() // 1000),
        }

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
        that starts at once is then stored as MSG#<turn>#0 (a new session's, when small: on its META).
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
        pk = session_pk(session_id)
        meta = None if likely_new and not must_exist else self.read_item(pk, META)
        if must_exist and meta is None:
            raise SessionNotFoundError(session_id)
        route_checked = False
        for _ in range(INTAKE_ATTEMPTS):
            # A session past its retention that TTL has not deleted yet (that can take days) is gone for
            # every reader: a message to its id starts a new session over it, conditioned on that TTL.
            expired = meta if meta is not None and not self.alive(meta) else None
            if expired is not None:
                if must_exist:
                    raise SessionNotFoundError(session_id)
                meta = None
            if meta is not None:
                if owner is not None and meta.get("owner", "") != owner:
                    raise SessionNotFoundError(session_id)
                if key is not None and meta.get(FIRST_KEY) == key:
                    # A repeat of the session's first message, stored on META (no inbox item of its own).
                    return Intake("started", int(meta[FIRST_TURN]), 1, replayed=True)
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
                stored = self.read_item(pk, inbox_sk(key)) if key else None
                if stored is not None:
                    return self._repeat(stored, meta)
                raise SessionBusyError(session_id)
            else:
                waiting = int(meta.get(INBOX_COUNT, 0)) - int(meta.get(INBOX_CONSUMED, 0))
                if waiting >= queue_limit:
                    stored = self.read_item(pk, inbox_sk(key)) if key else None
                    if stored is not None:
                        return self._repeat(stored, meta)
                    raise InboxFullError(session_id, waiting)
                ops, intake = self._queue_ops(
                    session_id, meta, message, retention_ms, route, owner, key, continues_task, message_id
                )
            checks = [proof_check(self.table, proof)] if proof else []
            reasons = self.transact(ops + checks + load)
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
                meta = plain_item(meta_reason["Item"])
                live = route_live(meta.get(ROUTE_ATTR), self.now_ms())
                if route is not None and meta.get("status") == "idle" and live:
                    raise SessionBusyError(session_id)  # a live reply route is never overwritten
            elif meta_reason.get("Code") == "ConditionalCheckFailed":
                meta = self.read_item(pk, META)
            if msg_reason.get("Code") == "ConditionalCheckFailed" and msg_reason.get("Item"):
                return self._repeat(plain_item(msg_reason["Item"]), meta)
            if continues_task and len(reasons) == len(ops) and reasons[-1].get("Code") == "ConditionalCheckFailed":
                raise TaskNotOpenError(continues_task)
            if meta_reason.get("Code") != "ConditionalCheckFailed":
                raise SessionBusyError(session_id)  # a live reply route is never overwritten
        raise SessionBusyError(session_id)

    def _repeat(self, item: dict[str, Any], meta: dict[str, Any] | None) -> Intake:
        """The answer to a message that is already in: the turn it started, or its place in the inbox now."""
        entry = queued_message(item)
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
            update["ExpressionAttributeValues"] = {**update["ExpressionAttributeValues"], **attr_values(holds=1)}
        if inherits:
            return []
        return [self._load_op(+1, max_busy)]

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
                "Item": ddb_item(
                    **{
                        PK: pk,
                        SK: inbox_sk(key),
                        "content": dumps(message),
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
        key = ddb_item(**{PK: pk, SK: A2A_TASK + task_key})
        names = {"#state": "state", "#shard": SHARD, "#due": DUE}
        values = attr_values(working="working")
        update = "REMOVE #shard, #due"
        if start_turn is not None:
            values.update(attr_values(turn=start_turn))
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
        pk = session_pk(session_id)
        expires = self.expiry(retention_ms)
        ops: list[dict[str, Any]] = []
        if meta is None:
            turn, seq = (int(expired["turn"]) + 1 if expired is not None else 1), 1
            ops.append(
                {
                    "Put": {
                        "TableName": self.table,
                        "Item": ddb_item(
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
                                **self._owed_item(session_id, turn, now),
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
                put["ExpressionAttributeValues"] = attr_values(old_ttl=int(expired[TTL]), old_turn=int(expired["turn"]))
        else:
            turn, seq = int(meta["turn"]) + 1, int(meta.get("msg_count", 0)) + 1
            condition = "#status = :idle AND turn = :prevturn"
            names = {"#status": "status", "#ttl": TTL, "#owed": OWED, "#shard": SHARD, "#due": DUE}
            values = attr_values(busy="busy", idle="idle", turn=turn, seq=seq, now=now, exp=expires, prevturn=turn - 1)
            values.update(self._owed_values(session_id, turn, now))
            owed_set, owed_remove = self._owed_actions()
            if owner is not None:
                condition += " AND #owner = :owner"
                names["#owner"] = "owner"
                values.update(attr_values(owner=owner))
            ops.append(
                {
                    "Update": {
                        "TableName": self.table,
                        "Key": ddb_item(**{PK: pk, SK: META}),
                        "UpdateExpression": "SET #status = :busy, turn = :turn, msg_count = :seq, updated_at = :now, "
                        f"#ttl = :exp, {owed_set}" + (f" REMOVE {owed_remove}" if owed_remove else ""),
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
                item[ROUTE_ATTR] = SERIALIZER.serialize(self._route_map(route, self.expiry(route[2]), turn, now))
            else:
                ops[0] = with_route(ops[0], *self._route_put(route, self.expiry(route[2]), turn, now))
        content = dumps(message)
        plain = key is None or not (continues_task or message_id)
        if meta is None and plain and len(content.encode("utf-8", "surrogatepass")) <= FIRST_MSG_MAX_BYTES:
            # A new session's first message rides on the META it creates: one item fewer. The listing's preview
            # is then derived from it (adapters.session_index), not kept a second time on an item every write pays for.
            item = ops[0]["Put"]["Item"]
            item.pop("first_message", None)
            item.update(ddb_item(**{FIRST_MSG: content, FIRST_TURN: turn, FIRST_KEY: key}))
        else:
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
        pk = session_pk(session_id)
        count, consumed = int(meta.get(INBOX_COUNT, 0)), int(meta.get(INBOX_CONSUMED, 0))
        condition = "#status = :busy AND " + (
            f"attribute_not_exists({INBOX_COUNT})" if count == 0 else f"{INBOX_COUNT} = :count"
        )
        names = {"#status": "status"}
        values = attr_values(busy="busy", next=count + 1, **({"count": count} if count else {}))
        if owner is not None:
            condition += " AND #owner = :owner"
            names["#owner"] = "owner"
            values.update(attr_values(owner=owner))
        attrs: dict[str, Any] = {
            PK: pk,
            SK: inbox_sk(key or uuid.uuid4().hex),
            "content": dumps(message),
            "seq": count + 1,
            "accepted_at": now,
            "message_id": message_id or None,
            "task_key": continues_task or None,
            TTL: self.expiry(retention_ms),
        }
        if route is not None:
            attrs.update(reply_service=route[0], reply_token=route[1], reply_expires=self.expiry(route[2]))
        ops: list[dict[str, Any]] = [
            {
                "Update": {
                    "TableName": self.table,
                    "Key": ddb_item(**{PK: pk, SK: META}),
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
                    "Item": ddb_item(**attrs),
                    **self._absent_condition(),
                    "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
                }
            },
        ]
        if continues_task:
            ops.append(self._task_op(pk, continues_task, None))
        position = count + 1 - consumed
        return ops, Intake("queued", 0, int(meta.get("msg_count", 0)) + position, position)
