"""The transaction items several stores put in one write: a turn started, a turn ended (idle, or the
next queued message's turn), the session's next think owed, the reply route changed, the load counter
moved, a turn's aggregation seeded. A write that crosses aggregates stays one transaction built here."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from flightdeck.adapters.dynamo.codec import (
    aggregation_of,
    attr_values,
    conversation,
    ddb_item,
    dumps,
    first_input,
    iteration_of,
    legacy_aggregation_of,
    live_fields,
    plain_item,
    queued_message,
    reply_route,
    route_live,
    this_life,
)
from flightdeck.adapters.dynamo.keys import (
    A2A_CURRENT,
    A2A_TASK,
    AGG_AT,
    AGG_DEADLINE,
    AGG_DEADLINES,
    AGG_EXPECTED,
    AGG_OPEN,
    AGG_STATUS,
    AGG_TOTAL,
    AGG_TURN,
    DUE,
    HOLDS_LOAD,
    INBOX,
    INBOX_CONSUMED,
    INBOX_COUNT,
    LOAD_BUSY,
    LOAD_PK,
    LOAD_SEQ,
    LOAD_SK,
    META,
    OWED,
    OWED_AT,
    PK,
    ROUTE,
    ROUTE_ATTR,
    SHARD,
    SK,
    TTL,
    deadline_shard,
    inbox_sk,
    iter_sk,
    legacy_turn_sk,
    msg_sk,
    session_pk,
)
from flightdeck.adapters.dynamo.table import Table
from flightdeck.domain.records import QueuedMessage, ReplyRoute, Session

# A session whose META keeps changing under a writer: give up after this many conditional attempts.
INTAKE_ATTEMPTS = 16


def with_route(op: dict[str, Any], clause: str, condition: str, values: dict[str, Any]) -> dict[str, Any]:
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
ROUTE_FREE = "(attribute_not_exists(#route) OR #route.#status = :r_retired OR #route.#ttl < :r_nows)"
# ...and the route that waits is answered (retired, or replaced by the next one) only while it waits.
ROUTE_WAITING = "(#route.#status = :r_active AND #route.#ttl > :r_nows)"


class StateOps(Table):
    """The shared transaction items and the session read they start from (the stores' common base)."""

    def _route_of(self, meta: dict[str, Any] | None) -> dict[str, Any] | None:
        """META's reply route, unless it has expired (as an expired ROUTE item was never read)."""
        route = (meta or {}).get(ROUTE_ATTR)
        return route if route and self.alive(route) else None

    def read_session(self, session_id: str, snapshot: str = "") -> Session | None:
        """SessionStore.get_session's read: here, as the end of a turn reads the session again when its
        inbox changed under it."""
        if snapshot:
            items = [p for p in (plain_item(i) for i in json.loads(snapshot)) if self.alive(p)]
        else:
            items = self.query_prefix(session_pk(session_id), "")
        meta = next((i for i in items if i[SK] == META), None)
        if meta is None:
            return None
        if "base_turn" in meta:  # put over an expired session: what is left of that one is not this one's
            items = this_life(items, int(meta["base_turn"]), int(meta.get("created_at", 0)))
        turn = int(meta["turn"])
        messages, stamps = conversation(items, turn, int(meta.get("created_at", 0)))
        by_sk = {i[SK]: i for i in items}
        iteration = by_sk.get(iter_sk(turn))
        route = self._route_of(meta) if ROUTE_ATTR in meta else by_sk.get(ROUTE)
        inbox = [queued_message(i) for i in items if i[SK].startswith(INBOX)]
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
            iteration=iteration_of(session_id, turn, iteration) if iteration else None,
            route=reply_route(session_id, route) if route else None,
            has_a2a_task=A2A_CURRENT in by_sk,
            aggregation=aggregation_of(session_id, turn, meta, self.now_ms())
            or (
                legacy_aggregation_of(session_id, turn, by_sk[legacy])
                if (legacy := legacy_turn_sk(turn)) in by_sk
                else None
            ),
            **live_fields(by_sk),
            queued=tuple(sorted((q for q in inbox if not q.turn), key=lambda q: q.seq)),
            inbox_accepted=int(meta.get(INBOX_COUNT, 0)),
            inbox_consumed=int(meta.get(INBOX_CONSUMED, 0)),
            input=next((q for q in inbox if q.turn == turn), None) or first_input(meta, turn),
            stamps=tuple(stamps),
            holds_load=HOLDS_LOAD in meta,
            listed_at_ms=int(meta.get(DUE, 0)),
            # The sweep re-sends an owed think no sooner than a grace after its mark (LivenessStore._due_on).
            resend_after_ms=int(meta[OWED_AT]) + self.owed_think_grace_ms
            if OWED_AT in meta and int(meta.get(OWED, -1)) == turn
            else 0,
        )

    def _owed_values(self, session_id: str, turn: int, now: int) -> dict[str, Any]:
        """The owed mark's values (:owed, :owed_at, and in the deadline index :shard and :due): see _owed_actions."""
        if not self.owed_in_index:
            return attr_values(owed=turn, owed_at=now)
        return attr_values(owed=turn, owed_at=now, shard=deadline_shard(session_id), due=now + self.owed_think_grace_ms)

    def _owed_actions(self, owed: str = ":owed", keep_listed: bool = False) -> tuple[str, str]:
        """(SET actions, REMOVE actions) of a write that marks a think owed (names #owed, #shard, #due).
        The writer starts thinks (THINK_START "writer"): the mark is due in the deadline index after its grace,
        for the sweep. The table's stream starts them ("stream"): the mark alone, and the index keys removed (an
        item a waiting turn had put in the index leaves it); only a recovery path indexes a mark then
        (LivenessStore.defer_owed_think).

        keep_listed: a session the index lists already keeps its listed time (the happy path's completion: no
        index write, ARCHITECTURE §3); the sweep, finding the mark younger than its grace (owed_at), looks
        again later instead of re-sending."""
        if not self.owed_in_index:
            return f"#owed = {owed}, {OWED_AT} = :owed_at", "#shard, #due"
        if keep_listed:
            listed = "#shard = if_not_exists(#shard, :shard), #due = if_not_exists(#due, :due)"
            return f"#owed = {owed}, {OWED_AT} = :owed_at, {listed}", ""
        return f"#owed = {owed}, {OWED_AT} = :owed_at, #shard = :shard, #due = :due", ""

    def _owed_item(self, session_id: str, turn: int, now: int) -> dict[str, Any]:
        """The owed mark's attributes on a new session's item (the Put that creates it)."""
        if not self.owed_in_index:
            return {OWED: turn, OWED_AT: now}
        return {OWED: turn, OWED_AT: now, SHARD: deadline_shard(session_id), DUE: now + self.owed_think_grace_ms}

    def _load_op(self, delta: int, max_busy: int | None = None) -> dict[str, Any]:
        """The load counter moved by delta (a slot taken: only below max_busy). Its seq counts every move,
        so a recount knows whether the count changed while it counted."""
        update: dict[str, Any] = {
            "TableName": self.table,
            "Key": ddb_item(**{PK: LOAD_PK, SK: LOAD_SK}),
            "UpdateExpression": "ADD #busy :delta, #seq :one",
            "ExpressionAttributeNames": {"#busy": LOAD_BUSY, "#seq": LOAD_SEQ},
            "ExpressionAttributeValues": attr_values(delta=delta, one=1),
        }
        if max_busy is not None:
            update["ConditionExpression"] = "attribute_not_exists(#busy) OR #busy < :max"
            update["ExpressionAttributeValues"].update(attr_values(max=max_busy))
        return {"Update": update}

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
        values = attr_values(route=self._route_map(route, expires_s, from_turn, now, answered), r_nows=now // 1000)
        if answered is not None and answers_meta:
            values.update(attr_values(r_active="active"))
            return "#route = :route", ROUTE_WAITING, values
        values.update(attr_values(r_retired="retired"))
        return "#route = :route", ROUTE_FREE, values

    @staticmethod
    def _route_retire(turn: int, now: int) -> tuple[str, str, dict[str, Any]]:
        """The META clause, condition and values that retire the waiting route: this turn answered it."""
        return (
            "#route.#status = :r_retired, #route.retired_at = :r_now, #route.retired_turn = :r_turn",
            ROUTE_WAITING,
            attr_values(r_retired="retired", r_active="active", r_now=now, r_turn=turn, r_nows=now // 1000),
        )

    def _put_message_op(self, pk: str, turn: int, slot: int, message: dict[str, Any], expires: int) -> dict[str, Any]:
        return {
            "Put": {
                "TableName": self.table,
                "Item": ddb_item(
                    # `at`: the timeline's time for it (an attribute of the put, no request more).
                    **{
                        PK: pk,
                        SK: msg_sk(turn, slot),
                        "content": dumps(message),
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
        values = attr_values(now=self.now_ms(), turn=turn, busy=status)
        condition = "attribute_exists(#pk) AND turn = :turn AND #status = :busy"
        op: dict[str, Any] = {}
        if ends_turn:
            update += ", #status = :idle"
            values.update(attr_values(idle="idle"))
            # Idle only with nothing waiting in the inbox: a message queued after the session was read
            # fails this, and the turn's end starts its turn instead (no lost wake-up).
            condition += f" AND (attribute_not_exists({INBOX_COUNT}) OR {INBOX_COUNT} = {INBOX_CONSUMED})"
            op["ReturnValuesOnConditionCheckFailure"] = "ALL_OLD"
        return {
            "Update": {
                "TableName": self.table,
                "Key": ddb_item(**{PK: pk, SK: META}),
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
        pk = session_pk(session_id)
        consumed = view.inbox_consumed if view is not None else 0
        msg_no = (view.user_messages if view is not None else 0) + 1
        expires = self.expiry(retention_ms) if retention_ms else None
        condition = "attribute_exists(#pk) AND turn = :turn AND #status = :busy AND " + (
            f"attribute_not_exists({INBOX_CONSUMED})" if consumed == 0 else f"{INBOX_CONSUMED} = :consumed"
        )
        values = {
            **attr_values(turn=turn, next=turn + 1, busy=status, done=consumed + 1, no=msg_no, now=now),
            **self._owed_values(session_id, turn + 1, now),
        }
        if consumed:
            values.update(attr_values(consumed=consumed))
        owed_set, owed_remove = self._owed_actions()
        update = f"SET turn = :next, {INBOX_CONSUMED} = :done, msg_count = :no, updated_at = :now, {owed_set}"
        if status != "busy":  # a canceled session's close starts the waiting message's turn: busy again
            update += ", #status = :nowbusy"
            values.update(attr_values(nowbusy="busy"))
        names = {"#pk": PK, "#status": "status", "#owed": OWED, "#shard": SHARD, "#due": DUE}
        item_update, item_values = "SET turn = :next, msg_no = :no", attr_values(next=turn + 1, no=msg_no)
        if expires is not None:
            update += ", #ttl = :exp"
            item_update += ", #ttl = :exp"
            values.update(attr_values(exp=expires))
            item_values.update(attr_values(exp=expires))
            names["#ttl"] = TTL
        if owed_remove:
            update += f" REMOVE {owed_remove}"
        return [
            {
                "Update": {
                    "TableName": self.table,
                    "Key": ddb_item(**{PK: pk, SK: META}),
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
                    "Key": ddb_item(**{PK: pk, SK: inbox_sk(entry.key)}),
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
                "Key": ddb_item(**{PK: pk, SK: A2A_TASK + task_key}),
                "UpdateExpression": "SET last_input_turn = :turn",
                "ConditionExpression": "attribute_exists(#pk)",
                "ExpressionAttributeNames": {"#pk": PK},
                "ExpressionAttributeValues": attr_values(turn=turn),
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
        pk = session_pk(session_id)
        queued = view.queued if view is not None else ()
        reasons: list[dict[str, Any]] | None = None
        task_op, legacy = True, False
        for _ in range(INTAKE_ATTEMPTS):
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
                ops[meta_at] = with_route(ops[meta_at], *route_change)
            elif retire and not legacy:
                ops[meta_at] = with_route(ops[meta_at], *self._route_retire(turn, now))
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
            reasons = self.transact(ops)
            if reasons is None:
                return None, entry
            failed = [i for i, r in enumerate(reasons) if r.get("Code") == "ConditionalCheckFailed"]
            if any(i < len(lead) for i in failed) or not failed:
                return reasons, None
            meta_reason = reasons[len(lead)]
            if len(lead) in failed:
                current = plain_item(meta_reason.get("Item") or {})
                if current.get("status") != status or int(current.get("turn", -1)) != turn:
                    return reasons, None  # the session moved on: this end is stale
                changes_route = retire or (entry is not None and entry.route is not None)
                if retire and not legacy and ROUTE_ATTR not in current:
                    legacy = True  # its route is a ROUTE item of its own
                    continue
                if changes_route and route_live(current.get(ROUTE_ATTR), now) != needs_waiting:
                    if retire:
                        retire = False  # the route expired or was retired meanwhile: nothing to answer
                        continue
                    return reasons, None  # a route waits for its answer: never overwritten
                view = self.read_session(session_id)  # the inbox changed since it was read
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
        meta = self.read_item(session_pk(session_id), META)  # no view handed in: a read on this rare path only
        return meta is not None and HOLDS_LOAD in meta

    def _legacy_retire_op(self, pk: str, turn: int, now: int) -> dict[str, Any]:
        """Retire a reply route stored as its own ROUTE item (before the route moved into META)."""
        return {
            "Update": {
                "TableName": self.table,
                "Key": ddb_item(**{PK: pk, SK: ROUTE}),
                "UpdateExpression": "SET #status = :retired, retired_at = :now, retired_turn = :turn",
                "ConditionExpression": "#status = :active AND #ttl > :nows",
                "ExpressionAttributeNames": {"#status": "status", "#ttl": TTL},
                "ExpressionAttributeValues": attr_values(
                    retired="retired", active="active", now=now, turn=turn, nows=now // 1000
                ),
            }
        }

    def _seed_update(
        self,
        session_id: str,
        turn: int,
        tool_use_ids: list[str],
        deadline_ms: int,
        now: int,
        deadlines: dict[str, int] | None = None,
        listed_at_ms: int = 0,
    ) -> tuple[str, dict[str, Any], dict[str, str]]:
        """The SET clause, values and names that open a turn's aggregation on META (ARCHITECTURE §2):
        every id expected and open, META in the deadline index at the earliest deadline; or, when the index
        lists the session already at that time or later (listed_at_ms: the owed think's grace, which the
        think that opens the turn clears), where it is: no index write, and the sweep, the timer's backstop,
        looks at most a grace late (ARCHITECTURE §3)."""
        if not tool_use_ids or len(set(tool_use_ids)) != len(tool_use_ids):
            raise ValueError("tool_use_ids must be non-empty and distinct")
        # Per-call deadlines are stored only when they differ; the index lists the turn at its earliest.
        own = {i: int(deadlines[i]) for i in tool_use_ids if deadlines and i in deadlines}
        per_call = own if len(set(own.values()) | {deadline_ms}) > 1 else None
        clause = (
            f"{AGG_TURN} = :a_turn, {AGG_STATUS} = :a_waiting, {AGG_EXPECTED} = :a_ids, {AGG_OPEN} = :a_open, "
            f"{AGG_TOTAL} = :a_total, {AGG_DEADLINE} = :a_deadline, {AGG_AT} = :a_at"
        )
        earliest = min([deadline_ms, *own.values()])
        kept = listed_at_ms >= earliest
        values = attr_values(
            a_turn=turn,
            a_waiting="waiting",
            # Two values of the same set: one placeholder for both, and moto shares it (a DELETE from the
            # open ids would shrink the expected ones).
            a_ids=set(tool_use_ids),
            a_open=set(tool_use_ids),
            a_total=len(tool_use_ids),
            a_deadline=deadline_ms,
            a_at=now,
        )
        # Kept: written only if absent (the listing as read went meanwhile), else the same value (no index write).
        clause += (
            ", #shard = if_not_exists(#shard, :a_shard), #due = if_not_exists(#due, :a_due)"
            if kept
            else ", #shard = :a_shard, #due = :a_due"
        )
        values.update(attr_values(a_shard=deadline_shard(session_id), a_due=earliest))
        if per_call:
            clause += f", {AGG_DEADLINES} = :a_deadlines"
            values.update(attr_values(a_deadlines=per_call))
        return clause, values, {"#shard": SHARD, "#due": DUE}

    def _with_seed(
        self,
        op: dict[str, Any],
        session_id: str,
        turn: int,
        tool_use_ids: list[str],
        deadline_ms: int,
        now: int,
        deadlines: dict[str, int] | None = None,
        listed_at_ms: int = 0,
    ) -> dict[str, Any]:
        """A META update that also opens turn `turn`'s aggregation (the think's own write): the index
        attributes it would remove are set to the turn's earliest deadline instead, or stay as the owed think
        had them listed when that is as late (listed_at_ms; _seed_update)."""
        clause, values, names = self._seed_update(
            session_id, turn, tool_use_ids, deadline_ms, now, deadlines, listed_at_ms
        )
        update = dict(op["Update"])
        head, sep, tail = update["UpdateExpression"].partition(" REMOVE ")
        index_keys = {"#shard", "#due"}
        removed = [a.strip() for a in tail.split(",") if a.strip() and a.strip() not in index_keys] if sep else []
        update["UpdateExpression"] = f"{head}, {clause}" + (" REMOVE " + ", ".join(removed) if removed else "")
        update["ExpressionAttributeNames"] = {**update["ExpressionAttributeNames"], **names}
        update["ExpressionAttributeValues"] = {**update["ExpressionAttributeValues"], **values}
        return {"Update": update}
